// A module worker of a fault run written with the project's Node package
// (clients/node: Locker on node-redis), with its defaults (`replicas: 'auto'`): the
// same rounds as worker.py's module workers (a waiting acquire, plain, session-bound or
// shared; a renewal in every other round; a write through LOCK.DO; the release) and the
// same history (JSON lines, times on the machine's monotonic clock) and state file. It
// has no fenced store (SQLite): its writes go through LOCK.DO only. Its connections
// leave from its own loopback address (node-redis `localAddress`), so a partition can
// cut it alone, to the master the Sentinels name.
//
//   node faults/node_worker.mjs --id N --address A --sentinels a,b,c --service S --port P
//        --keys k1,k2 --ttl MS --wait MS --seed N --seconds S --history F --state F
//        [--replicas auto|n]

import { appendFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(new URL('../clients/node/package.json', import.meta.url));
const { createClient } = require('redis');
const { Locker, NotReplicatedError, ResourceLockedError, LockLostError } = require('./index.cjs');

const o = {};
for (let i = 2; i < process.argv.length; i += 2) {
  o[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
}
const [ttl, wait, port] = [Number(o.ttl), Number(o.wait), Number(o.port)];
const name = `module-${o.id}`;
const replicas = o.replicas === undefined || o.replicas === 'auto' ? 'auto' : Number(o.replicas);

// mulberry32: the worker's choices, from its seed
let seed = Number(o.seed) >>> 0;
function random() {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const choice = (items) => items[Math.floor(random() * items.length)];
const uniform = (lo, hi) => lo + (hi - lo) * random();

const now = () => Number(process.hrtime.bigint()) / 1e9;
const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));
const log = (entry) => appendFileSync(o.history, `${JSON.stringify({ ...entry, w: name })}\n`);
function state(phase, key = null, answeredAt = 0, mode = null) {
  writeFileSync(`${o.state}.new`, JSON.stringify({ phase, key, answered_at: answeredAt, mode }));
  renameSync(`${o.state}.new`, o.state);
}

class Unreachable extends Error {}

/** `promise`, or Unreachable after `ms` (node-redis has no command timeout). */
function within(promise, ms) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Unreachable(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** Closes `c` whatever state it is in (node-redis throws on closing a closed client). */
function close(c) {
  try {
    c.destroy();
  } catch {
    // closed already
  }
}

function client(host) {
  const c = createClient({
    socket: { host, port, localAddress: o.address, connectTimeout: 500, reconnectStrategy: false },
  });
  c.on('error', () => {});
  return c;
}

let master = null;
let locker = null;
let masterHost = null;

async function connect() {
  const sentinels = o.sentinels.split(',').sort(() => random() - 0.5);
  for (const sentinel of sentinels) {
    const probe = client(sentinel);
    try {
      await within(probe.connect(), 600);
      const reply = await within(probe.sendCommand(['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', o.service]), 600);
      close(probe);
      if (!Array.isArray(reply)) continue;
      masterHost = String(reply[0]);
      master = client(masterHost);
      await within(master.connect(), 600);
      locker = new Locker(master, { replicas });
      return true;
    } catch {
      close(probe);
      drop();
    }
  }
  return false;
}

function drop() {
  if (master !== null) close(master);
  [master, locker] = [null, null];
}

/** What a call answered: { ok, value, err }, ok null when the server was not reached. */
async function attempt(call, ms) {
  try {
    return { ok: true, value: await within(call(), ms) };
  } catch (error) {
    if (error instanceof NotReplicatedError) return { ok: false, err: `NOTREPLICATED ${error.message}` };
    if (error instanceof LockLostError) return { ok: false, err: `NOTHELD ${error.message}` };
    if (error instanceof ResourceLockedError) return { ok: false, err: null };
    drop(); // unreachable, READONLY, a broken connection: find the master again
    return { ok: null, err: String(error && error.message) };
  }
}

async function round() {
  const key = choice(o.keys.split(','));
  const mode = choice(['plain', 'plain', 'session', 'shared']);
  const token = Array.from({ length: 16 }, () => Math.floor(random() * 16).toString(16)).join('');
  if (locker === null && !(await connect())) {
    log({ op: 'acquire', key, mode, t0: now(), t1: now(), ok: null, err: 'no master reachable' });
    await sleep(0.05);
    return;
  }
  const settings = { wait, token, shared: mode === 'shared' };
  if (mode === 'session') settings.session = 200;
  const t0 = now();
  const got = await attempt(() => locker.acquire(key, ttl, settings), wait + 1000);
  const t1 = now();
  if (!got.ok) {
    log({ op: 'acquire', key, mode, t0, t1, ok: got.ok, err: got.err });
    if (got.err) await sleep(0.05);
    return;
  }
  const lock = got.value;
  const fence = lock.fence;
  log({ op: 'acquire', key, mode, t0, t1, ok: true, fence, ttl, token, server: masterHost });
  state('holding', key, t1, mode);
  const pause = uniform(0.1, 0.3) * ttl / 1000;
  if (random() < 0.5) {
    await sleep(pause / 2);
    const r0 = now();
    const renewed = await attempt(() => lock.extend(ttl), 1000);
    log({ op: 'extend', key, fence, t0: r0, t1: now(), ok: renewed.ok, err: renewed.err });
    await sleep(pause / 2);
  } else {
    await sleep(pause);
  }
  state('writing', key, t1, mode);
  const w0 = now();
  const args = mode === 'shared' ? ['LLEN', `data:${key}`] : ['RPUSH', `data:${key}`, `${fence}:${name}`];
  const done = await attempt(() => lock.do(...args), 1000);
  log({ op: 'do', key, fence, read: mode === 'shared', t0: w0, t1: now(), ok: done.ok, err: done.err });
  await sleep(uniform(0, 0.1) * ttl / 1000);
  state('idle');
  const r0 = now();
  const released = await attempt(() => lock.release(), 1000);
  log({ op: 'release', key, fence, t0: r0, t1: now(), ok: released.ok === true, err: released.ok === null ? released.err : null });
}

state('idle');
process.on('SIGTERM', () => process.exit(0));
const deadline = now() + Number(o.seconds);
while (now() < deadline) {
  await round();
}
process.exit(0);
