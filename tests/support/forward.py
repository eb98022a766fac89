"""A TCP port forwarder for tests: a NAT's or a container's port mapping, in threads.

``Forwarder(target_port)`` listens on 127.0.0.1 at a free port of its own and copies
bytes both ways between each connection it accepts and 127.0.0.1:target_port; it
counts the connections it forwarded. Closing it closes every connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.support.ports import free_port


class Forwarder:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self.port = free_port()
        self.connections = 0
        self._listener = socket.create_server((host, self.port))
        self._sockets: list[socket.socket] = [self._listener]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> Forwarder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            try:
                outbound = socket.create_connection(self.target, timeout=5)
            except OSError:
                inbound.close()
                continue
            outbound.settimeout(None)
            with self._lock:
                self.connections += 1
                self._sockets += [inbound, outbound]
            for src, dst in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=_pipe, args=(src, dst), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
