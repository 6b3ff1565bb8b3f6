'use strict';
// Leader election on one lock, as etcd's Campaign / Proclaim / Resign / Leader / Observe:
// candidates queue for the lock (first come, first elected), the leader's lock is bound
// to the client's connection with a lock-delay (`SESSION`) and extended every third of
// its TTL, its value is published with `VALUE`, and followers wait in `LOCK.WATCH`.

const { Locker } = require('./locker.cjs');
const { checkMs, command, isServerReply } = require('./steps.cjs');
const { LockError, LockLostError, ResourceLockedError } = require('./errors.cjs');

/** How long one LOCK.WATCH of `observe` waits before asking again (ms). */
const OBSERVE_ROUND = 30_000;
/** The longest pause between two tries to reach the server again (ms). */
const MOST_BACKOFF = 2_000;

/** A LOCK.WATCH reply: undefined for a timeout, null for nobody, else { term, value }. */
function watched(reply) {
  if (reply === null || reply === undefined) {
    return undefined;
  }
  const term = Number(reply[0]);
  if (term === 0) {
    return null;
  }
  return { term, value: reply[1] === null || reply[1] === undefined ? null : String(reply[1]) };
}

/** The error replies `observe` rides out: what a failover, a restart or a slot move
 *  answers a watcher (docs/election.md). Every package rides out the same. */
const RIDDEN_OUT = /^(UNBLOCKED|MOVED|ASK|READONLY|LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN)( |$)/;

/** Whether `observe` reconnects and asks again after `error`: a lost, refused or
 *  timed-out connection (the client library's own error), or a reply of RIDDEN_OUT.
 *  Any other error reply (WRONGTYPE, NOPERM, ...) ends the observation. */
function retryable(error) {
  const reply = error instanceof LockError && error.cause instanceof Error ? error.cause : error;
  return isServerReply(reply) ? RIDDEN_OUT.test(reply.message) : true;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref());

class Leadership {
  constructor(election, lock) {
    this.election = election;
    this.lock = lock;
    /** The term: the fence of this leadership, to send with every write. */
    this.term = lock.fence;
    /** True once the term is known to be lost: stop acting as the leader. */
    this.lost = false;
    this.lastOk = Date.now();
    const ttl = election.ttl;
    this.timer = setInterval(() => this.keepAlive(ttl), Math.max(1, Math.floor(ttl / 3)));
    this.timer.unref();
  }

  async keepAlive(ttl) {
    try {
      await this.lock.extend(ttl);
      this.lastOk = Date.now();
    } catch (error) {
      if (error instanceof LockLostError || Date.now() - this.lastOk >= ttl) {
        this.lose();
      }
    }
  }

  lose() {
    this.lost = true;
    clearInterval(this.timer);
  }

  /** Publishes `value` in place of the last one, same term; LockLostError if lost. */
  async proclaim(value) {
    const e = this.election;
    let lock;
    try {
      lock = await e.locker.acquire(e.name, e.ttl, { token: this.lock.value, session: e.lockDelay, value });
    } catch (error) {
      if (error instanceof ResourceLockedError) {
        this.lose();
        throw new LockLostError(`${e.name}: the leadership was gone when it proclaimed`);
      }
      throw error;
    }
    if (lock.fence !== this.term) {
      // The term had ended and the key was free: this took it anew. Give it back.
      await lock.release().catch(() => {});
      this.lose();
      throw new LockLostError(`${e.name}: the leadership was gone when it proclaimed`);
    }
  }

  /** Resigns: the next candidate is elected at once. False if it was already lost. */
  async resign() {
    clearInterval(this.timer);
    try {
      await this.lock.release();
      return true;
    } catch (error) {
      if (error instanceof LockLostError) {
        return false;
      }
      throw error;
    } finally {
      this.lost = true;
    }
  }
}

class Election {
  /**
   * The election on `name`, on `client` (as for Locker). Settings: `ttl` (ms a leader
   * keeps its term without an extend; default 30000), `lockDelay` (ms after a leader's
   * connection closes before the next candidate is elected; default 5000).
   */
  constructor(client, name, settings = {}) {
    this.locker = client instanceof Locker ? client : new Locker(client);
    this.name = name;
    this.ttl = checkMs(settings.ttl === undefined ? 30_000 : settings.ttl, 'ttl', 1);
    this.lockDelay = checkMs(settings.lockDelay === undefined ? 5_000 : settings.lockDelay, 'lockDelay', 0);
  }

  /**
   * Campaigns with `value` published: resolves once elected (first come, first elected)
   * to a Leadership; to null if `settings.timeout` ms pass first (default: no limit).
   */
  async campaign(value, settings = {}) {
    const wait = settings.timeout === undefined ? 0 : checkMs(settings.timeout, 'timeout', 1);
    try {
      const lock = await this.locker.acquire(this.name, this.ttl, { wait, session: this.lockDelay, value });
      return new Leadership(this, lock);
    } catch (error) {
      if (error instanceof ResourceLockedError) {
        return null;
      }
      throw error;
    }
  }

  /** The leader now, `{ term, value }`, or null when nobody leads (`LOCK.INFO`). */
  async leader() {
    const info = await this.locker.info(this.name);
    return info === null ? null : { term: info.fence, value: info.value };
  }

  /**
   * Every change of leader after `term` (0: nobody, so the first is the leader now, if
   * any), as it happens: `{ term, value }`, or null when nobody leads. It re-asks
   * LOCK.WATCH with the last term seen, on a connection of its own, and rides out a lost
   * connection or a failover by asking again. `break` out of the loop to stop.
   */
  async *observe(term = 0) {
    const connection = this.locker.connection;
    const key = connection.keyOf(this.name);
    let last = term;
    let pause = 0;
    let own = null;
    try {
      for (;;) {
        let reply;
        try {
          own = own || (await connection.duplicate());
          reply = await command((a) => own.send(a), key, ['LOCK.WATCH', key, last, OBSERVE_ROUND]);
        } catch (error) {
          if (!retryable(error)) {
            throw error;
          }
          if (own !== null) {
            own.close();
            own = null;
          }
          pause = Math.min(MOST_BACKOFF, Math.max(100, pause * 2));
          await sleep(pause);
          continue;
        }
        pause = 0;
        const seen = watched(reply);
        if (seen === undefined) {
          continue; // the round passed with no change
        }
        last = seen === null ? 0 : seen.term;
        yield seen;
      }
    } finally {
      if (own !== null) {
        own.close();
      }
    }
  }
}

module.exports = { Election, Leadership };
