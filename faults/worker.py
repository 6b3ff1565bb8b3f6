"""One client of a fault run, a process of its own (so a nemesis can SIGSTOP it) on its
own loopback address (so a partition can cut it alone). It loops until its deadline:
take a lock, write to the two resources it protects, release, and logs every operation
to its history (JSON lines) with the times it was invoked and completed, on the
machine's monotonic clock (the same in every process).

  system "module": the project's Python package (`package_locks.py`), with its defaults
    (`replicas="auto"`: a grant counts once a replica has it): a waiting acquire (plain,
    session-bound or shared), a renewal (`reacquire`) in every other round, a write to the
    list data:<key> through `Lock.do` (LOCK.DO), a write to the fenced store with the
    grant's fence, the release. A shared holder only reads (LOCK.DO ... LLEN).
  system "recipe": SET key token NX PX ttl, polled every 50 ms while busy (the recipe's
    wait), a plain RPUSH to data:<key>, a write to the store carrying the grant's order
    (it has no fence, so the store cannot check it), and the compare-and-delete script.

With --wait-replicas n, the recipe's grant counts only once `WAIT n 100` answers n or
more; otherwise it is released at once. --replicas sets the package's option for the
module (`auto`; `0` turns it off).

Before the protected writes the worker pauses (the work it does), and it keeps the file
<state> saying whether it holds a lock it has not written under yet, so the harness can
freeze a holder before its writes."""

import argparse
import json
import random
import time
from dataclasses import MISSING, dataclass, fields

from . import package_locks
from .resp import Client, Disconnected, ReplyError
from .state import HOLDING, IDLE, WRITING, HolderState
from .store import open_store, write as store_write

RELEASE_SCRIPT = ("if redis.call('GET', KEYS[1]) == ARGV[1] then "
                  "return redis.call('DEL', KEYS[1]) else return 0 end")


def now():
    return time.monotonic()


