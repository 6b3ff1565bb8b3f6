// The package against a real server (REDIS_LOCK_PORT, started by
// clients/rust/tests/packages/node_package.rs), once with ioredis and once with node-redis.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import IORedis from 'ioredis';
import { createClient } from 'redis';
import { Locker, ResourceLockedError, LockLostError } from '../index.mjs';
import { port, libraries, close, sleep, until } from './support.mjs';

for (const [library, connect] of Object.entries(libraries)) {
  describe(library, { timeout: 60_000 }, () => {
    let n = 0;
    const key = () => `lock:${library}:${++n}`;

    test('acquire, fence, extend, release', async () => {
      const client = await connect();
      const locker = new Locker(client);
      const k = key();
      const lock = await locker.acquire([k], 10_000);
      assert.equal(typeof lock.fence, 'number');
      assert.ok(Number.isSafeInteger(lock.fence) && lock.fence > 0);
      assert.equal(lock.value.length, 32);
      assert.ok(lock.expiration > Date.now() + 9_000);
      const info = await locker.info(k);
      assert.equal(info.fence, lock.fence, 'the fence reads exactly as a number');
      await assert.rejects(locker.acquire(k, 10_000), ResourceLockedError);
      await lock.extend(20_000);
      assert.ok((await locker.info(k)).ttl > 10_000);
      await lock.release();
      assert.equal(await locker.info(k), null);
      await assert.rejects(lock.release(), LockLostError);
      await assert.rejects(lock.extend(1_000), LockLostError);
      const next = await locker.acquire(k, 10_000);
      assert.ok(next.fence > lock.fence, 'fences grow');
      await locker.release(next);
      await close(client);
    });

    test('the tokens it makes are 128 random bits in hex, never the same twice', async () => {
      const client = await connect();
      const locker = new Locker(client);
      // more than one draw of the generator (256 tokens each)
      const tokens = new Set();
      for (let i = 0; i < 300; i++) {
        const lock = await locker.acquire(key(), 10_000, { replicas: 0 });
        assert.match(lock.value, /^[0-9a-f]{32}$/);
        tokens.add(lock.value);
        await lock.release();
      }
      assert.equal(tokens.size, 300);
      await close(client);
    });

    test('a retried acquire with its token keeps the fence', async () => {
      const client = await connect();
      const locker = new Locker(client);
      const k = key();
      const first = await locker.acquire(k, 10_000, { token: 'worker-1' });
      const again = await locker.acquire(k, 10_000, { token: 'worker-1' });
      assert.equal(again.fence, first.fence);
      await again.release();
      await close(client);
    });

    test('waits are served in the server, in order, without blocking the shared connection', async () => {
      const client = await connect();
      const locker = new Locker(client);
      const k = key();
      const holder = await locker.acquire(k, 10_000);
      const order = [];
      const waiters = [0, 1, 2].map(async (i) => {
        await until(async () => (await locker.info(k)).waiters === i, `waiter ${i}'s turn to queue`);
        const lock = await locker.acquire(k, 10_000, { wait: 10_000 });
        order.push(i);
        await lock.release();
      });
      await until(async () => (await locker.info(k)).waiters === 3, 'three waiters');
      // the shared connection still answers while three waits block theirs
      assert.equal((await locker.info(k)).fence, holder.fence);
      await holder.release();
      await Promise.all(waiters);
      assert.deepEqual(order, [0, 1, 2]);
      await close(client);
    });

    test('a wait that times out rejects with ResourceLockedError', async () => {
      const client = await connect();
      const locker = new Locker(client);
      const k = key();
      const holder = await locker.acquire(k, 10_000);
      const started = Date.now();
      await assert.rejects(locker.acquire(k, 10_000, { wait: 200 }), ResourceLockedError);
      assert.ok(Date.now() - started >= 190);
      await holder.release();
      await close(client);
    });

    test('using extends the lock and releases it after', async () => {
      const client = await connect();
      const locker = new Locker(client);
      const k = key();
      const result = await locker.using(k, 300, async (signal, lock) => {
        await sleep(1_000); // more than three durations
        assert.equal(signal.aborted, false);
        assert.equal((await locker.info(k)).fence, lock.fence);
        return 'done';
      });
      assert.equal(result, 'done');
      assert.equal(await locker.info(k), null);
      await close(client);
    });

    test('using aborts the signal when the lock is lost', async () => {
      const client = await connect();
      const locker = new Locker(client);
      const k = key();
      await locker.using(k, 300, { extendEvery: 50 }, async (signal) => {
        await locker.connection.send(['DEL', k]);
        await until(async () => signal.aborted, 'the signal to abort');
        assert.ok(signal.reason instanceof LockLostError);
        assert.equal(signal.error, signal.reason);
      });
      await close(client);
    });

    test('a session-bound lock waited for on a duplicate stays bound to the client', async () => {
      const client = await connect();
      const locker = new Locker(client);
      const k = key();
      const holder = await locker.acquire(k, 30_000);
      const pending = locker.acquire(k, 60_000, { wait: 10_000, session: 0 });
      await until(async () => (await locker.info(k)).waiters === 1, 'the waiter');
      await holder.release();
      const lock = await pending;
      const info = await locker.info(k);
      assert.equal(info.connected, 1);
      assert.equal(info.fence, lock.fence);
      await close(client); // the client's connection closes: the lock goes at once
      const observer = await connect();
      await until(async () => (await new Locker(observer).info(k)) === null, 'the lock to go with the connection');
      await close(observer);
    });

    test('bad arguments are refused before any command', async () => {
      const client = await connect();
      const locker = new Locker(client);
      const k = key();
      await assert.rejects(locker.acquire(k, 0), RangeError);
      await assert.rejects(locker.acquire(k, 1.5), RangeError);
      await assert.rejects(locker.acquire(k, 1_000, { wait: -1 }), RangeError);
      await assert.rejects(locker.acquire(k, 1_000, { token: 'x'.repeat(257) }), RangeError);
      await assert.rejects(locker.acquire([k, 'other'], 1_000), TypeError);
      assert.equal(await locker.info(k), null);
      await close(client);
    });
  });
}

