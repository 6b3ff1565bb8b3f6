"""The faults, each a start and a heal. A nemesis acts on the node the Sentinels name as
master when it starts, and on workers of both systems alike, so each row of the report
compares the module and the recipe under the same fault."""

import os
import signal
import time

from .topology import NODES, SENTINELS

CLOCK_JUMP_S = 5


class Nemesis:
    name = ""

    def __init__(self, run):
        self.run = run            # the Run (run.py): topology, partitions, workers, rng

    def start(self):
        raise NotImplementedError

    def heal(self):
        raise NotImplementedError


class PartitionMaster(Nemesis):
    """The master is cut from its replicas and the Sentinels, and from half the clients;
    the other half still reach it (a split brain once a replica is promoted)."""
    name = "partition-master"

    def start(self):
        self.master = self.run.master()
        near = self.run.workers.near_clients()
        far = [w.address for w in self.run.workers.all if w.address not in near]
        others = [a for a in NODES if a != self.master]
        self.run.partitions.cut([self.master], others + SENTINELS + far)
        return f"{self.master} cut from {', '.join(others + SENTINELS)} and clients {', '.join(far)}"

    def heal(self):
        self.run.partitions.heal()


class PartitionClient(Nemesis):
    """One client of each system is cut from every server."""
    name = "partition-client"

    def start(self):
        self.cut = [self.run.rng.choice(self.run.workers.of(system)).address for system in ("module", "recipe")]
        self.run.partitions.cut(self.cut, NODES + SENTINELS)
        return f"clients {', '.join(self.cut)} cut from every server"

    def heal(self):
        self.run.partitions.heal()


class PauseMaster(Nemesis):
    """SIGSTOP of the master past the Sentinels' down-after time, then SIGCONT."""
    name = "pause-master"

    def start(self):
        self.master = self.run.master()
        os.kill(self.run.topology.pid(self.master), signal.SIGSTOP)
        return f"{self.master} stopped"

    def heal(self):
        os.kill(self.run.topology.pid(self.master), signal.SIGCONT)


class PauseClient(Nemesis):
    """SIGSTOP of a client of each system while it holds a lock and has not written under
    it yet, past the lock's TTL and until a newer holder has written: its writes come
    after the TTL ran out, and after a newer holder's."""
    name = "pause-client"

    def start(self):
        self.started = time.monotonic()
        self.paused = []
        for system in ("module", "recipe"):
            worker = self.run.workers.stop_holder(system)
            if worker is not None:
                self.paused.append(worker)
        return "stopped while holding: " + (", ".join(w.name for w in self.paused) or "none")

    def heal(self):
        # Thawed once another holder of the same lock has written to the store (or 10 s
        # more have passed), so that the late write it makes next is one.
        deadline = time.monotonic() + 10
        for worker in self.paused:
            key = worker.state().key   # stopped while holding: its state stays
            while time.monotonic() < deadline and not self.run.written_since(key, self.started, worker.name):
                time.sleep(0.02)
            os.kill(worker.proc.pid, signal.SIGCONT)


class KillMaster(Nemesis):
    """kill -9 of the master; it is started again (empty) at the heal."""
    name = "kill-master"

    def start(self):
        self.master = self.run.master()
        self.run.topology.kill9(self.master)
        return f"{self.master} killed"

    def heal(self):
        self.run.topology.restart(self.master)


class ClockJump(Nemesis):
    """The master's wall clock jumps by CLOCK_JUMP_S seconds (forward or back), and back
    to the machine's at the heal (the opposite jump)."""

    def __init__(self, run, sign):
        super().__init__(run)
        self.sign = sign
        self.name = "clock-forward" if sign > 0 else "clock-back"

    def start(self):
        self.master = self.run.master()
        self.run.topology.clocks[self.master].set(self.sign * CLOCK_JUMP_S)
        return f"{self.master}'s clock {self.sign * CLOCK_JUMP_S:+d} s"

    def heal(self):
        self.run.topology.clocks[self.master].set(0)


def make(name, run):
    if name == "clock-forward":
        return ClockJump(run, +1)
    if name == "clock-back":
        return ClockJump(run, -1)
    kinds = {k.name: k for k in (PartitionMaster, PartitionClient, PauseMaster, PauseClient, KillMaster)}
    return kinds[name](run)


# The nemeses that make the Sentinels fail over: their faults last twice as long.
FAILOVERS = ("partition-master", "pause-master", "kill-master")


def compatible(a, b):
    """Whether two nemeses can act at once: not the same one, not both a clock jump, not a
    pause of the master and its crash (a killed process cannot be stopped or resumed)."""
    if a == b or {a, b} == {"clock-forward", "clock-back"}:
        return False
    return {a, b} != {"pause-master", "kill-master"}


ALL = ["partition-master", "partition-client", "pause-master", "pause-client", "kill-master",
       "clock-forward", "clock-back"]
