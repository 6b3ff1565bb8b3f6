"""`Lock`: redis-py's `redis.lock.Lock`, on the module's commands.

Same constructor, methods, errors and context manager, so `r.lock(name, timeout=10,
lock_class=Lock)` or a changed import is all a program needs. What changes underneath:
acquire, release and extend are one atomic command each (no scripts to load, no `EVAL`
rights), a blocking acquire waits in the server's first-come-first-served queue instead
of polling every `sleep` seconds, and the lock has a fence. On top: `session=` (the
lock goes with the connection), `watchdog=True` (renewal while held, `on_lost`), and
`owned()` compares fences, so the token never leaves the server.
"""

from __future__ import annotations

from functools import partial
from types import TracebackType
from typing import Any, List, Literal, Optional, Tuple, Type

from redis.exceptions import ResponseError

from . import _protocol, _replicas
from ._protocol import Number, Token
from ._state import LockState
from ._watchdog import ThreadWatchdog
from .exceptions import LockError, LockNotOwnedError, LockNotReplicatedError


class Lock(LockState):
    """A distributed lock named `name` on the redis-py client `redis`.

    `timeout`: the lock's life in seconds (float or int); None lives until released.
    `blocking`, `blocking_timeout`: as redis-py's (`blocking_timeout=None` waits without
    limit), but waiting in the server (`LOCK.ACQUIRE ... WAIT`). `sleep` is accepted and
    not used. `thread_local`, `raise_on_release_error`: as redis-py's.

    `session=grace` (seconds): bind the lock to the client connection that acquired it;
    the server releases it `grace` after that connection closes (the process died or the
    network dropped), however long its `timeout`. `watchdog=True`: extend the lock to
    `timeout` every third of it while held; `on_lost(lock)` is called (in the watchdog's
    thread) if it is lost, and `check()` raises `LockLostError` from then on.

    `shared=True`: a reader of a read/write lock (`LOCK.ACQUIRE ... SHARED`), beside other
    readers, never beside a writer (a plain `Lock` on the same name). `limit=n`: one of at
    most `n` holders, a counting semaphore. `read_lock`, `write_lock` and `semaphore`
    make them. For a shared holder `owned()` extends it to `timeout` (the server's
    `LOCK.INFO` shows the newest holder's fence, not this one's).

    `replicas="auto"` (the default): a grant counts once a replica of the master has it,
    so that a failover keeps it. Each acquire and extend goes with `WAIT 1 t` in the same
    round trip when the master has a replica online (learned per connection with
    `ROLE`), and alone when it has none. `replicas=n` asks for `n` (a master with fewer
    online refuses at once); `replicas=0` turns it off. `replicas_timeout` (seconds)
    bounds the `WAIT`: by default a tenth of `timeout`, at most 1 s. A grant too few
    replicas acknowledged is released at once: `acquire` tries again while its wait
    lasts, then raises LockNotReplicatedError (False when not blocking).

    `fsync=True`: the grant counts once the master has also written it to its
    append-only file and fsynced it (and the replicas asked for theirs): `WAITAOF 1 n
    timeout` instead of `WAIT`, for a worry about a restart rather than a failover. It
    needs Redis 7.2+ or Valkey 8+ with `appendonly yes`; elsewhere every acquire raises
    LockNotReplicatedError (`refused`), the grant released.
    """

    def __enter__(self) -> "Lock":
        if self.acquire():
            return self
        raise self._not_acquired()

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc_value: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        try:
            self.release()
        except LockError as error:
            self._release_failed(error)

    def acquire(self, sleep: Optional[Number] = None, blocking: Optional[bool] = None,
                blocking_timeout: Optional[Number] = None,
                token: Optional[Token] = None) -> bool:
        """Takes the lock: True once held, False when `blocking` is false and the lock
        is busy, or the wait ended first. Waiters are served in arrival order.

        A grant too few replicas acknowledged (`replicas`) is released at once and
        counts as a failed attempt: False without `blocking`, tried again while the wait
        lasts, then LockNotReplicatedError."""
        encoded = self._new_token(token)
        waiting = _protocol.Waiting(self._wait_ms(blocking, blocking_timeout))
        self.not_replicated = None
        while True:
            try:
                granted = self.do_acquire(encoded, waiting.left_ms())
            except LockNotReplicatedError as error:
                if waiting.again(error):
                    continue
                self.not_replicated = error
                return False
            break
        if granted is None:
            return False
        self._start_watchdog(self._hold(*granted), ThreadWatchdog)
        return True

    def do_acquire(self, token: bytes,
                   wait_ms: Optional[int] = None) -> Optional[Tuple[bytes, int]]:
        try:
            granted = self._acquire_once(token, wait_ms)
        except ResponseError as error:
            if self._wrong_type(error):
                return None  # a key of another type holds the name, as for redis-py
            raise self._refused(error) from error
        if granted is not None and not self._expires:
            self.redis.persist(self.name)
        return granted

    def _acquire_once(self, token: bytes,
                      wait_ms: Optional[int]) -> Optional[Tuple[bytes, int]]:
        if wait_ms is None:  # no wait: through the client's own connections
            return self._granted_on_master(self._acquire_args(token), token)
        waiting = _protocol.Waiting(wait_ms)
        while True:
            connection = self._waiting_connection(waiting.left_ms(), waiting.address)
            args = self._acquire_args(token, waiting.left_ms())
            if connection is None:
                return self._granted_on_master(args, token)
            rebind = self._session_ms is not None
            try:
                # connect() itself, not the one send_command would make: a
                # Sentinel-managed connection finds the master's address only there.
                connection.connect()
                if waiting.asking:
                    connection.send_command("ASKING")
                    connection.read_response()
                if rebind:  # the grant's replicas are waited for where it is bound
                    granted = _protocol.grant(_replicas.Outcome(
                        _replicas.exchange(connection, [args]), 0, None).reply)
                else:
                    granted = _protocol.grant(_replicas.granted(
                        connection, args, self._replicas, self.name, self._releases(token)))
            except ResponseError as error:
                if not waiting.redirected(error):
                    raise
                if waiting.address is None:
                    self._cluster_moved()
                continue
            finally:
                connection.disconnect()
            if granted is not None and rebind:
                granted = self._granted_on_master(self._acquire_args(token), token)
            return granted

    def _granted_on_master(self, args: List[Any], token: bytes) -> Optional[Tuple[bytes, int]]:
        """Sends the acquire `args` with the `WAIT` its replicas need on a connection to
        the key's master, following a cluster's `MOVED` a few times; the last `MOVED`
        (or `ASK`) is raised when the slot keeps moving, never an acquire without its
        `WAIT`."""
        work = partial(_replicas.granted, args=args, replicas=self._replicas, name=self.name,
                       releases=self._releases(token))
        for attempt in range(_protocol.Waiting.REDIRECTIONS + 1):
            try:
                return _protocol.grant(_replicas.on_master(self.redis, self.name, work))
            except ResponseError as error:
                if not _protocol.redirection(error) or attempt == _protocol.Waiting.REDIRECTIONS:
                    raise
                self._cluster_moved()
        raise AssertionError("unreachable: the last attempt returns or raises")

    def locked(self) -> bool:
        """True if anyone holds the lock."""
        return bool(self.redis.exists(self.name))

    def owned(self) -> bool:
        """True if this lock object (this thread's holding) holds the lock now."""
        if self.token is None:
            return False
        try:
            return self._owned_from(self.redis.execute_command(*self._owned_args()))
        except ResponseError as error:
            if self._wrong_type(error):
                return False
            raise

    def release(self) -> None:
        """Releases the lock; LockNotOwnedError if it was no longer held (it expired or
        went to another token), LockError if this object did not hold it. The holding is
        forgotten once the server has answered, so a release interrupted on its way (a
        lost connection) can be tried again."""
        token = self._releasing()
        try:
            self.do_release(token)
        except LockNotOwnedError:
            self._forget_if(token)
            raise
        self._forget_if(token)

    def do_release(self, expected_token: bytes) -> None:
        try:
            released = self.redis.execute_command("LOCK.RELEASE", self.name, expected_token)
        except ResponseError as error:
            if not self._wrong_type(error):
                raise
            released = 0
        if released != 1:
            raise self._not_owned("release")

    def do(self, *args: Any) -> Any:
        """Runs the command `args` fenced by the lock (`LOCK.DO`): atomically, and only
        while this holding's token holds the lock; returns its reply. LockLostError (and
        nothing ran) when the lock was no longer held."""
        try:
            return self.redis.execute_command(*self._do_args(args))
        except ResponseError as error:
            raise self._do_refused(error) from error

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> Literal[True]:
        """Adds `additional_time` seconds to what is left of the lock's time, or with
        `replace_ttl=True` sets what is left to it. As in redis-py 8.2: a time that comes
        to zero or less keeps the lock's time as it is (True while held), and a lock
        made with `timeout=0` (no expiry) raises LockNotOwnedError."""
        token = self._check_renewable("extend")
        return self.do_extend(additional_time, replace_ttl, token)

    def do_extend(self, additional_time: Number, replace_ttl: bool,
                  token: Optional[bytes] = None) -> Literal[True]:
        token = self.token if token is None else token
        pttl = int(self.redis.pttl(self.name))
        ttl_ms = self._extended_ms(additional_time, replace_ttl, pttl)
        if pttl < 0 or not (self._still_held() if ttl_ms <= 0 else self._extend_to(token, ttl_ms)):
            raise self._not_owned("extend")
        return True

    def reacquire(self) -> Literal[True]:
        """Resets the lock's time to `timeout`; with `timeout=0` (no expiry) only checks
        that the lock is still held (redis-py 8.2)."""
        token = self._check_renewable("reacquire")
        return self.do_reacquire(token)

    def do_reacquire(self, token: Optional[bytes] = None) -> Literal[True]:
        token = self.token if token is None else token
        if not (self._extend_to(token, self._ttl_ms) if self._expires else self._still_held()):
            raise self._not_owned("reacquire")
        return True

    def _still_held(self) -> bool:
        """Whether this holding still holds the lock, asked without changing it."""
        try:
            return self._held_from(self.redis.execute_command(*self._holders_args()))
        except ResponseError as error:
            if self._wrong_type(error):
                return False
            raise

    def _extend_to(self, token: Any, ttl_ms: int, retry: bool = True) -> bool:
        """`LOCK.EXTEND` with the `WAIT` its replicas need; LockNotReplicatedError when
        extended but too few replicas acknowledged it (the lock stays held: the watchdog
        tries again). `retry=False`: once only, for the watchdog (`on_master`)."""
        args = ["LOCK.EXTEND", self.name, token, ttl_ms]
        try:
            outcome = _replicas.on_master(self.redis, self.name, lambda connection: _replicas.replicated(
                connection, args, self._replicas, self.name), retry)
            extended = bool(outcome.reply == 1)
        except ResponseError as error:
            if self._wrong_type(error):
                return False
            raise
        missing = outcome.missing(self.name, "extended") if extended else None
        if missing is not None:
            raise missing
        return extended


def read_lock(redis: Any, name: Any, **kwargs: Any) -> Lock:
    """A reader of the read/write lock `name`: `Lock(redis, name, shared=True, ...)`.

        with read_lock(r, "catalog", timeout=10, blocking_timeout=5):
            serve_from_cache()
    """
    return Lock(redis, name, shared=True, **kwargs)


def write_lock(redis: Any, name: Any, **kwargs: Any) -> Lock:
    """The writer of the read/write lock `name`: alone, after the readers that came
    before it (readers that come after it wait for it). A plain `Lock` on that name."""
    return Lock(redis, name, **kwargs)


def semaphore(redis: Any, name: Any, permits: int, **kwargs: Any) -> Lock:
    """One of at most `permits` holders of the counting semaphore `name`
    (`LOCK.ACQUIRE ... LIMIT permits`); every holder of a name gives the same `permits`.

        with semaphore(r, "payments-api", 10, timeout=30, blocking_timeout=None):
            call_the_api()
    """
    return Lock(redis, name, limit=permits, **kwargs)
