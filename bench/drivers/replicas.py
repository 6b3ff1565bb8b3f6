"""Scenario 14 of the benchmark (bench/src/scenarios/replicas.rs), for the Python package:
on a master with one replica, free locks acquired one at a time by the package with its
defaults (replicas "auto": the server holds the reply until the replica has the grant)
against a raw LOCK.ACQUIRE ... REPLICAS 1 on the same redis-py client, each released
untimed. Sides alternate which goes first from round to round.

usage: replicas.py PORT N ROUNDS
prints, per round and side, one line: "package" or "raw", then each acquire's latency in
ns."""

import sys
import time

import redis
from redis_lock_module import Lock

TTL_S = 600


def package(r, tag, n):
    latencies = []
    for i in range(n):
        lock = r.lock(f"py:{tag}:{i}", timeout=TTL_S, lock_class=Lock)
        start = time.perf_counter_ns()
        granted = lock.acquire(blocking=False)
        latencies.append(time.perf_counter_ns() - start)
        if not granted:
            raise SystemExit(f"py:{tag}:{i}: a free lock not granted")
        lock.release()
    return latencies


def raw(r, tag, n):
    latencies = []
    for i in range(n):
        key = f"py-raw:{tag}:{i}"
        start = time.perf_counter_ns()
        granted = r.execute_command("LOCK.ACQUIRE", key, TTL_S * 1000,
                                    "REPLICAS", 1, "REPLTIMEOUT", 1000)
        latencies.append(time.perf_counter_ns() - start)
        if granted is None:
            raise SystemExit(f"{key}: a free lock not granted")
        r.execute_command("LOCK.RELEASE", key, granted[0])
    return latencies


def main():
    port, n, rounds = (int(arg) for arg in sys.argv[1:4])
    r = redis.Redis(port=port)
    sides = [("package", package), ("raw", raw)]
    for round_ in range(rounds):
        for name, run in sides if round_ % 2 == 0 else sides[::-1]:
            latencies = run(r, f"{name}:{round_}", n)
            print(name, *latencies, flush=True)


main()