test('a session lock goes when its holder process is killed', { timeout: 30_000 }, async () => {
  const require = createRequire(import.meta.url);
  const child = spawn(process.execPath, ['-e', `
    const IORedis = require(${JSON.stringify(require.resolve('ioredis'))});
    const { Locker } = require(${JSON.stringify(require.resolve('../index.cjs'))});
    const locker = new Locker(new IORedis({ port: ${port} }));
    locker.acquire('lock:killed', 600000, { session: 0 }).then((l) => console.log(l.fence));
    setInterval(() => {}, 1000);
  `], { stdio: ['ignore', 'pipe', 'inherit'] });
  const observer = new IORedis({ port });
  try {
    const fence = await new Promise((resolve, reject) => {
      child.stdout.once('data', (d) => resolve(Number(String(d))));
      child.once('exit', (code) => reject(new Error(`the holder exited (${code}) before printing its fence`)));
    });
    const locker = new Locker(observer);
    assert.equal((await locker.info('lock:killed')).fence, fence);
    child.kill('SIGKILL');
    await until(async () => (await locker.info('lock:killed')) === null, 'the lock to go');
  } finally {
    child.kill('SIGKILL');
    observer.disconnect();
  }
});

test('the CommonJS build exports the same classes', () => {
  const require = createRequire(import.meta.url);
  const cjs = require('../index.cjs');
  assert.equal(cjs.Locker, Locker);
  assert.equal(require('redis-lock-module').Locker, Locker, 'the package resolves by its name');
});

test('a waiting acquire on an unreachable server rejects quietly: no unhandled error events', async () => {
  const { createServer } = await import('node:net');
  const probe = createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const deadPort = probe.address().port;
  await new Promise((resolve) => probe.close(resolve));
  const printed = [];
  const original = console.error;
  console.error = (...args) => printed.push(args.map(String).join(' '));
  try {
    for (const client of [
      new IORedis({ host: '127.0.0.1', port: deadPort, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null }),
      createClient({ socket: { host: '127.0.0.1', port: deadPort, reconnectStrategy: false } }),
    ]) {
      client.on('error', () => {});
      const locker = new Locker(client);
      await assert.rejects(locker.acquire('unreachable', 1000, { wait: 200 }));
      await sleep(100); // an error event emitted after the rejection would show here
    }
  } finally {
    console.error = original;
  }
  assert.deepEqual(printed.filter((line) => /Unhandled error event/.test(line)), []);
});
