"""What a lock object knows, apart from how it talks to the server: its settings, checked
once in the constructor, and the token and fence of the current holding (per thread, as
in redis-py, unless `thread_local=False`). The synchronous and asyncio locks share it."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Tuple

from redis.exceptions import ResponseError

from . import _protocol
from ._protocol import Number, Token
from ._replicas import AUTO, Replicas
from .exceptions import LockNotReplicatedError
from .exceptions import LockError, LockLostError, LockNotOwnedError, lock_error

logger = logging.getLogger("redis_lock_module")


class LockState:
    def __init__(
        self,
        redis: Any,
        name: Any,
        timeout: Optional[Number] = None,
        sleep: Number = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[Number] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
        *,
        session: Optional[Number] = None,
        watchdog: bool = False,
        on_lost: Optional[Callable[[Any], None]] = None,
        shared: bool = False,
        limit: Optional[int] = None,
        replicas: Any = AUTO,
        replicas_timeout: Optional[Number] = None,
        fsync: bool = False,
    ):
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep  # accepted for redis-py's signature; waits never poll
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.session = session
        self.watchdog = watchdog
        self.on_lost = on_lost
        # Without a timeout (None, or 0 as redis-py reads it) the lock lives until
        # released: granted for the longest TTL there is, then made to never expire
        # (PERSIST), as redis-py's lock has no TTL then.
        self._ttl_ms = _protocol.to_ms(timeout, "timeout") if timeout else _protocol.MAX_MS
        self._session_ms = (None if session is None
                            else _protocol.to_ms(session, "session", minimum=0))
        self._mode = _protocol.mode_args(shared, limit)
        self.replicas = replicas
        self._replicas = Replicas(replicas, replicas_timeout, self._ttl_ms, fsync)
        #: Why the last `acquire` answered False, when a grant was made but too few
        #: replicas acknowledged it (it was released): that LockNotReplicatedError.
        self.not_replicated: Optional[LockNotReplicatedError] = None
        if watchdog and not self._expires:
            raise ValueError("watchdog=True needs a timeout: a lock without one never expires")
        if blocking_timeout is not None:
            _protocol.blocking_wait_ms(True, blocking_timeout)  # checks the range now
        self.local = threading.local() if self.thread_local else SimpleNamespace()
        self.local.token = None
        self.local.holding = None

    @property
    def _expires(self) -> bool:
        """Whether the lock has a TTL: redis-py's `if self.timeout:`, so that None and 0
        both make a lock that lives until released."""
        return bool(self.timeout)

    # What this thread holds.

    @property
    def token(self) -> Optional[bytes]:
        """The token of the current holding (bytes), None when not held: redis-py's
        `local.token`, which code may set and read as it does there."""
        return getattr(self.local, "token", None)

    @property
    def fence(self) -> Optional[int]:
        """The fencing token of the current holding: send it with every write the lock
        protects, and let the resource refuse lower ones. None when not held."""
        holding = self._holding()
        return None if holding is None else holding.fence

    @property
    def lost(self) -> bool:
        """True once the watchdog found the current holding's lock gone (see `check`)."""
        holding = self._holding()
        return holding is not None and holding.lost is not None

    def check(self) -> None:
        """Raises LockLostError if the watchdog found the lock gone, LockError if it is
        not held; returns quietly while the lock is held as far as the client knows."""
        holding = self._holding()
        if holding is None:
            raise lock_error(LockError, "The lock is not held", self.name)
        if holding.lost is not None:
            raise holding.lost

    def _holding(self) -> Optional["Holding"]:
        """The grant behind `local.token`; None when the token was set (or changed) by
        other code than an acquire of this object's, which then holds no fence."""
        holding: Optional[Holding] = getattr(self.local, "holding", None)
        if holding is None or holding.token != self.token:
            return None
        return holding

    def _do_args(self, args: Tuple[Any, ...]) -> List[Any]:
        """`LOCK.DO name token *args` for the current holding; LockError if not held."""
        token = self.token
        if token is None:
            raise lock_error(LockError, "Cannot run a command under an unlocked lock",
                             self.name)
        if not args:
            raise ValueError("do() needs a command")
        return ["LOCK.DO", self.name, token, *args]

    def _do_refused(self, error: Exception) -> Exception:
        """The error `do()` raises for `error`: LockLostError (the holding marked lost)
        when the token no longer holds the lock, else `error` itself."""
        if not str(error).startswith("NOTHELD"):
            return error
        lost = lock_error(LockLostError, "The lock was no longer held: nothing ran",
                          str(self.name))
        holding = self._holding()
        if holding is not None and holding.lost is None:
            holding.lost = lost
        return lost

    def _forget(self) -> Optional["Holding"]:
        """Drops this thread's holding and stops its watchdog; returns it."""
        holding: Optional[Holding] = getattr(self.local, "holding", None)
        self.local.token = None  # redis-py's attribute, which code may read
        self.local.holding = None
        if holding is not None:
            holding.stop_watchdog()
        return holding

    def _forget_if(self, token: Any) -> None:
        """Forgets the holding of `token` if it is still this thread's (a release
        answered): with `thread_local=False` the namespace is shared, and another acquirer
        may have stored its own token meanwhile, which must stay (redis-py 8.2)."""
        if self.token == token:
            self._forget()

    def _releasing(self) -> Any:
        """The token a release gives back (LockError when there is none), its holding's
        watchdog stopped first so that no renewal races the release."""
        token = self.token
        if token is None:
            raise self._release_unheld()
        holding = self._holding()
        if holding is not None:
            holding.stop_watchdog()
        return token

    def _hold(self, token: bytes, fence: int) -> "Holding":
        self._forget()  # a holding that expired unseen: its watchdog stops
        holding = Holding(self, token, fence)
        self.local.token = token
        self.local.holding = holding
        return holding

    def _new_token(self, token: Optional[Token]) -> bytes:
        """The caller's token, or a random version-4 UUID's hex digits made here, as
        redis-py makes them (`_protocol.new_token`)."""
        if token is None:
            return _protocol.new_token()
        return _protocol.encode_token(self.redis, token)

    def _wait_ms(self, blocking: Optional[bool],
                 blocking_timeout: Optional[Number]) -> Optional[int]:
        return _protocol.blocking_wait_ms(
            self.blocking if blocking is None else blocking,
            self.blocking_timeout if blocking_timeout is None else blocking_timeout,
        )

    # Messages, as redis-py words them.

    def _not_acquired(self) -> LockError:
        return lock_error(LockError, "Unable to acquire lock within the time specified",
                          self.name)

    def _release_unheld(self) -> LockError:
        return lock_error(LockError,
                          "Cannot release a lock that's not owned or is already unlocked.",
                          self.name)

    def _check_renewable(self, what: str) -> bytes:
        token = self.token
        if token is None:
            raise lock_error(LockError, f"Cannot {what} an unlocked lock", self.name)
        if self.timeout is None:  # 0 may be extended: it raises LockNotOwnedError then
            raise lock_error(LockError, f"Cannot {what} a lock with no timeout", self.name)
        return token

    def _not_owned(self, what: str) -> LockNotOwnedError:
        return lock_error(LockNotOwnedError, f"Cannot {what} a lock that's no longer owned",
                          self.name)

    def _release_failed(self, error: LockError) -> None:
        """`__exit__` of a lock that was no longer held: raise, or log as redis-py does."""
        if self.raise_on_release_error:
            raise error
        logger.warning("Lock was unlocked or no longer owned when exiting context manager.")

    def _extended_ms(self, additional_time: Number, replace_ttl: bool, pttl: int) -> int:
        """The TTL to set: the added time alone, or added to what is left (`pttl`). Zero
        or less keeps the lock's time as it is (redis-py 8.2): the caller then only
        checks that the lock is still held."""
        added = _protocol.signed_ms(additional_time, "additional_time")
        if replace_ttl:
            return added
        return min(pttl + added, _protocol.MAX_MS)

    def _holders_args(self) -> List[Any]:
        """What tells, without changing anything, whether this holding still holds the
        lock: `LOCK.HOLDERS`, whose fences are each holder's (a token never leaves the
        server)."""
        return ["LOCK.HOLDERS", self.name]

    def _held_from(self, reply: Any) -> bool:
        """Whether this holding's fence is among the holders `LOCK.HOLDERS` answered."""
        fence = self.fence
        if reply is None or fence is None:
            return False
        return any((_protocol.info_fields(holder) or {}).get("fence") == fence
                   for holder in reply)

    def _start_watchdog(self, holding: "Holding", kind: Callable[..., Any]) -> None:
        """Starts `kind` (a thread or task watchdog) extending `holding` to the TTL
        every third of it, when the lock was made with `watchdog=True`."""
        if self.watchdog:
            # Each extend once: a failed one is tried again at the next tick, and one the
            # client's retry policy sent again would come seconds later, perhaps after
            # the watchdog ended.
            holding.watchdog = kind(
                self.name, self._ttl_ms / 1000, self._ttl_ms / 3000,
                lambda: self._extend_to(holding.token, self._ttl_ms, retry=False),
                holding.lose)

    def _extend_to(self, token: Any, ttl_ms: int, retry: bool = True) -> Any:
        raise NotImplementedError  # each API's own: a call or a coroutine

    def _acquire_args(self, token: bytes, wait_ms: Optional[int] = None) -> List[Any]:
        return _protocol.acquire_args(self.name, self._ttl_ms, token, wait_ms,
                                      self._session_ms, self._mode)

    def _owned_args(self) -> List[Any]:
        """What `owned()` asks: `LOCK.INFO` (whose fence is the holder's) for an
        exclusive lock; for a shared holder, which `LOCK.INFO` cannot single out, an
        extend of its own to the full timeout (as a watchdog's)."""
        if self._mode:
            return ["LOCK.EXTEND", self.name, self.token, self._ttl_ms]
        return ["LOCK.INFO", self.name]

    def _owned_from(self, reply: Any) -> bool:
        return reply == 1 if self._mode else self._owned_by(reply)

    def _waiting_connection(self, wait_ms: Optional[int],
                            address: Optional[Tuple[str, int]] = None) -> Any:
        """A new connection without a read timeout for a wait the client would stop
        reading before it ends, else None (the wait runs through the client itself).
        It is made the way the client makes its own (`_connection_maker`): to the
        server the client would send the key to, a Sentinel's master or a cluster's node
        included, or to `address` (a cluster's redirection). The caller connects it,
        moves a session binding to the client (`_acquire_args(token)` there) before
        closing it, and closes it."""
        if wait_ms is None:
            return None
        maker = self._connection_maker()
        if maker is None or not _protocol.read_timeout_too_short(maker[1], wait_ms):
            return None
        connection_class, kwargs = maker
        kwargs = {**kwargs, "socket_timeout": None}
        if address is not None:
            kwargs.update(host=address[0], port=address[1])
        return connection_class(**kwargs)

    def _connection_maker(self) -> Optional[Tuple[Any, Dict[str, Any]]]:
        """The class and settings the client makes its connections to the key's server
        with: its pool's (a plain or Sentinel client), or those of the cluster node that
        serves the key (redis-py's sync and asyncio `RedisCluster`)."""
        pool = getattr(self.redis, "connection_pool", None)
        if pool is not None:
            return pool.connection_class, pool.connection_kwargs
        get_node = getattr(self.redis, "get_node_from_key", None)
        if get_node is None:
            return None
        node = get_node(self.name)
        if hasattr(node, "connection_class"):  # asyncio: the node makes its connections
            return node.connection_class, node.connection_kwargs
        pool = self.redis.get_redis_connection(node).connection_pool
        return pool.connection_class, pool.connection_kwargs

    def _releases(self, token: bytes) -> List[List[Any]]:
        """What gives back a grant too few replicas acknowledged."""
        return [["LOCK.RELEASE", self.name, token]]

    def _cluster_moved(self) -> None:
        """The key's slot moved: the cluster client's map is looked at again."""
        nodes_manager = getattr(self.redis, "nodes_manager", None)
        if nodes_manager is not None:
            nodes_manager.initialize()

    def _refused(self, error: ResponseError) -> LockError:
        """The server refused the command (an argument it does not accept, a limit that
        disagrees with the holders'): a LockError naming the lock, with the server's
        words, so that `except LockError` sees it."""
        return lock_error(LockError, f"The server refused the lock: {error}", self.name)

    @staticmethod
    def _wrong_type(error: ResponseError) -> bool:
        """A key of another type (a plain SET overwrote the lock): not held by this
        token, which redis-py's Lock reports as LockNotOwnedError, not a ResponseError."""
        return str(error).startswith("WRONGTYPE")

    def _owned_by(self, info_reply: Any) -> bool:
        """Fences are unique per grant of a key, so the lock is this holding's exactly
        when its fence is this holding's: no token leaves the server to check it."""
        fields = _protocol.info_fields(info_reply)
        return (fields is not None and self.fence is not None
                and fields.get("fence") == self.fence)


class Holding:
    """One grant as its holder sees it. The watchdog (another thread or task) writes
    `lost` here, where the holder's thread reads it."""

    def __init__(self, lock: LockState, token: bytes, fence: int):
        self._lock = lock
        self.token = token
        self.fence = fence
        self.lost: Optional[LockLostError] = None
        self.watchdog: Any = None

    def stop_watchdog(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()

    def lose(self, lost: LockLostError) -> None:
        self.lost = lost
        on_lost = self._lock.on_lost
        if on_lost is not None:
            try:
                on_lost(self._lock)
            except Exception:
                logger.exception("on_lost callback of lock %r failed", self._lock.name)
