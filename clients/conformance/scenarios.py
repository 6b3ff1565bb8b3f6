"""Reads clients/conformance/scenarios.txt and runs it with a package's driver: the
interpreter every Python-side driver shares (the format is described in the file)."""

import os
import signal
import sys
import time
import traceback


def parse(path):
    scenarios = []
    for raw in open(path, encoding="utf-8"):
        line = raw.split("#", 1)[0].rstrip() if raw.lstrip().startswith("#") else raw.rstrip()
        if not line.strip():
            continue
        if line.startswith("scenario "):
            scenarios.append({"name": line[len("scenario "):].strip(), "needs": [], "steps": []})
        elif line.strip().startswith("needs "):
            scenarios[-1]["needs"].append(line.split()[1])
        else:
            step, _, expected = line.strip().partition(" -> ")
            overrides = {}
            while expected.endswith("]") and "[" in expected:
                expected, _, override = expected[:-1].rpartition("[")
                package, _, outcome = override.partition(":")
                overrides[package.strip()] = outcome.strip()
                expected = expected.strip()
            scenarios[-1]["steps"].append((step, step.split(), expected or None, overrides))
    return scenarios


def shown(reply):
    """A reply as the scenarios write it."""
    if reply is None:
        return "nil"
    if isinstance(reply, (list, tuple)):
        return "array"
    if isinstance(reply, bytes):
        return reply.decode()
    if isinstance(reply, bool):
        return str(reply).lower()
    if isinstance(reply, float):
        return str(int(reply)) if reply.is_integer() else str(reply)
    return str(reply)


def matches(got, expected):
    words = expected.split()
    if words[0] == "between":
        try:
            return int(words[1]) <= float(got) <= int(words[2])
        except ValueError:
            return False
    return got == expected


def options(words):
    """`wait 5000 watchdog retries 2` -> {"wait": 5000, "watchdog": True, "retries": 2}."""
    found, i = {}, 0
    while i < len(words):
        if words[i] == "watchdog":
            found["watchdog"] = True
            i += 1
        else:
            found[words[i]] = int(words[i + 1])
            i += 2
    return found


def step(driver, words, state):
    """Runs one step; its outcome as the scenarios write it (None: nothing to compare)."""
    verb, args = words[0], words[1:]
    if verb == "lock":
        return driver.lock(args[0], args[1], int(args[2]), **options(args[3:]))
    if verb == "release":
        return driver.release(args[0])
    if verb == "extend":
        return driver.extend(args[0], int(args[1]))
    if verb == "do":
        return shown(driver.do(args[0], args[1:]))
    if verb == "fence-above":
        high, low = driver.fence(args[0]), driver.fence(args[1])
        if not high > low:
            raise AssertionError(f"fence {high} is not above {low}")
        return None
    if verb == "held":
        return driver.held(args[0])
    if verb == "lost":
        return driver.lost_within(args[0], int(args[2]))
    if verb == "server":
        return shown(driver.server(int(args[0]), args[1:]))
    if verb == "calls":
        return str(calls(driver.server(int(args[0]), ["INFO", "commandstats"]), args[1]))
    if verb in ("waits", "own-waits"):
        stats = driver.server(int(args[0]), ["INFO", "commandstats"])
        if verb == "waits":
            return str(calls(stats, "wait") + calls(stats, "waitaof"))
        server = driver.server(int(args[0]), ["INFO", "server"])
        return str(calls(stats, "wait") if server_waits(server) else 0)
    if verb == "eventually":
        index, command, limit = int(args[0]), args[1:-2], int(args[-1])
        deadline = time.monotonic() + limit / 1000
        while True:
            got = shown(driver.server(index, command))
            if got == state["expected"] or time.monotonic() > deadline:
                return got
            time.sleep(0.02)
    if verb in ("freeze", "thaw"):
        driver.signal(int(args[0]), verb == "freeze")
        state["frozen"].add(int(args[0])) if verb == "freeze" else state["frozen"].discard(int(args[0]))
        return None
    if verb == "sleep":
        time.sleep(int(args[0]) / 1000)
        return None
    if verb == "redlock":
        return driver.redlock(args[0], args[1], int(args[2]), **options(args[3:]))
    if verb == "attempts":
        return str(driver.attempts(args[0]))
    if verb == "took-between":
        took = state["took"]
        if not int(args[0]) <= took <= int(args[1]):
            raise AssertionError(f"took {took:.0f} ms")
        return None
    if verb == "validity-between":
        validity = driver.validity(args[0])
        if not int(args[1]) <= validity <= int(args[2]):
            raise AssertionError(f"validity {validity:.0f} ms")
        return None
    if verb == "redlock-release":
        return driver.redlock_release(args[0])
    raise ValueError(f"unknown step {verb!r}")


