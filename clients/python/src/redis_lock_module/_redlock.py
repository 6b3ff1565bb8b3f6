"""Redlock over N independent masters, each with the module loaded.

One random token is sent to every master (`LOCK.ACQUIRE key ttl TOKEN t`), each bounded
by `master_timeout` (default: a tenth of the TTL, at most 0.5 s). The lock is held when a
majority (N/2 + 1) granted it with time to spare: validity = TTL - elapsed - drift,
drift = 1% of the TTL + 2 ms, elapsed on a monotonic clock. Otherwise it is released on
every master and, when blocking, tried again after `retry_delay` +/- `retry_jitter`
seconds, up to `retry_count` times (the defaults of every package: 10 retries, 0.2 s
+/- 0.1 s; `blocking_timeout` also ends the retries, `blocking=False` makes one attempt).
A master's calls run in order: a release after a failed attempt follows the acquire it
undoes, so a master whose answer did not come in time is released once it answers.

Fences of independent masters do not compare with each other, so Redlock has no single
fencing token (`fences` holds each master's): when the resource must refuse late
writers, use one master with replicas and `Lock.fence` instead.
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
import time
import weakref
from concurrent.futures import wait
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Sequence, Type

from . import _protocol, _replicas
from ._protocol import Number
from ._replicas import AUTO, Replicas
from ._worker import Worker
from .exceptions import LockError, lock_error


class _RedlockState:
    def __init__(self, masters: Sequence[Any], name: Any, timeout: Number, *,
                 blocking: bool = True, blocking_timeout: Optional[Number] = None,
                 retry_count: int = 10, retry_delay: Number = 0.2, retry_jitter: Number = 0.1,
                 master_timeout: Optional[Number] = None, replicas: Any = AUTO,
                 replicas_timeout: Optional[Number] = None, fsync: bool = False):
        if not masters:
            raise ValueError("Redlock needs at least one master")
        self.masters = list(masters)
        self.name = name
        self.timeout = timeout
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        if not isinstance(retry_count, int) or retry_count < 0:
            raise ValueError(f"retry_count must be an integer from 0, not {retry_count!r}")
        if retry_delay < 0 or retry_jitter < 0:
            raise ValueError("retry_delay and retry_jitter must not be negative")
        self.retry_count = retry_count
        self.retry_delay = retry_delay
        self.retry_jitter = retry_jitter
        #: How many attempts the last `acquire` made (each asked every master).
        self.attempts = 0
        self._ttl_ms = _protocol.to_ms(timeout, "timeout")
        self.master_timeout = (min(self._ttl_ms / 10_000, 0.5) if master_timeout is None
                               else master_timeout)
        # Each master's grant waits for its own replicas, within the master's timeout.
        self.replicas = replicas
        self._replicas = Replicas(replicas, replicas_timeout if replicas_timeout is not None
                                  else max(0.001, self.master_timeout / 2), self._ttl_ms, fsync)
        self.token: Optional[bytes] = None
        self.fences: Dict[int, int] = {}
        self._valid_until = 0.0

    @property
    def quorum(self) -> int:
        return _protocol.redlock_quorum(len(self.masters))

    @property
    def validity(self) -> float:
        """Seconds the lock is still certain to be held (0 when not held)."""
        if self.token is None:
            return 0.0
        return max(0.0, self._valid_until - time.monotonic())

    def is_valid(self) -> bool:
        return self.validity > 0

    def _held(self, started: float, answers: List[Any], parse: Callable[[Any], Any]) -> bool:
        """Counts the masters whose answer `parse` accepts; records the validity."""
        accepted = [answer for answer in answers
                    if not isinstance(answer, BaseException) and parse(answer)]
        elapsed_ms = (time.monotonic() - started) * 1000
        left_ms = _protocol.redlock_validity(self._ttl_ms, elapsed_ms)
        if len(accepted) < self.quorum or left_ms <= 0:
            return False
        self._valid_until = started + (elapsed_ms + left_ms) / 1000
        return True

    def _acquire_args(self, token: bytes) -> List[Any]:
        return _protocol.acquire_args(self.name, self._ttl_ms, token)

    def _grant_on(self, master: Any, token: bytes) -> Any:
        """The master's grant, with the `WAIT` for its own replicas (a grant they did not
        acknowledge is released there and counts as refused)."""
        return _replicas.on_master(master, self.name, lambda connection: _replicas.granted(
            connection, self._acquire_args(token), self._replicas, self.name,
            [["LOCK.RELEASE", self.name, token]]))

    def _extend_on(self, master: Any, token: bytes) -> Any:
        return _replicas.on_master(master, self.name, lambda connection: _replicas.kept(
            connection, [["LOCK.EXTEND", self.name, token, self._ttl_ms]], self._replicas,
            self.name))[0]

    async def _async_grant_on(self, master: Any, token: bytes) -> Any:
        return await _replicas.async_on_master(
            master, self.name, lambda connection: _replicas.async_granted(
                connection, self._acquire_args(token), self._replicas, self.name,
                [["LOCK.RELEASE", self.name, token]]))

    async def _async_extend_on(self, master: Any, token: bytes) -> Any:
        replies = await _replicas.async_on_master(
            master, self.name, lambda connection: _replicas.async_kept(
                connection, [["LOCK.EXTEND", self.name, token, self._ttl_ms]], self._replicas,
                self.name))
        return replies[0]

    def _deadline(self, blocking: Optional[bool],
                  blocking_timeout: Optional[Number]) -> Optional[float]:
        """When to stop retrying: now (not blocking), never (None), or a time."""
        if not (self.blocking if blocking is None else blocking):
            return time.monotonic()
        limit = self.blocking_timeout if blocking_timeout is None else blocking_timeout
        return None if limit is None else time.monotonic() + limit

    def _retry_pause(self, deadline: Optional[float]) -> Optional[float]:
        """The random pause before the next attempt (`retry_delay` +/- `retry_jitter`),
        or None when the retries or the time are used up."""
        if self.attempts > self.retry_count:
            return None
        pause = max(0.0, self.retry_delay + random.uniform(-1, 1) * self.retry_jitter)
        if deadline is not None and time.monotonic() + pause >= deadline:
            return None
        return pause

    def _granted(self, token: bytes, answers: List[Any]) -> None:
        self.token = token
        self.fences = {i: fence for i, fence in
                       ((i, self._grant_fence(a)) for i, a in enumerate(answers))
                       if fence is not None}

    def _grant_fence(self, answer: Any) -> Optional[int]:
        if isinstance(answer, BaseException):
            return None
        granted = _protocol.grant(answer)
        return None if granted is None else granted[1]

    def _unheld(self, what: str) -> LockError:
        return lock_error(LockError, f"Cannot {what} a Redlock lock that is not held",
                          self.name)


class Redlock(_RedlockState):
    """Redlock on synchronous redis-py clients; the masters are asked in parallel."""

    def __enter__(self) -> "Redlock":
        if self.acquire():
            return self
        raise lock_error(LockError, "Unable to acquire lock within the time specified",
                         self.name)

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc_value: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        self.release()

    def acquire(self, blocking: Optional[bool] = None,
                blocking_timeout: Optional[Number] = None) -> bool:
        deadline = self._deadline(blocking, blocking_timeout)
        self.attempts = 0
        # One token for every attempt: a grant of an earlier attempt that arrives late is
        # this lock's own, released or extended with the rest.
        token = _protocol.new_token()
        while True:
            self.attempts += 1
            started = time.monotonic()
            answers = self._on_all(lambda r: self._grant_on(r, token))
            if self._held(started, answers, self._grant_fence):
                self._granted(token, answers)
                return True
            self._release_all(token)
            pause = self._retry_pause(deadline)
            if pause is None:
                return False
            time.sleep(pause)

    def extend(self) -> bool:
        """Resets the TTL on every master; True if a majority still held it in time."""
        if self.token is None:
            raise self._unheld("extend")
        token, started = self.token, time.monotonic()
        answers = self._on_all(lambda r: self._extend_on(r, token))
        return self._held(started, answers, lambda answer: answer == 1)

    def release(self) -> int:
        """Releases on every master; returns how many confirmed they held it."""
        if self.token is None:
            raise self._unheld("release")
        token, self.token, self.fences = self.token, None, {}
        return self._release_all(token)

    def _release_all(self, token: bytes) -> int:
        answers = self._on_all(lambda r: r.execute_command("LOCK.RELEASE", self.name, token))
        return sum(1 for answer in answers if answer == 1)

    def _on_all(self, call: Callable[[Any], Any]) -> List[Any]:
        """`call(master)` on every master at once; a master that fails or does not answer
        within `master_timeout` counts as an exception. Each master is asked by its own
        worker thread, its calls in order: a master that hangs (stopped, partitioned)
        holds one thread, and the calls queued behind (the release of an acquire it did
        not answer) run once it answers. The thread is a daemon, so it never keeps the
        process from exiting."""
        futures = [_worker_for(master).submit(functools.partial(call, master))
                   for master in self.masters]
        wait(futures, timeout=self.master_timeout)
        answers: List[Any] = []
        for future in futures:
            if not future.done():
                answers.append(TimeoutError("the master did not answer in time"))
            elif future.exception() is not None:
                answers.append(future.exception())
            else:
                answers.append(future.result())
        return answers


_WORKERS: "weakref.WeakKeyDictionary[Any, Worker]" = weakref.WeakKeyDictionary()
_WORKERS_LOCK = threading.Lock()


def _worker_for(master: Any) -> Worker:
    """The worker of the client `master` (one per client, shared by every Redlock)."""
    with _WORKERS_LOCK:
        worker = _WORKERS.get(master)
        if worker is None:
            worker = _WORKERS[master] = Worker()
        return worker


class AsyncRedlock(_RedlockState):
    """Redlock on `redis.asyncio` clients (`redis_lock_module.asyncio.Redlock`)."""

    async def __aenter__(self) -> "AsyncRedlock":
        if await self.acquire():
            return self
        raise lock_error(LockError, "Unable to acquire lock within the time specified",
                         self.name)

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc_value: Optional[BaseException],
                        traceback: Optional[TracebackType]) -> None:
        await self.release()

    async def acquire(self, blocking: Optional[bool] = None,
                      blocking_timeout: Optional[Number] = None) -> bool:
        deadline = self._deadline(blocking, blocking_timeout)
        self.attempts = 0
        # One token for every attempt: a grant of an earlier attempt that arrives late is
        # this lock's own, released or extended with the rest.
        token = _protocol.new_token()
        while True:
            self.attempts += 1
            started = time.monotonic()
            answers = await self._on_all(lambda r: self._async_grant_on(r, token))
            if self._held(started, answers, self._grant_fence):
                self._granted(token, answers)
                return True
            await self._release_all(token)
            pause = self._retry_pause(deadline)
            if pause is None:
                return False
            await asyncio.sleep(pause)

    async def extend(self) -> bool:
        if self.token is None:
            raise self._unheld("extend")
        token, started = self.token, time.monotonic()
        answers = await self._on_all(lambda r: self._async_extend_on(r, token))
        return self._held(started, answers, lambda answer: answer == 1)

    async def release(self) -> int:
        if self.token is None:
            raise self._unheld("release")
        token, self.token, self.fences = self.token, None, {}
        return await self._release_all(token)

    async def _release_all(self, token: bytes) -> int:
        answers = await self._on_all(
            lambda r: r.execute_command("LOCK.RELEASE", self.name, token))
        return sum(1 for answer in answers if answer == 1)

    async def _on_all(self, call: Callable[[Any], Any]) -> List[Any]:
        """As the synchronous one: each master's calls run in order, one after another,
        and a call that outlives `master_timeout` is not cancelled (its connection stays
        in step), so the release queued behind an unanswered acquire still follows it."""
        async def bounded(master: Any) -> Any:
            before = _TAILS.get(master)

            async def in_turn() -> Any:
                if before is not None:
                    await asyncio.gather(before, return_exceptions=True)
                return await call(master)

            task = asyncio.ensure_future(in_turn())
            _TAILS[master] = task
            return await asyncio.wait_for(asyncio.shield(task), self.master_timeout)

        return list(await asyncio.gather(*(bounded(m) for m in self.masters),
                                         return_exceptions=True))


#: The last call queued for each asyncio client, which the next one runs after.
_TAILS: "weakref.WeakKeyDictionary[Any, asyncio.Future[Any]]" = weakref.WeakKeyDictionary()
