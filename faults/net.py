"""Partitions as packet filter rules between loopback addresses: one iptables chain per
run (RLFAULTS-<pid>), jumped to from OUTPUT (loopback packets pass OUTPUT once), holding
DROP rules for every cut pair, both ways, on the run's port only: every connection of a
run has that port at one end (every server of the run listens on it, and it is below
the kernel's ephemeral range), so runs on other ports, on the same addresses, are not
touched. Only 127.0.0.0/8 addresses are ever named.
`heal` empties the chain; `remove` deletes it; `sweep` removes the chains of runs whose
process is gone (a run killed with SIGKILL), which every run does first."""

import os
import re
import subprocess

PREFIX = "RLFAULTS-"


def iptables(*args, check=True):
    return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=check)


def sweep():
    """Removes the chains of runs that are no longer running."""
    listing = iptables("-S", check=False).stdout
    for pid in sorted(set(re.findall(r"-N " + PREFIX + r"(\d+)", listing))):
        if not os.path.exists(f"/proc/{pid}") or int(pid) == os.getpid():
            Partitions(int(pid)).remove()


class Partitions:
    def __init__(self, pid=None, port=None):
        self.chain = f"{PREFIX}{pid or os.getpid()}"
        self.port = port

    def create(self):
        iptables("-N", self.chain)
        iptables("-I", "OUTPUT", "-j", self.chain)

    def cut(self, side_a, side_b):
        """Drops every packet between an address of side_a and one of side_b."""
        for a in side_a:
            for b in side_b:
                assert a.startswith("127.") and b.startswith("127."), (a, b)
                for src, dst in ((a, b), (b, a)):
                    for end in ("--dport", "--sport"):
                        iptables("-A", self.chain, "-s", src, "-d", dst, "-p", "tcp", end, str(self.port), "-j", "DROP")

    def heal(self):
        iptables("-F", self.chain, check=False)

    def remove(self):
        while iptables("-D", "OUTPUT", "-j", self.chain, check=False).returncode == 0:
            pass
        iptables("-F", self.chain, check=False)
        iptables("-X", self.chain, check=False)

    def rules(self):
        out = iptables("-S", self.chain, check=False).stdout
        return [line for line in out.splitlines() if line.startswith("-A")]
