"""`replicas`: a grant counts once a replica has it (docs/clients.md, "Failover-safe by
default"). The master of these tests has one replica; the Redlock masters have none."""

import time

import pytest
import redis
from redis.sentinel import Sentinel

from redis_lock_module import Lock, LockError, LockNotReplicatedError, MultiLock, Redlock
from redis_lock_module import LockNotReplicated, lock
from redis_lock_module.asyncio import Lock as AsyncLock
from helpers import frozen, pid_of, server_waits, wait_until


def calls(client, command):
    """How many times the server ran `command` (INFO commandstats)."""
    stats = client.info("commandstats").get(f"cmdstat_{command}")
    return 0 if stats is None else int(stats["calls"])


def own_waits(client):
    """The WAITs clients sent (the module asks replicas for acknowledgements with a
    WAITAOF of its own)."""
    return calls(client, "wait")


def replica_waits(client):
    """The waits for replicas the server ran: the package's own WAITs (on Redis 7.0),
    or the replies the server held until a replica had the grant (`REPLICAS n`)."""
    return own_waits(client) + int(client.info("lock")["lock_replica_waits"])


def assert_own_waits(client, before, waits):
    """The package sent `waits` WAITs of its own since `before` where the server cannot
    wait for replicas, and none where it can."""
    assert own_waits(client) - before == (0 if server_waits(client) else waits)


def role(client):
    """The server's role, or None while it answers nothing: Sentinel closes a promoted
    replica's client connections (CLIENT KILL TYPE normal) in the step that promotes it,
    and redis-py before 5 does not retry a command on a closed connection."""
    try:
        return client.execute_command("ROLE")[0]
    except redis.ConnectionError:
        return None


@pytest.fixture
def synced(r, replica_port):
    """The replica online and caught up with the master."""
    replica = redis.Redis(port=replica_port)
    wait_until(lambda: len(r.execute_command("ROLE")[2]) == 1, "the replica online")
    # a write, then WAIT on the same (pooled) connection: a WAIT on a connection that
    # has written nothing answers at once
    wait_until(lambda: r.set("in-sync", 1) and r.execute_command("WAIT", 1, 100) == 1,
               "the replica in sync")
    yield replica
    replica.close()


def test_a_grant_waits_for_one_replica_in_the_same_round_trip(r, key, synced):
    lock = Lock(r, key, timeout=10, replicas_timeout=10)
    assert lock.acquire(blocking=False)  # the connection learns its master's replicas
    lock.release()
    waits, own, roles = replica_waits(r), own_waits(r), calls(r, "role")
    for _ in range(3):
        assert lock.acquire(blocking=False)
        assert synced.exists(key) == 1  # the replica has it before acquire returns
        lock.release()
    assert replica_waits(r) - waits == 3
    assert_own_waits(r, own, 3)
    # Learned once per connection where the package counts the replicas itself (Redis
    # 7.0), never where the server waits: either way no ROLE per grant.
    assert calls(r, "role") == roles


def test_a_waiting_acquire_sends_its_wait_behind_the_grant(r, other, key, synced):
    assert Lock(other, key, timeout=2, replicas_timeout=10).acquire(blocking=False)
    waits, own = replica_waits(r), own_waits(r)
    # 10 s for the replica: a grant it acknowledged later than the replicas timeout is
    # released and asked for again while the wait lasts (a second wait).
    lock = Lock(r, key, timeout=10, blocking_timeout=10, replicas_timeout=10)
    assert lock.acquire()
    assert replica_waits(r) - waits == 1
    assert_own_waits(r, own, 1)
    assert synced.exists(key) == 1


def test_a_grant_no_replica_acknowledges_is_released_and_not_granted(r, key, synced,
                                                                    replica_port):
    lock = Lock(r, key, timeout=10, replicas_timeout=0.2)
    assert lock.acquire(blocking=False)
    lock.release()
    with frozen(replica_port):
        started = time.monotonic()
        assert not lock.acquire(blocking=False)
        assert time.monotonic() - started < 2  # the WAIT's timeout, not the TTL
        assert r.exists(key) == 0  # released at once by its token
        assert lock.token is None
        with pytest.raises(LockNotReplicatedError) as raised:
            lock.acquire(blocking_timeout=0.5)
        assert (raised.value.acked, raised.value.required) == (0, 1)
        assert isinstance(raised.value, LockError)
        assert "0 of 1 replicas" in str(raised.value)
        assert r.exists(key) == 0


