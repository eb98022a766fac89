"""The HTTP port's listener: its sockets, opened, moved and closed as the config says.

:class:`HttpShell` belongs to the server process (server/app.py makes it and hands it
the node's log and TLS contexts); the application it serves is http/server.py's, made
the first time a port opens. aiohttp is imported only then: most nodes (every node of
the tests, every ``make run`` without ``http-port``) never pay for it at start-up, and a
start is a fifth of a second shorter for it.

Sockets are bound synchronously, so CONFIG SET http-port answers "address in use" at
once, as an error, and the old listener is closed before the new one binds; they are
then served by aiohttp's ``AppRunner`` through ``loop.create_server(runner.server,
sock=...)`` (what ``SockSite`` does, with the listening socket kept ours to close
synchronously). With ``tls-http yes`` the port speaks HTTPS, with the client port's
certificate and ``tls-auth-clients`` rule: each connection's handshake is done first (by
the acceptor the server shell hands over, server/tls.py), with the certificate of the
moment. A port that cannot open at start-up stops the server, as its client port does.
While the port is on, a 1 s timer samples the cluster totals for the API's history
(http/api.py).
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from disquette.http.api import History
    from disquette.http.server import Logger, TlsAcceptor
    from disquette.state.server import ServerState


def bind_sockets(addresses: list[str], port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets on ``port`` for each address (none: every interface, IPv4 and
    IPv6). Raises OSError (the first address that cannot be bound) after closing the
    sockets already made."""
    made: list[socket.socket] = []
    try:
        if not addresses:
            if socket.has_dualstack_ipv6():
                made.append(
                    socket.create_server(
                        ("", port), family=socket.AF_INET6, backlog=backlog, dualstack_ipv6=True
                    )
                )
            else:
                made.append(socket.create_server(("", port), backlog=backlog))
        for address in addresses:
            info = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0]
            made.append(socket.create_server(info[4][:2], family=info[0], backlog=backlog))
    except (OSError, UnicodeError) as e:
        for sock in made:
            sock.close()
        raise OSError(getattr(e, "errno", None), getattr(e, "strerror", None) or str(e)) from e
    for sock in made:
        sock.setblocking(False)
    return made


class HttpShell:
    """The node's HTTP listener, started after the client port, restarted by CONFIG SET
    http-port/http-bind, stopped at shutdown (module docstring)."""

    def __init__(self, state: ServerState, log: Logger, tls: TlsAcceptor | None = None) -> None:
        self.state = state
        self.log = log
        self.tls = tls
        self.runner: web.AppRunner | None = None
        self.sockets: list[socket.socket] = []
        self.servers: list[asyncio.AbstractServer] = []
        self._started = False
        self._ready: asyncio.Task[None] | None = None  # the application's set-up
        self._history: History | None = None
        self._serving: asyncio.Task[None] | None = None
        #: (addresses, port, over TLS) listened on.
        self._listening: tuple[tuple[str, ...], int, bool] | None = None
        self._timer: asyncio.TimerHandle | None = None  # the history's 1 s sampler

    @property
    def port(self) -> int:
        """The port listened on (0: off)."""
        return self._listening[1] if self._listening else 0

    async def start(self) -> str | None:
        """Open the listener the config asks for, its application set up before this
        returns; the reason it could not (a port in use: the server stops, as for its
        client port), or None."""
        self._started = True
        problem = self.reconfigure()
        if self._ready is not None:
            await asyncio.shield(self._ready)
        return problem

    def reconfigure(self) -> str | None:
        """Listen as ``http-port``/``http-bind`` say now; return an error text or None.

        The same addresses and port keep the listener as it is. Another port is bound
        before the old listener closes (an error leaves the old one serving); new
        addresses on the same port need the old listener closed first (an error then
        opens the old one again)."""
        config = self.state.config
        old = self._listening
        addresses = tuple(config.http_bind or config.bind)
        tls = bool(config.tls_http and self.tls is not None)
        wanted = (addresses, config.http_port, tls) if config.http_port else None
        if wanted == old or not self._started:
            return None
        if wanted is None or (old is not None and old[1] == wanted[1]):
            self._close_listener()
        if wanted is None:
            return None
        problem = self._open(wanted)
        if problem is not None and old is not None and self._listening is None:
            self._open(old)
        return problem

    def _open(self, listening: tuple[tuple[str, ...], int, bool]) -> str | None:
        addresses, port, tls = listening
        where = f"{','.join(addresses) or '*'}:{port}"
        try:
            sockets = bind_sockets(list(addresses), port, self.state.config.tcp_backlog)
        except OSError as e:
            reason = os.strerror(e.errno) if e.errno else str(e)
            return f"Creating HTTP listening socket {where}: {reason}"
        self._close_listener()
        loop = asyncio.get_running_loop()
        if self._ready is None:
            self._ready = loop.create_task(self._set_up())
        self.sockets = sockets
        self._listening = listening
        self._serving = loop.create_task(self._serve(sockets, tls))
        if self._timer is None:
            self._tick()
        self.log.notice(f"HTTP{'S' if tls else ''} port open on {where}")
        return None

    async def _set_up(self) -> None:
        """The application and its runner, made once (aiohttp imported here)."""
        from aiohttp import web

        from disquette.http.api import HISTORY
        from disquette.http.server import build_app

        app = build_app(self.state, self.log)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self.runner = runner
        self._history = app[HISTORY]

    async def _serve(self, sockets: list[socket.socket], tls: bool) -> None:
        assert self._ready is not None
        await asyncio.shield(self._ready)
        loop = asyncio.get_running_loop()
        assert self.runner is not None and self.runner.server is not None
        factory: Any = self.runner.server
        if tls and self.tls is not None:
            factory = self.tls.accepting(factory, "clients")
        for sock in sockets:
            server = await loop.create_server(factory, sock=sock)
            self.servers.append(server)

    def _close_listener(self) -> None:
        if self._serving is not None and not self._serving.done():
            self._serving.cancel()
        self._serving = None
        for server in self.servers:
            server.close()
        for sock in self.sockets:
            sock.close()
        self.servers = []
        self.sockets = []
        self._listening = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        """Once a second while the port is on: the API's history samples the cluster."""
        if self._history is not None:
            self._history.tick()
        self._timer = asyncio.get_running_loop().call_later(1.0, self._tick)

    async def close(self) -> None:
        """Stop listening and end the open requests (shutdown)."""
        self._close_listener()
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
