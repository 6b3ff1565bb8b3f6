"""`read_lock`, `write_lock` and `semaphore` (sync and asyncio) against a real server:
the same `Lock` as the mutex, as a reader, a writer or a semaphore's holder."""

import asyncio
import threading

import pytest
import redis.asyncio as aioredis

from redis_lock_module import LockError, read_lock, semaphore, write_lock
from redis_lock_module import asyncio as aio
from helpers import lock_info


def test_readers_share_and_a_writer_waits_for_them(r, other, key):
    first, second = read_lock(r, key, timeout=30), read_lock(other, key, timeout=30)
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    assert second.fence > first.fence
    info = lock_info(r, key)
    assert info["mode"] == "shared" and info["holders"] == 2 and info["limit"] == -1
    assert first.owned() and second.owned()
    writer = write_lock(r, key, timeout=30)
    assert not writer.acquire(blocking=False)
    granted = []
    waiting = threading.Thread(
        target=lambda: granted.append(write_lock(other, key, timeout=30).acquire(
            blocking_timeout=10)))
    first.release()
    waiting.start()
    second.release()
    waiting.join()
    assert granted == [True]
    assert lock_info(r, key)["mode"] == "exclusive"


def test_a_semaphore_gives_out_its_permits_as_context_managers(r, key):
    with semaphore(r, key, 2, timeout=30) as a, semaphore(r, key, 2, timeout=30) as b:
        assert a.fence < b.fence
        assert not semaphore(r, key, 2, timeout=30).acquire(blocking=False)
        assert lock_info(r, key)["limit"] == 2
    assert not r.exists(key)


def test_a_limit_that_disagrees_is_an_error_naming_limit(r, key):
    # The package's own error (redis-py's LockError), naming the lock, not a bare
    # ResponseError that `except LockError` would miss.
    with semaphore(r, key, 2, timeout=30):
        with pytest.raises(LockError, match="LIMIT") as raised:
            semaphore(r, key, 3, timeout=30).acquire(blocking=False)
        assert raised.value.lock_name == key


def test_bad_limits_are_refused_before_any_command(r, key):
    for bad in (0, 1_000_001, -1, 1.5, True):
        with pytest.raises(ValueError, match="limit"):
            semaphore(r, key, bad, timeout=1)


def test_asyncio_read_write_and_semaphore(port, key):
    async def scenario():
        r = aioredis.Redis(host="127.0.0.1", port=port)
        try:
            async with aio.read_lock(r, key, timeout=30) as reader:
                assert await reader.owned()
                other = aio.read_lock(r, key, timeout=30)
                assert await other.acquire(blocking=False)
                assert not await aio.write_lock(r, key, timeout=30).acquire(blocking=False)
                await other.release()
            assert not await r.exists(key)
            permit = aio.semaphore(r, key + ":sem", 1, timeout=30)
            assert await permit.acquire(blocking=False)
            assert not await aio.semaphore(r, key + ":sem", 1, timeout=30).acquire(
                blocking=False)
            await permit.release()
        finally:
            await r.aclose()

    asyncio.run(scenario())
