"""`Election` (sync and asyncio) against a real server (docs/election.md): first come,
first elected; the value published and proclaimed; resigning or a dead leader's
lock-delay elects the next candidate; observers see every new leader, terms growing."""

import asyncio
import queue
import threading

import pytest
import redis
import redis.asyncio as aioredis

from redis_lock_module import Election, Leader, LockLostError
from redis_lock_module import asyncio as lock_asyncio
from helpers import lock_info, wait_until


def test_first_come_first_elected_proclaim_and_resign(r, port, key):
    election = Election(r, key, ttl=10, lock_delay=0.2)
    assert election.leader() is None
    first = election.campaign(b"node-a")
    assert first.term > 0
    assert election.leader() == Leader(first.term, b"node-a")

    elected = queue.Queue()
    other = redis.Redis(host="127.0.0.1", port=port)
    threading.Thread(target=lambda: elected.put(Election(other, key, ttl=10, lock_delay=0.2)
                                                .campaign("node-b")), daemon=True).start()
    wait_until(lambda: lock_info(r, key)["waiters"] == 1, "the second candidate to queue")
    assert elected.empty(), "one leader at a time"
    first.proclaim(b"node-a2")
    assert election.leader() == Leader(first.term, b"node-a2"), "same term, new value"
    assert first.resign()
    second = elected.get(timeout=10)
    assert second.term > first.term
    assert election.leader() == Leader(second.term, b"node-b")
    assert not second.lost
    with second:
        pass  # leaving the block resigns
    assert election.leader() is None
    other.close()


def test_a_campaign_with_a_timeout_gives_up(r, key):
    election = Election(r, key, ttl=10)
    leader = election.campaign("a")
    assert election.campaign("b", timeout=0.1) is None
    assert lock_info(r, key)["waiters"] == 0
    leader.resign()


def test_observers_see_every_new_leader_with_growing_terms(r, port, key):
    election = Election(r, key, ttl=10, lock_delay=0.2)
    seen = queue.Queue()
    follower = redis.Redis(host="127.0.0.1", port=port)

    def follow():
        for n, leader in enumerate(Election(follower, key).observe(), 1):
            seen.put(leader)
            if n == 3:
                return  # a, nobody, b

    following = threading.Thread(target=follow, daemon=True)
    following.start()
    wait_until(lambda: int(r.info("lock")["lock_watchers"]) == 1, "the observer to watch")
    first = election.campaign("a")
    assert seen.get(timeout=10) == Leader(first.term, b"a")
    first.resign()
    assert seen.get(timeout=10) is None
    second = election.campaign("b")
    got = seen.get(timeout=10)
    assert got == Leader(second.term, b"b") and got.term > first.term
    second.resign()
    following.join(timeout=10)
    follower.close()


def test_a_dead_leader_is_replaced_after_its_lock_delay(r, port, key):
    dead = redis.Redis(host="127.0.0.1", port=port)
    dead_term = Election(dead, key, ttl=10, lock_delay=0.2).campaign("dead").term
    observer = Election(r, key).observe(dead_term)
    elected = queue.Queue()
    threading.Thread(target=lambda: elected.put(Election(r, key, ttl=10, lock_delay=0.2)
                                                .campaign("alive")), daemon=True).start()
    wait_until(lambda: lock_info(r, key)["waiters"] == 1, "the candidate to queue")
    dead.connection_pool.disconnect()  # as the connections of a dead process close
    alive = elected.get(timeout=10)
    assert alive.term > dead_term
    assert next(observer) == Leader(alive.term, b"alive"), "the new term, never nobody"
    alive.resign()


def test_an_observer_ends_with_an_error_it_does_not_ride_out(r, key):
    r.set(key, "not a lock")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        next(Election(r, key).observe())


def test_a_lost_leadership_refuses_to_proclaim(r, key):
    leadership = Election(r, key, ttl=10).campaign("a")
    r.delete(key)
    with pytest.raises(LockLostError):
        leadership.proclaim("b")
    assert not leadership.resign()


def test_asyncio_election(port, key):
    async def scenario():
        a = aioredis.Redis(host="127.0.0.1", port=port)
        election = lock_asyncio.Election(a, key, ttl=10, lock_delay=0.2)
        assert await election.leader() is None
        observed = []

        async def follow():
            async for leader in lock_asyncio.Election(a, key).observe():
                observed.append(leader)
                if len(observed) == 3:
                    return

        async def seen(n):
            for _ in range(2000):
                if len(observed) >= n:
                    return
                await asyncio.sleep(0.005)
            raise AssertionError(f"the follower saw {observed}, not {n} changes")

        follower = asyncio.create_task(follow())
        async with await election.campaign(b"x") as first:
            await seen(1)
            await first.proclaim(b"x2")
            assert await election.leader() == Leader(first.term, b"x2")
        await seen(2)
        second = await election.campaign(b"y")
        assert second.term > first.term
        await asyncio.wait_for(follower, 10)
        assert [o.term if o else 0 for o in observed] == [first.term, 0, second.term]
        assert observed[2].value == b"y"
        assert await second.resign()
        await a.aclose()

    asyncio.run(scenario())


def test_an_observer_rides_out_a_killed_connection(r, port, key):
    election = Election(r, key, ttl=10, lock_delay=0.2)
    seen = queue.Queue()
    follower = redis.Redis(host="127.0.0.1", port=port, client_name="election-observer")

    def follow():
        for n, leader in enumerate(Election(follower, key).observe(), 1):
            seen.put(leader)
            if n == 2:
                return  # a, nobody

    following = threading.Thread(target=follow, daemon=True)
    following.start()
    first = election.campaign("a")
    assert seen.get(timeout=10) == Leader(first.term, b"a")

    def observer_ids():
        return [c["id"] for c in r.client_list() if c.get("name") == "election-observer"]

    wait_until(lambda: len(observer_ids()) == 1 and
               int(r.info("lock")["lock_watchers"]) == 1, "the observer to watch again")
    # Its connection is cut (a failover, a restart): it reconnects and asks again with the
    # term it knows; the next change reaches it.
    killed = observer_ids()[0]
    r.client_kill_filter(_id=killed)
    wait_until(lambda: observer_ids() not in ([], [killed]) and
               int(r.info("lock")["lock_watchers"]) == 1, "the observer to be back")
    assert first.resign()
    assert seen.get(timeout=10) is None
    following.join(timeout=10)
    follower.close()
