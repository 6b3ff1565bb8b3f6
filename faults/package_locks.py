"""The module worker's locks, taken, renewed, used and released through the project's
Python package (`clients/python`, `redis_lock_module.Lock`) with its defaults: its
`replicas="auto"` among them, so that a grant counts once a replica has it. Only the
connection is the harness's own: a redis-py connection bound to the worker's loopback
address (so a partition can cut the worker alone), to the master the Sentinels name.

`--replicas` sets the package's option (`auto` by default; `0` is the mutation that turns
it off)."""

import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "clients", "python", "src"))

import redis  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402
from redis.exceptions import ConnectionError, RedisError, TimeoutError  # noqa: E402
from redis.retry import Retry  # noqa: E402

from redis_lock_module import (  # noqa: E402
    Lock, LockError, LockLostError, LockNotOwnedError, LockNotReplicatedError,
)

UNREACHABLE = (ConnectionError, TimeoutError, OSError)


class BoundConnection(redis.connection.Connection):
    """A redis-py connection from the worker's own address."""

    def __init__(self, source_address="127.0.0.1", **kwargs):
        self.source_address = source_address
        super().__init__(**kwargs)

    def _connect(self):
        sock = socket.create_connection((self.host, self.port), timeout=self.socket_connect_timeout,
                                        source_address=(self.source_address, 0))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.socket_timeout)
        return sock


def client(host, port, address, wait_ms):
    """A redis-py client of the master at host:port from `address`. Its read timeout is
    longer than a wait (so the package waits on it, not on a connection of its own), and
    it does not retry: the worker finds the master again after an error."""
    pool = redis.ConnectionPool(connection_class=BoundConnection, host=host, port=port,
                                source_address=address, socket_timeout=wait_ms / 1000 + 1.0,
                                socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    return redis.Redis(connection_pool=pool)


def replicas_setting(text):
    return text if text == "auto" else int(text)


class Outcome:
    """What a call answered: `ok` (True, False, or None when the server was not reached
    or refused), `value` and `err` (the reason, for the history)."""

    def __init__(self, ok, value=None, err=None, drop=False):
        self.ok, self.value, self.err, self.drop = ok, value, err, drop


def attempt(call):
    """`call()` as an Outcome: the package's errors become the history's words."""
    try:
        return Outcome(True, call())
    except LockNotReplicatedError as error:
        return Outcome(False, err=f"NOTREPLICATED {error}")
    except LockLostError as error:
        return Outcome(False, err=f"NOTHELD {error}")
    except LockNotOwnedError as error:
        return Outcome(False, err=None if "no longer owned" in str(error) else str(error))
    except UNREACHABLE as error:
        return Outcome(None, err=f"{type(error).__name__}: {error}", drop=True)
    except (LockError, RedisError) as error:
        # READONLY, MASTERDOWN, ...: the master moved; find it again
        return Outcome(None, err=str(error), drop=True)


class PackageLocks:
    """One worker's locks through the package, on `client`."""

    def __init__(self, redis_client, ttl_ms, wait_ms, replicas):
        self.r, self.ttl_ms, self.wait_ms, self.replicas = redis_client, ttl_ms, wait_ms, replicas
        self.host = redis_client.connection_pool.connection_kwargs["host"]
        self.lock = None

    def acquire(self, key, mode, token):
        """Outcome whose value is the grant's fence, or ok False when busy or not
        replicated."""
        self.lock = Lock(self.r, key, timeout=self.ttl_ms / 1000, blocking_timeout=self.wait_ms / 1000,
                         session=0.2 if mode == "session" else None, shared=mode == "shared",
                         replicas=self.replicas)
        got = attempt(lambda: self.lock.acquire(token=token))
        if got.ok and got.value:
            got.value = self.lock.fence
        elif got.ok:
            got = Outcome(False)
        return got

    def renew(self):
        """Resets the lock's time to its TTL (`reacquire`, as the watchdog does)."""
        return attempt(self.lock.reacquire)

    def do(self, *command):
        return attempt(lambda: self.lock.do(*command))

    def release(self):
        return attempt(self.lock.release)

    def close(self):
        self.r.close()
