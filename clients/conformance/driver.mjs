// The Node package's conformance driver: runs clients/conformance/scenarios.txt against
// the masters in CONFORMANCE_PORTS (pids in CONFORMANCE_PIDS) with clients/node on
// ioredis, and prints one line per scenario (the format is described in the file).

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

// REDIS_LOCK_NODE_DIR: another copy of clients/node with its own node_modules (`make
// peers-latest` runs the scenarios on the newest ioredis that way).
const nodeDir = process.env.REDIS_LOCK_NODE_DIR;
const require = createRequire(nodeDir
  ? pathToFileURL(`${nodeDir}/package.json`)
  : new URL('../node/package.json', import.meta.url));
const Redis = require('ioredis');
const {
  Locker, Redlock, ResourceLockedError, NotReplicatedError, LockLostError, ExecutionError,
} = require('./index.cjs');

const FEATURES = new Set(['redlock', 'watchdog']);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function parse(path) {
  const scenarios = [];
  for (const raw of readFileSync(path, 'utf8').split('\n')) {
    const line = raw.trimEnd();
    if (line.trim() === '' || line.trimStart().startsWith('#')) continue;
    if (line.startsWith('scenario ')) {
      scenarios.push({ name: line.slice('scenario '.length).trim(), needs: [], steps: [] });
    } else if (line.trim().startsWith('needs ')) {
      scenarios.at(-1).needs.push(line.trim().split(/\s+/)[1]);
    } else {
      const text = line.trim();
      const at = text.indexOf(' -> ');
      const step = at < 0 ? text : text.slice(0, at);
      let expected = at < 0 ? null : text.slice(at + 4).trim();
      const overrides = {};
      let m;
      while (expected !== null && (m = /\s*\[([^:\]]+):([^\]]*)\]$/.exec(expected))) {
        overrides[m[1].trim()] = m[2].trim();
        expected = expected.slice(0, m.index).trim();
      }
      scenarios.at(-1).steps.push({ text: step, words: step.split(/\s+/), expected, overrides });
    }
  }
  return scenarios;
}

function shown(reply) {
  if (reply === null || reply === undefined) return 'nil';
  if (Array.isArray(reply)) return 'array';
  if (Buffer.isBuffer(reply)) return reply.toString();
  return String(reply);
}

function matches(got, expected) {
  const words = expected.split(/\s+/);
  if (words[0] === 'between') {
    const n = Number(got);
    return Number(words[1]) <= n && n <= Number(words[2]);
  }
  return got === expected;
}

function options(words) {
  const found = {};
  for (let i = 0; i < words.length;) {
    if (words[i] === 'watchdog') {
      found.watchdog = true;
      i += 1;
    } else {
      found[words[i]] = Number(words[i + 1]);
      i += 2;
    }
  }
  return found;
}

/** How the package reported a failure, as the scenarios write it. */
function outcomeOf(error) {
  if (error instanceof NotReplicatedError) return error.refused ? 'too-few-replicas' : 'not-replicated';
  if (error instanceof ResourceLockedError) return 'busy';
  if (error instanceof RangeError || error instanceof TypeError) return 'invalid';
  if (error && error.name === 'ReplyError') {
    const code = error.message.split(' ')[0];
    return code === 'ERR' ? 'invalid' : `error ${code}`;
  }
  return `${error && error.name}: ${error && error.message}`;
}

/** 'true' once a release resolves, 'false' when the package reports the lock lost. */
async function released(releasing) {
  try {
    await releasing;
    return 'true';
  } catch (error) {
    if (error instanceof LockLostError) return 'false';
    throw error;
  }
}

class Driver {
  constructor(ports, pids) {
    this.ports = ports;
    this.clients = ports.map((port) => new Redis(port, { lazyConnect: false }));
    this.pids = pids;
    this.locker = new Locker(this.clients[0]);
    this.locks = new Map();
    this.redlocks = new Map();
  }

  async close() {
    for (const held of this.locks.values()) {
      held.done?.();
      await held.finished?.catch(() => {});
    }
    for (const client of this.clients) client.disconnect();
  }

