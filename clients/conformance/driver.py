"""The Python package's conformance driver: runs clients/conformance/scenarios.txt
against the masters in CONFORMANCE_PORTS (pids in CONFORMANCE_PIDS) with
redis_lock_module, and prints one line per scenario (see scenarios.txt)."""

import os
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "src"))

import redis  # noqa: E402
from redis_lock_module import (  # noqa: E402
    Lock, LockError, LockLostError, LockNotReplicatedError, Redlock,
)

from redis_lock_module._redlock import _worker_for  # noqa: E402
from scenarios import run_all  # noqa: E402

FEATURES = {"redlock", "watchdog"}


class Driver:
    def __init__(self, ports, pids):
        self.clients = [redis.Redis(port=port) for port in ports]
        # The raw replies for `server` steps: no redis-py reply callbacks (SET -> "OK").
        self.raw = [redis.Redis(port=port) for port in ports]
        for client in self.raw:
            client.response_callbacks.clear()
        self.pids = pids
        self.locks = {}
        self.lost = {}
        self.redlocks = {}
        self.last_took = 0.0

    def close(self):
        for lock in self.locks.values():
            try:
                lock.release()  # ends its watchdog
            except Exception:
                pass
        if self.redlocks:
            # Redlock asks each master on its own worker thread, and a refused attempt's
            # acquire and release may still be queued there: the next scenario starts
            # once they ran (a late grant would otherwise land after its flush).
            for client in self.clients[:3]:
                _worker_for(client).submit(lambda: None).result(timeout=10)
        for client in self.clients + self.raw:
            client.close()

    def lock(self, name, key, ttl, wait=None, watchdog=False, replicas="auto", on=0,
             repltimeout=None):
        lost = threading.Event()
        self.lost[name] = lost
        try:
            lock = Lock(self.clients[on], key, timeout=ttl / 1000, blocking=wait is not None,
                        blocking_timeout=None if wait is None else wait / 1000,
                        watchdog=watchdog, on_lost=lambda _lock: lost.set(),
                        replicas=replicas,
                        replicas_timeout=None if repltimeout is None else repltimeout / 1000)
            granted = lock.acquire()
        except LockNotReplicatedError as error:
            return "too-few-replicas" if error.refused else "not-replicated"
        except (ValueError, TypeError):
            return "invalid"
        except redis.ResponseError as error:
            code = str(error).split()[0]
            return "invalid" if code == "ERR" else "error " + code
        if granted:
            self.locks[name] = lock
            return "granted"
        return "not-replicated" if lock.not_replicated is not None else "busy"

    def release(self, name):
        try:
            self.locks[name].release()
            return "true"
        except LockError:  # redis-py's: not owned, or already released by this object
            return "false"

    def extend(self, name, ttl):
        try:
            return str(self.locks[name].extend(ttl / 1000, replace_ttl=True)).lower()
        except LockNotReplicatedError:
            return "not-replicated"
        except LockError:
            return "false"

    def do(self, name, args):
        try:
            return self.locks[name].do(*args)
        except LockLostError:  # the lock went: nothing ran
            return "lost"

    def fence(self, name):
        return self.locks[name].fence

    def held(self, name):
        try:
            self.locks[name].check()
            return "true"
        except LockLostError:
            return "false"

    def lost_within(self, name, ms):
        return str(self.lost[name].wait(ms / 1000)).lower()

    def server(self, index, args):
        return self.raw[index].execute_command(*args)

    def signal(self, index, stop):
        os.kill(self.pids[index], signal.SIGSTOP if stop else signal.SIGCONT)

    def redlock(self, name, key, ttl, retries=None, delay=None, jitter=None):
        options = {}
        if retries is not None:
            options["retry_count"] = retries
        if delay is not None:
            options["retry_delay"] = delay / 1000
        if jitter is not None:
            options["retry_jitter"] = jitter / 1000
        lock = Redlock(self.clients[:3], key, ttl / 1000, **options)
        self.redlocks[name] = lock
        return "granted" if lock.acquire() else "refused"

    def attempts(self, name):
        return self.redlocks[name].attempts

    def validity(self, name):
        return self.redlocks[name].validity * 1000

    def redlock_release(self, name):
        return str(self.redlocks[name].release() > 0).lower()


if __name__ == "__main__":
    ports = [int(p) for p in os.environ["CONFORMANCE_PORTS"].split(",")]
    pids = [int(p) for p in os.environ["CONFORMANCE_PIDS"].split(",")]
    sys.exit(run_all(sys.argv[1], "python", FEATURES, lambda: Driver(ports, pids), ports))
