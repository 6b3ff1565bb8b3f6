// Compiled with `tsc --noEmit --strict` in the tests: the declarations fit real use.
import IORedis from 'ioredis';
import { createClient } from 'redis';
import { Locker, Lock, LockLostError, ResourceLockedError } from 'redis-lock-module';

async function main(): Promise<void> {
  const ioredis = new Locker(new IORedis(7379));
  const nodeRedis = new Locker(await createClient().connect());
  const lock: Lock = await ioredis.acquire('orders:42', 10_000, { wait: 5_000, session: 5_000 });
  const fence: number = lock.fence;
  await lock.extend(20_000);
  await lock.release();
  const total: number = await nodeRedis.using('orders:42', 10_000, async (signal, held) => {
    if (signal.aborted) {
      throw signal.error ?? new LockLostError('lost');
    }
    return held.fence + fence;
  });
  const info = await nodeRedis.info('orders:42');
  const waiters: number | undefined = info?.waiters;
  void total;
  void waiters;
  void ResourceLockedError;
}
void main;
