"""The lock through the client shapes redis-py users deploy with: a Sentinel-managed
master and a cluster (sync and asyncio), with read timeouts shorter than the waits."""

import asyncio
import threading
import time

import pytest

import redis.asyncio.sentinel as aiosentinel
try:
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
except ImportError:  # redis-py 4.2, the oldest the package supports, has none
    AsyncRedisCluster = None
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from redis_lock_module import Lock
from redis_lock_module.asyncio import Lock as AsyncLock
from helpers import lock_info, wait_until

MASTER = "mymaster"


def test_a_blocking_acquire_through_sentinel_waits_on_the_master(r, sentinel_port, key):
    # The waiting acquire has a connection of its own (the client's read timeout is shorter
    # than the wait); it must find the master through Sentinel like the pool's do.
    master = Sentinel([("127.0.0.1", sentinel_port)]).master_for(MASTER, socket_timeout=0.5)
    holder = Lock(master, key, timeout=30)
    assert holder.acquire(blocking=False)
    got = {}
    waiter = Lock(master, key, timeout=30, blocking_timeout=10, thread_local=False)
    thread = threading.Thread(target=lambda: got.update(acquired=waiter.acquire()))
    thread.start()
    holder_fence = holder.fence
    wait_for_waiters(r, key, 1)
    holder.release()
    thread.join(10)
    assert got == {"acquired": True} and waiter.fence > holder_fence
    waiter.release()


def test_an_asyncio_blocking_acquire_through_sentinel_waits_on_the_master(r, sentinel_port,
                                                                           key):
    async def scenario():
        sentinel = aiosentinel.Sentinel([("127.0.0.1", sentinel_port)])
        master = sentinel.master_for(MASTER, socket_timeout=0.5)
        holder = AsyncLock(master, key, timeout=30)
        assert await holder.acquire(blocking=False)
        waiter = asyncio.create_task(AsyncLock(master, key, timeout=30,
                                               blocking_timeout=10).acquire())
        while lock_info(r, key)["waiters"] != 1:
            await asyncio.sleep(0.005)
        await holder.release()
        assert await waiter
        await master.aclose()

    asyncio.run(scenario())


def wait_for_waiters(r, key, n):
    wait_until(lambda: lock_info(r, key)["waiters"] == n, f"{n} waiter(s) on {key}")


def test_a_cluster_client_waits_on_the_keys_node_for_as_long_as_asked(cluster_port, key):
    # The client's read timeout (0.5 s) is shorter than the wait: the wait must run on a
    # connection of its own to the node serving the key, and end when asked, not when
    # the cluster client's retries give up or the holder's TTL runs out.
    rc = RedisCluster(host="127.0.0.1", port=cluster_port, socket_timeout=0.5)
    holder = Lock(rc, key, timeout=30)
    assert holder.acquire(blocking=False)
    holder_fence = holder.fence
    started = time.monotonic()
    assert not Lock(rc, key, timeout=30, blocking_timeout=1.5).acquire()
    assert 1.4 < time.monotonic() - started < 3
    got = {}
    waiter = Lock(rc, key, timeout=30, blocking_timeout=10, thread_local=False)
    thread = threading.Thread(target=lambda: got.update(acquired=waiter.acquire()))
    thread.start()
    wait_until(lambda: lock_info(rc, key)["waiters"] == 1, "the waiter to queue")
    holder.release()
    thread.join(10)
    assert got == {"acquired": True} and waiter.fence > holder_fence
    assert waiter.owned()
    waiter.release()
    rc.close()


def test_an_asyncio_cluster_client_waits_on_the_keys_node(cluster_port, key):
    if AsyncRedisCluster is None:
        pytest.skip("redis-py before 4.3 has no asyncio RedisCluster")

    async def scenario():
        rc = AsyncRedisCluster(host="127.0.0.1", port=cluster_port, socket_timeout=0.5)
        holder = AsyncLock(rc, key, timeout=30)
        assert await holder.acquire(blocking=False)
        started = time.monotonic()
        assert not await AsyncLock(rc, key, timeout=30, blocking_timeout=1.5).acquire()
        assert 1.4 < time.monotonic() - started < 3
        waiter = asyncio.create_task(AsyncLock(rc, key, timeout=30,
                                               blocking_timeout=10).acquire())
        while lock_info(sync, key)["waiters"] != 1:
            await asyncio.sleep(0.005)
        await holder.release()
        assert await waiter
        await rc.aclose()

    sync = RedisCluster(host="127.0.0.1", port=cluster_port)
    asyncio.run(scenario())
    sync.close()
