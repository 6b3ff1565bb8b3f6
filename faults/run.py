"""A fault run from start to report: starts a master, two replicas (with the module) and
three Sentinels on their own loopback addresses (`topology.py`), runs the workers of both
systems, the module and the SET NX + compare-and-delete recipe, for the whole run
(`workers.py`), applies the nemeses one phase after another (`phases.py`), then reads
back what happened (`results.py`), counts it (`checker.py`) and writes the report
(`report.py`).

  python3 -m faults --server PATH --module PATH [--nemeses a,b,...|all] [--mixed N]
                    [--seed N] [--fault-seconds S] [--out DIR] [--short]

Exits 1 when the checker finds a violation of what the module promises (`late kept`,
`store stale`), 2 when the run itself failed; a run with a violation keeps its
directory (its histories, logs and store) and names it last. Every process it started,
every packet filter rule and every clock file is removed at the end, also on SIGTERM or
Ctrl-C; a run killed with SIGKILL is cleaned up by the next one (or `--sweep`)."""

import glob
import json
import os
import random
import shutil
import signal
import sys
import time

from . import checker, net, options, phases, results
from .report import markdown
from .store import open_store
from .topology import Topology
from .workers import Workers

# The line a run with a violation ends with, before the directory it keeps (its
# histories, server logs and store): what was kept is for a look at the violation.
KEPT = "the run's files, kept for a look at the violation:"


class Run:
    """One run: its options, its directory, the servers, the partitions, the workers, and
    the nemeses' random choices. The nemeses act through it (`nemesis.py`)."""

    def __init__(self, opts, work):
        self.o, self.dir = opts, work
        self.store_path = os.path.join(work, "store.db")
        self.rng = random.Random(opts.seed)
        self.topology = Topology(opts.server, opts.module, work, random.Random(), opts.min_replicas,
                                 opts.server_replicas)
        self.partitions = net.Partitions(port=self.topology.port)
        self.workers = Workers(opts, work, self.topology.port, self.store_path, self.rng)
        self.phases = []
        self.notes = []

    def master(self):
        """The master the Sentinels name now (waiting up to 20 s for one)."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            master = self.topology.master_by_sentinels()
            if master:
                return master
            time.sleep(0.1)
        raise RuntimeError("the Sentinels name no master")

    def written_since(self, key, since, not_by):
        """True if the store accepted a write to `key` by another writer after `since`."""
        return results.written_since(self.store_path, key, since, not_by)

    def start(self):
        net.sweep()
        self.partitions.create()
        self.topology.start()
        open_store(self.store_path, create=True).close()
        self.workers.start()

    def play(self):
        self.phases, self.notes = phases.play(self)

    def results(self):
        end = time.monotonic()
        self.workers.stop()
        with open(os.path.join(self.dir, "phases.json"), "w") as f:
            json.dump({"phases": self.phases, "end": end, "packages": self.workers.packages()}, f)
        master = phases.settled(self.topology, every_replica=False)
        return results.check(self, master, self.phases, end)

    def cleanup(self):
        self.workers.kill()
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


def write_counts(path, rows):
    """The counts as `phase<TAB>system<TAB>what<TAB>n` lines (for tests/faults), then the
    module's per package, with `module:<package>` for the system."""
    with open(path, "w") as f:
        for row in rows:
            for system in checker.SYSTEMS:
                for what, n in sorted(row[system].items()):
                    f.write(f"{row['phase']}\t{system}\t{what}\t{n}\n")
            for package, counts in sorted(row["packages"].items()):
                for what, n in sorted(counts.items()):
                    f.write(f"{row['phase']}\tmodule:{package}\t{what}\t{n}\n")


def main(argv=None):
    o = options.parse(argv, __doc__)
    base = os.path.join(options.ROOT, "target/faults")
    os.makedirs(base, exist_ok=True)
    sweep_runs(base)
    if o.sweep:
        return 0
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
        write_counts(o.counts, rows)
    broken = checker.violations(rows, ["partition-master"] if o.short else None)
    for line in broken:
        print("VIOLATION:", line)
    if broken:
        print(f"{KEPT} {work}")
    elif not o.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if broken else 0


def entry():
    """`python3 -m faults`: exit 0, 1 on a violation, 2 when the run failed."""
    try:
        return main()
    except SystemExit:
        raise
    except BaseException:
        import traceback
        traceback.print_exc()
        return 2
