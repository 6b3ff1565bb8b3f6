"""The asyncio `Lock`: redis-py's `redis.asyncio.lock.Lock`, on the module's commands.

The same as `redis_lock_module.Lock` with coroutines, on a `redis.asyncio.Redis` client:
`async with Lock(r, "orders:42", timeout=10) as lock: ...`, or
`r.lock("orders:42", timeout=10, lock_class=redis_lock_module.asyncio.Lock)`. The watchdog is
a task on the running loop; `on_lost` is called from it.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Awaitable, Optional, Tuple, Type

from redis.exceptions import ResponseError

from . import _protocol
from ._protocol import Number, Token
from ._redlock import AsyncRedlock
from ._state import LockState
from ._watchdog import TaskWatchdog
from .exceptions import LockError, LockNotOwnedError

__all__ = ["Lock", "Redlock", "read_lock", "write_lock", "semaphore"]

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

    async def acquire(self, sleep: Optional[Number] = None, blocking: Optional[bool] = None,
                      blocking_timeout: Optional[Number] = None,
                      token: Optional[Token] = None) -> bool:
        encoded = self._new_token(token)
        granted = await self.do_acquire(encoded, self._wait_ms(blocking, blocking_timeout))
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
        if granted is not None and self.timeout is None:
            await self.redis.persist(self.name)
        return granted

    async def _acquire_once(self, token: bytes,
                            wait_ms: Optional[int]) -> Optional[Tuple[bytes, int]]:
        waiting = _protocol.Waiting(wait_ms)
        if wait_ms is not None and hasattr(self.redis, "nodes_manager"):
            await self.redis.initialize()  # an asyncio cluster client maps its slots first
        while True:
            connection = self._waiting_connection(waiting.left_ms(), waiting.address)
            args = self._acquire_args(token, waiting.left_ms())
            if connection is None:
                return _protocol.grant(await self.redis.execute_command(*args))
            # Cancelling the task closes the connection: the waiter leaves the queue.
            try:
                await connection.connect()
                if waiting.asking:
                    await connection.send_command("ASKING")
                    await connection.read_response()
                await connection.send_command(*args)
                granted = _protocol.grant(await connection.read_response())
            except ResponseError as error:
                if not waiting.redirected(error):
                    raise
                if waiting.address is None:
                    await self._async_cluster_moved()
                continue
            finally:
                await connection.disconnect()
            if granted is not None and self._session_ms is not None:
                rebind = self._acquire_args(token)
                granted = _protocol.grant(await self.redis.execute_command(*rebind))
            return granted

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
        holding = self._holding()
        if holding is None:
            raise self._release_unheld()
        holding.stop_watchdog()  # no renewal races the release
        try:
            await self.do_release(holding.token)
        except LockNotOwnedError:
            self._forget_if(holding)
            raise
        self._forget_if(holding)

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
        pttl = 0 if replace_ttl else int(await self.redis.pttl(self.name))
        if pttl < 0 or not await self._extend_to(
                token, self._extended_ms(additional_time, replace_ttl, pttl)):
            raise self._not_owned("extend")
        return True

    def reacquire(self) -> Awaitable[bool]:
        token = self._check_renewable("reacquire")
        return self.do_reacquire(token)

    async def do_reacquire(self, token: Optional[bytes] = None) -> bool:
        if not await self._extend_to(self.token if token is None else token, self._ttl_ms):
            raise self._not_owned("reacquire")
        return True

    async def _extend_to(self, token: Any, ttl_ms: int) -> bool:
        try:
            extended = await self.redis.execute_command("LOCK.EXTEND", self.name, token,
                                                        ttl_ms)
        except ResponseError as error:
            if self._wrong_type(error):
                return False
            raise
        return bool(extended == 1)


def read_lock(redis: Any, name: Any, **kwargs: Any) -> Lock:
    """See `redis_lock_module.read_lock`."""
    return Lock(redis, name, shared=True, **kwargs)


def write_lock(redis: Any, name: Any, **kwargs: Any) -> Lock:
    """See `redis_lock_module.write_lock`."""
    return Lock(redis, name, **kwargs)


def semaphore(redis: Any, name: Any, permits: int, **kwargs: Any) -> Lock:
    """See `redis_lock_module.semaphore`."""
    return Lock(redis, name, limit=permits, **kwargs)
