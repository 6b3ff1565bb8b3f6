// Several keys at once (`Locker#lockAll`, `Redlock#acquire([a, b])` on one master) against
// a real server (REDIS_LOCK_PORT), with ioredis and with node-redis: every key or none,
// one token and a fence per key, released and extended together, waiting in turn
// without deadlock (docs/clients.md, docs/commands.md "LOCK.ACQUIREALL").
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Locker, Redlock, MultiLock, ResourceLockedError, LockLostError, ExecutionError } from '../index.mjs';
import { libraries, close, until } from './support.mjs';

for (const [library, connect] of Object.entries(libraries)) {
  describe(`${library}: several keys at once`, { timeout: 60_000 }, () => {
    let n = 0;
    const keys = (count) => {
      n += 1;
      return Array.from({ length: count }, (_, i) => `multi:${library}:${n}:${i}`);
    };

    test('every key or none, released and extended together', async () => {
      const client = await connect();
      const locker = new Locker(client);
      const [a, b, c] = keys(3);
      const both = await locker.lockAll([a, b], 10_000);
      assert.ok(both instanceof MultiLock);
      assert.equal(both.fences.length, 2);
      assert.ok(both.fences.every((fence) => Number.isSafeInteger(fence) && fence > 0));
      await assert.rejects(locker.lockAll([c, b], 10_000), ResourceLockedError);
      assert.equal(await locker.info(c), null, 'nothing taken on c');
      await both.extend(20_000);
      assert.ok((await locker.info(a)).ttl > 10_000);
      await both.release();
      assert.equal(await locker.info(a), null);
      await assert.rejects(both.release(), LockLostError);
      await assert.rejects(locker.lockAll([a, a], 1_000), TypeError);
      await assert.rejects(locker.lockAll([a, b], 1_000, { limit: 2 }), TypeError);
      await close(client);
    });

    test('crossing orders wait their turn', async () => {
      const client = await connect();
      const locker = new Locker(client);
      const [a, b] = keys(2);
      const held = await locker.lockAll([a, b], 10_000);
      // Each waiter releases its own grant: which of the two came first is the server's
      // to say.
      const turn = (order) => locker.lockAll(order, 10_000, { wait: 10_000 }).then(async (lock) => {
        await lock.release();
        return lock.fences;
      });
      const crossing = [turn([b, a]), turn([a, b])];
      await until(async () => (await locker.info(a)).waiters === 2, 'two waiters');
      await held.release();
      const [one, two] = await Promise.all(crossing);
      // One was granted both keys, then the other: every fence of the later grant is above
      // every fence of the earlier one.
      const [earlier, later] = Math.min(...one) < Math.min(...two) ? [one, two] : [two, one];
      assert.ok(Math.min(...later) > Math.max(...earlier));
      await close(client);
    });

    test("Redlock's multi-resource acquire on one master takes every key in one step", async () => {
      const client = await connect();
      const redlock = new Redlock([client], { retryCount: 0 });
      const [a, b] = keys(2);
      const lock = await redlock.acquire([a, b], 10_000);
      assert.deepEqual(lock.resources, [a, b]);
      assert.equal(lock.fences[0].length, 2);
      await assert.rejects(redlock.acquire([b], 10_000), ExecutionError);
      const extended = await lock.extend(20_000);
      await redlock.release(extended);
      // 10 s, not 1 s: a Redlock of 1 s gives each master 100 ms, and the grant's WAIT for
      // the replica plus the release could outlast that on a loaded machine (a full
      // `make test` once reported the release as not held).
      const again = await redlock.acquire([b, a], 10_000);
      await again.release();
      await close(client);
    });
  });
}
