'use strict';
// `replicas`: a grant counts once the master's replicas have it (docs/clients.md,
// "Failover-safe by default"). Every write that makes or keeps a grant (an acquire,
// `lockAll`, an extend, `using`'s extends) asks the server to hold its reply until its
// replicas have it (`REPLICAS AUTO`, the default: one replica when the master has one,
// none without, by the server's own rule; or the number given; `REPLTIMEOUT ms`): the
// server counts the acknowledgements of the grant's own offset and, when too few come in
// time, undoes the grant itself and answers NOTREPLICATED. The package keeps no knowledge
// of replicas of its own there: no ROLE, no INFO, no WAIT. A server that cannot wait
// (Redis 7.0, a module before 0.3.0) refuses the option, changing nothing; from then on
// the package waits itself (redis70.cjs). Either way the shortfall is reported as
// NotReplicatedError.

const { NotReplicatedError } = require('./errors.cjs');
const redis70 = require('./redis70.cjs');
const { errorAsReply } = require('./connection.cjs');

const AUTO = 'auto';
const MAX_DEFAULT_TIMEOUT_MS = 1000;

/** A lock's `replicas` and `replicasTimeout` (ms), checked; the WAIT they ask. */
class Replicas {
  constructor(setting = AUTO, timeoutMs, ttlMs, fsync = false) {
    if (setting !== AUTO && !(Number.isInteger(setting) && setting >= 0)) {
      throw new RangeError(`replicas must be 'auto' or a number of replicas from 0, not ${setting}`);
    }
    if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs >= 1 && timeoutMs <= 3_600_000)) {
      throw new RangeError(`replicasTimeout must be an integer number of ms from 1 to 3600000, not ${timeoutMs}`);
    }
    if (typeof fsync !== 'boolean') {
      throw new TypeError(`fsync must be true or false, not ${fsync}`);
    }
    this.setting = setting;
    /** What `REPLICAS` says on the wire: the server's own rule, or the number. */
    this.rule = setting === AUTO ? 'AUTO' : setting;
    this.fsync = fsync;
    // With fsync, a third of the TTL, at most 2 s: a replica reports its fsync once a second.
    this.timeoutMs = timeoutMs ?? (fsync
      ? Math.max(1, Math.min(Math.floor(ttlMs / 3), 2 * MAX_DEFAULT_TIMEOUT_MS))
      : Math.max(1, Math.min(Math.floor(ttlMs / 10), MAX_DEFAULT_TIMEOUT_MS)));
  }

  /** No wait at all: no replicas asked for, and no fsync. */
  get off() {
    return this.setting === 0 && !this.fsync;
  }

  /** The acknowledgements a grant needs from a master with `online` replicas. */
  required(online, label) {
    if (this.setting === 0) {
      return 0;
    }
    if (this.setting === AUTO) {
      return online > 0 ? 1 : 0;
    }
    if (online < this.setting) {
      throw new NotReplicatedError(
        `${label}: the master has ${online} replicas online and replicas: ${this.setting} asks for ${this.setting}: not acquired`,
        online, this.setting, true,
      );
    }
    return this.setting;
  }

  /** `WAIT required timeout`, or with `fsync` `WAITAOF 1 required timeout`, or none. */
  waitCommands(required) {
    if (this.fsync) {
      return [['WAITAOF', 1, required, this.timeoutMs]];
    }
    return required > 0 ? [['WAIT', required, this.timeoutMs]] : [];
  }
}

// Servers (by address) that refused `REPLICAS`: their writes go with WAIT.
const noServerWait = new Set();

function isError(reply) {
  return reply instanceof Error;
}

/** Whether a server's reply refused `REPLICAS` (it cannot wait, or does not know it). */
function refusesReplicas(reply) {
  return reply instanceof Error
    && (/REPLICAS needs/.test(reply.message) || /unknown option 'REPLICAS'/.test(reply.message));
}

/** The server's `NOTREPLICATED acked <a> required <n>` as NotReplicatedError, else `reply`. */
function fromServer(key, reply) {
  const found = reply instanceof Error && /^NOTREPLICATED acked (\d+) required (\d+)/.exec(reply.message);
  if (!found) {
    return reply;
  }
  const [acked, required] = [Number(found[1]), Number(found[2])];
  return new NotReplicatedError(
    `${key}: only ${acked} of ${required} replicas acknowledged it in time (the server undid the grant; an extend keeps the lock)`,
    acked, required, false,
  );
}

