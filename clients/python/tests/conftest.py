"""Fixtures on the servers that `clients/rust/tests/packages/python_package.rs` starts (real servers
with the module; it removes them whatever happens here):

- REDIS_LOCK_PORT: a master, REDIS_LOCK_REPLICA_PORT: its replica;
- REDIS_LOCK_REDLOCK_PORTS: independent masters for Redlock, comma-separated;
- REDIS_LOCK_DEAD_PORT: a port where no server listens;
- REDIS_LOCK_SENTINEL_PORT: a Sentinel watching the master as `mymaster`;
- REDIS_LOCK_CLUSTER_PORT: a node of a cluster of three masters;
- REDIS_LOCK_FAILOVER_PORTS: a Sentinel, its master and the master's replica, for the
  failover test alone.

Every test gets a key of its own; the master's data is flushed before each test.
"""

import os
import re

import pytest
import redis


def _port(name):
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run these tests with `make test` "
                    "(cargo test -p redis-lock-client --test packages python_package)", returncode=2)
    return int(value)


@pytest.fixture(scope="session")
def port():
    return _port("REDIS_LOCK_PORT")


@pytest.fixture(scope="session")
def replica_port():
    return _port("REDIS_LOCK_REPLICA_PORT")


@pytest.fixture(scope="session")
def redlock_ports():
    return [int(p) for p in os.environ["REDIS_LOCK_REDLOCK_PORTS"].split(",")]


@pytest.fixture(scope="session")
def sentinel_port():
    return _port("REDIS_LOCK_SENTINEL_PORT")


@pytest.fixture(scope="session")
def cluster_port():
    return _port("REDIS_LOCK_CLUSTER_PORT")


@pytest.fixture(scope="session")
def failover():
    """A master, its replica and a Sentinel of their own, for the one test that fails
    them over."""
    sentinel, master, replica = (int(p) for p in _port_list("REDIS_LOCK_FAILOVER_PORTS"))
    return {"sentinel": sentinel, "master": master, "replica": replica, "name": "mymaster"}


def _port_list(name):
    value = os.environ.get(name)
    if not value:
        _port(name)
    return value.split(",")


@pytest.fixture(scope="session")
def dead_port():
    return _port("REDIS_LOCK_DEAD_PORT")


@pytest.fixture
def r(port):
    client = redis.Redis(host="127.0.0.1", port=port)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def other(port):
    """A second client, for the other party of a test."""
    client = redis.Redis(host="127.0.0.1", port=port)
    yield client
    client.close()


@pytest.fixture
def key(request):
    return "lock:" + re.sub(r"[^A-Za-z0-9_]+", "_", request.node.name)


# redis-py before 5.0.1 names `aclose` `close`: the tests say `aclose`, and run on the
# oldest redis-py the package supports too.
import redis.asyncio as _aioredis  # noqa: E402

for _cls in (_aioredis.Redis, getattr(_aioredis, "RedisCluster", None)):
    if _cls is not None and not hasattr(_cls, "aclose"):
        _cls.aclose = _cls.close
