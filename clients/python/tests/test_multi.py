"""`MultiLock` (sync and asyncio) against a real server: several keys at once or none
(`LOCK.ACQUIREALL`), one token and a fence per key, released and extended together,
waiting in turn without deadlock (docs/clients.md, docs/commands.md)."""

import asyncio
import threading
import time

import pytest
import redis.asyncio as aioredis

from redis_lock_module import LockError, LockNotOwnedError, MultiLock
from redis_lock_module import asyncio as aio


def test_every_key_or_none_with_a_fence_each(r, other, key):
    a, b, c = f"{key}:a", f"{key}:b", f"{key}:c"
    with MultiLock(r, [a, b], timeout=30) as both:
        assert len(both.fences) == 2 and both.token
        assert not MultiLock(other, [c, b], timeout=30, blocking=False).acquire()
        assert r.exists(c) == 0
        assert both.extend(30) is True
        assert r.pttl(a) > 40_000
        assert both.reacquire() is True
    assert r.exists(a, b) == 0


def test_readers_share_every_key(r, other, key):
    a, b = f"{key}:a", f"{key}:b"
    first = MultiLock(r, [a, b], timeout=30, shared=True)
    second = MultiLock(other, [b, a], timeout=30, shared=True)
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    assert not MultiLock(other, [a], timeout=30, blocking=False).acquire()
    first.release()
    second.release()


def test_a_lost_key_makes_release_fail_and_bad_input_is_refused(r, key):
    a, b = f"{key}:a", f"{key}:b"
    both = MultiLock(r, [a, b], timeout=30)
    assert both.acquire()
    r.delete(b)
    with pytest.raises(LockNotOwnedError):
        both.release()
    with pytest.raises(LockError):
        both.release()
    with pytest.raises(ValueError):
        MultiLock(r, [], timeout=1)


def test_crossing_orders_are_served_in_turn(r, other, key, port):
    import redis
    a, b = f"{key}:a", f"{key}:b"
    held = MultiLock(r, [a, b], timeout=30)
    assert held.acquire()
    fences = []

    def wait(names):
        con = redis.Redis(port=port)
        lock = MultiLock(con, names, timeout=30, blocking_timeout=10)
        assert lock.acquire()
        fences.append(lock.fences)
        lock.release()

    threads = [threading.Thread(target=wait, args=(names,)) for names in ([b, a], [a, b])]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while int(r.info("lock")["lock_waiters"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    held.release()
    for thread in threads:
        thread.join(15)
    assert len(fences) == 2


def test_the_asyncio_multilock(port, key):
    async def run():
        con = aioredis.Redis(port=port)
        a, b = f"{key}:a", f"{key}:b"
        async with aio.MultiLock(con, [a, b], timeout=30) as both:
            assert len(both.fences) == 2
            assert not await aio.MultiLock(con, [b], timeout=30, blocking=False).acquire()
            assert await both.reacquire() is True
        assert await con.exists(a, b) == 0
        await con.aclose()

    asyncio.run(run())
