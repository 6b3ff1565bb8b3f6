'use strict';
// Redlock in node-redlock's shape (its constructor, settings, `acquire`, `release`,
// `extend`, `using` and errors), so a node-redlock program switches by changing its
// import. With one client the lock is the module's own, fenced, and node-redlock's
// retries become one wait in the server's first-come-first-served queue; with several
// independent masters it is the Redlock algorithm over them.

const { EventEmitter } = require('node:events');
const { Locker, checkMs, randomToken, holdWhile } = require('./locker.cjs');
const { resourcesOf } = require('./multi.cjs');
const { ResourceLockedError, ExecutionError, LockLostError } = require('./errors.cjs');

const DEFAULTS = {
  driftFactor: 0.01,
  retryCount: 10,
  retryDelay: 200,
  retryJitter: 200,
  automaticExtensionThreshold: 500,
};

function checkSettings(settings) {
  const { driftFactor, retryCount, retryDelay, retryJitter, automaticExtensionThreshold } = settings;
  if (typeof driftFactor !== 'number' || !(driftFactor >= 0 && driftFactor < 1)) {
    throw new RangeError(`driftFactor must be a number from 0 to 1, not ${driftFactor}`);
  }
  if (!Number.isInteger(retryCount) || retryCount < -1) {
    throw new RangeError(`retryCount must be an integer, -1 (retry forever) or more, not ${retryCount}`);
  }
  for (const [name, value] of Object.entries({ retryDelay, retryJitter, automaticExtensionThreshold })) {
    if (!Number.isInteger(value) || value < 0) {
      throw new RangeError(`${name} must be a whole number of ms, not ${value}`);
    }
  }
  return settings;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One resource with `acquire`, several at once with `lockAll`, on one master. */
function take(locker, resources, duration, settings) {
  return resources.length === 1
    ? locker.acquire(resources[0], duration, settings)
    : locker.lockAll(resources, duration, settings);
}

/** A lock held through a Redlock: node-redlock's Lock, plus the fence(s). */
class RedlockLock {
  constructor(redlock, resources, value, held, attempts, expiration) {
    this.redlock = redlock;
    this.resources = resources;
    /** The token that proves ownership. */
    this.value = value;
    /** What each attempt's masters answered. */
    this.attempts = attempts;
    /** When the lock expires (ms since the epoch), drift allowed for. */
    this.expiration = expiration;
    /** The module's lock on each master that granted it. */
    this.held = held;
    /** Each granting master's fence (fences of independent masters do not compare); for
     *  several resources, each master's array of one fence per resource. */
    this.fences = held.map((lock) => lock.fences ?? lock.fence);
    /** With one client and one resource, the fencing token to send with every write;
     *  else undefined. */
    this.fence = redlock.lockers.length === 1 ? held[0].fence : undefined;
  }

  /** Releases the lock on every master; LockLostError if none still held it. */
  release() {
    return this.redlock.release(this);
  }

  /** A new lock for `duration` ms more (node-redlock's `extend`); this one expires. */
  extend(duration) {
    return this.redlock.extend(this, duration);
  }
}

class Redlock extends EventEmitter {
  /**
   * `clients`: one client (a master with its replicas, or a cluster), or several
   * independent masters; each an ioredis or node-redis client (see Locker). `settings`:
   * node-redlock's `driftFactor`, `retryCount`, `retryDelay`, `retryJitter`,
   * `automaticExtensionThreshold`.
   */
  constructor(clients, settings = {}) {
    super();
    if (!Array.isArray(clients) || clients.length === 0) {
      throw new TypeError('Redlock needs an array of at least one client');
    }
    this.lockers = clients.map((client) => new Locker(client));
    this.settings = checkSettings({ ...DEFAULTS, ...settings });
  }

  get quorum() {
    return Math.floor(this.lockers.length / 2) + 1;
  }

  /**
   * Takes `resources` (a key, or an array of keys: all of them or none) for `duration`
   * ms. Several resources are taken on each master in one step (`LOCK.ACQUIREALL`).
   * Rejects with ExecutionError when no quorum is reached within the retries.
   */
  async acquire(resources, duration, settings = {}) {
    const resource = resourcesOf(resources);
    checkMs(duration, 'duration', 1);
    const options = checkSettings({ ...this.settings, ...settings });
    if (this.lockers.length === 1) {
      return this.acquireOne(resource, duration, options);
    }
    const attempts = [];
    for (let attempt = 0; options.retryCount === -1 || attempt <= options.retryCount; attempt += 1) {
      const token = randomToken();
      const started = Date.now();
      const results = await Promise.allSettled(
        this.lockers.map((locker) => take(locker, resource, duration, { token })),
      );
      const held = results.filter((r) => r.status === 'fulfilled').map((r) => r.value);
      const drift = Math.round(options.driftFactor * duration) + 2;
      const validity = duration - (Date.now() - started) - drift;
      attempts.push({ granted: held.length, errors: results.filter((r) => r.status === 'rejected').map((r) => r.reason) });
      for (const r of results) {
        if (r.status === 'rejected' && !(r.reason instanceof ResourceLockedError)) {
          this.emit('error', r.reason);
        }
      }
      if (held.length >= this.quorum && validity > 0) {
        return new RedlockLock(this, resource, token, held, attempts, started + duration - drift);
      }
      await Promise.allSettled(held.map((lock) => lock.release()));
      if (options.retryCount !== -1 && attempt >= options.retryCount) {
        break;
      }
      await sleep(options.retryDelay + Math.floor(Math.random() * (options.retryJitter + 1)));
    }
    throw new ExecutionError('The operation was unable to achieve a quorum during its retry window.', attempts);
  }

  /** One server: the retries node-redlock would make become one wait in the server's
   *  queue, as long as those retries could last (forever for `retryCount: -1`). */
  async acquireOne(resource, duration, options) {
    const { retryCount, retryDelay, retryJitter } = options;
    const wait = retryCount === 0 ? undefined
      : retryCount === -1 ? 0
        : Math.max(1, retryCount * (retryDelay + retryJitter));
    try {
      const lock = await take(this.lockers[0], resource, duration, { wait });
      return new RedlockLock(this, resource, lock.value, [lock], [{ granted: 1, errors: [] }], lock.expiration);
    } catch (error) {
      if (error instanceof ResourceLockedError) {
        throw new ExecutionError('The operation was unable to achieve a quorum during its retry window.', [
          { granted: 0, errors: [error] },
        ]);
      }
      throw error;
    }
  }

  /** Releases `lock` on every master; LockLostError if none still held it. */
  async release(lock) {
    const results = await Promise.allSettled(lock.held.map((held) => held.release()));
    lock.expiration = 0;
    if (!results.some((r) => r.status === 'fulfilled')) {
      throw new LockLostError(`${lock.resources[0]}: the lock was no longer held when released`);
    }
  }

  /** Extends `lock` to `duration` ms on every master: a new lock (node-redlock's
   *  `extend`); ExecutionError when fewer than a quorum still held it. */
  async extend(lock, duration) {
    checkMs(duration, 'duration', 1);
    const started = Date.now();
    const results = await Promise.allSettled(lock.held.map((held) => held.extend(duration)));
    const held = results.filter((r) => r.status === 'fulfilled').map((r) => r.value);
    const drift = Math.round(this.settings.driftFactor * duration) + 2;
    lock.expiration = 0;
    if (held.length < Math.min(this.quorum, lock.held.length) || Date.now() - started + drift >= duration) {
      throw new ExecutionError('The operation was unable to achieve a quorum during its retry window.', [
        { granted: held.length, errors: results.filter((r) => r.status === 'rejected').map((r) => r.reason) },
      ]);
    }
    return new RedlockLock(this, lock.resources, lock.value, held, lock.attempts, started + duration - drift);
  }

  /**
   * node-redlock's `using(resources, duration, settings?, routine)`: holds the lock
   * while `routine(signal)` runs, extending it when less than
   * `automaticExtensionThreshold` ms are left; the signal aborts (`signal.error`) if it
   * is lost.
   */
  async using(resources, duration, settings, routine) {
    if (typeof settings === 'function') {
      routine = settings;
      settings = {};
    }
    const options = checkSettings({ ...this.settings, ...settings });
    const lock = await this.acquire(resources, duration, settings);
    const every = Math.max(1, duration - options.automaticExtensionThreshold);
    const extend = async (held) => {
      try {
        return await held.extend(duration);
      } catch (error) {
        throw error instanceof ExecutionError ? new LockLostError(`${held.resources[0]}: ${error.message}`) : error;
      }
    };
    return holdWhile(lock, duration, every, routine, extend);
  }
}

module.exports = { Redlock, RedlockLock };
