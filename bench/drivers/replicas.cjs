// Scenario 14 of the benchmark (bench/src/scenarios/replicas.rs), for the Node package on
// ioredis: on a master with one replica, free locks acquired one at a time by the package
// with its defaults (replicas 'auto': the server holds the reply until the replica has
// the grant) against a raw LOCK.ACQUIRE ... REPLICAS 1 on the same ioredis client, each
// released untimed. The two sides take turns in stretches of 100 acquires, so that both
// meet the same state of the machine; which goes first turns from round to round.
//
// usage: node replicas.cjs ROOT PORT N ROUNDS  (ROOT: the repository)
// prints, per round and side, one line: "package" or "raw", then each acquire's latency
// in ns.
'use strict';
const path = require('node:path');

const [root, port, n, rounds] = [process.argv[2], ...process.argv.slice(3, 6).map(Number)];
const node = path.join(root, 'clients/node');
const IORedis = require(path.join(node, 'node_modules/ioredis'));
const { Locker } = require(path.join(node, 'index.cjs'));

const TTL_MS = 600_000;
const STRETCH = 100;

async function packageOnce(locker, key) {
  const start = process.hrtime.bigint();
  const lock = await locker.acquire(key, TTL_MS);
  const took = Number(process.hrtime.bigint() - start);
  await lock.release();
  return took;
}

async function rawOnce(redis, key) {
  const start = process.hrtime.bigint();
  const granted = await redis.call('LOCK.ACQUIRE', key, TTL_MS, 'REPLICAS', 1, 'REPLTIMEOUT', 1000);
  const took = Number(process.hrtime.bigint() - start);
  if (granted === null) throw new Error(`${key}: a free lock not granted`);
  await redis.call('LOCK.RELEASE', key, granted[0]);
  return took;
}

async function main() {
  const redis = new IORedis(port, '127.0.0.1');
  const locker = new Locker(redis);
  const sides = [['package', (key) => packageOnce(locker, key)], ['raw', (key) => rawOnce(redis, key)]];
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? sides : [...sides].reverse();
    const latencies = { package: [], raw: [] };
    for (let start = 0; start < n; start += STRETCH) {
      for (const [name, once] of order) {
        for (let i = start; i < Math.min(start + STRETCH, n); i++) {
          latencies[name].push(await once(`node:${name}:${round}:${i}`));
        }
      }
    }
    for (const [name] of sides) {
      process.stdout.write(`${name} ${latencies[name].join(' ')}\n`);
    }
  }
  redis.disconnect();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
