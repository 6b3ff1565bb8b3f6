// The package through the client shapes people deploy with, and node-redlock's API:
// ioredis key prefixes, command timeouts and Cluster; node-redis pools and clusters;
// shared locks and semaphores; Redlock on one client and on three masters. Against the
// servers clients/rust/tests/packages/node_package.rs starts (REDIS_LOCK_PORT, REDIS_LOCK_REDLOCK_PORTS,
// REDIS_LOCK_CLUSTER_PORT, REDIS_LOCK_SENTINEL_PORT: a Sentinel watching the master as
// `mymaster`; REDIS_LOCK_MOVING_CLUSTER_PORT: a cluster whose first master has a replica,
// where a slot moves).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import IORedis from 'ioredis';
import { createClientPool, createCluster, createSentinel } from 'redis';
import Redlock, {
  Locker, ResourceLockedError, LockLostError, LockError, ExecutionError,
} from '../index.mjs';

const port = Number(process.env.REDIS_LOCK_PORT);
const redlockPorts = String(process.env.REDIS_LOCK_REDLOCK_PORTS || '').split(',').map(Number);
const clusterPort = Number(process.env.REDIS_LOCK_CLUSTER_PORT);
const sentinelPort = Number(process.env.REDIS_LOCK_SENTINEL_PORT);
const movingPort = Number(process.env.REDIS_LOCK_MOVING_CLUSTER_PORT);
assert.ok(port > 0 && clusterPort > 0 && movingPort > 0 && redlockPorts.length === 3, 'run through `make test`');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let n = 0;
const key = (what) => `deploy:${what}:${++n}`;

async function until(condition, what, limit = 10_000) {
  const deadline = Date.now() + limit;
  while (!(await condition())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await sleep(5);
  }
}

/** A holder on `locker` that lets go after `ms`; resolves once released. */
async function holdFor(locker, k, ms) {
  const lock = await locker.acquire(k, 30_000);
  return { lock, released: sleep(ms).then(() => lock.release()) };
}

describe('ioredis', { timeout: 60_000 }, () => {
  test('a key prefix applies to the lock key, as to every other key', async () => {
    const raw = new IORedis({ port });
    const prefixed = new IORedis({ port, keyPrefix: 'app:' });
    const locker = new Locker(prefixed);
    const k = key('prefix');
    const lock = await locker.acquire(k, 10_000);
    assert.equal(await raw.exists(`app:${k}`), 1, 'the lock lives under the prefix');
    assert.equal(await raw.exists(k), 0);
    assert.equal((await locker.info(k)).fence, lock.fence);
    await lock.release();
    assert.equal(await raw.exists(`app:${k}`), 0);
    raw.disconnect();
    prefixed.disconnect();
  });

  test('a wait longer than the command timeout is not cut short', async () => {
    const client = new IORedis({ port, commandTimeout: 2_000 });
    const locker = new Locker(client);
    const k = key('timeout');
    const { lock: held, released } = await holdFor(locker, k, 3_000);
    const lock = await locker.acquire(k, 10_000, { wait: 5_000 });
    assert.ok(lock.fence > held.fence);
    await released;
    await lock.release();
    client.disconnect();
  });

  test('a Sentinel-managed ioredis client locks and waits on the master', async () => {
    const client = new IORedis({ sentinels: [{ host: '127.0.0.1', port: sentinelPort }], name: 'mymaster', commandTimeout: 2_000 });
    const locker = new Locker(client);
    const k = key('iosentinel');
    const { lock: held, released } = await holdFor(locker, k, 3_000);
    const lock = await locker.acquire(k, 10_000, { wait: 5_000 });
    assert.ok(lock.fence > held.fence);
    await released;
    await lock.release();
    client.disconnect();
  });

  test('an ioredis Cluster routes, waits and prefixes', async () => {
    const cluster = new IORedis.Cluster([{ host: '127.0.0.1', port: clusterPort }], {
      keyPrefix: 'c:', redisOptions: { commandTimeout: 2_000 },
    });
    const locker = new Locker(cluster);
    const k = key('iocluster');
    const { lock: held, released } = await holdFor(locker, k, 3_000);
    const lock = await locker.acquire(k, 10_000, { wait: 5_000 });
    assert.ok(lock.fence > held.fence);
    assert.equal(await cluster.exists(k), 1, 'ioredis prefixes EXISTS the same way');
    await released;
    await lock.release();
    cluster.disconnect();
  });
});

