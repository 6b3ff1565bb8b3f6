// `replicas`: a grant counts once a replica has it (docs/clients.md, "Failover-safe by
// default"). The master (REDIS_LOCK_PORT) has one replica (REDIS_LOCK_REPLICA_PORT); the
// Redlock masters have none.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import IORedis from 'ioredis';
import { Locker, Redlock, NotReplicatedError, ResourceLockedError } from '../index.mjs';
import { port, libraries, close, until } from './support.mjs';

const replicaPort = Number(process.env.REDIS_LOCK_REPLICA_PORT);
const redlockPorts = (process.env.REDIS_LOCK_REDLOCK_PORTS || '').split(',').map(Number);
const admin = new IORedis({ host: '127.0.0.1', port });

async function calls(client, command) {
  const stats = await client.info('commandstats');
  const line = stats.split('\n').find((l) => l.startsWith(`cmdstat_${command}:`));
  return line ? Number(/calls=(\d+)/.exec(line)[1]) : 0;
}

/** The waits for replicas the server ran: the package's WAITs (where the server cannot
 *  wait itself), or the replies it held for its replicas (REPLICAS n), each of which asks
 *  them with a WAITAOF of the module's own. */
async function replicaWaits(client) {
  return (await calls(client, 'wait')) + (await calls(client, 'waitaof'));
}

/** Whether the server holds a grant's reply for its replicas itself (Redis 7.2+, Valkey). */
async function serverWaits(client) {
  const info = await client.info('server');
  if (/valkey_version:/.test(info)) {
    return true;
  }
  const [major, minor] = /redis_version:(\d+)\.(\d+)/.exec(info).slice(1).map(Number);
  return major > 7 || (major === 7 && minor >= 2);
}

/** The replica stopped (SIGSTOP) while `body` runs, continued whatever happens. */
async function frozen(body) {
  const replica = new IORedis({ host: '127.0.0.1', port: replicaPort });
  const pid = Number(/process_id:(\d+)/.exec(await replica.info('server'))[1]);
  replica.disconnect();
  process.kill(pid, 'SIGSTOP');
  try {
    return await body();
  } finally {
    process.kill(pid, 'SIGCONT');
  }
}

/** The replica online and acknowledging this connection's writes (a WAIT on a
 *  connection that has written nothing answers at once). */
async function synced() {
  await until(async () => (await admin.call('ROLE'))[2].length === 1, 'the replica online');
  await until(async () => {
    await admin.set('in-sync', 1);
    return Number(await admin.call('WAIT', 1, 100)) === 1;
  }, 'the replica in sync');
}

