'use strict';
// Locks from the redis-lock server module, for ioredis and node-redis (`redis`), in
// node-redlock's shape: `acquire`, `release`, `extend`, `using(key, ttl, fn)`.

const MAX_MS = 2 ** 47 - 1;

class LockError extends Error {
  constructor(message) {
    super(message);
    this.name = this.constructor.name;
  }
}

/** The lock is held by another token (after waiting, if a wait was asked for). */
class ResourceLockedError extends LockError {}

/** The lock was gone when it was released or extended, or when `using` renewed it. */
class LockLostError extends LockError {}

function checkMs(value, what, minimum) {
  if (!Number.isInteger(value) || value < minimum || value > MAX_MS) {
    throw new RangeError(`${what} must be an integer number of ms from ${minimum} to ${MAX_MS}, not ${value}`);
  }
  return value;
}

function resourceOf(resource) {
  const key = Array.isArray(resource) ? resource : [resource];
  if (key.length !== 1 || typeof key[0] !== 'string' || key[0] === '') {
    throw new TypeError('one resource (a key name) per lock');
  }
  return key[0];
}

function randomToken() {
  return require('node:crypto').randomBytes(16).toString('hex');
}

/**
 * The connection, whichever library made it: ioredis (`call`) or node-redis
 * (`sendCommand`). Arguments go as strings; replies come back as strings and numbers.
 */
class Connection {
  constructor(client) {
    this.client = client;
    if (typeof client.call === 'function') {
      this.kind = 'ioredis';
    } else if (typeof client.sendCommand === 'function') {
      this.kind = 'node-redis';
    } else {
      throw new TypeError('expected an ioredis or node-redis client');
    }
  }

  send(args) {
    const strings = args.map(String);
    if (this.kind === 'ioredis') {
      return this.client.call(...strings);
    }
    return this.client.sendCommand(strings);
  }

  /** A new connection like this one, for a wait that blocks it; `close()` it after. */
  async duplicate() {
    const copy = this.client.duplicate();
    if (this.kind === 'node-redis') {
      await copy.connect();
    }
    return new Connection(copy);
  }

  close() {
    const c = this.client;
    if (this.kind === 'ioredis') {
      c.disconnect();
    } else if (typeof c.destroy === 'function') {
      c.destroy();
    } else {
      c.disconnect();
    }
  }
}

function grantOf(reply) {
  if (reply === null || reply === undefined) {
    return null;
  }
  return { token: String(reply[0]), fence: Number(reply[1]) };
}

class Lock {
  constructor(locker, resource, token, fence, duration, session) {
    this.locker = locker;
    this.resource = resource;
    /** The token that proves ownership (node-redlock's `value`). */
    this.value = token;
    /** The fencing token: exact as a number (the module keeps fences below 2^53). */
    this.fence = fence;
    this.duration = duration;
    this.session = session;
    /** When the lock expires (ms since the epoch), as far as the client knows. */
    this.expiration = Date.now() + duration;
  }

  /** Releases the lock; throws LockLostError if it was no longer held. */
  async release() {
    const released = await this.locker.connection.send(['LOCK.RELEASE', this.resource, this.value]);
    this.expiration = 0;
    if (Number(released) !== 1) {
      throw new LockLostError(`${this.resource}: the lock was no longer held when released`);
    }
  }

  /** Sets what is left of the lock's time to `duration` ms; throws LockLostError if gone. */
  async extend(duration) {
    checkMs(duration, 'duration', 1);
    const extended = await this.locker.connection.send(['LOCK.EXTEND', this.resource, this.value, duration]);
    if (Number(extended) !== 1) {
      this.expiration = 0;
      throw new LockLostError(`${this.resource}: the lock was no longer held when extended`);
    }
    this.duration = duration;
    this.expiration = Date.now() + duration;
    return this;
  }
}

