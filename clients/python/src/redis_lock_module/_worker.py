"""A daemon thread that runs calls one at a time, in order, each answered by a future
the caller may stop waiting for: Redlock's per-master calls and the watchdog's extends,
which must not block their caller on a server that answers nothing."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, Optional, Tuple


class Worker:
    """A daemon thread that runs the calls given to it (one master's, one watchdog's),
    one at a time, in the order they came. It ends after `IDLE` seconds without work, and
    starts again with the next call."""

    IDLE = 30.0

    def __init__(self) -> None:
        self._jobs: "queue.SimpleQueue[Tuple[Callable[[], Any], Future[Any]]]" = (
            queue.SimpleQueue())
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def submit(self, call: Callable[[], Any]) -> "Future[Any]":
        """Queues `call` behind the calls before it: its future."""
        with self._lock:
            future: "Future[Any]" = Future()
            self._jobs.put((call, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="redlock-master")
                self._thread.start()
            return future

    def _run(self) -> None:
        while True:
            try:
                call, future = self._jobs.get(timeout=self.IDLE)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._thread = None
                        return
                continue
            try:
                result = call()
            except BaseException as error:  # handed to the caller, who decides
                future.set_exception(error)
            else:
                future.set_result(result)
