"""The functions (`acquire`, `release`, `extend`, `info`) and the `lock` context
manager, in milliseconds: the package's first API, checked step by step against the
master and its replica."""

import socket
import threading
import time

import redis

from helpers import server_waits
from redis_lock_module import (
    LockNotAcquired, LockNotReplicated, acquire, extend, info, lock, release,
)

def check(name, ok):
    assert ok, name


class Resp3:
    """A bare RESP3 connection on a socket: redis-py before 5.0 (Debian 12's
    python3-redis is 4.3) speaks RESP2 only, and the map reply of LOCK.INFO must be
    checked whatever the installed version."""

    def __init__(self, port):
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self._buf = b""

    def command(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            arg = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
        self._sock.sendall(b"".join(out))
        return self._reply()

    def _line(self):
        while b"\r\n" not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\r\n", 1)
        return line

    def _exactly(self, n):
        while len(self._buf) < n + 2:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n + 2:]
        return data

    def _reply(self):
        """One reply; a map as a (marker, dict) pair so the caller sees it was a map."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"("):
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b",":
            return float(rest)
        if kind == b"#":
            return rest == b"t"
        if kind == b"_":
            return None
        if kind in (b"$", b"="):
            return None if rest == b"-1" else self._exactly(int(rest))
        if kind in (b"*", b"~", b">"):
            return [self._reply() for _ in range(int(rest))]
        if kind == b"%":
            return ("map", {self._reply(): self._reply() for _ in range(int(rest))})
        if kind == b"|":  # attributes come before the reply they describe
            for _ in range(int(rest)):
                self._reply(), self._reply()
            return self._reply()
        raise ValueError(f"unknown RESP3 type in {line!r}")

    def close(self):
        self._sock.close()


class _Replies:
    """Stands in for a redis client in info(): answers with a reply read elsewhere."""

    def __init__(self, reply):
        self._reply = reply

    def execute_command(self, *args):
        return self._reply


def check_resp3(port, r):
    held = acquire(r, "jobs:3", 10_000)
    raw = Resp3(port)
    try:
        hello = raw.command("HELLO", 3)
        check("the server speaks RESP3 (HELLO 3)",
              hello[0] == "map" and hello[1].get(b"proto") == 3)
        reply = raw.command("LOCK.INFO", "jobs:3")
    finally:
        raw.close()
    check("LOCK.INFO answers a map on RESP3",
          isinstance(reply, tuple) and reply[0] == "map")
    fields = reply[1]
    check("the RESP3 map has bulk-string names and integer values (the word `mode` and"
          " the published `value`, nil here, aside), never the token",
          set(fields) >= {b"ttl", b"fence", b"acquired", b"waiters", b"mode", b"value"}
          and fields[b"mode"] == b"exclusive" and fields[b"value"] is None
          and all(isinstance(v, int) for k, v in fields.items()
                  if k not in (b"mode", b"value"))
          and held.token not in fields and held.token not in fields.values())
    check("info reads the RESP3 map too",
          info(_Replies(fields), "jobs:3")["fence"] == held.fence)
    try:
        resp3 = redis.Redis(host="127.0.0.1", port=port, protocol=3)
    except TypeError:
        resp3 = None
    if resp3 is not None:  # redis-py 5+: the same through the client itself
        check("info reads the RESP3 map through redis-py",
              info(resp3, "jobs:3")["fence"] == held.fence)
    release(r, "jobs:3", held.token)


def check_replicas(port, replica_port, r):
    replica = redis.Redis(host="127.0.0.1", port=replica_port)
    # WAIT needs writes to acknowledge: prove the pair is linked first.
    check("the replica is linked to the master",
          int(r.execute_command("WAIT", 1, 10_000)) == 1)
    manager = lock(r, "jobs:8", 10_000, replicas=1, replicas_timeout_ms=10_000)
    with manager as held:
        on_replica = info(replica, "jobs:8")
        check("with replicas=1 the grant is on the replica when the block starts",
              on_replica is not None and on_replica["fence"] == held.fence)
    check("and released after the block", manager.held_to_end is True)

    try:
        with lock(r, "jobs:9", 10_000, replicas=2, replicas_timeout_ms=300):
            check("a lock without enough replicas is not entered", False)
    except LockNotReplicated as err:
        # Where the server waits it holds the grant for two and undoes it with one; where
        # the package counts the replicas (Redis 7.0), it refuses at once, as Lock's.
        check("a master with fewer replicas than asked for is not replicated",
              (err.wanted, err.acked, err.refused) == (2, 1, not server_waits(r))
              and isinstance(err, LockNotAcquired))
    check("and nothing is held", info(r, "jobs:9") is None)


def wait_until(what, condition, limit=10):
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            check(what, False)
        time.sleep(0.005)


def check_session(port, r):
    worker = redis.Redis(host="127.0.0.1", port=port)
    with lock(worker, "jobs:session", 600_000, session_ms=0) as held:
        fields = info(r, "jobs:session")
        check("a session-bound lock shows its grace and its open connection",
              fields["session"] == 0 and fields["connected"] == 1)
        # The worker dies inside its critical section: its connections close.
        worker.connection_pool.disconnect()
        wait_until("the lock to go with its connection",
                   lambda: info(r, "jobs:session") is None)
        check("it went at once, not after its 10-minute TTL", True)
    check("the late release finds the lock gone", not release(r, "jobs:session", held.token))

    cut_off = redis.Redis(host="127.0.0.1", port=port)
    first = acquire(cut_off, "jobs:grace", 600_000, token="w1", session_ms=2_000)
    cut_off.connection_pool.disconnect()
    wait_until("the grace to start", lambda: info(r, "jobs:grace")["connected"] == 0)
    check("nobody else gets the lock during the grace",
          acquire(r, "jobs:grace", 1_000) is None)
    again = acquire(r, "jobs:grace", 600_000, token="w1", session_ms=2_000)
    check("the holder reclaims it with the same fence", again.fence == first.fence)
    release(r, "jobs:grace", "w1")


def main(port, replica_port):
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

    check_resp3(port, r)

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

    releaser = threading.Thread(target=release_later)
    releaser.start()
    waiter = redis.Redis(host="127.0.0.1", port=port)
    manager = lock(waiter, "jobs:4", 10_000, wait_ms=10_000)
    with manager as held:
        check("the waiter gets the lock when the holder releases",
              released.is_set() and held.fence > holder.fence)
    releaser.join(10)
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

    check_session(port, r)

    r.set("jobs:legacy", "an old SET NX lock")
    try:
        acquire(r, "jobs:legacy", 1_000)
        check("a string key is refused with WRONGTYPE", False)
    except redis.ResponseError as err:
        check("a string key is refused with WRONGTYPE", str(err).startswith("WRONGTYPE"))

    check_replicas(port, replica_port, r)


def test_functions_and_context_manager(r, port, replica_port):
    main(port, replica_port)