class Worker:
    def __init__(self, opts):
        self.o = opts
        self.rng = random.Random(opts.seed)
        self.client = None
        self.locks = None  # the module's: the package on a redis-py client
        self.history = open(opts.history, "a", buffering=1)
        self.store = open_store(opts.store)
        self.name = f"{opts.system}-{opts.id}"

    def log(self, **entry):
        entry["w"] = self.name
        self.history.write(json.dumps(entry) + "\n")

    def state(self, state):
        state.write(self.o.state)

    # --- connection: the master the Sentinels name ----------------------------------

    def connect(self):
        sentinels = self.o.sentinels.split(",")
        self.rng.shuffle(sentinels)
        for sentinel in sentinels:
            try:
                probe = Client(sentinel, self.o.port, self.o.address, timeout=0.5)
                reply = probe.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.o.service)
                probe.close()
            except Disconnected:
                continue
            if isinstance(reply, list):
                host, port = reply[0].decode(), int(reply[1])
                if self.o.system == "module":
                    self.locks = package_locks.PackageLocks(
                        package_locks.client(host, port, self.o.address, self.o.wait), self.o.ttl,
                        self.o.wait, package_locks.replicas_setting(self.o.replicas))
                    return True
                try:
                    self.client = Client(host, port, self.o.address, timeout=1.0)
                    return True
                except Disconnected:
                    return False
        return False

    def drop(self):
        """Forgets the master: the next round asks the Sentinels again."""
        if self.locks is not None:
            self.locks.close()
            self.locks = None

    def call(self, *args, timeout=None):
        """The reply, or Disconnected (the connection is dropped: the next call finds the
        master again). An error reply such as READONLY drops it too."""
        if self.client is None and not self.connect():
            raise Disconnected("no master reachable")
        try:
            reply = self.client.call(*args, timeout=timeout)
        except Disconnected:
            self.client = None
            raise
        if isinstance(reply, ReplyError) and str(reply).startswith(("READONLY", "MASTERDOWN", "NOREPLICAS")):
            self.client.close()
            self.client = None
        return reply

    # --- one round: acquire, work, write, release -------------------------------------

    def round(self):
        key = self.rng.choice(self.o.keys.split(","))
        token = "%016x" % self.rng.getrandbits(64)
        if self.o.system == "module":
            self.module_round(key, self.rng.choice(["plain", "plain", "session", "shared"]), token)
            return
        mode = "plain"
        t0 = now()
        try:
            order = self.acquire(key, mode, token)
            if order is not None and not isinstance(order, ReplyError) and self.o.wait_replicas:
                order = self.replicated(key, token, order)
        except Disconnected as error:
            self.log(op="acquire", key=key, mode=mode, t0=t0, t1=now(), ok=None, err=str(error))
            time.sleep(0.05)
            return
        t1 = now()
        if isinstance(order, ReplyError):
            self.log(op="acquire", key=key, mode=mode, t0=t0, t1=t1, ok=False, err=str(order))
            time.sleep(0.05)
            return
        self.log(op="acquire", key=key, mode=mode, t0=t0, t1=t1, ok=order is not None, fence=order,
                 ttl=self.o.ttl, token=token)
        if order is None:
            return
        self.work(key, mode, t1, order, lambda: self.data_write(key, mode, token, order))
        self.release(key, token, order)

    def work(self, key, mode, granted_at, order, write, renew=None):
        """The holder's part: pause (renewing halfway when `renew` is given), `write()`
        to the data list, write to the store, pause; the state file says where it is."""
        self.state(HolderState(HOLDING, key, granted_at, mode))  # and has not written yet
        pause = self.rng.uniform(0.1, 0.3) * self.o.ttl / 1000
        if renew is not None:
            time.sleep(pause / 2)
            renew()
            time.sleep(pause / 2)
        else:
            time.sleep(pause)
        self.state(HolderState(WRITING, key, granted_at, mode))
        write()
        if mode != "shared":
            t0 = now()
            checked = self.o.system == "module" and not self.o.unchecked_store
            accepted = store_write(self.store, key, order, self.name, checked=checked)
            self.log(op="store", key=key, fence=order, t0=t0, t1=now(), ok=accepted)
        time.sleep(self.rng.uniform(0.0, 0.1) * self.o.ttl / 1000)
        self.state(HolderState(IDLE))

    def module_round(self, key, mode, token):
        """A round of the module's, through the package."""
        if self.locks is None and not self.connect():
            self.log(op="acquire", key=key, mode=mode, t0=now(), t1=now(), ok=None,
                     err="no master reachable")
            time.sleep(0.05)
            return
        locks = self.locks
        t0 = now()
        got = self.outcome(locks.acquire(key, mode, token))
        t1 = now()
        if not got.ok:
            self.log(op="acquire", key=key, mode=mode, t0=t0, t1=t1, ok=got.ok, err=got.err)
            if got.err:
                time.sleep(0.05)
            return
        fence = got.value
        self.log(op="acquire", key=key, mode=mode, t0=t0, t1=t1, ok=True, fence=fence,
                 ttl=self.o.ttl, token=token, server=locks.host)

        def renew():
            r0 = now()
            renewed = self.outcome(locks.renew())
            self.log(op="extend", key=key, fence=fence, t0=r0, t1=now(), ok=renewed.ok,
                     err=renewed.err)

        def write():
            w0 = now()
            if mode == "shared":
                done = self.outcome(locks.do("LLEN", f"data:{key}"))
            else:
                done = self.outcome(locks.do("RPUSH", f"data:{key}", f"{fence}:{self.name}"))
            self.log(op="do", key=key, fence=fence, read=mode == "shared", t0=w0, t1=now(),
                     ok=done.ok, err=done.err)

        self.work(key, mode, t1, fence, write, renew if self.rng.random() < 0.5 else None)
        r0 = now()
        released = self.outcome(locks.release())
        self.log(op="release", key=key, fence=fence, t0=r0, t1=now(), ok=released.ok is True,
                 err=released.err if released.ok is None else None)

    def outcome(self, got):
        if got.drop:
            self.drop()
        return got

    def acquire(self, key, mode, token):
        """The recipe's grant: its order (the ns of its answer), None when busy, or an
        error reply."""
        ttl = self.o.ttl
        deadline = now() + self.o.wait / 1000
        while True:
            reply = self.call("SET", key, token, "NX", "PX", ttl)
            if reply == b"OK":
                return time.monotonic_ns()
            if isinstance(reply, ReplyError) or now() > deadline:
                return reply
            time.sleep(0.05)

    def replicated(self, key, token, order):
        """`order` once WAIT says enough replicas have the grant; else the grant is
        released and treated as not made (a ReplyError saying so)."""
        acked = self.call("WAIT", self.o.wait_replicas, 100, timeout=1.0)
        if isinstance(acked, int) and acked >= self.o.wait_replicas:
            return order
        self.release(key, token, order)
        return ReplyError(f"NOTREPLICATED WAIT answered {acked}")

    def data_write(self, key, mode, token, order):
        t0 = now()
        entry = f"{order}:{self.name}"
        try:
            reply = self.call("RPUSH", f"data:{key}", entry)
        except Disconnected as error:
            self.log(op="do", key=key, fence=order, read=mode == "shared", t0=t0, t1=now(), ok=None, err=str(error))
            return
        ok = not isinstance(reply, ReplyError)
        self.log(op="do", key=key, fence=order, read=mode == "shared", t0=t0, t1=now(), ok=ok,
                 err=None if ok else str(reply))

    def release(self, key, token, order):
        t0 = now()
        try:
            reply = self.call("EVAL", RELEASE_SCRIPT, 1, key, token)
        except Disconnected as error:
            self.log(op="release", key=key, fence=order, t0=t0, t1=now(), ok=None, err=str(error))
            return
        self.log(op="release", key=key, fence=order, t0=t0, t1=now(), ok=reply == 1,
                 err=str(reply) if isinstance(reply, ReplyError) else None)

    def run(self):
        self.state(HolderState(IDLE))
        deadline = now() + self.o.seconds
        while now() < deadline:
            self.round()


