"""A TCP proxy for tests that need a connection to break at a precise moment.

It forwards bytes both ways between a client and a server. Arming
:meth:`Proxy.cut_next_reply` makes it close the client's connection as soon as
the server answers, without forwarding the answer: the command was executed,
its reply is lost. With an ``ssl`` server context it also terminates TLS, so a
client can reach a plain server over TLS.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import ssl
import threading
from collections.abc import Iterator


class Proxy:
    def __init__(self, target_port: int, tls: ssl.SSLContext | None = None) -> None:
        self.target_port = target_port
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._cut = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def cut_next_reply(self) -> None:
        self._cut.set()

    def _accept(self) -> None:
        self.listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        if self.tls is not None:
            client.settimeout(10)
            try:
                client = self.tls.wrap_socket(client, server_side=True)
            except (ssl.SSLError, OSError):
                client.close()
                return
            client.settimeout(None)
        server = socket.create_connection(("127.0.0.1", self.target_port))
        self._sockets += [client, server]
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, server)
        sel.register(server, selectors.EVENT_READ, client)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(0.1):
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    if key.fileobj is server and self._cut.is_set():
                        self._cut.clear()
                        return  # executed by the server, reply dropped
                    key.data.sendall(data)
                if self.tls is not None and client.pending():
                    server.sendall(client.recv(65536))
        except OSError:
            return
        finally:
            sel.close()
            for s in (client, server):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        self._accepter.join()
        for thread in self._threads:
            thread.join()


@contextlib.contextmanager
def running_proxy(target_port: int, tls: ssl.SSLContext | None = None) -> Iterator[Proxy]:
    proxy = Proxy(target_port, tls)
    try:
        yield proxy
    finally:
        proxy.close()
