"""The watchdog: renews a lock every third of its TTL while its holder works, and tells
the holder when the lock is lost instead of letting it carry on unprotected.

The lock counts as lost when an extend is answered 0 (it expired, was deleted, or went
to another token) or when no extend has succeeded for a whole TTL (the server could not
be reached, so the lock may have expired there), an extend the server has not answered
yet included (a stopped server or a dropped network answers nothing). Connection errors
before that are retried at the next tick."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future
from typing import Awaitable, Callable, Optional

from ._worker import Worker
from .exceptions import LockLostError, lock_error

Lose = Callable[[LockLostError], None]


class _Clock:
    """When the last extend succeeded, and what losing the lock means."""

    def __init__(self, name: object, ttl: float, lose: Lose):
        self._name = name
        self._ttl = ttl
        self._lose = lose
        self._last_ok = time.monotonic()

    def answered(self, extended: bool) -> bool:
        """Records an extend's answer; False once the lock is lost."""
        if extended:
            self._last_ok = time.monotonic()
            return True
        self._lose(lock_error(LockLostError, "The lock was gone when the watchdog extended it",
                              str(self._name)))
        return False

    def left(self) -> float:
        """Seconds until a whole TTL has passed without a successful extend."""
        return max(0.0, self._ttl - (time.monotonic() - self._last_ok))

    def failed(self, error: Exception) -> bool:
        """Records an extend that could not reach the server; False once the lock is
        lost (no success for a whole TTL)."""
        if time.monotonic() - self._last_ok < self._ttl:
            return True
        self._lose(lock_error(LockLostError,
                              f"The server was unreachable for a whole TTL ({error})",
                              str(self._name)))
        return False


class ThreadWatchdog:
    """Runs in a daemon thread; `stop()` ends it at once."""

    def __init__(self, name: object, ttl: float, interval: float,
                 extend: Callable[[], bool], lose: Lose):
        self._clock = _Clock(name, ttl, lose)
        self._interval = interval
        self._extend = extend
        self._worker = Worker()
        self._pending: Optional["Future[bool]"] = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"redis-lock watchdog {name}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                extended = self._extend_within(self._clock.left())
            except Exception as error:  # the connection's errors: retried next tick
                if not self._clock.failed(error):
                    return
                continue
            if self._stopped.is_set() or not self._clock.answered(extended):
                return

    def _extend_within(self, limit: float) -> bool:
        """The extend's answer, or TimeoutError when none came within `limit` seconds
        (the call stays on the watchdog's worker, left to finish when the server
        answers). One extend at a time: while one the server has not answered is on the
        worker (a stopped server, a lost network), the next tick waits for that one
        instead of queueing another behind it, which would reach the server only after
        the first, long after its tick, perhaps after the watchdog reported the lock
        lost or was stopped."""
        pending = self._pending
        if pending is None or pending.done():
            pending = self._pending = self._worker.submit(self._extend_unless_stopped)
        return bool(pending.result(timeout=limit))

    def _extend_unless_stopped(self) -> bool:
        """The extend, on the worker; nothing once the watchdog was stopped."""
        if self._stopped.is_set():
            return False
        return self._extend()

    def stop(self) -> None:
        self._stopped.set()


class TaskWatchdog:
    """The same as an asyncio task on the running loop; `stop()` cancels it."""

    def __init__(self, name: object, ttl: float, interval: float,
                 extend: Callable[[], Awaitable[bool]], lose: Lose):
        self._clock = _Clock(name, ttl, lose)
        self._interval = interval
        self._extend = extend
        self._task: Optional["asyncio.Task[None]"] = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                extended = await asyncio.wait_for(self._extend(), self._clock.left())
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if not self._clock.failed(error):
                    return
                continue
            if not self._clock.answered(extended):
                return

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
