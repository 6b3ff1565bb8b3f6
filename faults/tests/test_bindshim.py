"""The bind shim (`faults/bindshim.c`) that gives the Rust and PHP workers their own
source address: preloaded into a process, its connections to a loopback address leave
from BINDSHIM_ADDRESS, and without it from the default address."""

import os
import socket
import subprocess
import sys
import tempfile
import unittest

from faults import shims

CONNECT = ("import socket, sys\n"
           "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
           "s.recv(1)\n")


class BindShimTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.library = shims.build("bindshim", self.dir.name)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.listener.settimeout(10)

    def tearDown(self):
        self.listener.close()
        self.dir.cleanup()

    def peer_of(self, **env):
        """The address a preloaded child process connects from."""
        child = subprocess.Popen([sys.executable, "-c", CONNECT, str(self.listener.getsockname()[1])],
                                 env=dict(os.environ, LD_PRELOAD=self.library, **env))
        try:
            con, peer = self.listener.accept()
            con.sendall(b"x")
            con.close()
            return peer[0]
        finally:
            child.wait(timeout=10)

    def test_a_connection_leaves_from_the_named_address(self):
        self.assertEqual(self.peer_of(BINDSHIM_ADDRESS="127.0.0.77"), "127.0.0.77")

    def test_without_an_address_it_leaves_from_the_default_one(self):
        self.assertEqual(self.peer_of(), "127.0.0.1")