  async lock(name, key, ttl, { wait, watchdog, replicas, on = 0, repltimeout } = {}) {
    const settings = wait === undefined ? {} : { wait };
    if (replicas !== undefined) settings.replicas = replicas;
    if (repltimeout !== undefined) settings.replicasTimeout = repltimeout;
    const locker = on === 0 ? this.locker : new Locker(this.clients[on]);
    try {
      if (!watchdog) {
        this.locks.set(name, { lock: await locker.acquire(key, ttl, settings) });
        return 'granted';
      }
      // The watchdog is `using`: it holds the lock while the routine runs.
      const held = {};
      const started = new Promise((resolve, reject) => {
        held.finished = locker.using(key, ttl, settings, (signal, lock) => {
          Object.assign(held, { signal, lock });
          resolve();
          return new Promise((done) => { held.done = done; });
        });
        held.finished.catch(reject);
      });
      await started;
      this.locks.set(name, held);
      return 'granted';
    } catch (error) {
      return outcomeOf(error);
    }
  }

  async release(name) {
    try {
      return await released(this.locks.get(name).lock.release());
    } finally {
      this.locks.get(name).done?.();
    }
  }

  async extend(name, ttl) {
    try {
      await this.locks.get(name).lock.extend(ttl);
      return 'true';
    } catch (error) {
      if (error instanceof LockLostError) return 'false';
      if (error instanceof NotReplicatedError) return 'not-replicated';
      throw error;
    }
  }

  async do(name, args) {
    try {
      return await this.locks.get(name).lock.do(...args);
    } catch (error) {
      if (error instanceof LockLostError) return 'lost';
      throw error;
    }
  }

  fence(name) {
    return this.locks.get(name).lock.fence;
  }

  held(name) {
    return String(!this.locks.get(name).signal.aborted);
  }

  async lostWithin(name, ms) {
    const { signal } = this.locks.get(name);
    const deadline = performance.now() + ms;
    while (!signal.aborted && performance.now() < deadline) await sleep(10);
    return String(signal.aborted && signal.reason instanceof LockLostError);
  }

  server(index, args) {
    return this.clients[index].call(...args);
  }

  signal(index, stop) {
    process.kill(this.pids[index], stop ? 'SIGSTOP' : 'SIGCONT');
  }

  async redlock(name, key, ttl, { retries, delay, jitter } = {}) {
    const settings = {};
    if (retries !== undefined) settings.retryCount = retries;
    if (delay !== undefined) settings.retryDelay = delay;
    if (jitter !== undefined) settings.retryJitter = jitter;
    const redlock = new Redlock(this.clients.slice(0, 3), settings);
    const entry = { redlock };
    this.redlocks.set(name, entry);
    try {
      entry.lock = await redlock.acquire([key], ttl);
      entry.granted = performance.now();
      entry.expiration = entry.lock.expiration;
      entry.at = Date.now();
      return 'granted';
    } catch (error) {
      if (!(error instanceof ExecutionError)) throw error;
      entry.attempts = error.attempts.length;
      return 'refused';
    }
  }

  attempts(name) {
    return this.redlocks.get(name).attempts;
  }

  validity(name) {
    const { expiration, at } = this.redlocks.get(name);
    return expiration - at;
  }

  async redlockRelease(name) {
    return released(this.redlocks.get(name).lock.release());
  }
}

class Failed extends Error {}

/** Whether the server of an `INFO server` reply holds a grant's reply for its replicas
 *  itself (`REPLICAS n`): Redis 7.2+ and every Valkey. */
function serverWaits(info) {
  if (/valkey_version:/.test(info)) {
    return true;
  }
  const [major, minor] = /redis_version:(\d+)\.(\d+)/.exec(info).slice(1).map(Number);
  return major > 7 || (major === 7 && minor >= 2);
}

/** How many calls of `command` an `INFO commandstats` reply counts. */
function callsOf(info, command) {
  const line = String(info).split(/\r?\n/).find((l) => l.startsWith(`cmdstat_${command.toLowerCase()}:`));
  return line ? Number(/calls=(\d+)/.exec(line)[1]) : 0;
}

/** Server 3 a replica of master 0 again, in sync with master 0's flush. */
async function attachReplica(driver) {
  if (driver.clients.length < 4) return;
  await driver.server(3, ['REPLICAOF', '127.0.0.1', String(driver.ports[0])]);
  const deadline = performance.now() + 15_000;
  // A write made now, acknowledged: the replica streams from master 0.
  while ((await driver.server(0, ['SET', 'conformance:synced', '1'])) === undefined
    || Number(await driver.server(0, ['WAIT', '1', '100'])) !== 1) {
    if (performance.now() > deadline) throw new Error('the replica of master 0 did not catch up');
  }
}