/**
 * The reply of one write that makes a grant, on a plain ioredis connection (`plain`),
 * asking the server to hold it until its replicas have the grant, in one call: what
 * `replicated` does for the common grant, in the fewest steps (every allocation of the
 * package's own lands in some acquire's latency as the collector's work). An error reply
 * is its Error; `REFUSED` when the server refuses `REPLICAS` (Redis 7.0, which changed
 * nothing): the server is marked, and the write must go the general way (`replicated`),
 * which then waits itself.
 */
async function replicatedPlainly(connection, key, args, replicas) {
  const reply = await connection.client
    .call(...args, 'REPLICAS', replicas.rule, 'REPLTIMEOUT', replicas.timeoutMs)
    .catch(errorAsReply);
  if (!(reply instanceof Error)) {
    return reply;
  }
  if (refusesReplicas(reply)) {
    noServerWait.add(connection.addressOf());
    return REFUSED;
  }
  return fromServer(key, reply);
}

/** `replicatedPlainly`'s answer when the server cannot wait. */
const REFUSED = Symbol('REPLICAS refused');

/** Whether `replicatedPlainly` applies: one write, no fsync, on a plain ioredis connection to a server not known to refuse `REPLICAS`. */
function plain(connection, replicas) {
  return !replicas.fsync && connection.kind === 'ioredis' && !connection.client.isCluster
    && (noServerWait.size === 0 || !noServerWait.has(connection.addressOf()));
}

/**
 * Sends `commands` (writes that make or keep a grant) asking the server to hold each
 * reply until its replicas have it (`REPLICAS AUTO`, or the number given, and
 * `REPLTIMEOUT`; with fsync, a `WAITAOF 1 0` behind them for the master's own fsync), in
 * one round trip on `connection`; resolves to `{ replies, required, acked }` (the
 * writes' replies, an error reply as its Error). A server that cannot wait (Redis 7.0)
 * refuses, changing nothing: then, and from then on, the package waits itself
 * (redis70.cjs).
 */
async function replicated(connection, key, commands, replicas) {
  if (noServerWait.has(connection.addressOf())) {
    return redis70.replicated(connection, key, commands, replicas);
  }
  const writes = commands.map((command) => [...command, 'REPLICAS', replicas.rule, 'REPLTIMEOUT', replicas.timeoutMs]);
  if (replicas.fsync) {
    writes.push(['WAITAOF', 1, 0, replicas.timeoutMs]);
  }
  const replies = await connection.exchange(key, writes);
  const own = replicas.fsync ? replies.slice(0, commands.length) : replies;
  if (own.some(refusesReplicas)) {
    noServerWait.add(connection.addressOf());
    return redis70.replicated(connection, key, commands, replicas);
  }
  const told = own.some(isError) ? own.map((reply) => fromServer(key, reply)) : own;
  const outcome = { replies: told, required: 0, answer: undefined, waited: false, fsync: false, acked: 0 };
  if (replicas.fsync) {
    const answer = replies[commands.length];
    const [local, acked] = Array.isArray(answer) ? answer.map(Number) : [0, 0];
    Object.assign(outcome, { answer, waited: true, fsync: true, local, acked, refused: !Array.isArray(answer) });
  }
  return outcome;
}

/** The error a shortfall is reported with. */
function shortfall(label, what, outcome) {
  if (outcome.fsync && outcome.refused) {
    const why = outcome.answer instanceof Error ? outcome.answer.message : String(outcome.answer);
    return new NotReplicatedError(
      `${label}: the lock was ${what}, but WAITAOF failed (fsync needs Redis 7.2+ or Valkey 8+ with appendonly yes): ${why}`,
      0, outcome.required, true,
    );
  }
  if (outcome.fsync) {
    return new NotReplicatedError(
      `${label}: the lock was ${what}, but the master fsynced it ${outcome.local} times and ${outcome.acked} of ${outcome.required} replicas did, in time`,
      outcome.acked, outcome.required, false,
    );
  }
  const why = outcome.answer instanceof Error ? ` (WAIT answered: ${outcome.answer.message})` : '';
  return new NotReplicatedError(
    `${label}: the lock was ${what}, but only ${outcome.acked} of ${outcome.required} replicas acknowledged it in time${why}`,
    outcome.acked, outcome.required, false,
  );
}

const { short } = redis70;

module.exports = {
  AUTO, Replicas, replicated, replicatedPlainly, plain, REFUSED, shortfall, short,
};
