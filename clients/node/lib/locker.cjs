'use strict';
// Locker: locks on one server (a master with its replicas, a cluster), in node-redlock's
// shape: `acquire`, `release`, `extend`, `using(key, ttl, fn)`; shared holders
// (read/write locks) and semaphores.

const { Connection } = require('./connection.cjs');
const {
  LockError, ResourceLockedError, NotReplicatedError, LockLostError,
} = require('./errors.cjs');
const { Replicas } = require('./replicas.cjs');
const {
  checkMs, resourceOf, randomToken, modeArgs, grantOf, isServerReply, command,
  whileWaiting, grantWithReplicas, keptOn,
} = require('./steps.cjs');
const { lockAll } = require('./multi.cjs');

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

/** The settings of an acquire given none (one object, never changed). */
const NO_SETTINGS = Object.freeze({});

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
  async acquire(resource, duration, settings = NO_SETTINGS) {
    const name = resourceOf(resource);
    const options = settings === NO_SETTINGS ? this.settings : { ...this.settings, ...settings };
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
    const replicas = this.replicasFor(options, duration);
    const releases = [['LOCK.RELEASE', key, token]];
    const granted = grantOf(await (wait === undefined
      ? grantWithReplicas(this, key, args, replicas, releases, name, session, undefined)
      : whileWaiting(wait, (left) => grantWithReplicas(this, key, args, replicas, releases, name, session, left))));
    if (granted === null) {
      throw new ResourceLockedError(`${name} is locked by another holder`);
    }
    return new Lock(this, name, key, granted.token, granted.fence, duration, session, replicas);
  }

  /**
   * The `Replicas` of an acquire with `options` for `duration` ms: the last one made
   * again when both are the same (the defaults, most often), else a new one.
   */
  replicasFor(options, duration) {
    const last = this.lastReplicas;
    if (last !== undefined && last.duration === duration && last.replicas === options.replicas
        && last.replicasTimeout === options.replicasTimeout && last.fsync === options.fsync) {
      return last.made;
    }
    const made = new Replicas(options.replicas, options.replicasTimeout, duration, options.fsync ?? false);
    this.lastReplicas = {
      duration, replicas: options.replicas, replicasTimeout: options.replicasTimeout, fsync: options.fsync, made,
    };
    return made;
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
    return lockAll(this, resources, duration, settings);
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

module.exports = { Locker, Lock, holdWhile, within };