async function step(driver, words, state) {
  const [verb, ...args] = words;
  switch (verb) {
    case 'lock': return driver.lock(args[0], args[1], Number(args[2]), options(args.slice(3)));
    case 'release': return driver.release(args[0]);
    case 'extend': return driver.extend(args[0], Number(args[1]));
    case 'do': return shown(await driver.do(args[0], args.slice(1)));
    case 'fence-above': {
      const [high, low] = [driver.fence(args[0]), driver.fence(args[1])];
      if (!(high > low)) throw new Failed(`fence ${high} is not above ${low}`);
      return null;
    }
    case 'held': return driver.held(args[0]);
    case 'lost': return driver.lostWithin(args[0], Number(args[2]));
    case 'server': return shown(await driver.server(Number(args[0]), args.slice(1)));
    case 'calls': return String(callsOf(await driver.server(Number(args[0]), ['INFO', 'commandstats']), args[1]));
    case 'waits':
    case 'own-waits': {
      const stats = await driver.server(Number(args[0]), ['INFO', 'commandstats']);
      if (verb === 'waits') {
        return String(callsOf(stats, 'wait') + callsOf(stats, 'waitaof'));
      }
      const server = String(await driver.server(Number(args[0]), ['INFO', 'server']));
      return String(serverWaits(server) ? callsOf(stats, 'wait') : 0);
    }
    case 'eventually': {
      const [index, command, limit] = [Number(args[0]), args.slice(1, -2), Number(args.at(-1))];
      const deadline = performance.now() + limit;
      for (;;) {
        const got = shown(await driver.server(index, command));
        if (got === state.expected || performance.now() > deadline) return got;
        await sleep(20);
      }
    }
    case 'freeze':
    case 'thaw':
      driver.signal(Number(args[0]), verb === 'freeze');
      if (verb === 'freeze') state.frozen.add(Number(args[0]));
      else state.frozen.delete(Number(args[0]));
      return null;
    case 'sleep': await sleep(Number(args[0])); return null;
    case 'redlock': return driver.redlock(args[0], args[1], Number(args[2]), options(args.slice(3)));
    case 'attempts': return String(driver.attempts(args[0]));
    case 'took-between':
      if (!(Number(args[0]) <= state.took && state.took <= Number(args[1]))) {
        throw new Failed(`took ${Math.round(state.took)} ms`);
      }
      return null;
    case 'validity-between': {
      const validity = driver.validity(args[0]);
      if (!(Number(args[1]) <= validity && validity <= Number(args[2]))) {
        throw new Failed(`validity ${Math.round(validity)} ms`);
      }
      return null;
    }
    case 'redlock-release': return driver.redlockRelease(args[0]);
    default: throw new Error(`unknown step ${verb}`);
  }
}

async function run(scenario, makeDriver) {
  const driver = makeDriver();
  const state = { frozen: new Set(), took: 0, expected: null };
  try {
    for (let i = 0; i < 3; i += 1) await driver.server(i, ['FLUSHALL']);
    await attachReplica(driver);
    // `[7.0: outcome]`: the outcome where the server cannot wait for its replicas itself
    // (Redis 7.0), and the package waits.
    const waitsItself = !serverWaits(await driver.server(0, ['INFO', 'server']));
    for (const { text, words, expected: written, overrides } of scenario.steps) {
      const expected = overrides.node ?? (waitsItself ? overrides['7.0'] : undefined) ?? written;
      state.expected = expected;
      const started = performance.now();
      let got;
      try {
        got = await step(driver, words, state);
      } catch (error) {
        if (error instanceof Failed) return `FAIL ${scenario.name}: ${text}: ${error.message}`;
        got = `${error.name}: ${error.message}`;
      }
      state.took = performance.now() - started;
      if (expected !== null && !(got !== null && matches(got, expected))) {
        return `FAIL ${scenario.name}: ${text}: expected ${expected}, got ${got}`;
      }
    }
    return `ok ${scenario.name}`;
  } finally {
    for (const index of state.frozen) driver.signal(index, false);
    await driver.close();
  }
}

const ports = process.env.CONFORMANCE_PORTS.split(',').map(Number);
const pids = process.env.CONFORMANCE_PIDS.split(',').map(Number);
let failed = 0;
for (const scenario of parse(process.argv[2])) {
  const missing = scenario.needs.find((need) => !FEATURES.has(need));
  if (missing !== undefined) {
    console.log(`skip ${scenario.name}: the node package has no ${missing}`);
    continue;
  }
  let line;
  try {
    line = await run(scenario, () => new Driver(ports, pids));
  } catch (error) {
    line = `FAIL ${scenario.name}: ${error.stack}`;
  }
  if (line.startsWith('FAIL')) failed += 1;
  console.log(line.replace(/\n/g, ' | '));
}
process.exit(failed ? 1 : 0);