def test_with_the_replica_back_the_same_lock_is_granted(r, key, synced, replica_port):
    lock = Lock(r, key, timeout=10, replicas_timeout=0.2)
    with frozen(replica_port):
        assert not lock.acquire(blocking=False)
    wait_until(lambda: r.execute_command("WAIT", 1, 100) == 1, "the replica back")
    assert lock.acquire(blocking_timeout=5)
    lock.release()


def test_replicas_zero_sends_no_wait(r, key, synced):
    waits = replica_waits(r)
    lock = Lock(r, key, timeout=10, replicas=0)
    assert lock.acquire(blocking=False)
    lock.extend(5)
    lock.release()
    assert replica_waits(r) == waits


def test_more_replicas_than_the_master_has_are_not_replicated_and_nothing_stays(r, key,
                                                                               synced):
    lock = Lock(r, key, timeout=10, replicas=2, replicas_timeout=0.2)
    if server_waits(r):
        # The server holds the grant for two acknowledgements, one comes, it undoes it:
        # not replicated, as any shortfall (False without blocking).
        assert not lock.acquire(blocking=False)
        assert (lock.not_replicated.acked, lock.not_replicated.required) == (1, 2)
    else:
        # The package knows its master's replicas: refused before anything is sent.
        with pytest.raises(LockNotReplicatedError) as raised:
            lock.acquire(blocking=False)
        assert raised.value.refused
        assert "1 replicas online" in str(raised.value)
    assert r.exists(key) == 0


def test_a_master_without_replicas_grants_without_a_wait(redlock_ports, key):
    master = redis.Redis(port=redlock_ports[0])
    waits = replica_waits(master)
    lock = Lock(master, key, timeout=10)
    assert lock.acquire(blocking=False)
    lock.extend(5)
    lock.release()
    assert replica_waits(master) == waits
    master.close()


def test_extends_and_the_watchdog_wait_for_the_replica(r, key, synced, replica_port):
    lock = Lock(r, key, timeout=2, watchdog=True)
    assert lock.acquire(blocking=False)
    waits, own = replica_waits(r), own_waits(r)
    lock.extend(1)
    assert replica_waits(r) - waits == 1
    assert_own_waits(r, own, 1)
    wait_until(lambda: replica_waits(r) - waits >= 3, "the watchdog's extends, waited for")
    with frozen(replica_port):
        # not replicated extends are retried; the lock is lost once a whole TTL passed
        wait_until(lambda: lock.lost, "the lock lost", limit=10)
    lock.release()


def test_an_extend_too_few_replicas_acknowledged_raises_and_keeps_the_lock(r, key, synced,
                                                                          replica_port):
    lock = Lock(r, key, timeout=10, replicas_timeout=0.2)
    assert lock.acquire(blocking=False)
    with frozen(replica_port):
        with pytest.raises(LockNotReplicatedError):
            lock.extend(20, replace_ttl=True)
        assert r.exists(key) == 1
    lock.release()


def test_multilock_and_redlock_wait_for_their_masters_replicas(r, key, synced, replica_port,
                                                               redlock_ports):
    names = [key + ":a", key + ":b"]
    waits, own = replica_waits(r), own_waits(r)
    both = MultiLock(r, names, timeout=10)
    assert both.acquire(blocking=False)
    both.reacquire()
    both.release()
    # The acquire, and the reacquire's extends: one WAIT behind both, or the server
    # holding each extend's reply.
    assert replica_waits(r) - waits == (3 if server_waits(r) else 2)
    assert_own_waits(r, own, 2)
    with frozen(replica_port):
        assert not MultiLock(r, names, timeout=10, replicas_timeout=0.1).acquire(blocking=False)
        assert r.exists(*names) == 0
    masters = [redis.Redis(port=p) for p in redlock_ports]
    lock = Redlock(masters, key, timeout=10)
    assert lock.acquire(blocking=False)  # masters without replicas: no wait
    lock.release()
    for master in masters:
        master.close()


