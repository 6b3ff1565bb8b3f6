// ESM entry: the same classes as the CommonJS build; the default export is Redlock, as
// node-redlock's.
import cjs from './index.cjs';

export const {
  Locker, Lock, MultiLock, Redlock, RedlockLock, Election, Leadership, LockError, ResourceLockedError,
  NotReplicatedError, LockLostError, ExecutionError,
} = cjs;
export default cjs.Redlock;
