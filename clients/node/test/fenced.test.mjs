// Lock.do (LOCK.DO) against a real server (REDIS_LOCK_PORT, started by
// clients/rust/tests/packages/node_package.rs), with ioredis and node-redis: the command
// runs while the lock is held, and a lost lock's write is refused with LockLostError.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Locker, LockLostError } from '../index.mjs';
import { libraries, close } from './support.mjs';

for (const [library, connect] of Object.entries(libraries)) {
  describe(`${library} lock.do`, { timeout: 30_000 }, () => {
    test('writes only while the lock is held', async () => {
      const client = await connect();
      try {
        const locker = new Locker(client);
        const name = `{sale:${library}}:lock`;
        const stock = `{sale:${library}}:stock`;
        const lock = await locker.acquire(name, 30_000);
        assert.equal(String(await lock.do('SET', stock, 1)), 'OK');
        assert.equal(Number(await lock.do('DECR', stock)), 0);
        await locker.connection.send(['DEL', name]); // the lock goes (its TTL ran out, say)
        await assert.rejects(lock.do('DECR', stock), LockLostError);
        assert.equal(Number(await locker.connection.send(['GET', stock])), 0, 'sold once');
        await assert.rejects(lock.do(), TypeError);
      } finally {
        await close(client);
      }
    });
  });
}
