'use strict';
// Redlock in node-redlock's shape (its constructor, settings and defaults, `acquire`,
// `release`, `extend`, `using`, its errors, and each attempt's votes), so a node-redlock
// program switches by changing its import. With one client the lock is the module's
// own, fenced, and each of node-redlock's attempts waits in the server's
// first-come-first-served queue for as long as node-redlock would have slept before
// the next one; with several independent masters it is the Redlock algorithm over them.
// Several resources are taken on each master in one step (`LOCK.ACQUIREALL`).

const { EventEmitter } = require('node:events');
const { performance } = require('node:perf_hooks');
const { Locker, holdWhile, within } = require('./locker.cjs');
const { checkMs, randomToken, command } = require('./steps.cjs');
const { resourcesOf } = require('./multi.cjs');
const { ResourceLockedError, ExecutionError, LockLostError } = require('./errors.cjs');
const { Replicas } = require('./replicas.cjs');

/** node-redlock's defaults: 11 attempts in all, 200 ms +/- 100 ms apart. `masterTimeout`
 *  (ours; node-redlock has none, so one stopped master stalls it): how long each master
 *  may take to answer, by default a tenth of the duration, at most 500 ms. */
const DEFAULTS = {
  driftFactor: 0.01,
  retryCount: 10,
  retryDelay: 200,
  retryJitter: 100,
  automaticExtensionThreshold: 500,
};

const NO_QUORUM = 'The operation was unable to achieve a quorum during its retry window.';

