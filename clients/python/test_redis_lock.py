"""Checks redis_lock.py against a server with the module: python3 test_redis_lock.py PORT

Prints one line per check and exits non-zero on the first failure.
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import redis  # noqa: E402

from redis_lock import LockNotAcquired, acquire, extend, info, lock, release  # noqa: E402

passed = 0


def check(name, ok):
    global passed
    if not ok:
        print(f"FAILED: {name}", file=sys.stderr)
        sys.exit(1)
    passed += 1
    print(f"ok - {name}")


def main(port):
    r = redis.Redis(host="127.0.0.1", port=port)

    held = acquire(r, "jobs:1", 10_000)
    check("acquire returns a 32-character token and a positive fence",
          held is not None and len(held.token) == 32 and held.fence > 0)
    check("a second acquire answers None", acquire(r, "jobs:1", 10_000) is None)
    check("release with another token is refused", not release(r, "jobs:1", b"other"))
    check("extend with the token succeeds", extend(r, "jobs:1", held.token, 20_000))
    check("info shows the extended ttl", info(r, "jobs:1")["ttl"] > 10_000)
    check("release with the token succeeds", release(r, "jobs:1", held.token))
    check("info of a free key is None", info(r, "jobs:1") is None)

    own = acquire(r, "jobs:2", 10_000, token="worker-3")
    again = acquire(r, "jobs:2", 10_000, token="worker-3")
    check("an own token is kept, and re-acquiring with it keeps the fence",
          own.token == b"worker-3" and again.fence == own.fence)
    release(r, "jobs:2", "worker-3")

    try:
        resp3 = redis.Redis(host="127.0.0.1", port=port, protocol=3)
    except TypeError:
        # redis-py before 5.0 (Debian 12's python3-redis is 4.3) speaks RESP2 only.
        resp3 = None
    if resp3 is not None:
        with lock(resp3, "jobs:3", 10_000) as held:
            check("info reads the RESP3 map too", info(resp3, "jobs:3")["fence"] == held.fence)

    # The context manager with WAIT: the holder releases after a while, the waiter
    # (blocked in LOCK.ACQUIRE ... WAIT on its own connection) gets the lock then.
    holder = acquire(r, "jobs:4", 10_000)
    released = threading.Event()

    def release_later():
        waiter_seen = time.monotonic() + 10
        while info(r, "jobs:4")["waiters"] < 1 and time.monotonic() < waiter_seen:
            time.sleep(0.005)
        released.set()
        release(r, "jobs:4", holder.token)

    threading.Thread(target=release_later).start()
    waiter = redis.Redis(host="127.0.0.1", port=port)
    manager = lock(waiter, "jobs:4", 10_000, wait_ms=10_000)
    with manager as held:
        check("the waiter gets the lock when the holder releases",
              released.is_set() and held.fence > holder.fence)
    check("and the context manager released it, held to the end",
          manager.held_to_end is True and info(r, "jobs:4") is None)

    busy = acquire(r, "jobs:5", 10_000)
    started = time.monotonic()
    try:
        with lock(waiter, "jobs:5", 10_000, wait_ms=200):
            check("a busy lock is not entered", False)
    except LockNotAcquired:
        check("a wait that times out raises LockNotAcquired",
              time.monotonic() - started >= 0.15)
    release(r, "jobs:5", busy.token)

    try:
        with lock(r, "jobs:6", 10_000):
            raise ValueError("the work failed")
    except ValueError:
        pass
    check("the lock is released when the block raises", info(r, "jobs:6") is None)

    manager = lock(r, "jobs:7", 100)
    with manager:
        time.sleep(0.4)
    check("held_to_end is False when the lock expired during the block",
          manager.held_to_end is False)

    r.set("jobs:legacy", "an old SET NX lock")
    try:
        acquire(r, "jobs:legacy", 1_000)
        check("a string key is refused with WRONGTYPE", False)
    except redis.ResponseError as err:
        check("a string key is refused with WRONGTYPE", str(err).startswith("WRONGTYPE"))

    print(f"python: {passed} checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 test_redis_lock.py PORT", file=sys.stderr)
        sys.exit(2)
    main(int(sys.argv[1]))
