'use strict';
// Locker: locks on one server (a master with its replicas, a cluster), in node-redlock's
// shape: `acquire`, `release`, `extend`, `using(key, ttl, fn)`; shared holders
// (read/write locks) and semaphores.

const { Connection } = require('./connection.cjs');
const {
  LockError, ResourceLockedError, NotReplicatedError, LockLostError, serverError,
} = require('./errors.cjs');
const { Replicas, replicated, shortfall, short } = require('./replicas.cjs');

const MAX_MS = Number.MAX_SAFE_INTEGER;
const MAX_LIMIT = 1_000_000;

function checkMs(value, what, minimum) {
  if (!Number.isInteger(value) || value < minimum || value > MAX_MS) {
    throw new RangeError(`${what} must be an integer number of ms from ${minimum} to ${MAX_MS}, not ${value}`);
  }
  return value;
}

function resourceOf(resource) {
  const key = Array.isArray(resource) ? resource : [resource];
  if (key.length !== 1 || typeof key[0] !== 'string' || key[0] === '') {
    throw new TypeError('one resource (a non-empty key name) per lock');
  }
  return key[0];
}

function randomToken() {
  return require('node:crypto').randomBytes(16).toString('hex');
}

/** `SHARED`, `LIMIT n` or nothing, from the `shared` and `limit` settings. */
function modeArgs(options) {
  if (options.limit !== undefined) {
    if (!Number.isInteger(options.limit) || options.limit < 1 || options.limit > MAX_LIMIT) {
      throw new RangeError(`limit must be an integer from 1 to ${MAX_LIMIT}, not ${options.limit}`);
    }
    return ['LIMIT', options.limit];
  }
  return options.shared ? ['SHARED'] : [];
}

function grantOf(reply) {
  if (reply === null || reply === undefined) {
    return null;
  }
  return { token: String(reply[0]), fence: Number(reply[1]) };
}

/** Whether `error` is the server's error reply (its message starts with the code). */
function isServerReply(error) {
  return error instanceof Error && /^[A-Z][A-Z_]+( |$)/.test(error.message);
}

/**
 * Sends `args` on `send`. A server's error reply becomes a LockError naming the key
 * (a `WRONGTYPE`, a key of another type holding the name, resolves to `onWrongType`
 * when given); a connection's failure stays as the client library reports it.
 */
async function command(send, key, args, onWrongType) {
  try {
    return await send(args);
  } catch (error) {
    if (!isServerReply(error)) {
      throw error;
    }
    if (onWrongType !== undefined && error.message.startsWith('WRONGTYPE')) {
      return onWrongType;
    }
    throw serverError(key, error);
  }
}

/**
 * A reply of `exchange` as `command` gives it: a server's error reply becomes a LockError
 * naming the key (`WRONGTYPE` resolves to `onWrongType` when given); a connection's
 * failure is thrown as the client library reports it.
 */
function replyOf(key, reply, onWrongType) {
  if (!(reply instanceof Error)) {
    return reply;
  }
  if (!isServerReply(reply)) {
    throw reply;
  }
  if (onWrongType !== undefined && reply.message.startsWith('WRONGTYPE')) {
    return onWrongType;
  }
  throw serverError(key, reply);
}

/**
 * Sends the grant `args` with the WAIT its replicas need on `connection`: the reply (null
 * when busy), or NotReplicatedError after `releases` gave back a grant too few replicas
 * acknowledged.
 */
async function grantOn(connection, key, args, replicas, releases, label) {
  const outcome = await replicated(connection, key, [args], replicas);
  const reply = replyOf(key, outcome.replies[0], null);
  if (reply === null || reply === undefined || !short(outcome)) {
    return reply ?? null;
  }
  await connection.exchange(key, releases).catch(() => {});
  throw shortfall(label, 'granted', outcome);
}

/**
 * Takes a grant with `grant(waitLeft)`, again after a grant too few replicas acknowledged
 * while the wait (`wait` ms, 0 without end, undefined: none) lasts.
 */
