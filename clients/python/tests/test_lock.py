"""`redis_lock_module.Lock` against a real server: redis-py's own Lock behaviours that apply
(ported from the cases of redis-py's tests/test_lock.py), then what it adds."""

import logging
import os
import uuid
import subprocess
import sys
import threading
import time

import pytest
import redis
from redis.exceptions import LockError as RedisPyLockError
from redis.exceptions import LockNotOwnedError as RedisPyLockNotOwnedError

from redis_lock_module import Lock, LockError, LockLostError, LockNotOwnedError
from helpers import frozen, lock_info, wait_until


def make(r, key, **kwargs):
    return Lock(r, key, **kwargs)


# --- redis-py's Lock behaviours ---------------------------------------------------------


def test_lock_holds_and_releases(r, key):
    lock = make(r, key)
    assert lock.acquire(blocking=False)
    assert lock.locked() and lock.owned()
    assert r.type(key) != b"string"  # a lock of the module's type, not a string
    assert lock_info(r, key)["fence"] == lock.fence
    lock.release()
    assert not r.exists(key) and not lock.locked() and not lock.owned()


def test_lock_without_timeout_lives_until_released(r, key):
    lock = make(r, key)
    assert lock.acquire(blocking=False)
    assert r.pttl(key) == -1  # no expiry, as redis-py's
    assert lock_info(r, key)["ttl"] == -1 and lock.owned()
    lock.release()
    assert not r.exists(key)


def test_lock_token(r, key):
    lock = make(r, key)
    assert lock.acquire(token="abc")
    assert lock.token == b"abc" and lock.local.token == b"abc"
    assert lock.owned()
    lock.release()
    assert lock.token is None


def test_lock_token_bytes_are_binary_safe(r, key):
    lock = make(r, key)
    assert lock.acquire(token=b"\x00\xff token")
    assert lock.owned()
    lock.release()


def test_locked_and_owned_from_another_lock_object(r, key):
    lock1, lock2 = make(r, key), make(r, key)
    assert not lock1.locked() and not lock2.owned()
    assert lock1.acquire(blocking=False)
    assert lock2.locked() and not lock2.owned()
    lock1.release()


def test_owned_with_decoded_responses(port, key):
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
    lock = make(client, key)
    assert lock.acquire(blocking=False) and lock.owned()
    lock.release()
    client.close()


def test_competing_locks(r, key):
    lock1, lock2 = make(r, key), make(r, key)
    assert lock1.acquire(blocking=False)
    assert not lock2.acquire(blocking=False)
    lock1.release()
    assert lock2.acquire(blocking=False)
    assert not lock1.acquire(blocking=False)
    lock2.release()


