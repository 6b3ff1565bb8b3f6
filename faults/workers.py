"""The workers of a fault run: one process per client (`worker.py`), each on its own
loopback address, and what each holds now (its state file, `state.py`)."""

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from . import shims
from .options import ROOT
from .state import HolderState
from .topology import SENTINELS, SERVICE
from .worker import WorkerOptions

SYSTEMS = ("module", "recipe")
RUST_WORKER = os.path.join(ROOT, "target", "release", "examples", "fault_worker")


def rust_worker():
    """The Rust package's worker, built first if it is not (the tests' build makes it)."""
    if not os.path.exists(RUST_WORKER):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "redis-lock-client", "--example", "fault_worker"],
                       cwd=ROOT, check=True)
    return RUST_WORKER


@dataclass
class WorkerProc:
    system: str
    index: int
    address: str
    proc: subprocess.Popen
    state_path: str
    package: str = "python"     # the module's package it locks with (the recipe's: none)

    @property
    def name(self):
        return f"{self.system}-{self.index}"

    def state(self):
        """What it holds now; None before its first state."""
        return HolderState.read(self.state_path)


class Workers:
    def __init__(self, opts, work_dir, port, store_path, rng):
        self.o, self.dir, self.port, self.store_path, self.rng = opts, work_dir, port, store_path, rng
        self.all = []

    def start(self):
        """Starts `workers` processes per system, each with its own address and seed, and
        the module's workers on the other packages (Node, Rust, PHP)."""
        for system in SYSTEMS:
            keys = ",".join(f"{system[0]}{k}" for k in range(self.o.keys))
            if system == "module":
                self._start_package_workers(keys)
            for i in range(self.o.workers):
                address = f"127.0.0.{20 + len(self.all)}"
                worker = WorkerOptions(
                    system=system, id=i, address=address, sentinels=",".join(SENTINELS),
                    service=SERVICE, port=self.port, keys=keys, ttl=self.o.ttl,
                    wait=self.o.ttl // 2, seed=self.rng.getrandbits(32), seconds=100000,
                    history=os.path.join(self.dir, f"{system}-{i}.jsonl"),
                    state=os.path.join(self.dir, f"{system}-{i}.state"), store=self.store_path,
                    unchecked_store=self.o.unchecked_store, wait_replicas=self.o.wait_replicas,
                    replicas=self.o.replicas)
                proc = subprocess.Popen([sys.executable, "-m", "faults.worker", *worker.args()],
                                        stdin=subprocess.DEVNULL, cwd=ROOT)
                self.all.append(WorkerProc(system, i, address, proc, worker.state,
                                           "python" if system == "module" else "none"))

    def _start_package_workers(self, keys):
        """The module's workers on the other packages, named after the Python ones
        (module-<workers>, ...) and taking the same locks: `node_workers` on the Node
        package (`node_worker.mjs`, bound to its address by node-redis), then
        `rust_workers` on the Rust package (`examples/fault_worker.rs`) and `php_workers`
        on the PHP package (`php_worker.php`), whose clients cannot bind an address: a
        preloaded library (`bindshim.c`) binds their connections."""
        commands = ([("node", ["node", os.path.join(ROOT, "faults", "node_worker.mjs")])] * self.o.node_workers
                    + ([("rust", [rust_worker()])] * self.o.rust_workers if self.o.rust_workers else [])
                    + [("php", ["php", os.path.join(ROOT, "faults", "php_worker.php")])] * self.o.php_workers)
        for n, (package, command) in enumerate(commands):
            i = self.o.workers + n
            address = f"127.0.0.{20 + len(self.all)}"
            state = os.path.join(self.dir, f"module-{i}.state")
            args = ["--id", str(i), "--address", address, "--sentinels", ",".join(SENTINELS),
                    "--service", SERVICE, "--port", str(self.port), "--keys", keys,
                    "--ttl", str(self.o.ttl), "--wait", str(self.o.ttl // 2),
                    "--seed", str(self.rng.getrandbits(32)), "--seconds", "100000",
                    "--history", os.path.join(self.dir, f"module-{i}.jsonl"), "--state", state,
                    "--replicas", self.o.replicas]
            env = None
            if package != "node":
                env = dict(os.environ, LD_PRELOAD=shims.build("bindshim", self.dir), BINDSHIM_ADDRESS=address)
            proc = subprocess.Popen([*command, *args], stdin=subprocess.DEVNULL, cwd=ROOT, env=env)
            self.all.append(WorkerProc("module", i, address, proc, state, package))

    def packages(self):
        """Each of the module's workers' name -> the package it locks with."""
        return {w.name: w.package for w in self.all if w.system == "module"}

    def of(self, system):
        return [w for w in self.all if w.system == system]

    def near_clients(self):
        """The addresses of the first half of each system's workers, per package of the
        module's and at least one of each: every package meets the split brain."""
        near = []
        for system in SYSTEMS:
            for package in dict.fromkeys(w.package for w in self.of(system)):
                ws = [w for w in self.of(system) if w.package == package]
                near += [w.address for w in ws[: max(1, len(ws) // 2)]]
        return near

    def stop_holder(self, system):
        """SIGSTOPs a worker of `system` that holds a lock as a writer and has not written
        under it yet (its state file says so once it is stopped); None if none did
        within 10 s. Of the module's, a Python one: only they write to the fenced store
        too, whose refusal of the late write is what the pause shows."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ws = [w for w in self.of(system) if w.package in ("python", "none")]
            self.rng.shuffle(ws)
            for w in ws:
                if self._holds_unwritten(w):
                    os.kill(w.proc.pid, signal.SIGSTOP)
                    if self._holds_unwritten(w):
                        return w
                    os.kill(w.proc.pid, signal.SIGCONT)
            time.sleep(0.01)
        return None

    @staticmethod
    def _holds_unwritten(worker):
        state = worker.state()
        return state is not None and state.holds_unwritten

    def granted_since(self, since, seconds=30):
        """Waits until a worker of each system was granted a lock after `since`."""
        deadline = time.monotonic() + seconds
        waiting = set(SYSTEMS)
        while waiting and time.monotonic() < deadline:
            for w in self.all:
                state = w.state()
                if w.system in waiting and state is not None and state.holds and state.answered_at > since:
                    waiting.discard(w.system)
            time.sleep(0.02)
        if waiting:
            raise RuntimeError(f"no grant of {', '.join(sorted(waiting))} in {seconds} s after the heal")

    def stop(self):
        """Ends every worker; fails the run if one ended before (a dead worker)."""
        died = [f"{w.name} (exit {w.proc.returncode})" for w in self.all if w.proc.poll() is not None]
        if died:
            raise RuntimeError(f"workers ended before the run did: {', '.join(died)}")
        for w in self.all:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGCONT)
                w.proc.terminate()
        for w in self.all:
            try:
                w.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()

    def kill(self):
        """Kills whatever still runs (the run's cleanup)."""
        for w in self.all:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
