"""The fault harness: starts a master, two replicas (with the module) and three
Sentinels on their own loopback addresses, runs the workers of both systems (the module,
and the SET NX + compare-and-delete recipe) for the whole run, applies the nemeses one
after another (each a phase: the fault, its heal, and the recovery until the Sentinels
agree on one master again; a mixed phase applies two at once), then checks the history and writes the report.

  python3 faults/run.py --server PATH --module PATH [--nemeses a,b,...|all] [--mixed N]
                        [--seed N] [--fault-seconds S] [--out DIR] [--short]

Exits 1 when the checker finds a violation of what the module promises (`late kept`,
`store stale`), 2 when the run itself failed. Every process it started, every packet
filter rule and every clock file is removed at the end, also on SIGTERM or Ctrl-C; a
run killed with SIGKILL is cleaned up by the next one (or `--sweep`)."""

import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import checker
import nemesis
import net
from report import markdown
from store import accepted_writes, open_store
from topology import NODES, SENTINELS, SERVICE, Topology

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class WorkerProc:
    def __init__(self, system, index, address, proc, state):
        self.system, self.index, self.address, self.proc, self.state = system, index, address, proc, state
        self.name = f"{system}-{index}"


class Run:
    def __init__(self, opts, work):
        self.o, self.dir = opts, work
        self.store_path = os.path.join(work, "store.db")
        self.rng = random.Random(opts.seed)
        self.topology = Topology(opts.server, opts.module, work, random.Random(), opts.min_replicas)
        self.partitions = net.Partitions(port=self.topology.port)
        self.workers = []
        self.phases = []
        self.notes = []

    # --- what the nemeses ask ----------------------------------------------------------

    def master(self):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            master = self.topology.master_by_sentinels()
            if master:
                return master
            time.sleep(0.1)
        raise RuntimeError("the Sentinels name no master")

    def workers_of(self, system):
        return [w for w in self.workers if w.system == system]

    def near_clients(self):
        """The addresses of the first half of each system's workers."""
        near = []
        for system in ("module", "recipe"):
            ws = self.workers_of(system)
            near += [w.address for w in ws[: len(ws) // 2]]
        return near

    def stop_holder(self, system):
        """SIGSTOPs a worker of `system` that holds a lock as a writer and has not written
        under it yet (its state file says so once it is stopped); None if none did
        within 10 s."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ws = self.workers_of(system)
            self.rng.shuffle(ws)
            for w in ws:
                if self.holds_unwritten(w):
                    os.kill(w.proc.pid, signal.SIGSTOP)
                    if self.holds_unwritten(w):
                        return w
                    os.kill(w.proc.pid, signal.SIGCONT)
            time.sleep(0.01)
        return None

    def written_since(self, key, since, not_by):
        """True if the store accepted a write to `key` by another writer after `since`."""
        db = open_store(self.store_path)
        try:
            row = db.execute("SELECT count(*) FROM accepted WHERE key = ? AND at > ? AND writer != ?",
                             (key, since, not_by)).fetchone()
        finally:
            db.close()
        return row[0] > 0

    def holds_unwritten(self, worker):
        state = self.state_of(worker)
        return state is not None and state[0] == "holding" and state[3] != "shared"

    @staticmethod
    def state_of(worker):
        """What a worker's state file says: [holding|writing, key, answered at, mode] while
        it holds a lock, else None."""
        try:
            with open(worker.state) as f:
                words = f.read().split()
        except OSError:
            return None
        return words if len(words) == 4 else None

    # --- the run -----------------------------------------------------------------------

    def start(self):
        net.sweep()
        self.partitions.create()
        self.topology.start()
        db = open_store(self.store_path, create=True)
        db.close()
        sentinels = ",".join(SENTINELS)
        for system in ("module", "recipe"):
            keys = ",".join(f"{system[0]}{k}" for k in range(self.o.keys))
            for i in range(self.o.workers):
                address = f"127.0.0.{20 + len(self.workers)}"
                state = os.path.join(self.dir, f"{system}-{i}.state")
                args = [sys.executable, os.path.join(HERE, "worker.py"), "--system", system,
                        "--id", str(i), "--address", address, "--sentinels", sentinels,
                        "--service", SERVICE, "--port", str(self.topology.port), "--keys", keys,
                        "--ttl", str(self.o.ttl), "--wait", str(self.o.ttl // 2),
                        "--seed", str(self.rng.getrandbits(32)), "--seconds", "100000",
                        "--history", os.path.join(self.dir, f"{system}-{i}.jsonl"),
                        "--state", state, "--store", self.store_path]
                if self.o.unchecked_store:
                    args.append("--unchecked-store")
                if self.o.wait_replicas:
                    args += ["--wait-replicas", str(self.o.wait_replicas)]
                proc = subprocess.Popen(args, stdin=subprocess.DEVNULL)
                self.workers.append(WorkerProc(system, i, address, proc, state))

    def schedule(self):
        """The phases: lists of nemeses applied together. Each named one alone, then
        `--mixed` phases drawn with the seed, each one nemesis or two at once."""
        names = self.o.nemeses.split(",") if self.o.nemeses != "all" else list(nemesis.ALL)
        phases = [[name] for name in names]
        for _ in range(self.o.mixed):
            first = self.rng.choice(nemesis.ALL)
            phase = [first]
            if self.rng.random() < 0.5:
                phase.append(self.rng.choice([n for n in nemesis.ALL if nemesis.compatible(first, n)]))
            phases.append(phase)
        return phases

    def play(self):
        started = time.monotonic()
        self.phases.append(("no fault", started))
        time.sleep(self.o.fault_seconds)
        self.wait_granted_since(started)
        phases = self.schedule()
        for n, names in enumerate(phases):
            faults = [nemesis.make(name, self) for name in names]
            t = time.monotonic()
            what = [fault.start() for fault in faults]
            self.phases.append((" + ".join(names), t))
            seconds = self.o.fault_seconds * max(2 if name in nemesis.FAILOVERS else 1 for name in names)
            time.sleep(seconds)
            for fault in reversed(faults):
                fault.heal()
            healed = time.monotonic()
            # Between phases, every replica is linked again; after the last, one master.
            master = self.wait_settled(every_replica=n + 1 < len(phases))
            settled = time.monotonic() - healed
            self.wait_granted_since(healed)
            linked = "every replica" if n + 1 < len(phases) else "a replica"
            self.notes.append(f"{' + '.join(names)}: {'; '.join(what)}; healed after {seconds:.1f} s; the "
                              f"Sentinels agreed on {master}, with {linked} linked, {settled:.1f} s "
                              f"after the heal")
            time.sleep(self.o.ttl / 1000)

    def wait_granted_since(self, since, seconds=30):
        """Waits until a worker of each system was granted a lock after `since`."""
        deadline = time.monotonic() + seconds
        waiting = {"module", "recipe"}
        while waiting and time.monotonic() < deadline:
            for w in self.workers:
                state = self.state_of(w)
                if w.system in waiting and state is not None and float(state[2]) > since:
                    waiting.discard(w.system)
            time.sleep(0.02)
        if waiting:
            raise RuntimeError(f"no grant of {', '.join(sorted(waiting))} in {seconds} s after the heal")

    def wait_settled(self, every_replica=True, seconds=30):
        """One master named by every Sentinel, answering as master, with both replicas
        linked to it (they may lag: the workers write meanwhile), or one at least."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            master = self.topology.master_by_sentinels()
            role = master and self.topology.role(master)
            wanted = len(NODES) - 1 if every_replica else 1
            if role and role[0] == b"master" and len(role[2]) >= wanted:
                return master
            time.sleep(0.1)
        raise RuntimeError("the servers did not settle after the heal")

    def stop_workers(self):
        died = [f"{w.name} (exit {w.proc.returncode})" for w in self.workers if w.proc.poll() is not None]
        if died:
            raise RuntimeError(f"workers ended before the run did: {', '.join(died)}")
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGCONT)
                w.proc.terminate()
        for w in self.workers:
            try:
                w.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()

    def results(self):
        end = time.monotonic()
        self.stop_workers()
        master = self.wait_settled(every_replica=False)
        history = []
        for path in sorted(glob.glob(os.path.join(self.dir, "*.jsonl"))):
            with open(path) as f:
                for line in f:
                    try:
                        history.append(json.loads(line))
                    except ValueError:
                        pass       # a line cut by the worker's end
        data = {}
        for key in [f"{system[0]}{k}" for system in ("module", "recipe") for k in range(self.o.keys)]:
            reply = self.topology.call(master, "LRANGE", f"data:{key}", 0, -1, timeout=5)
            data[key] = [e.decode() for e in reply]
        db = open_store(self.store_path)
        accepted = accepted_writes(db)
        db.close()
        rows = checker.check(history, accepted, data, self.phases, end)
        info = self.topology.call(master, "INFO", "server", timeout=5).decode()
        fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        version = (f"Valkey {fields['valkey_version']}" if "valkey_version" in fields
                   else f"Redis {fields.get('redis_version', '?')}")
        return rows, version, len(history)

    def cleanup(self):
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
        self.topology.stop_all()
        self.partitions.remove()
        # Every server is gone: nothing for a later run's sweep to kill here.
        if os.path.exists(os.path.join(self.dir, "pids")):
            os.remove(os.path.join(self.dir, "pids"))


def sweep_runs(base):
    """Kills what runs killed with SIGKILL left behind (their servers), and removes their
    directories; removes their packet filter chains."""
    net.sweep()
    for run_dir in glob.glob(os.path.join(base, "run-*")):
        if not os.path.exists(os.path.join(run_dir, "pids")):
            continue       # a run that cleaned up after itself (kept with --keep)
        owner = run_dir.rsplit("-", 1)[1]
        if os.path.exists(f"/proc/{owner}"):
            continue
        with open(os.path.join(run_dir, "pids")) as f:
            pids = f.read().split()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if run_dir.encode() in f.read():
                        os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        shutil.rmtree(run_dir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    p.add_argument("--module", default=os.path.join(ROOT, "target/release/libredis_lock.so"))
    p.add_argument("--nemeses", default="all", help="comma-separated, or all: " + ", ".join(nemesis.ALL))
    p.add_argument("--mixed", type=int, default=0,
                   help="then N phases drawn at random with the seed, each one nemesis or two at once")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fault-seconds", type=float, default=3.0)
    p.add_argument("--ttl", type=int, default=1000, help="the locks' TTL in ms")
    p.add_argument("--workers", type=int, default=3, help="per system")
    p.add_argument("--keys", type=int, default=2, help="locks per system")
    p.add_argument("--counts", help="also write the counts here: one 'phase<TAB>system<TAB>what<TAB>n' a line")
    p.add_argument("--min-replicas", type=int, default=0, help="min-replicas-to-write on every node")
    p.add_argument("--wait-replicas", type=int, default=0,
                   help="a grant counts once WAIT n 100 says n replicas have it (else it is released)")
    p.add_argument("--unchecked-store", action="store_true",
                   help="mutation: the store accepts every write (the checker must then fail)")
    p.add_argument("--out", default=os.path.join(ROOT, "target/faults"))
    p.add_argument("--label", default=None)
    p.add_argument("--keep", action="store_true", help="keep the run's files (target/faults/run-<pid>)")
    p.add_argument("--short", action="store_true",
                   help="the run make test makes: faults of 1.5 s, one lock of 500 ms per system, and unless --nemeses says "
                        "otherwise pause-client, clock-forward, pause-master")
    p.add_argument("--sweep", action="store_true", help="only clean up after runs that were killed")
    o = p.parse_args()
    base = os.path.join(ROOT, "target/faults")
    os.makedirs(base, exist_ok=True)
    sweep_runs(base)
    if o.sweep:
        return 0
    if o.short:
        o.fault_seconds, o.ttl, o.keys = 1.5, 500, 1
        if o.nemeses == "all":
            o.nemeses = "pause-client,clock-forward,pause-master"
    o.server = shutil.which(o.server) or o.server
    work = os.path.join(base, f"run-{os.getpid()}")
    os.makedirs(work)

    def stop(signum, frame):
        raise SystemExit(2)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)

    run = Run(o, work)
    began = time.monotonic()
    failed_run = True
    try:
        run.start()
        run.play()
        rows, version, operations = run.results()
        failed_run = False
    finally:
        run.cleanup()
        if failed_run:
            print(f"fault run failed; its files: {work}", file=sys.stderr)
    label = o.label or os.path.basename(o.server)
    text = markdown(rows, o, version, run, operations, time.monotonic() - began)
    os.makedirs(o.out, exist_ok=True)
    with open(os.path.join(o.out, f"{label}.md"), "w") as f:
        f.write(text)
    print(text)
    if o.counts:
        with open(o.counts, "w") as f:
            for row in rows:
                for system in checker.SYSTEMS:
                    for what, n in sorted(row[system].items()):
                        f.write(f"{row['phase']}\t{system}\t{what}\t{n}\n")
    if not o.keep:
        shutil.rmtree(work, ignore_errors=True)
    broken = checker.violations(rows)
    for line in broken:
        print("VIOLATION:", line)
    return 1 if broken else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.exit(2)
