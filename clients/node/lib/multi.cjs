'use strict';
// Several keys at once, all or none (`LOCK.ACQUIREALL`): `Locker#lockAll` and its
// MultiLock. What node-redlock's multi-resource locks do from the client, the server does
// in one step, first come first served on every key, without deadlock.

const { Replicas } = require('./replicas.cjs');
const {
  checkMs, randomToken, command, whileWaiting, grantWithReplicas, keptOn,
} = require('./steps.cjs');
const { ResourceLockedError, LockLostError } = require('./errors.cjs');

const MAX_KEYS = 64;

function resourcesOf(resources) {
  const names = Array.isArray(resources) ? resources : [resources];
  if (names.length < 1 || names.length > MAX_KEYS || names.some((n) => typeof n !== 'string' || n === '')) {
    throw new TypeError(`1 to ${MAX_KEYS} resources (non-empty key names) at once`);
  }
  if (new Set(names).size !== names.length) {
    throw new TypeError('each resource once');
  }
  return names;
}

/** Every key of one `lockAll`, held by one token (`value`) with a fence per key. */
class MultiLock {
  constructor(locker, resources, keys, token, fences, duration, replicas) {
    this.locker = locker;
    /** The resources as named by the caller. */
    this.resources = resources;
    /** The keys on the server (with the client's key prefix). */
    this.keys = keys;
    /** The token that proves ownership of every key (node-redlock's `value`). */
    this.value = token;
    /** One fencing token per resource, in order. */
    this.fences = fences;
    this.duration = duration;
    this.replicas = replicas;
    /** When the keys expire (ms since the epoch), as far as the client knows. */
    this.expiration = Date.now() + duration;
  }

  /** Sends one command per key, `argsOf(key)`: how many answered 1. */
  async onEveryKey(argsOf) {
    const send = (args) => this.locker.connection.send(args);
    const replies = await Promise.all(this.keys.map((key) => command(send, key, argsOf(key), 0)));
    return replies.filter((reply) => Number(reply) === 1).length;
  }

  /** Releases every key; LockLostError if some were no longer held. */
  async release() {
    const released = await this.onEveryKey((key) => ['LOCK.RELEASE', key, this.value]);
    this.expiration = 0;
    if (released !== this.keys.length) {
      throw new LockLostError(`${this.resources.join(', ')}: ${this.keys.length - released} of the locks were no longer held when released`);
    }
  }

  /** Sets what is left of every key's time to `duration` ms; LockLostError if a key was gone. */
  async extend(duration) {
    checkMs(duration, 'duration', 1);
    const extended = await keptOn(this.locker.connection, this.keys[0],
      this.keys.map((key) => ['LOCK.EXTEND', key, this.value, duration]), this.replicas, this.resources.join(', '));
    if (extended !== this.keys.length) {
      this.expiration = 0;
      throw new LockLostError(`${this.resources.join(', ')}: a lock was no longer held when extended`);
    }
    this.duration = duration;
    this.expiration = Date.now() + duration;
    return this;
  }
}

/**
 * Takes every resource of `resources` at once, or none, for `duration` ms. Settings as
 * for `acquire`: `wait`, `session`, `token`, `shared` (`limit` and `value` belong to one
 * key). Resolves to a MultiLock; rejects with ResourceLockedError when a key is busy.
 */
async function lockAll(locker, resources, duration, settings = {}) {
  const names = resourcesOf(resources);
  const options = { ...locker.settings, ...settings };
  checkMs(duration, 'duration', 1);
  if (options.limit !== undefined || options.value !== undefined) {
    throw new TypeError('limit and value are for one resource: lockAll takes neither');
  }
  const wait = options.wait === undefined ? undefined : checkMs(options.wait, 'wait', 0);
  const session = options.session === undefined ? undefined : checkMs(options.session, 'session', 0);
  const token = options.token === undefined ? randomToken() : String(options.token);
  if (token.length < 1 || Buffer.byteLength(token) > 256) {
    throw new RangeError('token must be 1 to 256 bytes');
  }
  const keys = names.map((name) => locker.connection.keyOf(name));
  const args = ['LOCK.ACQUIREALL', keys.length, ...keys, duration, 'TOKEN', token];
  if (options.shared) {
    args.push('SHARED');
  }
  if (session !== undefined) {
    args.push('SESSION', session);
  }
  const replicas = new Replicas(options.replicas, options.replicasTimeout, duration, options.fsync ?? false);
  const releases = keys.map((key) => ['LOCK.RELEASE', key, token]);
  const label = names.join(', ');
  const reply = await whileWaiting(wait, (left) => grantWithReplicas(locker, keys[0], args, replicas, releases, label, session, left));
  if (reply === null || reply === undefined) {
    throw new ResourceLockedError(`${names.join(', ')}: a resource is locked by another holder`);
  }
  const fences = Array.from(reply[1], Number);
  return new MultiLock(locker, names, keys, String(reply[0]), fences, duration, replicas);
}

module.exports = { MultiLock, lockAll, resourcesOf };
