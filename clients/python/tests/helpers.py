"""Small helpers the tests share."""

import os
import signal
import time
from contextlib import contextmanager

import redis


def wait_until(condition, what, limit=10.0):
    """Polls `condition` until it is true; fails the test after `limit` seconds."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def lock_info(client, key):
    """LOCK.INFO as a dict of str to int (or None)."""
    from redis_lock_module import info

    return info(client, key)


def pid_of(port):
    return int(redis.Redis(port=port).info("server")["process_id"])


@contextmanager
def frozen(port):
    """The server on `port` stopped (SIGSTOP) for the block, continued whatever happens."""
    pid = pid_of(port)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def server_waits(client):
    """Whether the server holds a grant's reply for its replicas itself (`REPLICAS`:
    Redis 7.2+, every Valkey), so that the package sends it `REPLICAS AUTO` and learns
    nothing of the replicas itself; on Redis 7.0 the package counts them and waits."""
    info = client.info("server")
    if "valkey_version" in info:
        return True
    return tuple(int(part) for part in str(info["redis_version"]).split(".")[:2]) >= (7, 2)