for (const [library, connect] of Object.entries(libraries)) {
  describe(library, { timeout: 60_000 }, () => {
    test('a grant waits for one replica, in the same round trip', async () => {
      await synced();
      const client = await connect();
      const locker = new Locker(client);
      (await locker.acquire(`${library}:r1`, 10_000)).release(); // learns the master's replicas
      const waits = await replicaWaits(admin);
      const own = await calls(admin, 'wait');
      const roles = await calls(admin, 'role');
      for (let i = 0; i < 3; i += 1) {
        const lock = await locker.acquire(`${library}:r1`, 10_000);
        await lock.extend(10_000);
        await lock.release();
      }
      assert.equal(await replicaWaits(admin) - waits, 6);
      assert.equal(await calls(admin, 'wait') - own, (await serverWaits(admin)) ? 0 : 6);
      assert.equal(await calls(admin, 'role'), roles);
      await close(client);
    });

    test('a grant no replica acknowledges is released and rejected as not replicated', async () => {
      await synced();
      const client = await connect();
      const locker = new Locker(client, { replicasTimeout: 100 });
      (await locker.acquire(`${library}:r2`, 10_000)).release();
      await frozen(async () => {
        const error = await locker.acquire(`${library}:r2`, 10_000).catch((e) => e);
        assert.ok(error instanceof NotReplicatedError, String(error));
        assert.ok(error instanceof ResourceLockedError);
        assert.deepEqual([error.acked, error.required, error.refused], [0, 1, false]);
        assert.match(error.message, /0 of 1 replicas/);
        assert.equal(await admin.exists(`${library}:r2`), 0);
        // with a wait, it is tried again until the wait ends
        const started = Date.now();
        const waited = await locker.acquire(`${library}:r2`, 10_000, { wait: 400 }).catch((e) => e);
        assert.ok(waited instanceof NotReplicatedError);
        assert.ok(Date.now() - started >= 350);
        assert.equal(await admin.exists(`${library}:r2`), 0);
        const all = await locker.lockAll([`{${library}}:a`, `{${library}}:b`], 10_000).catch((e) => e);
        assert.ok(all instanceof NotReplicatedError);
        assert.equal(await admin.exists(`{${library}}:a`, `{${library}}:b`), 0);
      });
      await close(client);
    });

    test('an extend too few replicas acknowledged rejects and keeps the lock', async () => {
      await synced();
      const client = await connect();
      const locker = new Locker(client, { replicasTimeout: 100 });
      const lock = await locker.acquire(`${library}:r3`, 10_000);
      await frozen(async () => {
        await assert.rejects(lock.extend(20_000), NotReplicatedError);
        assert.equal(await admin.exists(`${library}:r3`), 1);
      });
      await lock.release();
      await close(client);
    });

    test('replicas 0 sends no WAIT; more replicas than the master has are not replicated', async () => {
      await synced();
      const client = await connect();
      const waits = await replicaWaits(admin);
      const lock = await new Locker(client, { replicas: 0 }).acquire(`${library}:r4`, 10_000);
      await lock.extend(5_000);
      await lock.release();
      assert.equal(await replicaWaits(admin), waits);
      const two = new Locker(client, { replicas: 2, replicasTimeout: 200 });
      const error = await two.acquire(`${library}:r4`, 10_000).catch((e) => e);
      if (await serverWaits(admin)) {
        // The server holds the grant for two acknowledgements, one comes, it undoes it.
        assert.ok(error instanceof NotReplicatedError && !error.refused, String(error));
        assert.deepEqual([error.acked, error.required], [1, 2]);
      } else {
        // The package counts the replicas itself (Redis 7.0): refused before sending.
        assert.ok(error instanceof NotReplicatedError && error.refused, String(error));
        assert.match(error.message, /1 replicas online/);
      }
      assert.equal(await admin.exists(`${library}:r4`), 0);
      await assert.rejects(new Locker(client, { replicas: -1 }).acquire(`${library}:r4`, 10_000), RangeError);
      await assert.rejects(new Locker(client, { replicasTimeout: 0 }).acquire(`${library}:r4`, 10_000), RangeError);
      await close(client);
    });

    test('a master without replicas grants without a WAIT; Redlock asks each master', async () => {
      const masters = redlockPorts.map((p) => new IORedis({ host: '127.0.0.1', port: p }));
      const before = await replicaWaits(masters[0]);
      const redlock = new Redlock(masters);
      const lock = await redlock.acquire([`${library}:r5`], 10_000);
      await lock.release();
      assert.equal(await replicaWaits(masters[0]), before);
      masters.forEach((m) => m.disconnect());
    });
  });
}

test('fsync waits for WAITAOF where the server has it, and is refused where not', { timeout: 60_000 }, async () => {
  await synced();
  const replica = new IORedis({ host: '127.0.0.1', port: replicaPort });
  const locker = new Locker(admin, { fsync: true });
  let hasWaitaof = true;
  await admin.call('WAITAOF', 0, 0, 0).catch(() => { hasWaitaof = false; });
  try {
    if (!hasWaitaof) {
      const error = await locker.acquire('fsync:a', 10_000).catch((e) => e);
      assert.ok(error instanceof NotReplicatedError && error.refused, String(error));
      assert.match(error.message, /WAITAOF/);
      assert.equal(await admin.exists('fsync:a'), 0);
      return;
    }
    for (const server of [admin, replica]) {
      await server.config('SET', 'appendonly', 'yes');
      await server.config('SET', 'appendfsync', 'always');
    }
    const settled = async (server) => {
      const info = await server.info('persistence');
      return /aof_enabled:1/.test(info) && /aof_rewrite_in_progress:0/.test(info) && /aof_rewrite_scheduled:0/.test(info);
    };
    await until(async () => (await settled(admin)) && (await settled(replica)), 'both AOFs on', 20_000);
    let streak = 0;
    await until(async () => {
      await admin.set('fsync:warm', 1);
      streak = JSON.stringify(await admin.call('WAITAOF', 1, 1, 100)) === '[1,1]' ? streak + 1 : 0;
      return streak >= 3;
    }, 'both fsyncing', 20_000);
    const before = await calls(admin, 'waitaof');
    const lock = await locker.acquire('fsync:a', 10_000);
    // The package's WAITAOF, and the module's own with which the held reply asks the
    // replica to acknowledge.
    assert.equal(await calls(admin, 'waitaof') - before, 2);
    await lock.release();
    await frozen(async () => {
      const error = await locker.acquire('fsync:a', 10_000).catch((e) => e);
      assert.ok(error instanceof NotReplicatedError && !error.refused, String(error));
      assert.equal(await admin.exists('fsync:a'), 0);
    });
  } finally {
    if (hasWaitaof) {
      for (const server of [admin, replica]) {
        await server.config('SET', 'appendfsync', 'everysec');
        await server.config('SET', 'appendonly', 'no');
      }
    }
    replica.disconnect();
  }
});

test.after(() => admin.disconnect());
