"""The options of a fault run, typed: `parse(argv)` reads the command line into `Options`
(`--short` applied), which every part of the run reads by name."""

import argparse
import os
import shutil
from dataclasses import dataclass

from . import nemesis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Options:
    server: str                  # the server binary (a path, or a name on PATH)
    module: str                  # the module to load
    nemeses: str                 # comma-separated, or "all"
    mixed: int                   # phases drawn at random after the named ones
    seed: int
    fault_seconds: float         # how long a fault lasts (twice that for a failover)
    ttl: int                     # the locks' TTL, ms
    workers: int                 # per system
    node_workers: int            # more of the module's, on the Node package
    rust_workers: int            # more of the module's, on the Rust package
    php_workers: int             # more of the module's, on the PHP package
    keys: int                    # locks per system
    counts: str                  # where to write the counts too, or ""
    min_replicas: int            # min-replicas-to-write on every node
    wait_replicas: int           # the recipe's grant counts once WAIT n 100 says n replicas have it
    replicas: str                # the Python package's `replicas` for the module's workers
    server_replicas: str         # `lock.replicas` on every node (the server's own wait)
    unchecked_store: bool        # mutation: the store takes every write
    out: str                     # where the report goes
    label: str                   # the report's name, or "" for the server's
    keep: bool                   # keep the run's files
    short: bool                  # the run make test makes
    sweep: bool                  # only clean up after killed runs

    @property
    def phase_names(self):
        """The nemeses named to run alone, in order."""
        return list(nemesis.ALL) if self.nemeses == "all" else self.nemeses.split(",")


def parser(description):
    p = argparse.ArgumentParser(prog="python3 -m faults", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default=os.environ.get("REDIS_SERVER", "redis-server"))
    p.add_argument("--module", default=os.path.join(ROOT, "target/release/libredis_lock.so"))
    p.add_argument("--nemeses", default="all", help="comma-separated (a+b: two at once, as a mixed phase), or all: " + ", ".join(nemesis.ALL))
    p.add_argument("--mixed", type=int, default=0,
                   help="then N phases drawn at random with the seed, each one nemesis or two at once")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fault-seconds", type=float, default=None,
                   help="how long a fault lasts, twice that for a failover (3, or 1.5 with --short)")
    p.add_argument("--ttl", type=int, default=1000, help="the locks' TTL in ms")
    p.add_argument("--workers", type=int, default=3, help="per system")
    p.add_argument("--node-workers", type=int, default=2,
                   help="more workers of the module's, written with the Node package (clients/node)")
    p.add_argument("--rust-workers", type=int, default=1,
                   help="more workers of the module's, written with the Rust package (clients/rust)")
    p.add_argument("--php-workers", type=int, default=1,
                   help="more workers of the module's, written with the PHP package (clients/php)")
    p.add_argument("--keys", type=int, default=2, help="locks per system")
    p.add_argument("--counts", default="",
                   help="also write the counts here: one 'phase<TAB>system<TAB>what<TAB>n' a line")
    p.add_argument("--min-replicas", type=int, default=0, help="min-replicas-to-write on every node")
    p.add_argument("--wait-replicas", type=int, default=0,
                   help="the recipe's grant counts once WAIT n 100 says n replicas have it (else it is released)")
    p.add_argument("--replicas", default="auto",
                   help="the package's replicas option for the module's workers: auto (its default), or n; "
                        "0 turns it off (the mutation)")
    p.add_argument("--server-replicas", default="auto",
                   help="lock.replicas on every node: the server holds a grant's reply until replicas "
                        "have it (auto, as the project's redis.conf sets it; n; or 0, the module's own "
                        "default); with --replicas 0 the Python workers send plain commands")
    p.add_argument("--unchecked-store", action="store_true",
                   help="mutation: the store accepts every write (the checker must then fail)")
    p.add_argument("--out", default=os.path.join(ROOT, "target/faults"))
    p.add_argument("--label", default="")
    p.add_argument("--keep", action="store_true", help="keep the run's files (target/faults/run-<pid>)")
    p.add_argument("--short", action="store_true",
                   help="the run make test makes: faults of 1.5 s, one lock of 500 ms per system, and unless "
                        "--nemeses says otherwise pause-client, clock-forward, pause-master, partition-master; "
                        "overlapping and fence back must be 0 in its partition (in every phase without a "
                        "clock jump in a full run)")
    p.add_argument("--sweep", action="store_true", help="only clean up after runs that were killed")
    return p


def parse(argv, description=""):
    o = Options(**vars(parser(description).parse_args(argv)))
    if o.fault_seconds is None:
        o.fault_seconds = 1.5 if o.short else 3.0
    if o.short:
        o.ttl, o.keys = 500, 1
        if o.nemeses == "all":
            o.nemeses = "pause-client,clock-forward,pause-master,partition-master"
    o.server = shutil.which(o.server) or o.server
    return o
