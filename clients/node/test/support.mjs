// What the package's test files share: the server's port (REDIS_LOCK_PORT, started by
// clients/rust/tests/packages/node_package.rs), a check that it has the module (every
// file fails at once without it, not test by test), the two client libraries, and
// polling to a deadline.
import assert from 'node:assert/strict';
import IORedis from 'ioredis';
import { createClient } from 'redis';

export const port = Number(process.env.REDIS_LOCK_PORT);
assert.ok(port > 0, 'REDIS_LOCK_PORT is not set: run through `make test`');

{
  const probe = new IORedis({ host: '127.0.0.1', port });
  const modules = JSON.stringify(await probe.call('MODULE', 'LIST'));
  probe.disconnect();
  assert.ok(modules.includes('"lock"'), `the server on ${port} has not loaded the module: ${modules}`);
}

/** A connected client of each library, by name. */
export const libraries = {
  ioredis: async () => new IORedis({ host: '127.0.0.1', port, lazyConnect: false }),
  'node-redis': async () => createClient({ socket: { host: '127.0.0.1', port } }).connect(),
};

export const close = (client) => (typeof client.quit === 'function' ? client.quit() : client.close());
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `condition` every 5 ms until it holds; fails after `limit` ms. */
export async function until(condition, what, limit = 10_000) {
  const deadline = Date.now() + limit;
  while (!(await condition())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await sleep(5);
  }
}