describe('node-redis', { timeout: 60_000 }, () => {
  test('a client pool acquires, waits on a client of its own, and releases', async () => {
    const pool = await createClientPool({ socket: { host: '127.0.0.1', port } }).connect();
    const locker = new Locker(pool);
    const k = key('pool');
    const holder = await locker.acquire(k, 30_000);
    const waiting = locker.acquire(k, 10_000, { wait: 10_000 });
    await until(async () => (await locker.info(k)).waiters === 1, 'the waiter');
    assert.equal((await locker.info(k)).fence, holder.fence, 'the pool still answers');
    await holder.release();
    const lock = await waiting;
    assert.ok(lock.fence > holder.fence);
    await lock.release();
    await pool.close();
  });

  test('a sentinel client locks on the master and waits on a leased client', async () => {
    // A wait leases one of the sentinel's master clients: a pool of two keeps the other free.
    const sentinel = await createSentinel({
      name: 'mymaster', sentinelRootNodes: [{ host: '127.0.0.1', port: sentinelPort }], masterPoolSize: 2,
    }).connect();
    const locker = new Locker(sentinel);
    const k = key('sentinel');
    try {
      const holder = await locker.acquire(k, 30_000);
      const waiting = locker.acquire(k, 10_000, { wait: 10_000 });
      await until(async () => (await locker.info(k)).waiters === 1, 'the waiter');
      await holder.release();
      const lock = await waiting;
      assert.ok(lock.fence > holder.fence);
      await lock.release();
    } finally {
      await sentinel.close();
    }
  });

  test('a cluster routes by the key and waits', async () => {
    const cluster = await createCluster({ rootNodes: [{ socket: { host: '127.0.0.1', port: clusterPort } }] }).connect();
    const locker = new Locker(cluster);
    const k = key('cluster');
    const holder = await locker.acquire(k, 30_000);
    await assert.rejects(locker.acquire(k, 10_000), ResourceLockedError);
    const waiting = locker.acquire(k, 10_000, { wait: 10_000 });
    await until(async () => (await locker.info(k)).waiters === 1, 'the waiter');
    await holder.release();
    const lock = await waiting;
    assert.ok(lock.fence > holder.fence);
    await lock.release();
    await cluster.close();
  });
});

// The moving cluster's masters (CLUSTER NODES): [{ port, id, slots: [[lo, hi], ...] }],
// the one with a replica and one without (node_package.rs gives one master a replica).
async function masters() {
  const admin = new IORedis({ port: movingPort });
  try {
    const nodes = String(await admin.call('CLUSTER', 'NODES')).trim().split('\n').map((line) => line.split(' '));
    const list = nodes.filter((f) => f[2].includes('master')).map((f) => ({
      port: Number(f[1].split('@')[0].split(':').pop()),
      id: f[0],
      slots: f.slice(8).filter((r) => !r.startsWith('[')).map((r) => r.split('-').map(Number)).map(([lo, hi]) => [lo, hi ?? lo]),
    }));
    const replicated = nodes.find((f) => f[2].includes('slave'))[3];
    return { list, withReplica: list.find((m) => m.id === replicated), without: list.find((m) => m.id !== replicated) };
  } finally {
    admin.disconnect();
  }
}

