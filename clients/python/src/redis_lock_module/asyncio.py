"""The asyncio `Lock`: redis-py's `redis.asyncio.lock.Lock`, on the module's commands.

The same as `redis_lock_module.Lock` with coroutines, on a `redis.asyncio.Redis` client:
`async with Lock(r, "orders:42", timeout=10) as lock: ...`, or
`r.lock("orders:42", timeout=10, lock_class=redis_lock_module.asyncio.Lock)`. The watchdog is
a task on the running loop; `on_lost` is called from it. `Election` is leader election
with coroutines (`observe` is an async generator).
"""

from __future__ import annotations

from types import TracebackType
import asyncio
from typing import Any, AsyncIterator, Awaitable, List, Optional, Tuple, Type

from redis.exceptions import ResponseError

from . import _election, _protocol, _replicas
from ._protocol import Number, Token
from ._multi import AsyncMultiLock as MultiLock
from ._redlock import AsyncRedlock
from ._state import LockState
from ._watchdog import TaskWatchdog
from .exceptions import LockError, LockNotOwnedError, LockNotReplicatedError

__all__ = ["Lock", "Redlock", "read_lock", "write_lock", "semaphore", "Election", "Leadership", "MultiLock"]

Redlock = AsyncRedlock


class Lock(LockState):
    """See `redis_lock_module.Lock`; every method that talks to the server is a coroutine."""

    async def __aenter__(self) -> "Lock":
        if await self.acquire():
            return self
        raise self._not_acquired()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc_value: Optional[BaseException],
                        traceback: Optional[TracebackType]) -> None:
        try:
            await self.release()
        except LockError as error:
            self._release_failed(error)

    async def acquire(self, blocking: Optional[bool] = None,
                      blocking_timeout: Optional[Number] = None,
                      token: Optional[Token] = None, *,
                      sleep: Optional[Number] = None) -> bool:
        """See `redis_lock_module.Lock.acquire`. The arguments are redis-py's asyncio
        Lock's: `blocking` first, `sleep` by name only."""
        encoded = self._new_token(token)
        waiting = _protocol.Waiting(self._wait_ms(blocking, blocking_timeout))
        self.not_replicated = None
        while True:
            try:
                granted = await self.do_acquire(encoded, waiting.left_ms())
            except LockNotReplicatedError as error:
                if waiting.again(error):
                    continue
                self.not_replicated = error
                return False
            break
        if granted is None:
            return False
        self._start_watchdog(self._hold(*granted), TaskWatchdog)
        return True

    async def do_acquire(self, token: bytes,
                         wait_ms: Optional[int] = None) -> Optional[Tuple[bytes, int]]:
        try:
            granted = await self._acquire_once(token, wait_ms)
        except ResponseError as error:
            if self._wrong_type(error):
                return None  # a key of another type holds the name, as for redis-py
            raise self._refused(error) from error
        if granted is not None and not self._expires:
            await self.redis.persist(self.name)
        return granted

    async def _acquire_once(self, token: bytes,
                            wait_ms: Optional[int]) -> Optional[Tuple[bytes, int]]:
        waiting = _protocol.Waiting(wait_ms)
        if hasattr(self.redis, "nodes_manager"):
            await self.redis.initialize()  # an asyncio cluster client maps its slots first
        while True:
            connection = self._waiting_connection(waiting.left_ms(), waiting.address)
            args = self._acquire_args(token, waiting.left_ms())
            if connection is None:
                return await self._granted_on_master(args, token)
            rebind = self._session_ms is not None
            # Cancelling the task closes the connection: the waiter leaves the queue.
            try:
                await connection.connect()
                if waiting.asking:
                    await connection.send_command("ASKING")
                    await connection.read_response()
                if rebind:  # the grant's replicas are waited for where it is bound
                    granted = _protocol.grant(_replicas.Outcome(
                        await _replicas.async_exchange(connection, [args]), 0, None).reply)
                else:
                    granted = _protocol.grant(await _replicas.async_granted(
                        connection, args, self._replicas, self.name, self._releases(token)))
            except ResponseError as error:
                if not waiting.redirected(error):
                    raise
                if waiting.address is None:
                    await self._async_cluster_moved()
                continue
            finally:
                await connection.disconnect()
            if granted is not None and rebind:
                granted = await self._granted_on_master(self._acquire_args(token), token)
            return granted

    async def _granted_on_master(self, args: List[Any],
                                 token: bytes) -> Optional[Tuple[bytes, int]]:
        """See `redis_lock_module.Lock._granted_on_master`."""
        for attempt in range(_protocol.Waiting.REDIRECTIONS + 1):
            try:
                return _protocol.grant(await _replicas.async_on_master(
                    self.redis, self.name, lambda connection: _replicas.async_granted(
                        connection, args, self._replicas, self.name, self._releases(token))))
            except ResponseError as error:
                if not _protocol.redirection(error) or attempt == _protocol.Waiting.REDIRECTIONS:
                    raise
                await self._async_cluster_moved()
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _async_cluster_moved(self) -> None:
        nodes_manager = getattr(self.redis, "nodes_manager", None)
        if nodes_manager is not None:
            await nodes_manager.initialize()

    async def locked(self) -> bool:
        return bool(await self.redis.exists(self.name))

    async def owned(self) -> bool:
        if self.token is None:
            return False
        try:
            return self._owned_from(await self.redis.execute_command(*self._owned_args()))
        except ResponseError as error:
            if self._wrong_type(error):
                return False
            raise

    async def release(self) -> None:
        """Releases the lock. The holding is forgotten once the server has answered
        (released, or no longer held), not before: a release cancelled on its way keeps
        the holding, so that it can be released again (as redis-py's since its #3847)."""
        token = self._releasing()
        try:
            await self.do_release(token)
        except LockNotOwnedError:
            self._forget_if(token)
            raise
        self._forget_if(token)

    async def do(self, *args: Any) -> Any:
        """See `redis_lock_module.Lock.do`."""
        try:
            return await self.redis.execute_command(*self._do_args(args))
        except ResponseError as error:
            raise self._do_refused(error) from error

    async def do_release(self, expected_token: bytes) -> None:
        try:
            released = await self.redis.execute_command("LOCK.RELEASE", self.name,
                                                        expected_token)
        except ResponseError as error:
            if not self._wrong_type(error):
                raise
            released = 0
        if released != 1:
            raise self._not_owned("release")

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> Awaitable[bool]:
        token = self._check_renewable("extend")
        return self.do_extend(additional_time, replace_ttl, token)

    async def do_extend(self, additional_time: Number, replace_ttl: bool,
                        token: Optional[bytes] = None) -> bool:
        token = self.token if token is None else token
        pttl = int(await self.redis.pttl(self.name))
        ttl_ms = self._extended_ms(additional_time, replace_ttl, pttl)
        if pttl < 0 or not (await self._still_held() if ttl_ms <= 0
                            else await self._extend_to(token, ttl_ms)):
            raise self._not_owned("extend")
        return True

    def reacquire(self) -> Awaitable[bool]:
        token = self._check_renewable("reacquire")
        return self.do_reacquire(token)

    async def do_reacquire(self, token: Optional[bytes] = None) -> bool:
        token = self.token if token is None else token
        held = (await self._extend_to(token, self._ttl_ms) if self._expires
                else await self._still_held())
        if not held:
            raise self._not_owned("reacquire")
        return True

    async def _still_held(self) -> bool:
        """See `redis_lock_module.Lock._still_held`."""
        try:
            return self._held_from(await self.redis.execute_command(*self._holders_args()))
        except ResponseError as error:
            if self._wrong_type(error):
                return False
            raise

    async def _extend_to(self, token: Any, ttl_ms: int, retry: bool = True) -> bool:
        """See `redis_lock_module.Lock._extend_to`."""
        args = ["LOCK.EXTEND", self.name, token, ttl_ms]
        try:
            outcome = await _replicas.async_on_master(
                self.redis, self.name, lambda connection: _replicas.async_replicated(
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
    """See `redis_lock_module.read_lock`."""
    return Lock(redis, name, shared=True, **kwargs)


def write_lock(redis: Any, name: Any, **kwargs: Any) -> Lock:
    """See `redis_lock_module.write_lock`."""
    return Lock(redis, name, **kwargs)


def semaphore(redis: Any, name: Any, permits: int, **kwargs: Any) -> Lock:
    """See `redis_lock_module.semaphore`."""
    return Lock(redis, name, limit=permits, **kwargs)


class _LeaderLock(Lock):
    """A `Lock` whose every acquire publishes `value`."""

    value: bytes = b""

    def _acquire_args(self, token: bytes, wait_ms: Optional[int] = None) -> List[Any]:
        return [*super()._acquire_args(token, wait_ms), "VALUE", self.value]


class Leadership:
    """See `redis_lock_module.Leadership`; `proclaim` and `resign` are coroutines, and it
    is an async context manager that resigns."""

    def __init__(self, lock: _LeaderLock):
        self._lock = lock
        self.term: int = lock.fence or 0

    @property
    def lost(self) -> bool:
        return self._lock.lost

    def check(self) -> None:
        self._lock.check()

    async def proclaim(self, value: Token) -> None:
        self._lock.value = _election.encode_value(value)
        redis, token = self._lock.redis, self._lock.token
        if token is None:
            raise _election.lost_on_proclaim(self._lock.name)
        granted = _protocol.grant(await redis.execute_command(*self._lock._acquire_args(token)))
        if granted is None or granted[1] != self.term:
            if granted is not None:
                # The term had ended and the key was free: this took it anew. Give it back.
                await redis.execute_command("LOCK.RELEASE", self._lock.name, token)
            raise _election.lost_on_proclaim(self._lock.name)

    async def resign(self) -> bool:
        try:
            await self._lock.release()
        except LockNotOwnedError:
            return False
        return True

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.resign()


class Election:
    """See `redis_lock_module.Election`, on a `redis.asyncio` client: `campaign` and
    `leader` are coroutines, `observe` an async generator."""

    def __init__(self, redis: Any, name: Any, ttl: Number = 30, lock_delay: Number = 5):
        self.redis = redis
        self.name = name
        self.ttl = ttl
        self.lock_delay = lock_delay
        _protocol.to_ms(ttl, "ttl")
        _protocol.to_ms(lock_delay, "lock_delay", minimum=0)

    async def campaign(self, value: Token,
                       timeout: Optional[Number] = None) -> Optional[Leadership]:
        lock = _LeaderLock(self.redis, self.name, timeout=self.ttl, blocking_timeout=timeout,
                           session=self.lock_delay, watchdog=True, thread_local=False)
        lock.value = _election.encode_value(value)
        if not await lock.acquire(blocking=True, blocking_timeout=timeout):
            return None
        return Leadership(lock)

    async def leader(self) -> Optional[_election.Leader]:
        return _election.leader_from_info(
            await self.redis.execute_command("LOCK.INFO", self.name))

    async def observe(self, term: int = 0) -> AsyncIterator[Optional[_election.Leader]]:
        last, pause = term, 0.0
        round_ms = max(1, int(_election.observe_round(self.redis) * 1000))
        while True:
            try:
                reply = await self.redis.execute_command("LOCK.WATCH", self.name, last, round_ms)
            except Exception as error:  # noqa: BLE001 - only what `retryable` names
                if not _election.retryable(error):
                    raise
                pause = _election.backoff(pause)
                await asyncio.sleep(pause)
                continue
            pause = 0.0
            changed, seen = _election.watched(reply)
            if not changed:
                continue
            last = 0 if seen is None else seen.term
            yield seen
