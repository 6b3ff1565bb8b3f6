"""One client of a fault run, a process of its own (so a nemesis can SIGSTOP it) on its
own loopback address (so a partition can cut it alone). It loops until its deadline:
take a lock, write to the two resources it protects, release, and logs every operation
to its history (JSON lines) with the times it was invoked and completed, on the
machine's monotonic clock (the same in every process).

  system "module": LOCK.ACQUIRE ... WAIT (plain, SESSION or SHARED), a write to the list
    data:<key> through LOCK.DO, a write to the fenced store with the grant's fence,
    LOCK.RELEASE. A SHARED holder only reads (LOCK.DO ... LLEN).
  system "recipe": SET key token NX PX ttl, polled every 50 ms while busy (the recipe's
    wait), a plain RPUSH to data:<key>, a write to the store carrying the grant's order
    (it has no fence, so the store cannot check it), and the compare-and-delete script.

With --wait-replicas n, a grant counts only once `WAIT n 100` answers n or more (the
clients' `replicas` option); otherwise it is released at once.

Before the protected writes the worker pauses (the work it does), and it keeps the file
<state> saying whether it holds a lock it has not written under yet, so the harness can
freeze a holder before its writes."""

import argparse
import json
import random
import time
from dataclasses import MISSING, dataclass, fields

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
                try:
                    self.client = Client(reply[0].decode(), int(reply[1]), self.o.address, timeout=1.0)
                    return True
                except Disconnected:
                    return False
        return False

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
        if self.o.system == "module":
            mode = self.rng.choice(["plain", "plain", "session", "shared"])
        else:
            mode = "plain"
        token = "%016x" % self.rng.getrandbits(64)
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
        self.state(HolderState(HOLDING, key, t1, mode))  # and has not written yet
        time.sleep(self.rng.uniform(0.1, 0.3) * self.o.ttl / 1000)
        self.state(HolderState(WRITING, key, t1, mode))
        self.data_write(key, mode, token, order)
        if mode != "shared":
            t0 = now()
            checked = self.o.system == "module" and not self.o.unchecked_store
            accepted = store_write(self.store, key, order, self.name, checked=checked)
            self.log(op="store", key=key, fence=order, t0=t0, t1=now(), ok=accepted)
        time.sleep(self.rng.uniform(0.0, 0.1) * self.o.ttl / 1000)
        self.state(HolderState(IDLE))
        self.release(key, token, order)

    def acquire(self, key, mode, token):
        """The grant's fence (module) or order (recipe: the ns of its answer), None when
        busy, or an error reply."""
        ttl = self.o.ttl
        if self.o.system == "module":
            args = ["LOCK.ACQUIRE", key, ttl, "TOKEN", token, "WAIT", self.o.wait]
            if mode == "session":
                args += ["SESSION", 200]
            if mode == "shared":
                args += ["SHARED"]
            reply = self.call(*args, timeout=self.o.wait / 1000 + 1.0)
            if isinstance(reply, list):
                return int(reply[1])
            return reply
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
            if self.o.system == "recipe":
                reply = self.call("RPUSH", f"data:{key}", entry)
            elif mode == "shared":
                reply = self.call("LOCK.DO", key, token, "LLEN", f"data:{key}")
            else:
                reply = self.call("LOCK.DO", key, token, "RPUSH", f"data:{key}", entry)
        except Disconnected as error:
            self.log(op="do", key=key, fence=order, read=mode == "shared", t0=t0, t1=now(), ok=None, err=str(error))
            return
        ok = not isinstance(reply, ReplyError)
        self.log(op="do", key=key, fence=order, read=mode == "shared", t0=t0, t1=now(), ok=ok,
                 err=None if ok else str(reply))

    def release(self, key, token, order):
        t0 = now()
        try:
            if self.o.system == "module":
                reply = self.call("LOCK.RELEASE", key, token)
            else:
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