/** Moves the empty slot `slot` from the master `from` to `to`, on every master. */
async function moveSlot(slot, from, to, all) {
  const call = async (p, ...args) => {
    const c = new IORedis({ port: p });
    try {
      return await c.call(...args);
    } finally {
      c.disconnect();
    }
  };
  await call(to.port, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', from.id);
  await call(from.port, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', to.id);
  for (const m of [to, from, ...all.filter((x) => x !== to && x !== from)]) {
    await call(m.port, 'CLUSTER', 'SETSLOT', slot, 'NODE', to.id);
  }
}

/** The waits for replicas the server on `p` has run: the package's WAITs, or the replies
 *  it held for its replicas (REPLICAS n), each asking them with a WAITAOF of its own. */
async function waitCalls(p) {
  const c = new IORedis({ port: p });
  try {
    const stats = String(await c.info('commandstats'));
    const count = (name) => Number((stats.match(new RegExp(`cmdstat_${name}:calls=(\\d+)`)) || [0, 0])[1]);
    return count('wait') + count('waitaof');
  } finally {
    c.disconnect();
  }
}

// A slot that moves (a resharding) answers MOVED; the package then asks the new node how
// many replicas it has before the grant counts, at once: the first acquire there is
// granted with the WAIT that node needs (none without a replica, one with), both on the
// node that took the grant.
// On a cluster of its own (REDIS_LOCK_MOVING_CLUSTER_PORT): the WAITs its nodes count are
// this suite's, one test after the other.
describe('a moved slot', { timeout: 60_000 }, () => {
  for (const [library, connect] of [
    ['ioredis', async () => new IORedis.Cluster([{ host: '127.0.0.1', port: movingPort }])],
    ['node-redis', async () => createCluster({ rootNodes: [{ socket: { host: '127.0.0.1', port: movingPort } }] }).connect()],
  ]) {
    test(`${library}: the first acquire on the new node waits as that node needs`, async () => {
      const { list, withReplica: a, without: b } = await masters();
      const slotOf = (await import('cluster-key-slot')).default;
      let tag = 0;
      const onA = (k) => a.slots.some(([lo, hi]) => slotOf(k) >= lo && slotOf(k) <= hi);
      while (!onA(`{moved-${library}-${tag}}:k`)) tag += 1;
      const k = `{moved-${library}-${tag}}:k`;
      const slot = slotOf(k);
      const cluster = await connect();
      const locker = new Locker(cluster);
      try {
        await (await locker.acquire(k, 10_000)).release(); // learned: a has a replica
        await moveSlot(slot, a, b, list);
        // The first try goes to a, which answers MOVED (its WAIT there runs, for nothing).
        let onBWaits = await waitCalls(b.port);
        const onB = await locker.acquire(k, 10_000);
        assert.equal(await waitCalls(b.port), onBWaits, 'no WAIT on b: it has no replica');
        await onB.release();
        await moveSlot(slot, b, a, list);
        const onAWaits = await waitCalls(a.port);
        onBWaits = await waitCalls(b.port);
        const onA2 = await locker.acquire(k, 10_000);
        assert.equal(await waitCalls(a.port), onAWaits + 1, 'the WAIT for a\'s replica, on a');
        assert.equal(await waitCalls(b.port), onBWaits);
        assert.ok(onA2.fence > onB.fence);
        await onA2.release();
      } finally {
        if (library === 'ioredis') cluster.disconnect(); else await cluster.close();
      }
    });
  }
});

describe('shared locks and semaphores', { timeout: 60_000 }, () => {
  test('readers share, a writer waits for them, a semaphore counts', async () => {
    const client = new IORedis({ port });
    const locker = new Locker(client);
    const k = key('rw');
    const r1 = await locker.readLock(k, 10_000);
    const r2 = await locker.readLock(k, 10_000);
    assert.equal((await locker.info(k)).holders, 2);
    await assert.rejects(locker.writeLock(k, 10_000), ResourceLockedError);
    const writer = locker.writeLock(k, 10_000, { wait: 10_000 });
    await until(async () => (await locker.info(k)).waiters === 1, 'the writer to queue');
    await r1.release();
    await r2.release();
    const w = await writer;
    assert.ok(w.fence > r2.fence);
    await w.release();

    const s = key('sem');
    const permits = [await locker.semaphore(s, 2, 10_000), await locker.semaphore(s, 2, 10_000)];
    await assert.rejects(locker.semaphore(s, 2, 10_000), ResourceLockedError);
    await assert.rejects(locker.semaphore(s, 3, 10_000), (error) => error instanceof LockError && /LIMIT/.test(error.message));
    await Promise.all(permits.map((p) => p.release()));
    client.disconnect();
  });

  test('a key of another type holds the name; bad input fails before any command', async () => {
    const client = new IORedis({ port });
    const locker = new Locker(client);
    const k = key('string');
    await client.set(k, 'an old SET NX lock');
    await assert.rejects(locker.acquire(k, 1_000), ResourceLockedError);
    await assert.rejects(locker.semaphore(k, 0, 1_000), RangeError);
    await assert.rejects(locker.acquire(k, 1_000, { limit: 1.5 }), RangeError);
    assert.equal(await client.get(k), 'an old SET NX lock');
    client.disconnect();
  });
});

describe('Redlock (node-redlock)', { timeout: 60_000 }, () => {
  test('one client: the retries become a wait in the server', async () => {
    const client = new IORedis({ port });
    const redlock = new Redlock([client], { retryCount: 10, retryDelay: 100, retryJitter: 0 });
    const k = key('redlock1');
    const first = await redlock.acquire([k], 10_000);
    assert.ok(first.fence > 0 && first.value.length === 32);
    const started = Date.now();
    await assert.rejects(redlock.acquire([k], 10_000, { retryCount: 0 }), ExecutionError);
    assert.ok(Date.now() - started < 500, 'retryCount 0 tries once');
    await assert.rejects(redlock.acquire([k], 10_000, { retryCount: 2, retryDelay: 150 }), ExecutionError);
    assert.ok(Date.now() - started >= 290, 'two retries of 150 ms were waited for');
    const waiting = redlock.acquire([k], 10_000);
    await until(async () => (await new Locker(client).info(k)).waiters === 1, 'the waiter');
    await first.release();
    const second = await waiting;
    assert.ok(second.fence > first.fence);
    const extended = await second.extend(20_000);
    assert.ok(extended.expiration > second.expiration || second.expiration === 0);
    await redlock.release(extended);
    await assert.rejects(extended.release(), LockLostError);
    client.disconnect();
  });

  test('three masters: a quorum holds it; without one, ExecutionError', async () => {
    const clients = redlockPorts.map((p) => new IORedis({ port: p }));
    const redlock = new Redlock(clients, { retryCount: 1, retryDelay: 50, retryJitter: 10 });
    const k = key('redlock3');
    const lock = await redlock.acquire([k], 10_000);
    assert.equal(lock.fences.length, 3);
    assert.equal(lock.fence, undefined, 'fences of independent masters do not compare');
    await lock.release();
    // Someone else holds it on two of the three masters.
    const others = clients.slice(1).map((c) => new Locker(c));
    const held = await Promise.all(others.map((l) => l.acquire(k, 10_000)));
    const errors = [];
    redlock.on('error', (error) => errors.push(error));
    await assert.rejects(redlock.acquire([k], 10_000), (error) => error instanceof ExecutionError && error.attempts.length === 2);
    assert.equal(await clients[0].exists(k), 0, 'the minority grant was given back');
    await Promise.all(held.map((h) => h.release()));
    assert.ok(errors.length === 4 && errors.every((e) => e instanceof ResourceLockedError), 'each vote against is an error event, as in node-redlock');
    clients.forEach((c) => c.disconnect());
  });

  test('three masters: several resources at once on each, all or none', async () => {
    const clients = redlockPorts.map((p) => new IORedis({ port: p }));
    const redlock = new Redlock(clients, { retryCount: 1, retryDelay: 50, retryJitter: 10 });
    const [a, b] = [key('redlock3-a'), key('redlock3-b')];
    const lock = await redlock.acquire([a, b], 10_000);
    assert.equal(lock.fences.length, 3);
    assert.ok(lock.fences.every((fences) => fences.length === 2));
    await lock.release();
    // b is held on two masters: no quorum, and nothing left on any master.
    const others = clients.slice(1).map((c) => new Locker(c));
    const held = await Promise.all(others.map((l) => l.acquire(b, 10_000)));
    await assert.rejects(redlock.acquire([a, b], 10_000), ExecutionError);
    for (const client of clients) {
      assert.equal(await client.exists(a), 0, 'a was given back, or never taken');
    }
    await Promise.all(held.map((h) => h.release()));
    clients.forEach((c) => c.disconnect());
  });

  test('using extends below the threshold and releases after', async () => {
    const client = new IORedis({ port });
    const redlock = new Redlock([client], { automaticExtensionThreshold: 200 });
    const k = key('using');
    const result = await redlock.using([k], 400, async (signal) => {
      await sleep(1_000);
      assert.equal(signal.aborted, false);
      return 'done';
    });
    assert.equal(result, 'done');
    assert.equal(await client.exists(k), 0);
    client.disconnect();
  });
});