async function whileWaiting(wait, grant) {
  const started = Date.now();
  for (;;) {
    const left = wait === undefined || wait === 0 ? wait : Math.max(1, wait - (Date.now() - started));
    try {
      return await grant(left);
    } catch (error) {
      const over = wait === undefined || (wait > 0 && Date.now() - started >= wait);
      if (!(error instanceof NotReplicatedError) || error.refused || over) {
        throw error;
      }
    }
  }
}

/**
 * The grant of `args` (`WAIT left` added when waiting) with its replicas: on the shared
 * connection, or while waiting on one of its own; a session-bound grant is bound (and
 * waited for) on the shared connection.
 */
function grantWithReplicas(locker, key, args, replicas, releases, label, session, left) {
  const shared = locker.connection;
  if (left === undefined) {
    return grantOn(shared, key, args, replicas, releases, label);
  }
  const waiting = [...args, 'WAIT', left];
  if (session === undefined) {
    return shared.onOwnConnection((own) => grantOn(own, key, waiting, replicas, releases, label));
  }
  return shared.onOwnConnection(async (own) => replyOf(key, (await own.exchange(key, [waiting]))[0], null))
    .then((reply) => (reply === null || reply === undefined
      ? null
      // The same acquire on the shared connection (same token: same grant, same fence)
      // binds the lock there before the waiting one closes.
      : grantOn(shared, key, args, replicas, releases, label)));
}

/** Extends with `commands` (1 each where held), with the WAIT they need; how many held. */
async function keptOn(connection, key, commands, replicas, label) {
  const outcome = await replicated(connection, key, commands, replicas);
  const held = outcome.replies.map((reply) => replyOf(key, reply, 0)).filter((r) => Number(r) === 1).length;
  if (held === commands.length && short(outcome)) {
    throw shortfall(label, 'extended', outcome);
  }
  return held;
}

class Lock {
  constructor(locker, resource, key, token, fence, duration, session, replicas) {
    this.locker = locker;
    /** The resource as named by the caller. */
    this.resource = resource;
    /** The key on the server (with the client's key prefix). */
    this.key = key;
    /** The token that proves ownership (node-redlock's `value`). */
    this.value = token;
    /** The fencing token: exact as a number (the module keeps fences below 2^53). */
    this.fence = fence;
    this.duration = duration;
    this.session = session;
    this.replicas = replicas;
    /** When the lock expires (ms since the epoch), as far as the client knows. */
    this.expiration = Date.now() + duration;
  }

  /** Releases the lock; throws LockLostError if it was no longer held. */
  async release() {
    const send = (args) => this.locker.connection.send(args);
    const released = await command(send, this.key, ['LOCK.RELEASE', this.key, this.value], 0);
    this.expiration = 0;
    if (Number(released) !== 1) {
      throw new LockLostError(`${this.resource}: the lock was no longer held when released`);
    }
  }

  /**
   * Runs a command fenced by the lock (`LOCK.DO`): atomically, and only while this
   * token holds the lock; resolves to its reply (the command's own errors as the client
   * library reports them). Rejects with LockLostError, nothing run, when the lock is no
   * longer held.
   */
  async do(...args) {
    if (args.length === 0) {
      throw new TypeError('do() needs a command');
    }
    try {
      return await this.locker.connection.send(['LOCK.DO', this.key, this.value, ...args]);
    } catch (error) {
      if (isServerReply(error) && error.message.startsWith('NOTHELD')) {
        this.expiration = 0;
        throw new LockLostError(`${this.resource}: the lock was no longer held: nothing ran`);
      }
      throw error;
    }
  }

  /**
   * Sets what is left of the lock's time to `duration` ms; throws LockLostError if gone,
   * NotReplicatedError (the lock still held, its time not counted as extended) when too
   * few replicas acknowledged it.
   */
  async extend(duration) {
    checkMs(duration, 'duration', 1);
    const extended = await keptOn(this.locker.connection, this.key,
      [['LOCK.EXTEND', this.key, this.value, duration]], this.replicas, this.resource);
    if (extended !== 1) {
      this.expiration = 0;
      throw new LockLostError(`${this.resource}: the lock was no longer held when extended`);
    }
    this.duration = duration;
    this.expiration = Date.now() + duration;
    return this;
  }
}

