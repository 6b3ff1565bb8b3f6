"""Scenario 14 of the benchmark (bench/src/scenarios/replicas.rs), for the Python package:
on a master with one replica, free locks acquired one at a time by the package with its
defaults (replicas "auto": the server holds the reply until the replica has the grant)
against a raw LOCK.ACQUIRE ... REPLICAS 1 on the same redis-py client, each released
untimed. The two sides take turns in stretches of 100 acquires, so that both meet the
same state of the machine; which goes first turns from round to round.

usage: replicas.py PORT N ROUNDS
prints, per round and side, one line: "package" or "raw", then each acquire's latency in
ns."""

import sys
import time

import redis
from redis_lock_module import Lock

TTL_S = 600
STRETCH = 100


def package(r, key):
    lock = r.lock(key, timeout=TTL_S, lock_class=Lock)
    start = time.perf_counter_ns()
    granted = lock.acquire(blocking=False)
    took = time.perf_counter_ns() - start
    if not granted:
        raise SystemExit(f"{key}: a free lock not granted")
    lock.release()
    return took


def raw(r, key):
    start = time.perf_counter_ns()
    granted = r.execute_command("LOCK.ACQUIRE", key, TTL_S * 1000,
                                "REPLICAS", 1, "REPLTIMEOUT", 1000)
    took = time.perf_counter_ns() - start
    if granted is None:
        raise SystemExit(f"{key}: a free lock not granted")
    r.execute_command("LOCK.RELEASE", key, granted[0])
    return took


def main():
    port, n, rounds = (int(arg) for arg in sys.argv[1:4])
    r = redis.Redis(port=port)
    sides = [("package", package), ("raw", raw)]
    for round_ in range(rounds):
        order = sides if round_ % 2 == 0 else sides[::-1]
        latencies = {name: [] for name, _ in sides}
        for start in range(0, n, STRETCH):
            for name, once in order:
                for i in range(start, min(start + STRETCH, n)):
                    latencies[name].append(once(r, f"py:{name}:{round_}:{i}"))
        for name, _ in sides:
            print(name, *latencies[name], flush=True)


main()
