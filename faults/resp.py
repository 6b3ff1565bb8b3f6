"""A small RESP2 client for the fault harness: one socket, bound to the caller's own
loopback address (so a partition can cut this client alone), with a timeout per call.
Replies: int, bytes (bulk and status), None (nil), list, or a ReplyError instance."""

import socket


class ReplyError(Exception):
    """An error reply (`-ERR ...`); returned, not raised, so a history can log it."""


class Disconnected(Exception):
    """The connection failed or timed out: the command's outcome is unknown."""


class Client:
    def __init__(self, host, port, source, timeout=1.0):
        self.sock = None
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.bind((source, 0))
            sock.connect((host, port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as error:
            sock.close()
            raise Disconnected(f"connect {host}:{port}: {error}") from error
        self.sock, self.buf, self.timeout = sock, b"", timeout
        self.address = (host, port)

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def call(self, *args, timeout=None):
        """Sends one command and reads its reply; Disconnected on any socket failure."""
        if self.sock is None:
            raise Disconnected("closed")
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        try:
            self.sock.settimeout(timeout or self.timeout)
            self.sock.sendall(b"".join(out))
            return self._reply()
        except (OSError, ValueError) as error:
            self.close()
            raise Disconnected(str(error) or type(error).__name__) from error

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ValueError("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, size):
        while len(self.buf) < size + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ValueError("connection closed")
            self.buf += chunk
        data, self.buf = self.buf[:size], self.buf[size + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            return ReplyError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self._exact(size)
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self._reply() for _ in range(size)]
        raise ValueError(f"unexpected reply {line[:40]!r}")
