"""A raw RESP connection for tests that care about exact bytes and reply types.

redis-py hides whether an ID came back as a status or a bulk string; Disque
clients do not. :class:`RawConnection` sends bytes as they are and returns one
reply at a time as its exact wire bytes, or parsed into typed values
(``Status``, ``Error``, ``int``, ``bytes``, ``None``, ``list``).
"""

from __future__ import annotations

import socket


class Status(bytes):
    """A ``+`` reply."""


class Error(bytes):
    """A ``-`` reply."""


class RawConnection:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def command(self, *args: bytes | str | int) -> object:
        self.send(encode(*args))
        return self.read()

    def _fill(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("connection closed by server")
        self.buf += data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_raw(self) -> bytes:
        """One whole reply, as the bytes on the wire."""
        line = self._line()
        out = line + b"\r\n"
        kind, rest = line[:1], line[1:]
        if kind == b"$" and int(rest) >= 0:
            out += self._exact(int(rest) + 2)
        elif kind == b"*" and int(rest) > 0:
            for _ in range(int(rest)):
                out += self.read_raw()
        return out

    def read(self) -> object:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return Status(rest)
        if kind == b"-":
            return Error(rest)
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ValueError(f"bad reply line {line!r}")

    def closed_by_server(self, timeout: float = 10.0) -> bool:
        """True once the server closes the connection (reads until EOF)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    return True
                self.buf += data
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def encode(*args: bytes | str | int) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)
