"""The servers of a fault run: a master and two replicas with the module, and three
Sentinels, each a real server process on its own loopback address, all on one port
number. Servers bind their address and open their own connections from it
(`bind-source-addr`), so a partition is a set of packet filter rules between addresses."""

import os
import signal
import socket
import subprocess
import time

from .clock import Clock
from .resp import Client, Disconnected, ReplyError

NODES = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]       # the first starts as master
SENTINELS = ["127.0.0.5", "127.0.0.6", "127.0.0.7"]
SERVICE = "faults"
DOWN_AFTER_MS = 1000
CONTROL = "127.0.0.9"                                 # the harness's own connections


def free_port(addresses, rng):
    """A port free on every address, below the ephemeral range (32768 and up), so no
    client connection of any run ever has it as its own end."""
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        try:
            for address in addresses:
                with socket.socket() as s:
                    s.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port on the loopback addresses")


class Topology:
    def __init__(self, binary, module, work_dir, rng, min_replicas=0, server_replicas=""):
        self.binary, self.module, self.dir = binary, module, work_dir
        self.port = free_port(NODES + SENTINELS, rng)
        self.min_replicas = min_replicas
        self.server_replicas = server_replicas
        self.procs = {}                                # address -> Popen
        self.clocks = {a: Clock(binary, os.path.join(work_dir, f"clock-{a}"), work_dir) for a in NODES}

    # --- processes -----------------------------------------------------------------

    def start(self):
        for i, address in enumerate(NODES):
            self._write_node_conf(address, replica=i > 0)
            self._spawn(address)
        for address in NODES:
            self._wait_ping(address)
        # The Sentinels learn the replicas from the master's INFO at their start (then
        # every 10 s): start them once both replicas are linked.
        deadline = time.monotonic() + 20
        while not self._replicas_linked(NODES[0]):
            if time.monotonic() > deadline:
                raise RuntimeError("the replicas did not link to the first master")
            time.sleep(0.05)
        for address in SENTINELS:
            self._write_sentinel_conf(address)
            self._spawn(address, sentinel=True)
        self.wait_healthy(20)

    def _conf_path(self, address):
        return os.path.join(self.dir, f"{address}.conf")

    def _write_node_conf(self, address, replica):
        lines = [
            f"bind {address}", f"bind-source-addr {address}", f"port {self.port}",
            "protected-mode no", "save \"\"", "appendonly no", f"dir {self.dir}",
            f"dbfilename {address}.rdb", f"logfile {self.dir}/{address}.log",
            f"loadmodule {self.module}", f"replica-announce-ip {address}",
            f"min-replicas-to-write {self.min_replicas}", "min-replicas-max-lag 2",
            "repl-diskless-sync-delay 0",
        ]
        if self.server_replicas:
            lines.append(f"lock.replicas {self.server_replicas}")
        if replica:
            lines.append(f"replicaof {NODES[0]} {self.port}")
        with open(self._conf_path(address), "w") as f:
            f.write("\n".join(lines) + "\n")

    def _write_sentinel_conf(self, address):
        lines = [
            f"bind {address}", f"bind-source-addr {address}", f"port {self.port}",
            "protected-mode no", f"dir {self.dir}", f"logfile {self.dir}/{address}.log",
            f"sentinel announce-ip {address}",
            f"sentinel monitor {SERVICE} {NODES[0]} {self.port} 2",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} 4000",
            f"sentinel parallel-syncs {SERVICE} 2",
        ]
        with open(self._conf_path(address), "w") as f:
            f.write("\n".join(lines) + "\n")

    def _spawn(self, address, sentinel=False):
        env = dict(os.environ)
        args = [self.binary, self._conf_path(address)]
        if sentinel:
            args.append("--sentinel")
        else:
            env.update(self.clocks[address].env)
        self.procs[address] = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(self.dir, "pids"), "a") as f:
            f.write(f"{self.procs[address].pid}\n")

    def pid(self, address):
        return self.procs[address].pid

    def kill9(self, address):
        self.procs[address].kill()
        self.procs[address].wait()

    def restart(self, address):
        """Starts a killed node again, empty, from its first configuration: the Sentinels
        make it a replica of whichever node is master by then."""
        self._spawn(address)
        self._wait_ping(address)

    def stop_all(self):
        for proc in self.procs.values():
            try:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            except ProcessLookupError:
                pass
        for proc in self.procs.values():
            proc.wait()

    # --- reading the servers --------------------------------------------------------

    def call(self, address, *args, timeout=1.0):
        client = Client(address, self.port, CONTROL, timeout)
        try:
            return client.call(*args)
        finally:
            client.close()

    def _wait_ping(self, address, seconds=10):
        deadline = time.monotonic() + seconds
        while True:
            try:
                if self.call(address, "PING") == b"PONG":
                    return
            except Disconnected:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{address} does not answer; log: {self.dir}/{address}.log")
            time.sleep(0.05)

    def master_by_sentinels(self):
        """The master the Sentinels agree on, or None."""
        named = set()
        for address in SENTINELS:
            try:
                reply = self.call(address, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            except Disconnected:
                return None
            if not isinstance(reply, list):
                return None
            named.add(reply[0].decode())
        return named.pop() if len(named) == 1 else None

    def _replicas_linked(self, master):
        role = self.role(master)
        if not role or role[0] != b"master" or len(role[2]) != len(NODES) - 1:
            return False
        replicas = [self.role(a) for a in NODES if a != master]
        return all(r and r[0] == b"slave" and r[3] == b"connected" for r in replicas)

    def role(self, address):
        try:
            reply = self.call(address, "ROLE")
        except Disconnected:
            return None
        return None if isinstance(reply, ReplyError) else reply

    def wait_healthy(self, seconds):
        """Waits until every Sentinel names one master, that node is master, the other two
        are its replicas with their link up and in sync, and every Sentinel knows the
        other two. Returns the master's address."""
        deadline = time.monotonic() + seconds
        last = "nothing asked yet"
        while time.monotonic() < deadline:
            last = self._health()
            if last.startswith("ok "):
                return last[3:]
            time.sleep(0.1)
        raise RuntimeError(f"the servers did not settle in {seconds} s: {last}")

    def _health(self):
        master = self.master_by_sentinels()
        if master is None:
            return "the Sentinels do not agree on a master"
        role = self.role(master)
        if not role or role[0] != b"master":
            return f"{master} is not a master"
        offset = role[1]
        for address in NODES:
            if address == master:
                continue
            role = self.role(address)
            if not role or role[0] != b"slave" or role[1].decode() != master or role[3] != b"connected":
                return f"{address} is not a connected replica of {master}: {role}"
            if role[4] != offset:
                return f"{address} is behind {master}"
        for address in SENTINELS:
            try:
                reply = self.call(address, "SENTINEL", "SENTINELS", SERVICE)
            except Disconnected:
                return f"Sentinel {address} does not answer"
            if not isinstance(reply, list) or len(reply) != len(SENTINELS) - 1:
                return f"Sentinel {address} does not know the others"
            reply = self.call(address, "SENTINEL", "REPLICAS", SERVICE)
            if not isinstance(reply, list) or len(reply) != len(NODES) - 1:
                return f"Sentinel {address} does not know both replicas"
        return "ok " + master
