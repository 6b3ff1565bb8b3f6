// The package under test in place of node-redlock's ./index.js; acquire also records the
// lock's value for harness.js.
import Base, { ExecutionError, ResourceLockedError } from 'redis-lock-module';
import { seen } from './harness.js';

export { ExecutionError, ResourceLockedError };
export default class Redlock extends Base {
  async acquire(...args) {
    const lock = await super.acquire(...args);
    seen.add(lock.value);
    return lock;
  }
}
