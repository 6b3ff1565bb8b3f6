'use strict';
// Where the server cannot hold a grant's reply for its replicas (Redis 7.0, which refuses
// `REPLICAS AUTO`; or a module before 0.3.0, which knows no `REPLICAS`): the package
// learns its masters' replicas itself and sends its own WAIT, in the same round trip as
// the writes; a grant too few replicas acknowledged is released at once by its token.
// Entered only from replicas.cjs, after such a refusal.
//
// `'auto'` asks for 1 when the master has a replica online and for nothing on a master
// without one. What a connection learned of its master (`ROLE`, or `WAIT 0 0` for a user
// whose ACL denies `ROLE`) is forgotten when it connects again, after an error or a
// shortfall, and after RELEARN_MS; on a cluster it is kept per node, so a slot that moved
// (a MOVED answer) is asked of its new node at once. A master that lists fewer replicas
// than before is taken at its former count for HOLD_MS (a deposed master loses its
// replicas just before it is demoted): the rule the server's own auto keeps where it can
// wait. An explicit `n` asks for `n`; a master with fewer online refuses at once.

const { slotOf } = require('./connection.cjs');

const RELEARN_MS = 5000;
const HOLD_MS = 15000;

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
  let [required, waits] = [0, []];
  const replies = await connection.exchange(key, async () => {
    required = replicas.setting === 0 ? 0 : replicas.required(await online(connection, key), key);
    waits = replicas.off ? [] : replicas.waitCommands(required);
    return [...commands, ...waits];
  });
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

module.exports = { replicated, short, HOLD_MS, RELEARN_MS };
