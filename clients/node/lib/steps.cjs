'use strict';
// The steps every lock of the package takes, with no Locker in them: checking durations
// and resources, making tokens, sending a command and reading its reply, a grant with the
// WAIT its replicas need, and extends. locker.cjs, multi.cjs, redlock.cjs and
// election.cjs build on them; they build on connection.cjs, replicas.cjs and errors.cjs
// only, so data flows one way.

const { randomBytes } = require('node:crypto');
const { NotReplicatedError, serverError } = require('./errors.cjs');
const {
  replicated, replicatedPlainly, plain, REFUSED, shortfall, short,
} = require('./replicas.cjs');

const MAX_MS = Number.MAX_SAFE_INTEGER;
const MAX_LIMIT = 1_000_000;

function checkMs(value, what, minimum) {
  if (!Number.isInteger(value) || value < minimum || value > MAX_MS) {
    throw new RangeError(`${what} must be an integer number of ms from ${minimum} to ${MAX_MS}, not ${value}`);
  }
  return value;
}

function resourceOf(resource) {
  if (typeof resource === 'string' && resource !== '') {
    return resource;
  }
  const key = Array.isArray(resource) ? resource : [resource];
  if (key.length !== 1 || typeof key[0] !== 'string' || key[0] === '') {
    throw new TypeError('one resource (a non-empty key name) per lock');
  }
  return key[0];
}

// Tokens are 16 random bytes in hex. The bytes are drawn 256 tokens at a time: one call
// into the system's generator costs as much as a lock's whole acquire in the package
// (node's own crypto.randomUUID keeps such a cache too). Each byte is used once.
const TOKEN_BYTES = 16;
let entropy = Buffer.alloc(0);
let drawn = 0;

function randomToken() {
  if (drawn === entropy.length) {
    entropy = randomBytes(TOKEN_BYTES * 256);
    drawn = 0;
  }
  drawn += TOKEN_BYTES;
  return entropy.toString('hex', drawn - TOKEN_BYTES, drawn);
}

/** `SHARED`, `LIMIT n` or nothing, from the `shared` and `limit` settings. */
function modeArgs(options) {
  if (options.limit !== undefined) {
    if (!Number.isInteger(options.limit) || options.limit < 1 || options.limit > MAX_LIMIT) {
      throw new RangeError(`limit must be an integer from 1 to ${MAX_LIMIT}, not ${options.limit}`);
    }
    return ['LIMIT', options.limit];
  }
  return options.shared ? SHARED : NO_MODE;
}

const SHARED = Object.freeze(['SHARED']);
const NO_MODE = Object.freeze([]);

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
  if (plain(connection, replicas)) {
    // The server undoes a grant too few replicas acknowledged itself: nothing to release.
    const reply = await replicatedPlainly(connection, key, args, replicas);
    if (reply !== REFUSED) {
      return replyOf(key, reply, null) ?? null;
    }
  }
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
 * while the wait (`wait` ms, 0 without end, undefined: none) lasts. Without a wait there
 * is nothing to try again: `grant`'s own promise.
 */
function whileWaiting(wait, grant) {
  return wait === undefined ? grant(undefined) : retryWhileWaiting(wait, grant);
}

async function retryWhileWaiting(wait, grant) {
  const started = Date.now();
  for (;;) {
    const left = wait === 0 ? 0 : Math.max(1, wait - (Date.now() - started));
    try {
      return await grant(left);
    } catch (error) {
      const over = wait > 0 && Date.now() - started >= wait;
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

module.exports = {
  MAX_MS, checkMs, resourceOf, randomToken, modeArgs, grantOf, isServerReply, command, replyOf,
  grantOn, whileWaiting, grantWithReplicas, keptOn,
};
