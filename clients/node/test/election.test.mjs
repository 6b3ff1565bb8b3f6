// Election against a real server (REDIS_LOCK_PORT, started by
// clients/rust/tests/packages/node_package.rs), with ioredis and node-redis: first come,
// first elected; proclaim keeps the term; resigning elects the next candidate; observers
// see every new leader with growing terms; a lost leadership takes nothing back.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Election, LockLostError } from '../index.mjs';
import { libraries, close, until } from './support.mjs';

for (const [library, connect] of Object.entries(libraries)) {
  describe(`${library} election`, { timeout: 60_000 }, () => {
    test('an observer ends with an error it does not ride out (WRONGTYPE)', async () => {
      const client = await connect();
      const name = `election:${library}:wrongtype`;
      await new Election(client, name).locker.connection.send(['SET', name, 'not a lock']);
      const observer = new Election(client, name).observe();
      await assert.rejects(observer.next(), /WRONGTYPE/);
      assert.deepEqual(await observer.next(), { value: undefined, done: true }, 'the observation ended');
      await close(client);
    });

    test('first come first elected, proclaim, resign, observe', async () => {
      const a = await connect();
      const b = await connect();
      const name = `election:${library}`;
      const first = new Election(a, name, { ttl: 10_000, lockDelay: 200 });
      const second = new Election(b, name, { ttl: 10_000, lockDelay: 200 });
      assert.equal(await first.leader(), null);

      const seen = [];
      const follower = (async () => {
        for await (const leader of second.observe()) {
          seen.push(leader);
          if (seen.length === 3) {
            break;
          }
        }
      })();

      const leading = await first.campaign('node-a');
      assert.ok(leading.term > 0);
      await until(async () => seen.length === 1, 'the follower to see node-a');
      assert.deepEqual(seen[0], { term: leading.term, value: 'node-a' });
      await leading.proclaim('node-a2');
      assert.deepEqual(await first.leader(), { term: leading.term, value: 'node-a2' });

      const campaigning = second.campaign('node-b');
      await until(async () => (await first.locker.info(name)).waiters === 1, 'the candidate to queue');
      assert.equal(await first.campaign('node-c', { timeout: 50 }), null, 'a timed-out campaign');
      assert.equal(await leading.resign(), true);
      const next = await campaigning;
      assert.ok(next.term > leading.term, 'terms grow');
      // A resignation with a waiter elects it in the same event: never nobody in between.
      await until(async () => seen.length === 2, 'the follower to see node-b');
      assert.deepEqual(seen[1], { term: next.term, value: 'node-b' });
      assert.equal(await next.resign(), true);
      await follower;
      assert.equal(seen[2], null);
      await close(a);
      await close(b);
    });

    test('a lost leadership refuses to proclaim and takes nothing', async () => {
      const a = await connect();
      const name = `election:lost:${library}`;
      const election = new Election(a, name, { ttl: 10_000 });
      const leading = await election.campaign('a');
      await election.locker.connection.send(['DEL', name]);
      await assert.rejects(leading.proclaim('b'), LockLostError);
      assert.equal(leading.lost, true);
      assert.equal(await election.leader(), null, 'the free key stays free');
      assert.equal(await leading.resign(), false);
      await close(a);
    });
  });
}