def calls(info, command):
    """How many calls of `command` an `INFO commandstats` reply counts."""
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith(f"cmdstat_{command.lower()}:"):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


def server_waits(info):
    """Whether the server an `INFO server` reply describes holds a grant's reply for its
    replicas itself (`REPLICAS n`): Redis 7.2+ and every Valkey."""
    text = info.decode() if isinstance(info, bytes) else str(info)
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    if "valkey_version" in fields:
        return True
    version = tuple(int(part) for part in fields.get("redis_version", "0.0").strip().split(".")[:2])
    return version >= (7, 2)


def counted_by(driver, words):
    """For a count of calls that came out wrong: the server's clients, each with its
    last command, its age and idle time (`CLIENT LIST`), to tell which connection made
    a call the scenario did not."""
    if words[0] not in ("calls", "waits", "own-waits"):
        return ""
    try:
        listing = driver.server(int(words[1]), ["CLIENT", "LIST"])
    except Exception as error:  # the count's failure is the report; this only helps
        return f" (CLIENT LIST failed: {error})"
    text = listing.decode() if isinstance(listing, bytes) else str(listing)
    keep = ("id=", "addr=", "age=", "idle=", "cmd=", "lib-name=")
    rows = [" ".join(f for f in line.split() if f.startswith(keep)) for line in text.splitlines()]
    return " | clients now: " + " ; ".join(rows)


def attach_replica(driver, ports):
    """Server 3 a replica of master 0 again, in sync with master 0's flush (its raw
    connection's `WAIT 1` answers 1 once the replica has it)."""
    if len(ports) < 4:
        return
    driver.server(3, ["REPLICAOF", "127.0.0.1", str(ports[0])])
    deadline = time.monotonic() + 15
    # A write made now, acknowledged: the replica streams from master 0 (Redis 7.0 starts
    # streaming to a replica only at its first acknowledgement after a sync).
    while driver.server(0, ["SET", "conformance:synced", "1"]) is None or \
            driver.server(0, ["WAIT", "1", "100"]) != 1:
        if time.monotonic() > deadline:
            raise RuntimeError("the replica of master 0 did not catch up")


def run(scenario, package, make_driver, ports=()):
    driver = make_driver()
    state = {"frozen": set(), "took": 0.0, "expected": None}
    try:
        for client_index in range(3):
            driver.server(client_index, ["FLUSHALL"])
        attach_replica(driver, ports)
        # `[7.0: outcome]`: the outcome where the server cannot wait for its replicas
        # itself (Redis 7.0), and the package waits.
        waits_itself = not server_waits(driver.server(0, ["INFO", "server"]))
        for text, words, expected, overrides in scenario["steps"]:
            path = overrides.get("7.0") if waits_itself else None
            expected = overrides.get(package, path or expected)
            state["expected"] = expected
            started = time.monotonic()
            try:
                got = step(driver, words, state)
            except AssertionError as error:
                return f"FAIL {scenario['name']}: {text}: {error}"
            except Exception as error:  # an outcome the scenario did not expect
                got = f"{type(error).__name__}: {error}"
            state["took"] = (time.monotonic() - started) * 1000
            if expected is not None and not (got is not None and matches(got, expected)):
                return f"FAIL {scenario['name']}: {text}: expected {expected}, got {got}" \
                    + counted_by(driver, words)
        return f"ok {scenario['name']}"
    finally:
        for index in state["frozen"]:
            driver.signal(index, False)
        driver.close()


def run_all(path, package, features, make_driver, ports=()):
    failed = 0
    for scenario in parse(path):
        missing = [need for need in scenario["needs"] if need not in features]
        if missing:
            print(f"skip {scenario['name']}: the {package} package has no {missing[0]}", flush=True)
            continue
        try:
            line = run(scenario, package, make_driver, ports)
        except Exception:
            line = f"FAIL {scenario['name']}: {traceback.format_exc().strip()}"
        failed += line.startswith("FAIL")
        print(line.replace("\n", " | "), flush=True)
    return 1 if failed else 0
