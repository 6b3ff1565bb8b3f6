// ESM entry: the same classes as the CommonJS build.
import cjs from './index.cjs';

export const { Locker, Lock, LockError, ResourceLockedError, LockLostError } = cjs;
export default cjs;