def test_timeout(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl(key) <= 10000
    lock.release()


def test_float_timeout(r, key):
    lock = make(r, key, timeout=9.5)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl(key) <= 9500
    lock.release()


def test_blocking_timeout(r, other, key):
    holder = make(r, key)
    assert holder.acquire(blocking=False)
    started = time.monotonic()
    assert not make(other, key, blocking_timeout=0.2).acquire()
    assert 0.2 <= time.monotonic() - started
    holder.release()


def test_blocking_timeout_argument_overrides(r, other, key):
    holder = make(r, key)
    assert holder.acquire(blocking=False)
    started = time.monotonic()
    assert not make(other, key, blocking_timeout=30).acquire(blocking_timeout=0.1)
    assert 0.1 <= time.monotonic() - started < 25
    holder.release()


def test_blocking_false_in_the_constructor(r, key):
    holder = make(r, key)
    assert holder.acquire()
    assert not make(r, key, blocking=False).acquire()
    holder.release()


def test_high_sleep_small_blocking_timeout(r, other, key):
    holder = make(r, key)
    assert holder.acquire(blocking=False)
    started = time.monotonic()
    # redis-py would sleep a whole second before giving up; no polling here.
    assert not make(other, key, sleep=1).acquire(blocking_timeout=0.1)
    assert time.monotonic() - started < 1
    holder.release()


def test_context_manager(r, key):
    with make(r, key, timeout=10) as lock:
        assert lock.owned() and r.exists(key)
    assert not r.exists(key)


def test_context_manager_blocking_timeout(r, other, key):
    holder = make(r, key)
    assert holder.acquire(blocking=False)
    with pytest.raises(LockError):
        with make(other, key, blocking_timeout=0.1):
            pytest.fail("entered a held lock")
    holder.release()


def test_context_manager_raises_when_the_lock_is_not_owned_on_exit(r, key):
    with pytest.raises(LockNotOwnedError):
        with make(r, key, timeout=10):
            r.delete(key)


def test_context_manager_can_log_instead(r, key, caplog):
    with caplog.at_level(logging.WARNING, logger="redis_lock_module"):
        with make(r, key, timeout=10, raise_on_release_error=False):
            r.delete(key)
    assert "no longer owned" in caplog.text


def test_releasing_unlocked_lock_raises_error(r, key):
    with pytest.raises(LockError):
        make(r, key).release()


def test_releasing_lock_no_longer_owned_raises_error(r, key):
    lock = make(r, key)
    assert lock.acquire(blocking=False)
    r.set(key, "a")  # a plain SET overwrites the lock
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert lock.token is None  # the token is dropped all the same


def test_extend_lock(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl(key) <= 10000
    assert lock.extend(10)
    assert 16000 < r.pttl(key) <= 20000
    lock.release()


def test_extend_lock_replace_ttl(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire(blocking=False)
    assert lock.extend(10, replace_ttl=True)
    assert 8000 < r.pttl(key) <= 10000
    lock.release()


def test_extend_lock_float(r, key):
    lock = make(r, key, timeout=10.5)
    assert lock.acquire(blocking=False)
    assert lock.extend(10.5)
    assert 16000 < r.pttl(key) <= 21000
    lock.release()


def test_extending_unlocked_lock_raises_error(r, key):
    with pytest.raises(LockError):
        make(r, key, timeout=10).extend(10)


def test_extending_lock_with_no_timeout_raises_error(r, key):
    lock = make(r, key)
    assert lock.acquire(blocking=False)
    with pytest.raises(LockError):
        lock.extend(10)
    lock.release()


def test_extending_lock_no_longer_owned_raises_error(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire(blocking=False)
    r.set(key, "a")
    with pytest.raises(LockNotOwnedError):
        lock.extend(10)
    r.delete(key)
    with pytest.raises(LockNotOwnedError):
        lock.extend(10, replace_ttl=True)


def test_reacquire_lock(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire(blocking=False)
    assert r.pexpire(key, 5000)
    assert r.pttl(key) <= 5000
    assert lock.reacquire()
    assert 8000 < r.pttl(key) <= 10000
    lock.release()


def test_reacquiring_unlocked_lock_raises_error(r, key):
    with pytest.raises(LockError):
        make(r, key, timeout=10).reacquire()


def test_reacquiring_lock_with_no_timeout_raises_error(r, key):
    lock = make(r, key)
    assert lock.acquire(blocking=False)
    with pytest.raises(LockError):
        lock.reacquire()
    lock.release()


def test_reacquiring_lock_no_longer_owned_raises_error(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire(blocking=False)
    r.set(key, "a")
    with pytest.raises(LockNotOwnedError):
        lock.reacquire()


# --- redis-py 8.2's meanings ----------------------------------------------------------


def test_the_default_token_is_a_random_uuid4(r, key):
    tokens = set()
    for _ in range(3):
        lock = make(r, key)
        assert lock.acquire(blocking=False)
        made = uuid.UUID(lock.token.decode())
        # redis-py's form: uuid4().hex, the version and the RFC 4122 variant set
        assert (made.version, made.variant) == (4, uuid.RFC_4122)
        assert lock.token == made.hex.encode()
        tokens.add(lock.token)
        lock.release()
    assert len(tokens) == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_makes_the_tokens_its_parent_makes(r, key, port):
    first = make(r, key + ":parent-1")
    assert first.acquire(blocking=False)  # the parent has drawn tokens ahead
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # the child: a client of its own, one lock, its token to the pipe
        try:
            lock = make(redis.Redis(port=port), key + ":child")
            os.write(writing, lock.token if lock.acquire(blocking=False) else b"-")
        finally:
            os._exit(0)
    os.close(writing)
    deadline = time.monotonic() + 30
    ended, status = os.waitpid(child, os.WNOHANG)
    while ended == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
        ended, status = os.waitpid(child, os.WNOHANG)
    if ended == 0:
        os.kill(child, 9)
        os.waitpid(child, 0)
        pytest.fail("the forked child did not end within 30 s")
    child_token = os.read(reading, 64)
    os.close(reading)
    assert os.WIFEXITED(status) and len(child_token) == 32, child_token
    parent = make(r, key + ":parent-2")
    assert parent.acquire(blocking=False)
    assert parent.token != child_token
    for lock in (first, parent):
        lock.release()


def test_a_zero_timeout_lives_until_released(r, key):
    lock = make(r, key, timeout=0)
    assert lock.acquire(blocking=False)
    assert r.pttl(key) == -1 and lock.owned()
    assert lock.reacquire()  # nothing to reset: it only checks the lock is held
    assert r.pttl(key) == -1
    for replace_ttl in (False, True):
        with pytest.raises(LockNotOwnedError):  # as redis-py: no expiry to extend
            lock.extend(0, replace_ttl=replace_ttl)
        with pytest.raises(LockNotOwnedError):
            lock.extend(10, replace_ttl=replace_ttl)
    assert r.pttl(key) == -1 and lock.owned()
    lock.release()
    assert not r.exists(key)


@pytest.mark.parametrize("added, replace_ttl", [(0, True), (-1, True), (-20, False), (0, False)])
def test_an_extend_to_zero_or_less_keeps_the_time_while_held(r, key, added, replace_ttl):
    lock = make(r, key, timeout=10)
    assert lock.acquire(blocking=False)
    before = r.pttl(key)
    assert lock.extend(added, replace_ttl=replace_ttl)
    assert 0 < r.pttl(key) <= before
    r.set(key, "a")  # no longer held: the same call raises
    with pytest.raises(LockNotOwnedError):
        lock.extend(added, replace_ttl=replace_ttl)


def test_a_negative_extend_shortens_what_is_left(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire(blocking=False)
    assert lock.extend(-4)
    assert 4000 < r.pttl(key) <= 6000
    lock.release()


def test_a_zero_timeout_reacquire_of_a_lost_lock_raises(r, key):
    lock = make(r, key, timeout=0)
    assert lock.acquire(blocking=False)
    r.delete(key)
    with pytest.raises(LockNotOwnedError):
        lock.reacquire()


def test_release_clears_only_its_own_token(r, key, monkeypatch):
    # thread_local=False: one namespace for every thread; another acquirer's token,
    # stored while the release was on its way, stays.
    lock = make(r, key, thread_local=False)
    assert lock.acquire(blocking=False)
    own = lock.token

    def others_token_meanwhile(expected_token):
        assert expected_token == own
        lock.local.token = b"another-acquirer"

    monkeypatch.setattr(lock, "do_release", others_token_meanwhile)
    lock.release()
    assert lock.local.token == b"another-acquirer"
    monkeypatch.undo()
    lock.local.token = own
    lock.release()
    assert lock.token is None and not r.exists(key)


def test_thread_local_token_is_the_acquiring_thread_s(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire(blocking=False)
    seen = []
    thread = threading.Thread(target=lambda: seen.append((lock.token, lock.owned())))
    thread.start()
    thread.join()
    assert seen == [(None, False)]
    lock.release()


def test_thread_local_false_shares_the_token(r, key):
    lock = make(r, key, timeout=10, thread_local=False)
    assert lock.acquire(blocking=False)
    released = []
    thread = threading.Thread(target=lambda: released.append(lock.release()))
    thread.start()
    thread.join()
    assert released == [None] and not r.exists(key)


def test_lock_class_argument_of_redis_py(r, key):
    with r.lock(key, timeout=10, blocking_timeout=1, lock_class=Lock) as lock:
        assert isinstance(lock, Lock) and lock.owned() and lock.fence > 0
    assert not r.exists(key)


def test_errors_are_redis_py_s_own(r, key):
    assert LockError is RedisPyLockError and LockNotOwnedError is RedisPyLockNotOwnedError
    assert issubclass(LockLostError, RedisPyLockNotOwnedError)


# --- what redis-py's Lock lacks ----------------------------------------------------------


def test_fences_grow_with_every_grant(r, other, key):
    first = make(r, key, timeout=10)
    assert first.acquire(blocking=False)
    fence = first.fence
    first.release()
    second = make(other, key, timeout=10)
    assert second.acquire(blocking=False) and second.fence > fence
    r.delete(key)
    assert first.acquire(blocking=False) and first.fence > second.fence
    assert not second.owned()


def test_owned_is_false_once_the_lock_expired_and_went_to_another(r, other, key):
    lock = make(r, key, timeout=0.5)
    assert lock.acquire(blocking=False)
    wait_until(lambda: not r.exists(key), "the lock to expire")
    assert make(other, key, timeout=10).acquire(blocking=False)
    assert not lock.owned()


def test_waiting_does_not_poll_and_is_first_come_first_served(r, port, key):
    holder = make(r, key, timeout=10)
    assert holder.acquire(blocking=False)
    r.config_resetstat()
    order, threads, clients = [], [], []
    for n in range(3):
        client = redis.Redis(host="127.0.0.1", port=port)
        clients.append(client)
        waiter = make(client, key, timeout=10)

        def wait(n=n, waiter=waiter):
            assert waiter.acquire(blocking_timeout=10)
            order.append(n)
            waiter.release()

        threads.append(threading.Thread(target=wait))
        threads[-1].start()
        wait_until(lambda n=n: lock_info(r, key)["waiters"] == n + 1, f"waiter {n} to queue")
    time.sleep(0.3)  # long enough for a polling client to have sent more commands
    holder.release()
    for thread in threads:
        thread.join(10)
    assert order == [0, 1, 2]
    # Counted when each wait ends (Redis 7.2+ and Valkey count a blocked call then).
    calls = r.info("commandstats")["cmdstat_lock.acquire"]["calls"]
    assert calls == 3, "each waiter sent one LOCK.ACQUIRE and waited in the server"
    for client in clients:
        client.close()


def test_a_wait_longer_than_the_socket_timeout(r, port, key):
    holder = make(r, key, timeout=30, thread_local=False)  # released by the timer thread
    assert holder.acquire(blocking=False)
    releaser = threading.Timer(0.6, holder.release)
    releaser.start()
    short = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.2)
    lock = make(short, key, timeout=10, session=5)
    started = time.monotonic()
    assert lock.acquire(blocking_timeout=20)  # on a connection of its own
    # the grant may reach this client before the release's own reply reaches the timer
    releaser.join(10)
    assert time.monotonic() - started < 15, "granted at the release, not at the expiry"
    fields = lock_info(r, key)
    # the session binding moved to the client's pool before that connection closed
    assert fields["connected"] == 1 and fields["session"] == 5000
    assert lock.owned()
    lock.release()
    short.close()


def test_a_retry_after_a_lost_reply_keeps_the_lock(r, key):
    lock = make(r, key, timeout=10)
    assert lock.acquire(blocking=False, token="retry-me")
    fence = lock.fence
    # the reply was lost: the same token acquires again and keeps its fence
    assert lock.acquire(blocking=False, token="retry-me") and lock.fence == fence
    lock.release()


CHILD = """
import sys, time, redis
sys.path.insert(0, sys.argv[2])
from redis_lock_module import Lock
lock = Lock(redis.Redis(port=int(sys.argv[1])), "lock:killed", timeout=600, session=0)
assert lock.acquire(blocking=False)
print(lock.fence, flush=True)
time.sleep(600)
"""


def test_session_lock_goes_with_a_killed_process(r, port):
    src = os.path.join(os.path.dirname(__file__), "..", "src")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(port), src],
                             stdout=subprocess.PIPE, text=True)
    try:
        fence = int(child.stdout.readline())
        fields = lock_info(r, "lock:killed")
        assert fields["fence"] == fence and fields["connected"] == 1
        child.kill()  # SIGKILL: no release, no clean close by the process
        wait_until(lambda: not r.exists("lock:killed"), "the session lock to go")
    finally:
        child.kill()
        child.wait()


def test_session_grace_keeps_the_lock_for_a_reclaim(r, port, key):
    worker = redis.Redis(host="127.0.0.1", port=port)
    lock = make(worker, key, timeout=600, session=5)
    assert lock.acquire(blocking=False, token="w1")
    fence = lock.fence
    worker.connection_pool.disconnect()  # cut off, not dead
    wait_until(lambda: lock_info(r, key)["connected"] == 0, "the grace to start")
    assert not make(r, key, timeout=1).acquire(blocking=False)
    assert lock.acquire(blocking=False, token="w1") and lock.fence == fence
    assert lock_info(r, key)["connected"] == 1
    lock.release()
    worker.close()


def test_watchdog_renews_while_held(r, key):
    # TTLs of 2 s: every extend waits for the replica (a tenth of the TTL), which a
    # loaded machine may not give in tens of milliseconds.
    with make(r, key, timeout=2, watchdog=True) as lock:
        time.sleep(3.0)  # more than a TTL
        assert lock.owned() and not lock.lost
        lock.check()


def test_watchdog_reports_a_lost_lock(r, key):
    called = threading.Event()
    lock = make(r, key, timeout=2, watchdog=True, on_lost=lambda lock: called.set())
    assert lock.acquire(blocking=False)
    r.delete(key)
    assert called.wait(5), "on_lost was not called"
    assert lock.lost
    with pytest.raises(LockLostError):
        lock.check()
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_watchdog_stops_on_release(r, other, key):
    lock = make(r, key, timeout=2, watchdog=True)
    assert lock.acquire(blocking=False)
    lock.release()
    successor = make(other, key, timeout=1)
    assert successor.acquire(blocking=False)
    wait_until(lambda: not r.exists(key), "the successor's lock to expire unextended", 10)


def test_a_watchdog_extend_cut_off_by_closing_the_client_is_not_sent_again(port, key):
    # An extend a stopped server never answered is cut off when the program closes its
    # client. The client's retry policy must not send it again: it came back seconds
    # later from a new connection, after the watchdog had reported the loss.
    admin = redis.Redis(port=port)
    client = redis.Redis(port=port)
    lost = threading.Event()
    lock = make(client, key, timeout=2, watchdog=True, on_lost=lambda _lock: lost.set())
    assert lock.acquire(blocking=False)
    admin.config_resetstat()
    with frozen(port):
        assert lost.wait(6), "the watchdog did not report the lock lost"
        client.close()  # the unanswered extend's connection closes under it
    extends = lambda: admin.info("commandstats").get("cmdstat_lock.extend", {}).get("calls", 0)
    # The extend sent before the close reaches the server once thawed (its bytes were
    # there); another would come within the retry policy's backoff (up to 2 s, then 4).
    wait_until(lambda: extends() >= 1, "the extend sent before the close", 5)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert extends() == 1, "the cut-off extend was sent again"
        time.sleep(0.05)
    admin.delete(key)


@pytest.mark.parametrize("kwargs, message", [
    ({"timeout": -1}, "timeout"),
    ({"timeout": 1 << 53}, "timeout"),
    ({"timeout": float("nan")}, "timeout"),
    ({"session": -1}, "session"),
    ({"blocking_timeout": 1 << 53}, "blocking_timeout"),
    ({"watchdog": True}, "watchdog"),
    ({"watchdog": True, "timeout": 0}, "watchdog"),
])
def test_bad_settings_are_refused_before_any_command(r, key, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(r, key, **kwargs)
    assert not r.exists(key)


@pytest.mark.parametrize("token", ["", "x" * 257])
def test_bad_tokens_are_refused(r, key, token):
    with pytest.raises(ValueError, match="token"):
        make(r, key).acquire(token=token)
    assert not r.exists(key)


def test_a_key_of_another_type_holds_the_name_as_for_redis_py(r, key):
    # redis-py's Lock cannot SET NX over it: acquire answers False, the context manager
    # raises LockError (not a ResponseError that `except LockError` would miss).
    r.set(key, "an old SET NX lock")
    assert make(r, key).acquire(blocking=False) is False
    assert make(r, key, blocking_timeout=0.1).acquire() is False
    with pytest.raises(LockError) as raised:
        with make(r, key, blocking_timeout=0.1):
            pass
    assert raised.value.lock_name == key
    assert r.get(key) == b"an old SET NX lock"
    assert not make(r, key).owned()


def test_do_runs_a_command_only_while_the_lock_is_held(r, key):
    from redis_lock_module import Lock, LockLostError

    lock = Lock(r, key, timeout=30)
    assert lock.acquire()
    data = "{" + key + "}:stock"
    # A lock and its data under one hash tag: the same slot on a cluster.
    assert lock.do("SET", data, 1) in (True, b"OK", "OK")
    assert lock.do("DECR", data) == 0
    r.delete(key)  # the lock goes (its TTL ran out, say)
    with pytest.raises(LockLostError):
        lock.do("DECR", data)
    assert lock.lost
    assert int(r.get(data)) == 0, "the late write did not run"


# --- what the package puts on the wire -------------------------------------------------


def test_a_command_packed_by_the_package_is_the_one_redis_py_packs(port):
    # The package packs its single commands itself (`_protocol.packed`): byte for byte
    # what the client's own packer makes of the same arguments, in the client's encoding.
    from redis_lock_module._protocol import packed

    connection = redis.Redis(port=port, encoding="latin-1").connection_pool.make_connection()
    commands = [
        (b"LOCK.ACQUIRE", "l\u00e9", 600000, b"TOKEN", b"a" * 32, b"REPLICAS", b"AUTO"),
        ("LOCK.EXTEND", b"k", -5, 2.5, b""),  # a negative, a float, an empty argument
        ("LOCK.ACQUIRE", "k", 1, "VALUE", b"v" * 10_000),  # past redis-py's copy cutoff
        ("LOCK.INFO", memoryview(b"a key")),
    ]
    for command in commands:
        expected = b"".join(bytes(part) for part in connection.pack_command(*command))
        assert packed(command, connection.encoder.encode) == expected, command


def test_a_client_encoding_names_the_same_key_for_the_package_and_the_client(port, key):
    # A name that is not ASCII goes out in the client's encoding (latin-1: one byte for
    # "é"), as the client's own commands send it; the lock is found by both.
    r = redis.Redis(port=port, encoding="latin-1")
    name = key + "\u00e9"
    lock = make(r, name, timeout=30)
    assert lock.acquire(blocking=False)
    assert r.execute_command("LOCK.INFO", name) is not None
    assert r.exists((key + "\u00e9").encode("latin-1")) == 1
    assert not r.exists(name.encode("utf-8"))
    lock.release()
    assert not r.exists(name)
