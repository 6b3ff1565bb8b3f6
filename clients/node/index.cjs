'use strict';
// Locks from the redis-lock server module, for ioredis and node-redis (`redis`), in
// node-redlock's shape: `Locker` for one server (a master with replicas, a cluster),
// `Redlock` as a drop-in for node-redlock, `Election` for leader election.

const { Locker, Lock } = require('./lib/locker.cjs');
const { MultiLock } = require('./lib/multi.cjs');
const { Redlock, RedlockLock } = require('./lib/redlock.cjs');
const { Election, Leadership } = require('./lib/election.cjs');
const {
  LockError, ResourceLockedError, NotReplicatedError, LockLostError, ExecutionError,
} = require('./lib/errors.cjs');

const api = {
  Locker, Lock, MultiLock, Redlock, RedlockLock, Election, Leadership, LockError, ResourceLockedError,
  NotReplicatedError, LockLostError, ExecutionError,
};
module.exports = api;
// The default export is Redlock, as node-redlock's; it also carries every other export,
// so `(await import('redis-lock-module')).default.Locker` keeps working.
Object.assign(Redlock, api);
module.exports.default = Redlock;