function checkSettings(settings) {
  const { driftFactor, retryCount, retryDelay, retryJitter, automaticExtensionThreshold, masterTimeout } = settings;
  if (masterTimeout !== undefined && !(Number.isInteger(masterTimeout) && masterTimeout > 0)) {
    throw new RangeError(`masterTimeout must be a whole number of ms above 0, not ${masterTimeout}`);
  }
  new Replicas(settings.replicas, settings.replicasTimeout, 1000, settings.fsync ?? false); // checks them now
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

/** node-redlock's check and words for a duration that is not a whole number of ms; then
 *  the module's range (1 to 2^53 - 1). */
function checkDuration(duration) {
  if (Math.floor(duration) !== duration) {
    throw new Error('Duration must be an integer value in milliseconds.');
  }
  return checkMs(duration, 'duration', 1);
}

/** The time before the next attempt: `retryDelay` +/- up to `retryJitter` ms. */
function pauseOf({ retryDelay, retryJitter }) {
  return Math.max(0, retryDelay + Math.floor((Math.random() * 2 - 1) * retryJitter));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** How long a master may take to answer for a lock of `duration` ms. */
function masterTimeoutOf(settings, duration) {
  return settings.masterTimeout ?? Math.max(1, Math.min(Math.floor(duration / 10), 500));
}

/** The allowance for clock drift: `driftFactor` of the duration, plus 2 ms for the
 *  servers' 1 ms expiry precision. */
function driftOf(driftFactor, duration) {
  return Math.round(driftFactor * duration) + 2;
}

/** One resource with `acquire`, several at once with `lockAll`, on one master. */
function take(locker, resources, duration, settings) {
  return resources.length === 1
    ? locker.acquire(resources[0], duration, settings)
    : locker.lockAll(resources, duration, settings);
}

/** Releases `token`'s hold of every resource on one master (a key it does not hold, or
 *  of another type, is left as it is); how many it released. */
async function releaseOn(locker, resources, token) {
  const send = (args) => locker.connection.send(args);
  const replies = await Promise.all(resources.map((name) => {
    const key = locker.connection.keyOf(name);
    return command(send, key, ['LOCK.RELEASE', key, token], 0);
  }));
  return replies.filter((reply) => Number(reply) === 1).length;
}

/**
 * One attempt's votes, in node-redlock's shape (`ExecutionStats`): a master that
 * granted is a vote for; one that did not, a vote against with its reason (a busy or
 * foreign key: node-redlock's ResourceLockedError; a failure: the client library's error).
 */
function statsOf(clients, results, resources) {
  const stats = {
    membershipSize: clients.length,
    quorumSize: Math.floor(clients.length / 2) + 1,
    votesFor: new Set(),
    votesAgainst: new Map(),
  };
  results.forEach((result, i) => {
    if (result.status === 'fulfilled') {
      stats.votesFor.add(clients[i]);
    } else if (result.reason instanceof ResourceLockedError) {
      stats.votesAgainst.set(clients[i], new ResourceLockedError(
        `The operation was applied to: 0 of the ${resources.length} requested resources.`,
      ));
    } else {
      stats.votesAgainst.set(clients[i], result.reason);
    }
  });
  return stats;
}

/** A lock held through a Redlock: node-redlock's Lock, plus the fence(s). */
class RedlockLock {
  constructor(redlock, resources, value, held, attempts, expiration, duration) {
    this.redlock = redlock;
    /** The duration (ms) it was taken or last extended for. */
    this.duration = duration;
    this.resources = resources;
    /** The token that proves ownership. */
    this.value = value;
    /** Each attempt's votes (node-redlock's `ExecutionStats`), as promises. */
    this.attempts = attempts;
    /** Until when the lock may be relied on (ms since the epoch): the duration less the
     *  time the attempt took (on a monotonic clock) and the drift allowance. */
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
   * `automaticExtensionThreshold`, with its defaults; ours: `masterTimeout`, `replicas`
   * and `replicasTimeout` (each master's grant waits for its own replicas; see Locker).
   */
  constructor(clients, settings = {}) {
    super();
    const list = clients === undefined || clients === null ? [] : Array.from(clients);
    if (list.length === 0) {
      throw new TypeError('Redlock needs at least one client');
    }
    // As node-redlock: every vote against is an "error" event, for observability, and
    // one listener keeps an unobserved event from throwing.
    this.on('error', () => {});
    this.clients = list;
    this.lockers = list.map((client) => new Locker(client));
    this.settings = checkSettings({ ...DEFAULTS, ...settings });
  }

  get quorum() {
    return Math.floor(this.lockers.length / 2) + 1;
  }

  /** Asks every master with `ask(locker)`: the attempt's results and votes. */
  async vote(resources, ask) {
    const results = await Promise.allSettled(this.lockers.map(ask));
    for (const result of results) {
      if (result.status === 'rejected') {
        this.emit('error', result.reason);
      }
    }
    return { results, stats: statsOf(this.clients, results, resources) };
  }

  /**
   * Takes `resources` (a key, or an array of keys: all of them or none) for `duration`
   * ms, in up to `retryCount + 1` attempts. Rejects with ExecutionError (`attempts`:
   * each attempt's votes) when no attempt reached a quorum with time to spare; after a
   * failed attempt the lock is released on every master, a master whose grant reply was
   * lost included.
   */
  async acquire(resources, duration, settings = {}) {
    checkDuration(duration);
    const resource = resourcesOf(resources);
    const options = checkSettings({ ...this.settings, ...settings });
    const drift = driftOf(options.driftFactor, duration);
    const masterTimeout = masterTimeoutOf(options, duration);
    const single = this.lockers.length === 1;
    const token = randomToken();
    const attempts = [];
    for (let attempt = 0; ; attempt += 1) {
      const last = options.retryCount !== -1 && attempt >= options.retryCount;
      const pause = last ? 0 : pauseOf(options);
      // One master: the pause before the next attempt is spent waiting in the server's
      // queue, which grants the lock the moment it frees, in its turn.
      const wait = single && pause > 0 ? pause : undefined;
      const started = performance.now();
      const limit = masterTimeout + (wait ?? 0);
      const { results, stats } = await this.vote(resource, (locker) =>
        within(take(locker, resource, duration, {
          token,
          wait,
          replicas: options.replicas,
          fsync: options.fsync,
          // each master's grant waits for its own replicas within the master's timeout
          replicasTimeout: options.replicasTimeout ?? Math.max(1, Math.floor(masterTimeout / 2)),
        }), limit, (late) => late.release().catch(() => {})));
      if (options.retryCount !== -1) {
        attempts.push(Promise.resolve(stats));
      }
      const held = results.filter((r) => r.status === 'fulfilled').map((r) => r.value);
      // A grant after a wait in the server counts from the grant, which the server
      // answers in the same event; the reply's transit is within the drift allowance.
      const elapsed = wait === undefined ? performance.now() - started : 0;
      const validity = duration - elapsed - drift;
      if (held.length >= this.quorum && validity > 0) {
        return new RedlockLock(this, resource, token, held, attempts, Date.now() + validity, duration);
      }
      await this.releaseAll(resource, token, masterTimeout);
      if (last) {
        throw new ExecutionError(NO_QUORUM, attempts);
      }
      if (wait === undefined) {
        await sleep(pause);
      }
    }
  }

  /** Releases `token`'s hold of `resources` on every master, each bounded by `ms` (a
   *  release that outlives it still reaches its master, after the acquire it undoes). */
  releaseAll(resources, token, ms) {
    return Promise.allSettled(this.lockers.map((locker) => within(releaseOn(locker, resources, token), ms)));
  }

  /** Releases `lock` on every master (a master whose grant reply was lost included);
   *  LockLostError if none still held it. */
  async release(lock) {
    lock.expiration = 0;
    const results = await this.releaseAll(lock.resources, lock.value, masterTimeoutOf(this.settings, lock.duration));
    const released = results.some((r) => r.status === 'fulfilled' && r.value === lock.resources.length);
    if (!released) {
      throw new LockLostError(`${lock.resources.join(', ')}: the lock was no longer held when released`);
    }
  }

  /** Extends `lock` to `duration` ms on every master that granted it: a new lock
   *  (node-redlock's `extend`); ExecutionError when fewer than a quorum still held it,
   *  or the lock had expired already. */
  async extend(lock, duration) {
    checkDuration(duration);
    if (lock.expiration < Date.now()) {
      throw new ExecutionError('Cannot extend an already-expired lock.', []);
    }
    const started = performance.now();
    const { results, stats } = await this.vote(lock.resources, async (locker) => {
      const held = lock.held.find((h) => h.locker === locker);
      if (held === undefined) {
        throw new ResourceLockedError(`${lock.resources.join(', ')}: not granted on this master`);
      }
      return within(held.extend(duration), masterTimeoutOf(this.settings, duration));
    });
    const held = results.filter((r) => r.status === 'fulfilled').map((r) => r.value);
    const validity = duration - (performance.now() - started) - driftOf(this.settings.driftFactor, duration);
    lock.expiration = 0;
    if (held.length < this.quorum || validity <= 0) {
      throw new ExecutionError(NO_QUORUM, [Promise.resolve(stats)]);
    }
    return new RedlockLock(this, lock.resources, lock.value, held, [Promise.resolve(stats)], Date.now() + validity, duration);
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

module.exports = { Redlock, RedlockLock, DEFAULTS };