/**
 * `promise`, or a rejection once `ms` have passed without its answer. The command is
 * not withdrawn: it stays on its connection, in order, so a command sent later on the
 * same connection still follows it; `late` gets what it answers after the rejection
 * (a grant that came too late, to be released).
 */
function within(promise, ms, late = () => {}) {
  let timer;
  let expired = false;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => {
      expired = true;
      reject(new Error(`no answer within ${ms} ms`));
    }, ms);
  });
  promise.then((value) => expired && late(value), () => {});
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Runs `routine(signal, lock)` holding `lock`, extending it every `every` ms until it
 * returns, then releases it. If the lock is lost (an extend answered 0, or failed for a
 * whole `duration`), `signal` aborts with `signal.reason` (and `signal.error`) a
 * LockLostError.
 */
async function holdWhile(lock, duration, every, routine, extend) {
  const controller = new AbortController();
  let lastOk = Date.now();
  let stopped = false;
  let timer;
  const lose = (error) => {
    controller.signal.error = error;
    controller.abort(error);
  };
  const tick = async () => {
    if (stopped) {
      return;
    }
    try {
      // An extend the server does not answer (stopped, cut off) counts as failed once a
      // whole TTL has passed since the last one that succeeded.
      lock = await within(extend(lock), Math.max(0, lastOk + duration - Date.now()));
      lastOk = Date.now();
    } catch (error) {
      if (error instanceof LockLostError) {
        return lose(error);
      }
      if (Date.now() - lastOk >= duration) {
        return lose(new LockLostError(`${lock.resource}: unreachable for a whole TTL (${error.message})`));
      }
    }
    if (!stopped) {
      timer = setTimeout(tick, every);
    }
  };
  timer = setTimeout(tick, every);
  try {
    return await routine(controller.signal, lock);
  } finally {
    stopped = true;
    clearTimeout(timer);
    if (!controller.signal.aborted) {
      await lock.release().catch(() => {});
    }
  }
}

class Locker {
  /**
   * `client`: an ioredis `Redis` or `Cluster`, or a connected node-redis client, pool or
   * cluster. A waiting acquire runs on a connection of its own (a duplicate without a
   * command timeout, or a client the pool lends), so the shared one is never blocked.
   */
  constructor(client, settings = {}) {
    this.connection = new Connection(client);
    this.settings = settings;
  }

  /**
   * Takes `resource` for `duration` ms. Settings: `wait` (ms to wait for a busy lock in
   * the server's first-come-first-served queue; 0 without limit), `session` (grace ms:
   * the lock goes `session` ms after this client's connection closes), `token`,
   * `shared` (a reader of a read/write lock), `limit` (one of at most `limit` holders: a
   * semaphore), `value` (a public value published with the grant: `LOCK.INFO` and
   * `LOCK.WATCH` show it; see Election). Resolves to a Lock; rejects with
   * ResourceLockedError when busy.
   *
   * `replicas` ('auto', the default): the grant counts once a replica of the master has
   * it, so that a failover keeps it: `WAIT 1 replicasTimeout` goes with the acquire in
   * the same round trip when the master has a replica online, nothing when it has none.
   * `replicas: n` asks for n (a master with fewer online refuses at once); 0 turns it off.
   * `replicasTimeout` (ms) defaults to a tenth of `duration`, at most 1000. A grant too
   * few replicas acknowledged is released at once and tried again while `wait` lasts,
   * then rejects with NotReplicatedError (a ResourceLockedError: `acked`, `required`).
   * `fsync: true` waits with `WAITAOF 1 n` instead: the master's own fsync to its
   * append-only file and the replicas' (Redis 7.2+, Valkey 8+, `appendonly yes`; else
   * every acquire is refused, the grant released).
   */
  async acquire(resource, duration, settings = {}) {
    const name = resourceOf(resource);
    const options = { ...this.settings, ...settings };
    checkMs(duration, 'duration', 1);
    const wait = options.wait === undefined ? undefined : checkMs(options.wait, 'wait', 0);
    const session = options.session === undefined ? undefined : checkMs(options.session, 'session', 0);
    const token = options.token === undefined ? randomToken() : String(options.token);
    if (token.length < 1 || Buffer.byteLength(token) > 256) {
      throw new RangeError('token must be 1 to 256 bytes');
    }
    const key = this.connection.keyOf(name);
    const args = ['LOCK.ACQUIRE', key, duration, 'TOKEN', token, ...modeArgs(options)];
    if (session !== undefined) {
      args.push('SESSION', session);
    }
    if (options.value !== undefined) {
      const value = String(options.value);
      if (Buffer.byteLength(value) > 4096) {
        throw new RangeError('value must be 0 to 4096 bytes');
      }
      args.push('VALUE', value);
    }
    const replicas = new Replicas(options.replicas, options.replicasTimeout, duration, options.fsync ?? false);
    const releases = [['LOCK.RELEASE', key, token]];
    const granted = grantOf(await whileWaiting(wait, (left) => grantWithReplicas(this, key, args, replicas, releases, name, session, left)));
    if (granted === null) {
      throw new ResourceLockedError(`${name} is locked by another holder`);
    }
    return new Lock(this, name, key, granted.token, granted.fence, duration, session, replicas);
  }

