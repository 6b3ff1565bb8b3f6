"""`MultiLock`: several keys at once, all or none (`LOCK.ACQUIREALL`), in redis-py's
Lock shape.

    from redis_lock_module import MultiLock

    with MultiLock(r, ["account:7", "account:9"], timeout=10, blocking_timeout=5) as both:
        transfer(7, 9, fences=both.fences)

What Redisson's `MultiLock` and node-redlock's multi-resource locks do from the client,
one key after another, the server does in one step: with a wait, the request queues on
every key and holds none of them meanwhile, is granted all of them at once when it is the
oldest waiter of each, and two callers that lock the same keys in different orders never
deadlock. One token holds every key, with a fence per key.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, List, Literal, Optional, Sequence, Tuple, Type

from . import _protocol, _replicas
from ._replicas import AUTO, Replicas
from ._protocol import Number, Token
from .exceptions import LockError, LockNotOwnedError, LockNotReplicatedError, lock_error


class MultiLockState:
    """What the sync and asyncio `MultiLock` share: the arguments, the holding, the
    messages."""

    def __init__(self, redis: Any, names: Sequence[Any], timeout: Number,
                 blocking: bool = True, blocking_timeout: Optional[Number] = None,
                 token: Optional[Token] = None, session: Optional[Number] = None,
                 shared: bool = False, replicas: Any = AUTO,
                 replicas_timeout: Optional[Number] = None, fsync: bool = False):
        self.redis = redis
        self.names = list(names)
        _protocol.acquire_all_args(self.names, 1)  # 1 to 64 keys, checked now
        self.timeout = timeout
        self._ttl_ms = _protocol.to_ms(timeout, "timeout")
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self._own_token = token
        self._session_ms = None if session is None else _protocol.to_ms(session, "session", 0)
        self.shared = shared
        self.replicas = replicas
        self._replicas = Replicas(replicas, replicas_timeout, self._ttl_ms, fsync)
        self.token: Optional[bytes] = None
        self.fences: Optional[List[int]] = None

    def _waiting(self, blocking: Optional[bool],
                 blocking_timeout: Optional[Number]) -> _protocol.Waiting:
        return _protocol.Waiting(_protocol.blocking_wait_ms(
            self.blocking if blocking is None else blocking,
            self.blocking_timeout if blocking_timeout is None else blocking_timeout))

    def _token_of(self, token: Optional[Token]) -> bytes:
        chosen = token if token is not None else self._own_token
        return _protocol.as_bytes(chosen) if chosen is not None else _protocol.new_token()

    def _args(self, token: bytes, wait_ms: Optional[int]) -> List[Any]:
        return _protocol.acquire_all_args(self.names, self._ttl_ms, token, wait_ms,
                                          self._session_ms, self.shared)

    def _granted(self, reply: Any) -> bool:
        granted = _protocol.grant_all(reply)
        if granted is None:
            return False
        self.token, self.fences = granted
        return True

    def _held_token(self, action: str) -> bytes:
        if self.token is None:
            raise lock_error(LockError, f"Cannot {action} a lock that's not owned",
                             self._label())
        return self.token

    def _each(self, command: str, token: bytes, *rest: Any) -> List[List[Any]]:
        return [[command, name, token, *rest] for name in self.names]

    def _all_held(self, replies: Sequence[Any], action: str) -> Literal[True]:
        if not all(int(reply) == 1 for reply in replies):
            raise lock_error(LockNotOwnedError,
                             f"Cannot {action} a lock that's no longer owned", self._label())
        return True

    def _label(self) -> str:
        return ", ".join(str(name) for name in self.names)

    def _not_acquired(self) -> LockError:
        return lock_error(LockError, "Unable to acquire lock within the time specified",
                          self._label())


class MultiLock(MultiLockState):
    """Every key of `names` at once, or none, held by one token with a fence per key
    (`fences`, in the order of `names`); released together. `timeout` is each key's TTL
    in seconds; `blocking`/`blocking_timeout` as in redis-py's Lock (the wait is the
    server's, first come first served on every key); `session=grace` binds every key to
    the connection; `shared=True` reads every key. On a cluster the keys must share a
    hash slot (a hash tag)."""

    def __enter__(self) -> "MultiLock":
        if self.acquire():
            return self
        raise self._not_acquired()

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc_value: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        self.release()

    def acquire(self, blocking: Optional[bool] = None,
                blocking_timeout: Optional[Number] = None,
                token: Optional[Token] = None) -> bool:
        """Takes every key: True once held, False when a key is busy (at once, or when
        the wait ended first). A grant too few replicas acknowledged (`replicas`, as
        `Lock`'s) is released and tried again while the wait lasts."""
        waiting, encoded = self._waiting(blocking, blocking_timeout), self._token_of(token)
        while True:
            args = self._args(encoded, waiting.left_ms())
            try:
                return self._granted(_replicas.on_master(
                    self.redis, self.names[0], lambda connection: _replicas.granted(
                        connection, args, self._replicas, self._label(),
                        self._each("LOCK.RELEASE", encoded))))
            except LockNotReplicatedError as error:
                if not waiting.again(error):
                    return False

    def _pipeline(self, commands: List[List[Any]]) -> List[Any]:
        pipe = self.redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies: List[Any] = pipe.execute()
        return replies

    def release(self) -> None:
        """Releases every key; LockNotOwnedError if some were no longer held (they
        expired or went to another token), LockError if this object held none."""
        token = self._held_token("release")
        replies = self._pipeline(self._each("LOCK.RELEASE", token))
        self.token, self.fences = None, None
        self._all_held(replies, "release")

    def extend(self, additional_time: Number, replace_ttl: bool = False) -> Literal[True]:
        """Adds `additional_time` seconds to what is left of each key's time, or with
        `replace_ttl=True` sets what is left to it; LockNotOwnedError if a key was no
        longer held."""
        token = self._held_token("extend")
        added = _protocol.to_ms(additional_time, "additional_time")
        left = [0] * len(self.names) if replace_ttl else [
            int(pttl) for pttl in self._pipeline([["PTTL", name] for name in self.names])]
        if any(pttl < 0 for pttl in left):
            raise lock_error(LockNotOwnedError,
                             "Cannot extend a lock that's no longer owned", self._label())
        return self._all_held(self._kept(
            [["LOCK.EXTEND", name, token, pttl + added]
             for name, pttl in zip(self.names, left)]), "extend")

    def reacquire(self) -> Literal[True]:
        """Resets every key's time to `timeout`."""
        token = self._held_token("reacquire")
        return self._all_held(
            self._kept(self._each("LOCK.EXTEND", token, self._ttl_ms)), "reacquire")

    def _kept(self, extends: List[List[Any]]) -> List[Any]:
        """The extends' replies, sent with the `WAIT` their replicas need."""
        replies: List[Any] = _replicas.on_master(
            self.redis, self.names[0],
            lambda connection: _replicas.kept(connection, extends, self._replicas, self._label()))
        return replies


class AsyncMultiLock(MultiLockState):
    """`MultiLock` for `redis.asyncio` (`redis_lock_module.asyncio.MultiLock`): the
    same keys, options and errors, awaited."""

    async def __aenter__(self) -> "AsyncMultiLock":
        if await self.acquire():
            return self
        raise self._not_acquired()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc_value: Optional[BaseException],
                        traceback: Optional[TracebackType]) -> None:
        await self.release()

    async def acquire(self, blocking: Optional[bool] = None,
                      blocking_timeout: Optional[Number] = None,
                      token: Optional[Token] = None) -> bool:
        """Takes every key: True once held, False when a key is busy."""
        waiting, encoded = self._waiting(blocking, blocking_timeout), self._token_of(token)
        while True:
            args = self._args(encoded, waiting.left_ms())
            try:
                return self._granted(await _replicas.async_on_master(
                    self.redis, self.names[0], lambda connection: _replicas.async_granted(
                        connection, args, self._replicas, self._label(),
                        self._each("LOCK.RELEASE", encoded))))
            except LockNotReplicatedError as error:
                if not waiting.again(error):
                    return False

    async def _pipeline(self, commands: List[List[Any]]) -> List[Any]:
        pipe = self.redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies: List[Any] = await pipe.execute()
        return replies

    async def release(self) -> None:
        """Releases every key (see `MultiLock.release`)."""
        token = self._held_token("release")
        replies = await self._pipeline(self._each("LOCK.RELEASE", token))
        self.token, self.fences = None, None
        self._all_held(replies, "release")

    async def reacquire(self) -> Literal[True]:
        """Resets every key's time to `timeout`."""
        token = self._held_token("reacquire")
        replies: List[Any] = await _replicas.async_on_master(
            self.redis, self.names[0], lambda connection: _replicas.async_kept(
                connection, self._each("LOCK.EXTEND", token, self._ttl_ms), self._replicas,
                self._label()))
        return self._all_held(replies, "reacquire")
