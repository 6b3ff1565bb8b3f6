// Redlock as node-redlock behaves (README, "Redlock"): its defaults and attempts, each
// attempt's votes, its errors and their messages, durations up to 2^53 - 1 ms,
// multi-resource locks, and a minority or majority of masters holding something else.
// On one master (REDIS_LOCK_PORT) and three (REDIS_LOCK_REDLOCK_PORTS).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import IORedis from 'ioredis';
import Redlock, { Locker, ResourceLockedError, ExecutionError } from '../index.mjs';
import { port, until } from './support.mjs';

const redlockPorts = String(process.env.REDIS_LOCK_REDLOCK_PORTS || '').split(',').map(Number);
assert.ok(redlockPorts.length === 3, 'run through `make test`');

let n = 0;
const key = (what) => `{redlock}:${what}:${++n}`;
/** A duration node-redlock's tests use for "long": a tenth of 2^53 - 1 ms. */
const LONG = Math.floor(Number.MAX_SAFE_INTEGER / 10);
/** Fast retries, so that a failing acquire's 11 attempts take a moment. */
const FAST = { retryDelay: 20, retryJitter: 10 };

/** Whether `token` holds `k` on `client` (a fenced PING runs only for the holder). */
async function holds(client, k, token) {
  try {
    return (await client.call('LOCK.DO', k, token, 'PING')) === 'PONG';
  } catch (error) {
    if (String(error.message).startsWith('NOTHELD')) {
      return false;
    }
    throw error;
  }
}

/** The votes of every attempt of `error`, an ExecutionError. */
async function votesOf(error) {
  assert.ok(error instanceof ExecutionError, `${error}`);
  return Promise.all(error.attempts);
}