class Locker {
  /**
   * `client`: an ioredis `Redis` or a connected node-redis client. A waiting acquire
   * runs on a duplicate of it, so that the shared connection is never blocked.
   */
  constructor(client, settings = {}) {
    this.connection = new Connection(client);
    this.settings = settings;
  }

  /**
   * Takes `resource` for `duration` ms. Settings: `wait` (ms to wait for a busy lock in
   * the server's first-come-first-served queue; 0 without limit), `session` (grace ms:
   * the lock goes `session` ms after this client's connection closes), `token`.
   * Resolves to a Lock; rejects with ResourceLockedError when busy.
   */
  async acquire(resource, duration, settings = {}) {
    const key = resourceOf(resource);
    const options = { ...this.settings, ...settings };
    checkMs(duration, 'duration', 1);
    const wait = options.wait === undefined ? undefined : checkMs(options.wait, 'wait', 0);
    const session = options.session === undefined ? undefined : checkMs(options.session, 'session', 0);
    const token = options.token === undefined ? randomToken() : String(options.token);
    if (token.length < 1 || Buffer.byteLength(token) > 256) {
      throw new RangeError('token must be 1 to 256 bytes');
    }
    const args = ['LOCK.ACQUIRE', key, duration, 'TOKEN', token];
    if (session !== undefined) {
      args.push('SESSION', session);
    }
    let granted;
    if (wait === undefined) {
      granted = grantOf(await this.connection.send(args));
    } else {
      granted = await this.waitFor(args, wait, session !== undefined);
    }
    if (granted === null) {
      throw new ResourceLockedError(`${key} is locked by another holder`);
    }
    return new Lock(this, key, granted.token, granted.fence, duration, session);
  }

  /** `args` with `WAIT wait` on a duplicate connection; a session binding moves back. */
  async waitFor(args, wait, bound) {
    const waiting = await this.connection.duplicate();
    try {
      let granted = grantOf(await waiting.send([...args, 'WAIT', wait]));
      if (granted !== null && bound) {
        // The same acquire on the shared connection (same token: same grant, same
        // fence) binds the lock there before the waiting one closes.
        granted = grantOf(await this.connection.send(args));
      }
      return granted;
    } finally {
      waiting.close();
    }
  }

  release(lock) {
    return lock.release();
  }

  extend(lock, duration) {
    return lock.extend(duration);
  }

  /**
   * Runs `routine(signal)` holding `resource`, extending the lock every third of
   * `duration` (or `settings.extendEvery` ms) until it returns, then releases it. If the
   * lock is lost (an extend answered 0, or failed for a whole `duration`), `signal` is
   * aborted with `signal.reason` (and `signal.error`) a LockLostError: check
   * `signal.aborted` between steps, or pass the signal to what supports one.
   */
  async using(resource, duration, settings, routine) {
    if (typeof settings === 'function') {
      routine = settings;
      settings = {};
    }
    const lock = await this.acquire(resource, duration, settings);
    const controller = new AbortController();
    const every = settings.extendEvery === undefined ? Math.max(1, Math.floor(duration / 3)) : settings.extendEvery;
    let lastOk = Date.now();
    let stopped = false;
    const lose = (error) => {
      controller.signal.error = error;
      controller.abort(error);
    };
    const tick = async () => {
      if (stopped) {
        return;
      }
      try {
        await lock.extend(duration);
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
    let timer = setTimeout(tick, every);
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

  /** LOCK.INFO as an object of numbers (ttl, fence, acquired, waiters, ...), or null. */
  async info(resource) {
    const reply = await this.connection.send(['LOCK.INFO', resourceOf(resource)]);
    if (reply === null || reply === undefined) {
      return null;
    }
    const pairs = Array.isArray(reply) ? reply : Object.entries(reply).flat();
    const fields = {};
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const value = pairs[i + 1];
      fields[String(pairs[i])] = /^-?\d+$/.test(String(value)) ? Number(value) : String(value);
    }
    return fields;
  }
}

module.exports = { Locker, Lock, LockError, ResourceLockedError, LockLostError };
