"""Which nemeses act when, and the wait for the servers to settle after each: every
nemesis named alone, then `--mixed` phases drawn with the seed, each of one nemesis or two
at once. A phase is its fault, its heal, and the recovery until the Sentinels agree on a
master with its replicas linked and both systems grant again."""

import time

from . import nemesis
from .topology import NODES


def schedule(opts, rng):
    """The phases: lists of nemeses applied together."""
    phases = [name.split("+") for name in opts.phase_names]  # "a+b": two at once
    for _ in range(opts.mixed):
        first = rng.choice(nemesis.ALL)
        phase = [first]
        if rng.random() < 0.5:
            phase.append(rng.choice([n for n in nemesis.ALL if nemesis.compatible(first, n)]))
        phases.append(phase)
    return phases


def settled(topology, every_replica=True, seconds=30):
    """One master named by every Sentinel, answering as master, with both replicas linked
    to it (they may lag: the workers write meanwhile), or one at least."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        master = topology.master_by_sentinels()
        role = master and topology.role(master)
        wanted = len(NODES) - 1 if every_replica else 1
        if role and role[0] == b"master" and len(role[2]) >= wanted:
            return master
        time.sleep(0.1)
    raise RuntimeError("the servers did not settle after the heal")


def play(run):
    """Runs the baseline, then every phase of `schedule`, on `run`; returns the phases as
    (name, start) and a note per phase of what it did."""
    o = run.o
    phases, notes = [], []
    started = time.monotonic()
    phases.append(("no fault", started))
    time.sleep(o.fault_seconds)
    run.workers.granted_since(started)
    planned = schedule(o, run.rng)
    for n, names in enumerate(planned):
        faults = [nemesis.make(name, run) for name in names]
        t = time.monotonic()
        what = [fault.start() for fault in faults]
        phases.append((" + ".join(names), t))
        seconds = o.fault_seconds * max(2 if name in nemesis.FAILOVERS else 1 for name in names)
        time.sleep(seconds)
        for fault in reversed(faults):
            fault.heal()
        healed = time.monotonic()
        # Between phases, every replica is linked again; after the last, one master.
        last = n + 1 == len(planned)
        master = settled(run.topology, every_replica=not last)
        took = time.monotonic() - healed
        run.workers.granted_since(healed)
        linked = "a replica" if last else "every replica"
        notes.append(f"{' + '.join(names)}: {'; '.join(what)}; healed after {seconds:.1f} s; the "
                     f"Sentinels agreed on {master}, with {linked} linked, {took:.1f} s after the heal")
        time.sleep(o.ttl / 1000)
    return phases, notes
