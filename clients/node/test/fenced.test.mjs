// Lock.do (LOCK.DO) against a real server (REDIS_LOCK_PORT, started by
// clients/rust/tests/packages/node_package.rs), with ioredis and node-redis: the command
// runs while the lock is held, and a lost lock's write is refused with LockLostError.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import IORedis from 'ioredis';
import { createClient } from 'redis';
import { Locker, LockLostError } from '../index.mjs';

const port = Number(process.env.REDIS_LOCK_PORT);
assert.ok(port > 0, 'REDIS_LOCK_PORT is not set: run through `make test`');

// Fail at once, not test by test, when the server lacks the module.
{
  const probe = new IORedis({ host: '127.0.0.1', port });
  const modules = JSON.stringify(await probe.call('MODULE', 'LIST'));
  probe.disconnect();
  assert.ok(modules.includes('"lock"'), `the server on ${port} has not loaded the module: ${modules}`);
}

const libraries = {
  ioredis: async () => new IORedis({ host: '127.0.0.1', port }),
  'node-redis': async () => createClient({ socket: { host: '127.0.0.1', port } }).connect(),
};
const close = (client) => (typeof client.quit === 'function' ? client.quit() : client.close());

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
