"""redis-lock for Python: locks from the redis-lock server module, on redis-py.

    import redis
    from redis_lock_module import Lock

    r = redis.Redis(port=7379)
    with Lock(r, "orders:42", timeout=10, blocking_timeout=5) as lock:
        pay_order(42, fence=lock.fence)      # the resource refuses lower fences

`Lock` is a drop-in for redis-py's `redis.lock.Lock` (also as
`r.lock(name, timeout=..., lock_class=Lock)`), with the fence, waits served by the
server in arrival order, `session=` and `watchdog=`; `redis_lock_module.asyncio.Lock` is the
same for `redis.asyncio`. `read_lock`, `write_lock` and `semaphore` make the same lock
as a reader or writer of a read/write lock, or a holder of a counting semaphore
(`LOCK.ACQUIRE ... SHARED` / `LIMIT n`). `Redlock` spans several independent masters. `acquire`,
`release`, `extend`, `info` and `lock` are the commands as functions, in milliseconds.
`MultiLock` takes several keys at once, all or none (`LOCK.ACQUIREALL`), without deadlock.
`Election` is leader election on one lock (campaign, proclaim, resign, leader, observe),
on `VALUE` and `LOCK.WATCH`.
"""

from ._election import Election, Leader, Leadership
from ._helpers import (
    Held, LockNotAcquired, LockNotReplicated, acquire, extend, info, lock, release,
)
from ._lock import Lock, read_lock, semaphore, write_lock
from ._multi import MultiLock
from ._redlock import Redlock
from .exceptions import LockError, LockLostError, LockNotOwnedError, LockNotReplicatedError

__all__ = [
    "Lock", "read_lock", "write_lock", "semaphore", "Redlock", "LockError", "LockNotOwnedError", "LockLostError",
    "LockNotReplicatedError",
    "Held", "LockNotAcquired", "LockNotReplicated", "acquire", "release", "extend", "info",
    "lock", "Election", "Leadership", "Leader", "MultiLock",
]
__version__ = "0.1.0"
