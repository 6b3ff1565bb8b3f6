'use strict';
// `replicas`: a grant counts once the master's replicas have it (docs/clients.md,
// "Failover-safe by default"). Every write that makes or keeps a grant (an acquire,
// `lockAll`, an extend, `using`'s extends) asks the server to hold its reply until `n`
// replicas have it (`REPLICAS n REPLTIMEOUT ms`): the server counts the acknowledgements
// of the grant's own offset and, when too few come in time, undoes the grant itself and
// answers NOTREPLICATED. A server that does not take `REPLICAS` (Redis 7.0, an older
// module: it refuses the command, changing nothing) gets the writes again with `WAIT n
// timeout` on the same connection, in the same round trip, from then on; there a grant
// too few replicas acknowledged is released at once by its token. Either way the
// shortfall is reported as NotReplicatedError.
//
// `'auto'` (the default) asks for 1 when the master has a replica online and for nothing
// on a master without one. What a connection learned of its master (`ROLE`, or `WAIT 0 0`
// for a user whose ACL denies `ROLE`) is forgotten when it connects again, after an error
// or a shortfall, and after RELEARN_MS; on a cluster it is kept per node, so a slot that
// moved (a MOVED answer) is asked of its new node at once. A master that lists fewer replicas than before is
// taken at its former count for HOLD_MS (a deposed master loses its replicas just before
// it is demoted). An explicit `n` asks for `n`; a master with fewer online refuses at once.

const { slotOf } = require('./connection.cjs');
const { NotReplicatedError } = require('./errors.cjs');

const AUTO = 'auto';
const MAX_DEFAULT_TIMEOUT_MS = 1000;
const RELEARN_MS = 5000;
const HOLD_MS = 15000;

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

// What each connection learned of its master, and the most replicas each server was
// seen with.
const learned = new WeakMap();
const seen = new Map();

/**
 * Where what `connection` learned is kept: per client, and on a cluster per node (the
 * master the client's slot map names for the key now: after a MOVED, the new one).
 */
function placeOf(connection, key) {
  const client = connection.client;
  if (!learned.has(client)) {
    learned.set(client, new Map());
    if (typeof client.on === 'function') {
      // a new connection (a reconnect, a failover's new master) learns again
      for (const event of ['ready', 'connect']) {
        client.on(event, () => learned.get(client)?.clear());
      }
    }
  }
  const node = connection.isCluster ? connection.nodeAddressOf(key) ?? `slot ${slotOf(key)}` : '';
  return { places: learned.get(client), slot: node };
}

/**
 * The count to go by: `online`, or the server's former count within HOLD_MS of its last
 * drop (a count that falls again, say from 1 to 0 after 2 to 1, starts the hold afresh).
 */
function heldCount(address, online) {
  const before = seen.get(address);
  if (before === undefined || online >= before.online) {
    seen.set(address, { online, last: online, fewerSince: undefined });
    return online;
  }
  const now = Date.now();
  if (before.fewerSince === undefined || online < before.last) {
    before.fewerSince = now;
  }
  before.last = online;
  if (now - before.fewerSince < HOLD_MS) {
    return before.online;
  }
  seen.set(address, { online, last: online, fewerSince: undefined });
  return online;
}

function onlineFrom(reply) {
  if (typeof reply === 'number') {
    return reply;
  }
  return String(reply[0]) === 'master' && Array.isArray(reply[2]) ? reply[2].length : 0;
}

/** The replicas `key`'s master has online, learned now if not known. */
async function online(connection, key) {
  const { places, slot } = placeOf(connection, key);
  const known = places.get(slot);
  if (known !== undefined && Date.now() - known.at < RELEARN_MS) {
    return known.online;
  }
  let [reply] = await connection.exchange(key, [['ROLE']]);
  if (reply instanceof Error && /^NOPERM/.test(reply.message)) {
    [reply] = await connection.exchange(key, [['WAIT', 0, 0]]);
  }
  if (reply instanceof Error) {
    throw reply;
  }
  const count = heldCount(`${connection.addressOf()}#${slot}`, onlineFrom(reply));
  places.set(slot, { online: count, at: Date.now() });
  return count;
}

// Servers (by address) that refused `REPLICAS`: their writes go with WAIT.
const noServerWait = new Set();

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

function forget(connection, key) {
  const { places, slot } = placeOf(connection, key);
  places.delete(slot);
}

/**
 * Sends `commands` (writes that make or keep a grant) with the WAIT they need, in one
 * round trip on `connection`; resolves to `{ replies, required, acked }` (the writes'
 * replies, an error reply as its Error).
 */
async function replicated(connection, key, commands, replicas) {
  // Made for the node each try goes to: after a MOVED, the WAIT the new node needs (or
  // the REPLICAS it holds the reply for).
  let [required, waits, serverSide, unwaited] = [0, [], false, false];
  const replies = await connection.exchange(key, async () => {
    required = replicas.setting === 0 ? 0 : replicas.required(await online(connection, key), key);
    serverSide = required > 0 && !replicas.fsync && !noServerWait.has(connection.addressOf());
    if (serverSide) {
      waits = [];
      return commands.map((command) => [...command, 'REPLICAS', required, 'REPLTIMEOUT', replicas.timeoutMs]);
    }
    waits = replicas.off ? [] : replicas.waitCommands(required);
    // The package waits itself (fsync), or not at all (replicas 0): the server must not
    // wait as its own lock.replicas (auto by default) would have it.
    unwaited = (replicas.setting === 0 || replicas.fsync) && !noServerWait.has(connection.addressOf());
    const writes = unwaited ? commands.map((command) => [...command, 'REPLICAS', 0]) : commands;
    return [...writes, ...waits];
  });
  if (unwaited && replies.slice(0, commands.length).some(refusesReplicas)) {
    // An older module that knows no REPLICAS changed nothing: the writes as they are.
    noServerWait.add(connection.addressOf());
    return replicated(connection, key, commands, replicas);
  }
  if (serverSide) {
    if (replies.some(refusesReplicas)) {
      noServerWait.add(connection.addressOf());
      return replicated(connection, key, commands, replicas);
    }
    const told = replies.map((reply) => fromServer(key, reply));
    if (told.some((reply) => reply instanceof NotReplicatedError)) {
      forget(connection, key);
    }
    return { replies: told, required, answer: undefined, waited: false, fsync: false, acked: required };
  }
  const answer = waits.length > 0 ? replies[commands.length] : undefined;
  const outcome = {
    replies: replies.slice(0, commands.length), required, answer, waited: waits.length > 0, fsync: replicas.fsync,
  };
  if (replicas.fsync) {
    const [local, acked] = Array.isArray(answer) ? answer.map(Number) : [0, 0];
    Object.assign(outcome, { local, acked, refused: !Array.isArray(answer) });
  } else {
    outcome.acked = typeof answer === 'number' ? answer : 0;
  }
  if (short(outcome)) {
    forget(connection, key);
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

/** Whether the wait sent with a write found fewer acknowledgements than it asked for. */
function short(outcome) {
  if (!outcome.waited) {
    return false;
  }
  if (outcome.fsync) {
    return outcome.refused || outcome.local < 1 || outcome.acked < outcome.required;
  }
  return outcome.acked < outcome.required;
}

module.exports = { AUTO, Replicas, replicated, shortfall, short };