describe('Redlock, as node-redlock behaves', { timeout: 60_000 }, () => {
  test("node-redlock's defaults: 11 attempts, 200 ms +/- 100 ms apart", () => {
    const redlock = new Redlock([new IORedis({ port, lazyConnect: true })]);
    assert.deepEqual(redlock.settings, {
      driftFactor: 0.01, retryCount: 10, retryDelay: 200, retryJitter: 100, automaticExtensionThreshold: 500,
    });
  });

  test('a duration that is not a whole number of ms is refused in its words', async () => {
    const client = new IORedis({ port });
    const redlock = new Redlock([client]);
    const k = key('float');
    for (const duration of [Number.MAX_SAFE_INTEGER / 10, 1.5, Number.NaN]) {
      await assert.rejects(redlock.acquire([k], duration), {
        message: 'Duration must be an integer value in milliseconds.',
      });
    }
    assert.equal(await client.exists(k), 0, 'nothing was taken');
    client.disconnect();
  });

  test('durations up to 2^53 - 1 ms: acquire, extend to three times as long, release', async () => {
    const client = new IORedis({ port });
    const redlock = new Redlock([client]);
    const [a, b] = [key('a'), key('b')];
    for (const resources of [[a], [a, b]]) {
      let lock = await redlock.acquire(resources, LONG);
      for (const k of resources) {
        assert.ok(await holds(client, k, lock.value));
        assert.equal(Math.floor((await client.pttl(k)) / 200), Math.floor(LONG / 200));
      }
      lock = await lock.extend(3 * LONG);
      for (const k of resources) {
        assert.equal(Math.floor((await client.pttl(k)) / 200), Math.floor((3 * LONG) / 200));
      }
      await lock.release();
      assert.equal(await client.exists(...resources), 0);
    }
    const max = await redlock.acquire([a], Number.MAX_SAFE_INTEGER);
    await max.release();
    await assert.rejects(redlock.acquire([a], Number.MAX_SAFE_INTEGER + 1), RangeError);
    client.disconnect();
  });

  test('a busy lock: retryCount + 1 attempts, each a ResourceLockedError vote', async () => {
    const client = new IORedis({ port });
    const redlock = new Redlock([client], FAST);
    const [c1, c2, c3] = [key('c1'), key('c2'), key('c3')];
    const lock = await redlock.acquire([c1, c2], LONG);
    const events = [];
    redlock.on('error', (error) => events.push(error));
    const error = await redlock.acquire([c2, c3], LONG).catch((e) => e);
    const attempts = await votesOf(error);
    assert.equal(attempts.length, 11);
    for (const stats of attempts) {
      assert.deepEqual([stats.membershipSize, stats.quorumSize, stats.votesFor.size], [1, 1, 0]);
      const [vote] = stats.votesAgainst.values();
      assert.ok(vote instanceof ResourceLockedError);
      assert.equal(vote.message, 'The operation was applied to: 0 of the 2 requested resources.');
      assert.equal(stats.votesAgainst.get(client), vote, 'votes are keyed by client');
    }
    assert.equal(events.length, 11, 'every vote against is an "error" event');
    assert.ok(await holds(client, c1, lock.value) && await holds(client, c2, lock.value));
    assert.equal(await client.exists(c3), 0, 'nothing taken');
    await lock.release();
    client.disconnect();
  });

  test('on one master, each attempt waits in the server: granted the moment the lock frees', async () => {
    const client = new IORedis({ port });
    const redlock = new Redlock([client], { retryCount: 3, retryDelay: 5_000, retryJitter: 0 });
    const k = key('wait');
    const first = await redlock.acquire([k], 30_000);
    const started = Date.now();
    const second = redlock.acquire([k], 30_000);
    await until(async () => (await new Locker(client).info(k)).waiters === 1, 'the waiter');
    await first.release();
    const lock = await second;
    assert.ok(Date.now() - started < 4_000, 'granted before the next attempt was due');
    assert.ok(lock.fence > first.fence);
    assert.equal((await Promise.all(lock.attempts)).length, 1);
    await lock.release();
    client.disconnect();
  });

  test('an unreachable server: every attempt a vote with the client library\'s own error', async () => {
    // Port 1 on loopback: nothing listens there.
    const client = new IORedis({
      host: '127.0.0.1', port: 1, maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: false,
    });
    client.on('error', () => {});
    const redlock = new Redlock([client], FAST);
    const error = await redlock.acquire([key('b')], LONG).catch((e) => e);
    const attempts = await votesOf(error);
    assert.equal(attempts.length, 11);
    for (const stats of attempts) {
      const [vote] = stats.votesAgainst.values();
      assert.equal(vote.message, 'Connection is closed.');
    }
  });

  test('three masters: a minority holding something else still gives a quorum', async () => {
    const clients = redlockPorts.map((p) => new IORedis({ port: p }));
    const redlock = new Redlock(clients, FAST);
    const k = key('minority');
    await clients[2].set(k, 'other');
    let lock = await redlock.acquire([k], LONG);
    assert.ok(await holds(clients[0], k, lock.value) && await holds(clients[1], k, lock.value));
    assert.equal(await clients[2].get(k), 'other');
    assert.equal(await clients[2].pttl(k), -1);
    const [stats] = await Promise.all(lock.attempts);
    assert.deepEqual([stats.votesFor.size, stats.votesAgainst.size], [2, 1]);
    lock = await lock.extend(3 * LONG);
    assert.equal(Math.floor((await clients[1].pttl(k)) / 200), Math.floor((3 * LONG) / 200));
    await lock.release();
    assert.equal(await clients[0].exists(k) + await clients[1].exists(k), 0);
    assert.equal(await clients[2].get(k), 'other');
    clients.forEach((c) => c.disconnect());
  });

  test('three masters: a majority holding something else, 11 attempts and nothing left', async () => {
    const clients = redlockPorts.map((p) => new IORedis({ port: p }));
    const redlock = new Redlock(clients, FAST);
    const k = key('majority');
    await clients[1].set(k, 'other1');
    await clients[2].set(k, 'other2');
    const attempts = await votesOf(await redlock.acquire([k], LONG).catch((e) => e));
    assert.equal(attempts.length, 11);
    for (const stats of attempts) {
      assert.equal(stats.votesAgainst.size, 2);
      for (const vote of stats.votesAgainst.values()) {
        assert.ok(vote instanceof ResourceLockedError);
        assert.equal(vote.message, 'The operation was applied to: 0 of the 1 requested resources.');
      }
    }
    assert.equal(await clients[0].exists(k), 0, 'the minority grant was given back');
    assert.deepEqual([await clients[1].get(k), await clients[2].get(k)], ['other1', 'other2']);
    clients.forEach((c) => c.disconnect());
  });

  test('after a failed attempt, a master whose grant reply was lost is released too', async () => {
    const admin = new IORedis({ port: redlockPorts[0] });
    const clients = [new IORedis({ port: redlockPorts[0], commandTimeout: 100 }), ...redlockPorts.slice(1).map((p) => new IORedis({ port: p }))];
    const k = key('lost-reply');
    await clients[1].set(k, 'other1');
    await clients[2].set(k, 'other2');
    // Master 0 holds writes back past the client's command timeout: the acquire is
    // granted there after its caller gave up on the reply.
    const stat = async (name) => Number((await admin.info('lock')).match(new RegExp(`^${name}:(\\d+)`, 'm'))[1]);
    const [grants, releases] = [await stat('lock_grants'), await stat('lock_releases')];
    await admin.call('CLIENT', 'PAUSE', '400', 'WRITE');
    const redlock = new Redlock(clients, { ...FAST, retryCount: 0 });
    const error = await redlock.acquire([k], 30_000).catch((e) => e);
    assert.ok(error instanceof ExecutionError);
    const [stats] = await Promise.all(error.attempts);
    assert.match(stats.votesAgainst.get(clients[0]).message, /timed out/i);
    await until(async () => await stat('lock_grants') === grants + 1, 'the late grant on master 0');
    await until(async () => await stat('lock_releases') === releases + 1, 'its release');
    assert.equal(await admin.exists(k), 0);
    [admin, ...clients].forEach((c) => c.disconnect());
  });

  test('using extends below the threshold and keeps the fence', async () => {
    const client = new IORedis({ port });
    const redlock = new Redlock([client]);
    const k = key('using');
    const result = await redlock.using([k], 500, { automaticExtensionThreshold: 200 }, async (signal) => {
      const fence = (await new Locker(client).info(k)).fence;
      await new Promise((resolve) => setTimeout(resolve, 700));
      assert.equal(signal.aborted, false);
      assert.equal(signal.error, undefined);
      assert.equal((await new Locker(client).info(k)).fence, fence);
      return fence;
    });
    assert.ok(result > 0);
    assert.equal(await client.exists(k), 0);
    client.disconnect();
  });
});