def test_the_asyncio_lock_waits_and_releases_the_same_way(port, replica_port, key, r,
                                                          synced):
    import asyncio
    import redis.asyncio as aioredis

    async def scenario():
        client = aioredis.Redis(port=port)
        try:
            waits, own = replica_waits(r), own_waits(r)
            lock = AsyncLock(client, key, timeout=10, replicas_timeout=0.2)
            assert await lock.acquire(blocking=False)
            await lock.release()
            assert replica_waits(r) - waits == 1
            assert_own_waits(r, own, 1)
            with frozen(replica_port):
                assert not await lock.acquire(blocking=False)
                assert r.exists(key) == 0
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_bad_settings_are_refused_before_anything_is_sent(r, key):
    for replicas in (-1, "two", 1.5, True):
        with pytest.raises(ValueError):
            Lock(r, key, timeout=10, replicas=replicas)
    for timeout in (0, -1, "1"):
        with pytest.raises(ValueError):
            Lock(r, key, timeout=10, replicas_timeout=timeout)


def test_a_sentinel_failover_to_a_master_without_replicas_grants_at_once(failover, key):
    """Sentinel promotes the replica of a stopped master: the client follows it, learns
    that the new master has no replica, and grants at once instead of waiting for one."""
    sentinel = Sentinel([("127.0.0.1", failover["sentinel"])], socket_timeout=1)
    client = sentinel.master_for(failover["name"], socket_timeout=1)
    lock = Lock(client, key, timeout=10, replicas_timeout=0.5)
    old = redis.Redis(port=failover["master"])
    waits = replica_waits(old)
    assert lock.acquire(blocking=False)
    lock.release()
    assert replica_waits(old) - waits == 1
    new = redis.Redis(port=failover["replica"])
    with frozen(failover["master"]):
        redis.Redis(port=failover["sentinel"]).execute_command(
            "SENTINEL", "FAILOVER", failover["name"])
        wait_until(lambda: role(new) == b"master", "the promotion", 30)
        wait_until(lambda: sentinel.discover_master(failover["name"])[1] == failover["replica"],
                   "the sentinel naming the new master", 30)
        started = time.monotonic()
        assert lock.acquire(blocking_timeout=5)
        took = time.monotonic() - started
        assert new.exists(key) == 1
        assert replica_waits(new) == 0  # no replica: no wait
        assert took < 3, took  # the stalled connection's timeout, not a wait per grant
        lock.release()
        again = time.monotonic()
        assert lock.acquire(blocking=False)
        assert time.monotonic() - again < 0.4  # at once
        lock.release()
    old.close()
    new.close()


def test_fsync_waits_for_the_masters_own_fsync_where_the_server_has_waitaof(r, key, synced,
                                                                           replica_port):
    """`fsync=True` sends WAITAOF 1 n timeout: on Redis 7.2+ and Valkey 8+ with
    appendonly, the grant counts once fsynced; elsewhere it is refused, and released."""
    try:
        r.execute_command("WAITAOF", 0, 0, 0)
        has_waitaof = True
    except redis.ResponseError:  # an unknown command before Redis 7.2 and Valkey 8
        has_waitaof = False
    lock = Lock(r, key, timeout=10, fsync=True)
    if not has_waitaof:
        with pytest.raises(LockNotReplicatedError) as raised:
            lock.acquire(blocking=False)
        assert raised.value.refused and "WAITAOF" in str(raised.value)
        assert r.exists(key) == 0
        return
    r.config_set("appendonly", "no")
    with pytest.raises(LockNotReplicatedError) as raised:
        lock.acquire(blocking=False)
    assert raised.value.refused and r.exists(key) == 0
    # WAITAOF counts the replicas that fsynced it to their own append-only file. Both
    # fsync every write here, so that a grant need not wait for the next second's fsync
    # (on Redis 8.2 a master's first everysec fsync after the switch came 17 s later).
    for server in (r, synced):
        server.config_set("appendonly", "yes")
        server.config_set("appendfsync", "always")
    try:
        wait_until(lambda: r.set(key + ":warm", 1) and list(
            r.execute_command("WAITAOF", 1, 1, 100)) == [1, 1], "both fsyncing", 20)
        waits = calls(r, "waitaof")
        assert lock.acquire(blocking=False)
        # The package's WAITAOF (and where the server waits for the replica itself, the
        # module's own, with which a held reply asks the replicas to acknowledge).
        assert calls(r, "waitaof") - waits == (2 if server_waits(r) else 1)
        lock.release()
        with frozen(replica_port):
            assert not lock.acquire(blocking=False)  # the replica's fsync is missing
            assert lock.not_replicated is not None and r.exists(key) == 0
        off = Lock(r, key, timeout=10, fsync=True, replicas=0)
        assert off.acquire(blocking=False)  # the master's own fsync alone
        off.release()
    finally:
        for server in (r, synced):
            server.config_set("appendfsync", "everysec")
            server.config_set("appendonly", "no")


