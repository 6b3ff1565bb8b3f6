"""A server's wall clock, made to jump: every data server starts preloaded with a
library that adds the offset its clock file holds ("+0", "+5s", "-5s"), re-read on every
call, so one server's clock jumps when its file is rewritten.

The library is Debian's libfaketime where it can be preloaded, and clockshim.c (built
here) where it cannot: Debian's redis-server links the shared jemalloc, and libfaketime's
start-up then recurses into itself and the server never starts (libfaketime issue #130).
Both leave CLOCK_MONOTONIC alone: the jump is of the wall clock, as NTP or an operator
would make it."""

import glob
import os
import subprocess

from . import shims

LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), "libfaketime.so.1")
WIDTH = 32   # the file is rewritten in place at this size: the shim maps it


def links_shared_jemalloc(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return "libjemalloc" in out


class Clock:
    """The clock file of one server, and the environment that starts it under it."""

    def __init__(self, binary, path, work_dir):
        self.path = path
        self.set(0)
        if links_shared_jemalloc(binary):
            self.library = "clockshim"
            self.env = {"LD_PRELOAD": shims.build("clockshim", work_dir), "CLOCKSHIM_FILE": path}
        else:
            self.library = "libfaketime"
            self.env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": path,
                        "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    def set(self, seconds):
        """The server's wall clock is `seconds` off from the machine's from now on."""
        text = ("%+ds" % seconds if seconds else "+0").ljust(WIDTH)
        mode = "r+b" if os.path.exists(self.path) else "wb"
        with open(self.path, mode) as f:
            f.write(text.encode())
            f.flush()
