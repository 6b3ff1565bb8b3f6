// Compiled with `tsc --noEmit --strict` in the tests: the declarations fit real use.
import IORedis from 'ioredis';
import { createClient, createClientPool, createCluster, createSentinel } from 'redis';
import Redlock, { Locker, Lock, MultiLock, LockLostError, ResourceLockedError, ExecutionError, Election, Leadership, Leader } from 'redis-lock-module';

async function main(): Promise<void> {
  const ioredis = new Locker(new IORedis(7379));
  const nodeRedis = new Locker(await createClient().connect());
  const clientPool = createClientPool();
  await clientPool.connect();
  const pool = new Locker(clientPool);
  const cluster = new Locker(await createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] }).connect());
  const ioCluster = new Locker(new IORedis.Cluster([{ host: '127.0.0.1', port: 7000 }]));
  const sentinel = new Locker(
    await createSentinel({ name: 'mymaster', sentinelRootNodes: [{ host: '127.0.0.1', port: 26379 }] }).connect(),
  );
  await sentinel.acquire('orders:44', 10_000);
  const both: MultiLock = await ioredis.lockAll(['{acct}:7', '{acct}:9'], 10_000, { wait: 1_000, shared: false });
  const fences: number[] = both.fences;
  void fences;
  await both.extend(20_000);
  await both.release();
  const election = new Election(new IORedis(7379), 'service:leader', { ttl: 10_000, lockDelay: 2_000 });
  const leadership: Leadership | null = await election.campaign('10.0.0.1:8080', { timeout: 1_000 });
  if (leadership !== null) {
    const term: number = leadership.term;
    await leadership.proclaim(`10.0.0.1:8080 term ${term}`);
    const resigned: boolean = await leadership.resign();
    void resigned;
  }
  const now: Leader | null = await election.leader();
  for await (const next of election.observe(now === null ? 0 : now.term)) {
    if (next === null || next.value !== null) {
      break;
    }
  }
  const lock: Lock = await ioredis.acquire('orders:42', 10_000, { wait: 5_000, session: 5_000 });
  const fence: number = lock.fence;
  await lock.extend(20_000);
  const stock: unknown = await lock.do('DECR', '{sale:7}:stock');
  void stock;
  await lock.release();
  const reader: Lock = await pool.readLock('catalog', 10_000);
  const permit: Lock = await cluster.semaphore('api', 10, 10_000, { wait: 1_000 });
  await ioCluster.writeLock('catalog', 10_000, { shared: false });
  const total: number = await nodeRedis.using('orders:42', 10_000, async (signal, held) => {
    if (signal.aborted) {
      throw signal.error ?? new LockLostError('lost');
    }
    return held.fence + fence + reader.fence + permit.fence;
  });
  const info = await nodeRedis.info('orders:42');
  const waiters: number | undefined = info?.waiters;
  const redlock = new Redlock([new IORedis(7379)], { retryCount: 3, retryDelay: 100 });
  redlock.on('error', (error: unknown) => void error);
  const held = await redlock.acquire(['orders:42'], 5_000);
  const longer = await held.extend(10_000);
  await redlock.using(['orders:43'], 5_000, async (signal) => signal.aborted);
  await longer.release();
  void total;
  void waiters;
  void ResourceLockedError;
  void ExecutionError;
}
void main;
