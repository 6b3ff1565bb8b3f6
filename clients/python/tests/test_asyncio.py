"""`redis_lock_module.asyncio.Lock` against a real server, on `redis.asyncio` clients."""

import asyncio
import time
import uuid

import pytest
import redis.asyncio as aioredis

from redis_lock_module import LockError, LockLostError, LockNotOwnedError
from redis_lock_module.asyncio import Lock
from helpers import lock_info


def run(coroutine):
    return asyncio.run(coroutine)


async def client(port, **kwargs):
    return aioredis.Redis(host="127.0.0.1", port=port, **kwargs)


async def until(condition, what, limit=10.0):
    deadline = time.monotonic() + limit
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def test_acquire_owned_locked_release(r, port, key):
    async def scenario():
        a = await client(port)
        lock = Lock(a, key, timeout=10)
        assert await lock.acquire(blocking=False)
        assert await lock.locked() and await lock.owned() and lock.fence > 0
        assert not await Lock(a, key, timeout=10).acquire(blocking=False)
        await lock.release()
        assert not await lock.locked()
        with pytest.raises(LockError):
            await lock.release()
        await a.aclose()

    run(scenario())
    assert not r.exists(key)


def test_context_manager_and_lock_class(port, key):
    async def scenario():
        a = await client(port)
        async with a.lock(key, timeout=10, lock_class=Lock) as lock:
            assert isinstance(lock, Lock) and await lock.owned()
        assert not await a.exists(key)
        with pytest.raises(LockNotOwnedError):
            async with Lock(a, key, timeout=10):
                await a.delete(key)
        await a.aclose()

    run(scenario())


def test_extend_and_reacquire(r, port, key):
    async def scenario():
        a = await client(port)
        lock = Lock(a, key, timeout=10)
        assert await lock.acquire(blocking=False)
        assert await lock.extend(10)
        assert 16000 < await a.pttl(key) <= 20000
        assert await lock.extend(5, replace_ttl=True)
        assert await a.pttl(key) <= 5000
        assert await lock.reacquire()
        assert 8000 < await a.pttl(key) <= 10000
        await a.set(key, "a")
        with pytest.raises(LockNotOwnedError):
            await lock.extend(1)
        with pytest.raises(LockNotOwnedError):
            await lock.reacquire()
        await a.aclose()

    run(scenario())


def test_redis_py_8_2_meanings(r, port, key):
    async def scenario():
        a = await client(port)
        lock = Lock(a, key, timeout=0)  # lives until released
        assert await lock.acquire(blocking=False)
        assert uuid.UUID(lock.token.decode()).version == 4
        assert await a.pttl(key) == -1
        assert await lock.reacquire()
        with pytest.raises(LockNotOwnedError):
            await lock.extend(0)
        assert await a.pttl(key) == -1 and await lock.owned()
        # `blocking` is the first positional argument, as in redis.asyncio's Lock.
        started = time.monotonic()
        assert not await Lock(a, key).acquire(False)
        assert time.monotonic() - started < 1
        await lock.release()

        timed = Lock(a, key, timeout=10)
        assert await timed.acquire(False)
        before = await a.pttl(key)
        assert await timed.extend(0, replace_ttl=True) and await timed.extend(-20)
        assert 0 < await a.pttl(key) <= before
        await timed.release()
        await a.aclose()

    run(scenario())


def test_release_clears_only_its_own_token(r, port, key, monkeypatch):
    async def scenario():
        a = await client(port)
        lock = Lock(a, key, thread_local=False)
        assert await lock.acquire(blocking=False)
        own = lock.token

        async def others_token_meanwhile(expected_token):
            lock.local.token = b"another-acquirer"

        monkeypatch.setattr(lock, "do_release", others_token_meanwhile)
        await lock.release()
        assert lock.local.token == b"another-acquirer"
        monkeypatch.undo()
        lock.local.token = own
        await lock.release()
        assert lock.token is None and not await a.exists(key)
        await a.aclose()

    run(scenario())


def test_waiters_are_served_in_order_without_polling(r, port, key):
    async def scenario():
        a = await client(port)
        holder = Lock(a, key, timeout=10)
        assert await holder.acquire(blocking=False)
        await a.config_resetstat()
        order = []
        clients = [await client(port) for _ in range(3)]

        async def wait(n):
            waiter = Lock(clients[n], key, timeout=10)
            assert await waiter.acquire(blocking_timeout=10)
            order.append(n)
            await waiter.release()

        tasks = []
        for n in range(3):
            tasks.append(asyncio.create_task(wait(n)))
            await until(lambda n=n: _waiters(a, key, n + 1), f"waiter {n} to queue")
        await asyncio.sleep(0.3)
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert order == [0, 1, 2]
        stats = await a.info("commandstats")  # counted when each wait ended
        assert stats["cmdstat_lock.acquire"]["calls"] == 3
        for c in clients + [a]:
            await c.aclose()

    run(scenario())