@dataclass(frozen=True)
class WorkerOptions:
    """What one worker is to do; `args()` is its command line, `parse` reads it back."""
    system: str            # "module" or "recipe"
    id: int
    address: str           # its own loopback address
    sentinels: str         # comma-separated addresses
    service: str
    port: int
    keys: str              # comma-separated lock names
    ttl: int               # ms
    wait: int              # ms
    seed: int
    seconds: float
    history: str           # path of its history (JSON lines)
    state: str             # path of its state file (state.py)
    store: str             # path of the fenced store
    unchecked_store: bool = False
    wait_replicas: int = 0
    replicas: str = "auto"

    def args(self):
        """The command line that starts this worker: `python3 -m faults.worker ...`."""
        out = []
        for field in fields(self):
            value = getattr(self, field.name)
            flag = "--" + field.name.replace("_", "-")
            if field.type is bool:
                out += [flag] if value else []
            else:
                out += [flag, str(value)]
        return out

    @staticmethod
    def parse(argv=None):
        p = argparse.ArgumentParser(description="one client of a fault run")
        for field in fields(WorkerOptions):
            flag = "--" + field.name.replace("_", "-")
            if field.type is bool:
                p.add_argument(flag, action="store_true")
            elif field.default is MISSING:
                p.add_argument(flag, type=field.type, required=True)
            else:
                p.add_argument(flag, type=field.type, default=field.default)
        return WorkerOptions(**vars(p.parse_args(argv)))


def main():
    Worker(WorkerOptions.parse()).run()


if __name__ == "__main__":
    main()
