"""Functions on the four commands, in milliseconds, and the `lock` context manager
(the package's first API, kept for the programs that use it).

    import redis
    from redis_lock_module import lock

    r = redis.Redis(port=7379)
    with lock(r, "orders:42", ttl_ms=10_000, wait_ms=5_000) as held:
        write_order(42, fence=held.fence)   # the resource refuses lower fences

A waiting acquire blocks its connection until the lock is granted or the wait times
out: give it a client whose ``socket_timeout`` is None (the default) or longer than
the wait.

Session-bound locks (``session_ms=grace``): the lock is bound to the connection that
acquired it (with redis-py, the pool connection that ran the command, which stays open
in the pool) and the server releases it ``grace`` ms after that connection closes: the
process exits or is killed, the network drops, ``r.close()``. Prefer it to renewing a
short TTL from a background thread (a watchdog) when the work may take long and a
crashed worker must not keep the lock for a whole long TTL: set a generous TTL as the
upper bound and let the connection decide. The grace is a lock-delay: a worker that is
only cut off may still be acting, so nobody else gets the lock before the grace ends;
acquiring again with the same token within the grace reclaims it (same fence). A
watchdog is still the tool when the lock must outlive the TTL while the process is
alive, or when the connection is not long-lived (a serverless function).
"""

from dataclasses import dataclass
from typing import Any, Dict, Literal, Optional

from . import _protocol, _replicas
from ._protocol import Token
from .exceptions import LockNotReplicatedError


class LockNotAcquired(Exception):
    """The lock is held by someone else (after waiting, if a wait was asked for)."""


class LockNotReplicated(LockNotAcquired):
    """The lock was granted, but fewer replicas than asked for acknowledged it in time
    (Redis ``WAIT``), so it was released again; or the master had fewer replicas online
    than asked for, and nothing was sent (``refused``). ``acked`` is how many did (or
    how many were online)."""

    def __init__(self, key: str, wanted: int, acked: int, refused: bool = False):
        if refused:
            message = f"{key}: the master has {acked} replicas online, {wanted} asked for"
        else:
            message = f"{key}: {acked} of {wanted} replicas acknowledged the lock"
        super().__init__(message)
        self.wanted = wanted
        self.acked = acked
        self.refused = refused


@dataclass
class Held:
    """A granted lock: its key, the token that proves ownership, and its fence."""

    key: str
    token: Token
    fence: int


def acquire(r: Any, key: str, ttl_ms: int, token: Optional[Token] = None,
            wait_ms: Optional[int] = None,
            session_ms: Optional[int] = None) -> Optional[Held]:
    """LOCK.ACQUIRE: a Held lock, or None when another token holds it.

    wait_ms=0 waits without limit; None does not wait. session_ms binds the lock to the
    connection (released session_ms after it closes; see the module's docstring).
    """
    reply = r.execute_command(*_protocol.acquire_args(key, ttl_ms, token, wait_ms, session_ms))
    if reply is None:
        return None
    granted_token, fence = reply
    return Held(key=key, token=granted_token, fence=int(fence))


def release(r: Any, key: str, token: Token) -> bool:
    """LOCK.RELEASE: True if this token held the lock (and it is now released)."""
    return bool(r.execute_command("LOCK.RELEASE", key, token) == 1)


def extend(r: Any, key: str, token: Token, ttl_ms: int) -> bool:
    """LOCK.EXTEND: True if this token holds the lock and it now has ttl_ms left."""
    return bool(r.execute_command("LOCK.EXTEND", key, token, ttl_ms) == 1)


def info(r: Any, key: str) -> Optional[Dict[str, Any]]:
    """LOCK.INFO as a dict of str to int (ttl, fence, acquired, waiters, session,
    connected), or None."""
    return _protocol.info_fields(r.execute_command("LOCK.INFO", key))


class lock:
    """Context manager: acquires on enter (raising LockNotAcquired when busy), releases
    on exit, exceptions included. After the block, ``held_to_end`` tells whether the
    lock was still held at release (False: it expired or was taken over meanwhile).

    ``wait_ms`` waits for a busy lock (``LOCK.ACQUIRE ... WAIT``; 0 waits without limit).
    ``session_ms`` binds the lock to its connection (see the module's docstring).

    ``replicas=N`` makes the grant durable before the block runs, as ``Lock``'s
    ``replicas=n`` does: the acquire and ``WAIT N replicas_timeout_ms`` go together in
    one round trip on one connection to the master, so the grant counts once N replicas
    have it (a failover to one of them keeps the lock). If fewer did within
    ``replicas_timeout_ms`` (default 1000, above 0), the lock is released at once on
    that connection and LockNotReplicated (a LockNotAcquired) is raised; a master with
    fewer than N replicas online refuses at once (``refused``), sending nothing.
    ``WAIT`` blocks the connection meanwhile, like a waiting acquire.

        with lock(r, "orders:42", ttl_ms=10_000, replicas=1, replicas_timeout_ms=500):
            ...
    """

    def __init__(self, r: Any, key: str, ttl_ms: int, wait_ms: Optional[int] = None,
                 token: Optional[Token] = None, replicas: Optional[int] = None,
                 replicas_timeout_ms: int = 1_000, session_ms: Optional[int] = None):
        self._r = r
        self._key = key
        self._ttl_ms = ttl_ms
        self._wait_ms = wait_ms
        self._token = token
        self._replicas = replicas
        self._replicas_timeout_ms = replicas_timeout_ms
        self._session_ms = session_ms
        self._lock: Optional[Held] = None
        self.held_to_end: Optional[bool] = None

    def __enter__(self) -> Held:
        if self._replicas:
            self._lock = self._replicated()
        else:
            self._lock = acquire(self._r, self._key, self._ttl_ms, self._token,
                                 self._wait_ms, self._session_ms)
        if self._lock is None:
            raise LockNotAcquired(self._key)
        return self._lock

    def _replicated(self) -> Optional[Held]:
        """The acquire with its ``WAIT``, pipelined on a connection to the master, and
        the release of a grant too few replicas acknowledged: ``Lock``'s path."""
        if self._replicas_timeout_ms <= 0:
            raise ValueError("replicas_timeout_ms must be above 0 (WAIT 0 waits forever)")
        replicas = _replicas.Replicas(self._replicas, self._replicas_timeout_ms / 1000,
                                      self._ttl_ms)
        token = (_protocol.new_token() if self._token is None
                 else _protocol.encode_token(self._r, self._token))
        args = _protocol.acquire_args(self._key, self._ttl_ms, token, self._wait_ms,
                                      self._session_ms)
        try:
            reply = _replicas.on_master(self._r, self._key, lambda connection: _replicas.granted(
                connection, args, replicas, self._key, [["LOCK.RELEASE", self._key, token]]))
        except LockNotReplicatedError as error:
            raise LockNotReplicated(self._key, error.required, error.acked,
                                    error.refused) from error
        granted = _protocol.grant(reply)
        return None if granted is None else Held(key=self._key, token=granted[0],
                                                 fence=granted[1])

    def __exit__(self, *exc: Any) -> Literal[False]:
        assert self._lock is not None, "__exit__ without __enter__"
        self.held_to_end = release(self._r, self._key, self._lock.token)
        return False