  /**
   * Takes every resource of `resources` at once, or none (`LOCK.ACQUIREALL`), for
   * `duration` ms: one token, a fence per resource. With `wait`, the request queues on
   * every key holding none of them, so callers that take the same keys in different
   * orders never deadlock. Settings: `wait`, `session`, `token`, `shared`. Resolves to a
   * MultiLock; rejects with ResourceLockedError when a key is busy. On a cluster the
   * keys must share a slot (a hash tag).
   */
  lockAll(resources, duration, settings = {}) {
    return require('./multi.cjs').lockAll(this, resources, duration, settings);
  }

  /** A reader of the read/write lock `resource`: `acquire(..., { shared: true })`. */
  readLock(resource, duration, settings = {}) {
    return this.acquire(resource, duration, { ...settings, shared: true });
  }

  /** The writer of the read/write lock `resource`: a plain `acquire`. */
  writeLock(resource, duration, settings = {}) {
    return this.acquire(resource, duration, settings);
  }

  /** One of at most `permits` holders of the semaphore `resource`. */
  semaphore(resource, permits, duration, settings = {}) {
    return this.acquire(resource, duration, { ...settings, limit: permits });
  }

  release(lock) {
    return lock.release();
  }

  extend(lock, duration) {
    return lock.extend(duration);
  }

  /**
   * Runs `routine(signal, lock)` holding `resource`, extending the lock every third of
   * `duration` (or `settings.extendEvery` ms) until it returns, then releases it. If the
   * lock is lost, `signal` is aborted with `signal.reason` (and `signal.error`) a
   * LockLostError: check `signal.aborted` between steps, or pass the signal on.
   */
  async using(resource, duration, settings, routine) {
    if (typeof settings === 'function') {
      routine = settings;
      settings = {};
    }
    const lock = await this.acquire(resource, duration, settings);
    const every = settings.extendEvery === undefined ? Math.max(1, Math.floor(duration / 3)) : settings.extendEvery;
    return holdWhile(lock, duration, every, routine, (held) => held.extend(duration));
  }

  /**
   * LOCK.INFO as an object of numbers (ttl, fence, acquired, waiters, ...), the words
   * `mode` and `value` (the published value, null when none), or null.
   */
  async info(resource) {
    const key = this.connection.keyOf(resourceOf(resource));
    const reply = await command((a) => this.connection.send(a), key, ['LOCK.INFO', key]);
    if (reply === null || reply === undefined) {
      return null;
    }
    const pairs = Array.isArray(reply) ? reply : Object.entries(reply).flat();
    const fields = {};
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const value = pairs[i + 1];
      const name = String(pairs[i]);
      if (value === null || value === undefined) {
        fields[name] = null;
      } else if (name !== 'value' && /^-?\d+$/.test(String(value))) {
        fields[name] = Number(value);
      } else {
        fields[name] = String(value);
      }
    }
    return fields;
  }
}

module.exports = {
  Locker, Lock, checkMs, resourceOf, randomToken, grantOf, command, isServerReply, holdWhile, within, LockError,
  Replicas, whileWaiting, grantWithReplicas, keptOn,
};