def test_the_lock_helper_sends_its_wait_with_the_grant_and_releases_a_shortfall(r, key, synced,
                                                                             replica_port):
    waits, own = replica_waits(r), own_waits(r)
    with lock(r, key, 10_000, replicas=1, replicas_timeout_ms=2_000) as held:
        assert synced.exists(key) == 1  # the replica had it before the block began
    assert replica_waits(r) - waits == 1
    assert_own_waits(r, own, 1)
    assert held.fence > 0 and not r.exists(key)
    with frozen(replica_port):
        started = time.monotonic()
        with pytest.raises(LockNotReplicated) as raised:
            with lock(r, key, 10_000, replicas=1, replicas_timeout_ms=300):
                pytest.fail("a grant no replica acknowledged is not entered")
        assert time.monotonic() - started >= 0.25
        assert (raised.value.wanted, raised.value.acked, raised.value.refused) == (1, 0, False)
        assert not r.exists(key)  # released on the spot, not left to its TTL


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_a_slot_that_keeps_moving_raises_its_last_redirection_never_an_unwaited_grant(
        r, port, key, monkeypatch, api):
    # Every try on the key's master answers MOVED (a slot that keeps moving); the lock
    # must give up with that redirection rather than send its acquire without the WAIT.
    from redis.exceptions import ResponseError
    from redis_lock_module import _replicas

    tries = []

    def moved(*args, **kwargs):
        tries.append(1)
        raise ResponseError(f"MOVED 1 127.0.0.1:{port}")

    async def async_moved(*args, **kwargs):
        moved()

    monkeypatch.setattr(_replicas, "on_master", moved)
    monkeypatch.setattr(_replicas, "async_on_master", async_moved)
    if api == "sync":
        with pytest.raises(LockError, match="MOVED"):
            Lock(r, key, timeout=10).acquire(blocking=False)
    else:
        import asyncio
        import redis.asyncio as aioredis

        async def scenario():
            a = aioredis.Redis(port=port)
            try:
                with pytest.raises(LockError, match="MOVED"):
                    await AsyncLock(a, key, timeout=10).acquire(blocking=False)
            finally:
                await a.aclose()

        asyncio.run(scenario())
    assert len(tries) == 6  # the first try and five redirections
    assert not r.exists(key)


def test_a_further_drop_of_the_replicas_starts_the_hold_afresh(monkeypatch):
    """Where the package waits itself (Redis 7.0): a master seen with 2 replicas, then 1, then 0 (a deposed master whose last link
    breaks at the heal) is taken at 2 for HOLD_SECONDS after the last drop, not the
    first: a client paused in between must not find the hold run out."""
    from redis_lock_module import _redis70
    now = [1000.0]
    monkeypatch.setattr(_redis70.time, "monotonic", lambda: now[0])
    address = ("hold-test", 1, None)
    assert _redis70._held_count(address, 2) == 2
    now[0] += 1
    assert _redis70._held_count(address, 1) == 2
    now[0] += _redis70.HOLD_SECONDS - 0.5
    assert _redis70._held_count(address, 0) == 2, "the drop to 0 holds afresh"
    now[0] += _redis70.HOLD_SECONDS - 1
    assert _redis70._held_count(address, 0) == 2
    now[0] += 2
    assert _redis70._held_count(address, 0) == 0, "the hold is over"
    assert _redis70._held_count(address, 1) == 1