async def _waiters(a, key, count):
    from redis_lock_module._protocol import info_fields

    fields = info_fields(await a.execute_command("LOCK.INFO", key))
    return fields is not None and fields["waiters"] == count


def test_a_cancelled_wait_leaves_the_queue(r, port, key):
    async def scenario():
        a = await client(port)
        holder = Lock(a, key, timeout=10)
        assert await holder.acquire(blocking=False)
        short = await client(port, socket_timeout=0.2)  # the wait gets its own connection
        task = asyncio.create_task(Lock(short, key, timeout=10).acquire(blocking_timeout=30))
        await until(lambda: _waiters(a, key, 1), "the waiter to queue")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: _waiters(a, key, 0), "the waiter to leave")
        await holder.release()
        for c in (short, a):
            await c.aclose()

    run(scenario())


def test_a_session_wait_on_its_own_connection_rebinds(r, port, key):
    async def scenario():
        a = await client(port)
        holder = Lock(a, key, timeout=30)
        assert await holder.acquire(blocking=False)
        short = await client(port, socket_timeout=0.2)
        lock = Lock(short, key, timeout=10, session=5)
        task = asyncio.create_task(lock.acquire(blocking_timeout=20))
        await until(lambda: _waiters(a, key, 1), "the waiter to queue")
        await holder.release()
        assert await asyncio.wait_for(task, 10)
        fields = lock_info(r, key)
        assert fields["connected"] == 1 and fields["session"] == 5000
        await lock.release()
        for c in (short, a):
            await c.aclose()

    run(scenario())


def test_watchdog_renews_then_reports_the_loss(r, port, key):
    async def scenario():
        a = await client(port)
        lost = asyncio.Event()
        lock = Lock(a, key, timeout=2, watchdog=True, on_lost=lambda lock: lost.set())
        assert await lock.acquire(blocking=False)
        await asyncio.sleep(3.0)  # more than a TTL
        assert await lock.owned() and not lock.lost
        await a.delete(key)
        await asyncio.wait_for(lost.wait(), 5)
        with pytest.raises(LockLostError):
            lock.check()
        await a.aclose()

    run(scenario())


def test_a_cancelled_release_keeps_the_holding_for_a_retry(r, port, key):
    # redis-py's #3847: forgetting the token before the server answered leaked the lock
    # until its TTL and made the retry raise LockError.
    async def scenario():
        a = await client(port)
        lock = Lock(a, key, timeout=60)
        assert await lock.acquire(blocking=False)
        token = lock.token
        task = asyncio.create_task(lock.release())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lock.token == token, "the cancelled release kept the holding"
        assert await lock.locked()
        await lock.release()
        assert not await lock.locked() and lock.token is None
        await a.aclose()

    run(scenario())


def test_a_release_that_finds_the_lock_gone_forgets_it(r, port, key):
    async def scenario():
        a = await client(port)
        lock = Lock(a, key, timeout=60)
        assert await lock.acquire(blocking=False)
        await a.delete(key)
        with pytest.raises(LockNotOwnedError):
            await lock.release()
        assert lock.token is None
        await a.aclose()

    run(scenario())


def test_a_key_of_another_type_holds_the_name_as_for_redis_py(r, port, key):
    async def scenario():
        a = await client(port)
        await a.set(key, "an old SET NX lock")
        assert await Lock(a, key).acquire(blocking=False) is False
        with pytest.raises(LockError):
            async with Lock(a, key, blocking_timeout=0.1):
                pass
        assert await a.get(key) == b"an old SET NX lock"
        await a.aclose()

    run(scenario())


def test_a_lock_without_timeout_never_expires(r, port, key):
    async def scenario():
        a = await client(port)
        lock = Lock(a, key)
        assert await lock.acquire(blocking=False)
        assert await a.pttl(key) == -1 and await lock.owned()
        await lock.release()
        await a.aclose()

    run(scenario())


def test_do_on_the_asyncio_lock(port, key):
    from redis_lock_module import LockLostError

    async def scenario():
        a = await client(port)
        lock = Lock(a, key, timeout=30)
        assert await lock.acquire()
        assert await lock.do("INCR", key + ":n") == 1
        await a.delete(key)
        with pytest.raises(LockLostError):
            await lock.do("INCR", key + ":n")
        assert int(await a.get(key + ":n")) == 1
        await a.aclose()

    run(scenario())
