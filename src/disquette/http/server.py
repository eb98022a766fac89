"""The HTTP port: an aiohttp application on the node's own event loop, and its listener.

The HTTP port is a third shell around the core (after the client port and the
simulator): it reads the node's state through the functions the commands use and
acts through the same commands, on the loop that runs everything else (only the
text of a Prometheus scrape is formatted in a worker thread: observe/metrics.py).
aiohttp is the server: a well-kept asyncio HTTP implementation (C parser, keep-alive,
streaming) that runs on uvloop as it is.

:func:`build_app` is the one place that makes the route table: ``/`` and
``/static/...`` (the dashboard's files, package data in ``http/static/``),
``/api/...`` (http/api.py), ``/metrics`` and ``/healthz`` (for probes: no data, no
credentials). Every request goes through three
middlewares, in this order, the same rules as the client port:

* **protected mode**: with ``protected-mode yes``, no ``bind``, no ``http-bind`` and
  no ``requirepass``, only loopback peers are served (others get 403 and Disque's
  protected-mode text);
* **authentication**: with ``requirepass`` (or a ``default`` user with a password),
  every request carries credentials, as HTTP Basic auth ``user:password`` (an ACL user,
  state/access.py; no user name: ``default``) or ``Authorization: Bearer <password>``
  (``default``'s), checked as AUTH checks them (constant time, a failure in ACL LOG);
  the API then acts as that user: its reads show what the user may read, its actions
  run with the user's permissions (http/api.py, observe/gather.py); otherwise 401 with
  ``WWW-Authenticate: Basic realm="disquette"`` so a browser asks for it. The
  dashboard's own files (``/`` and ``/static/...``, by the route they matched) and
  ``/healthz`` hold no data and load without it: the page asks for the password itself,
  once, and sends it with its API calls as a Bearer token;
* **CSRF**: a request that is not GET/HEAD (every action is a POST) needs the header
  ``X-Disquette-Action: 1`` (a cross-site form cannot set it, and a cross-site fetch
  that sets it needs a CORS preflight nobody answers) and, when an ``Origin`` header
  is present, an origin whose host is the request's ``Host``; otherwise 403.

Every reply carries a Content-Security-Policy that allows the page's own files and
nothing else (no inline script, no other origin, no framing) and ``nosniff``: a
second wall behind the page's escaping, should a job body ever reach the DOM as
markup. Errors are JSON (``{"error": ...}``) like every API reply; an unexpected exception in a
handler is logged and answered 500, never taken down the node.

:class:`HttpShell` owns the listener. The server shell (server/app.py) makes it and
hands it the node's log and TLS contexts, as :class:`Logger` and :class:`TlsAcceptor`:
the port runs inside the server process but imports none of its modules. Its sockets
are bound synchronously (so CONFIG SET http-port answers "address in use" at once, as
an error, and the old listener is closed before the new one binds) and then served by
aiohttp's ``AppRunner`` through ``loop.create_server(runner.server, sock=...)`` (what
``SockSite`` does, with the listening socket kept ours to close synchronously). With
``tls-http yes`` the port speaks HTTPS, with the client port's certificate and
``tls-auth-clients`` rule: each connection's handshake is done first (by the acceptor
the server shell hands over, server/tls.py), with the certificate of the moment. A port
in use at start-up is logged and the node runs without its HTTP port. While the port is
on, a 1 s timer samples the cluster totals for the API's history (http/api.py).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import web

from disquette.config.cstring import to_bytes
from disquette.core.acl import DEFAULT
from disquette.http.api import HISTORY, STATE, USER, add_routes
from disquette.observe import metrics
from disquette.state import access
from disquette.state.server import ServerState


class Logger(Protocol):
    """The node's log as the HTTP port writes to it (the server shell's, server/log.py)."""

    def notice(self, message: str) -> None: ...

    def warning(self, message: str) -> None: ...


class TlsAcceptor(Protocol):
    """What makes the port speak HTTPS (the server shell's TLS contexts, server/tls.py):
    a protocol factory that does the handshake, with the ``role``'s certificate of the
    moment, before handing the connection to ``make_protocol``'s protocol."""

    def accepting(
        self, make_protocol: Callable[[], asyncio.BaseProtocol], role: str
    ) -> Callable[[], Any]: ...


#: The dashboard's files (package data): index.html, dashboard.js, dashboard.css.
STATIC_DIR = Path(__file__).resolve().parent / "static"
#: The application's keys.
LOG = web.AppKey[Logger]("log")
#: The header every action (POST) must carry.
ACTION_HEADER = "X-Disquette-Action"
PROTECTED_MODE = (
    "DENIED disquette is running in protected mode because protected mode is enabled, no "
    "bind address was specified and no authentication password is required. In this mode "
    "connections are only accepted from the loopback interface. To accept clients from "
    "other computers, do one of: 1) set a password with 'requirepass' (CONFIG SET "
    "requirepass <password> from the loopback interface, or in the config file); 2) bind "
    "to the interfaces clients should use with 'http-bind' or 'bind'; 3) disable protected "
    "mode with 'protected-mode no' (only if the network is trusted)."
)
LOOPBACK_PREFIXES = ("127.", "::1", "::ffff:127.")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
REALM = 'Basic realm="disquette"'
#: Headers on every reply (see the module docstring).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON error reply: ``{"error": message}`` with ``status``."""
    return web.json_response({"error": message}, status=status, headers=headers)


# --------------------------------------------------------------------------
# The three rules every request goes through.


def http_protected(config: Any) -> bool:
    """Protected mode on the HTTP port: on, with no bind of either kind and no password."""
    return bool(
        config.protected_mode
        and not config.bind
        and not config.http_bind
        and not config.requirepass
    )


def is_loopback(peer: str | None) -> bool:
    return peer is not None and peer.startswith(LOOPBACK_PREFIXES)


def credentials_of(authorization: str) -> tuple[bytes, bytes] | None:
    """The user and password an ``Authorization`` header carries: Basic ``user:password``
    (no user name: ``default``), or Bearer ``password`` (``default``'s)."""
    scheme, _, value = authorization.strip().partition(" ")
    scheme = scheme.lower()
    value = value.strip()
    if scheme == "bearer":
        return DEFAULT, to_bytes(value)
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        user, colon, password = decoded.partition(b":")
        return (user or DEFAULT, password) if colon else None
    return None


def same_origin(origin: str, host: str | None) -> bool:
    """Whether an ``Origin`` header names the host the request was sent to."""
    parts = urlsplit(origin)
    return bool(host) and parts.scheme in ("http", "https") and parts.netloc == host


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as JSON; an unexpected exception is logged, answered 500."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        headers = {k: v for k, v in e.headers.items() if k.lower() in ("allow",)}
        return error(e.status, e.reason, headers)
    except Exception as e:  # a bug must not take the node down: say it, log it
        log = request.app.get(LOG)
        if log is not None:
            log.warning(f"HTTP {request.method} {request.path}: {type(e).__name__}: {e}")
        return error(500, f"internal error: {type(e).__name__}")


def dashboard_file(request: web.Request) -> bool:
    """A GET of the dashboard's page or one of its static files (by the route matched,
    so no spelling of another path passes for one)."""
    route = request.match_info.route
    return request.method in ("GET", "HEAD") and (
        route.handler in (index, health) or isinstance(route.resource, web.StaticResource)
    )


@web.middleware
async def security_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Protected mode, then the password, then the CSRF rule (module docstring)."""
    state = request.app[STATE]
    config = state.config
    if http_protected(config) and not is_loopback(request.remote):
        return error(403, PROTECTED_MODE)
    header = request.headers.get("Authorization")
    credentials = credentials_of(header) if header else None
    if credentials is not None and access.authenticate(state, None, *credentials):
        user = access.lookup(state, credentials[0])
        request[USER] = (*credentials, access.restriction(user))
    elif credentials is not None or access.auth_required(state):
        if not dashboard_file(request):
            return error(401, "NOAUTH Authentication required.", {"WWW-Authenticate": REALM})
    elif state.acl_default:  # ``default`` with no password but limited permissions
        request[USER] = (DEFAULT, b"", access.restriction(access.lookup(state, DEFAULT)))
    if request.method not in SAFE_METHODS:
        if request.headers.get(ACTION_HEADER) != "1":
            return error(403, f"actions need the header {ACTION_HEADER}: 1")
        origin = request.headers.get("Origin")
        if origin is not None and not same_origin(origin, request.host):
            return error(403, "cross-origin action refused")
    return await handler(request)


# --------------------------------------------------------------------------
# The application.


async def index(request: web.Request) -> web.StreamResponse:
    page = STATIC_DIR / "index.html"
    if not page.is_file():
        return error(404, "the dashboard's files are not installed")
    return web.FileResponse(page, headers={"Cache-Control": "no-cache"})


async def health(request: web.Request) -> web.StreamResponse:
    """``/healthz``, for load balancers and orchestrators (no credentials: it says
    nothing but this): 200 ``ok`` while the node serves clients; 503 ``loading`` while it
    loads its AOF, ``leaving`` once it is leaving the cluster (clients should go
    elsewhere: a readiness probe takes it out of a service's endpoints)."""
    state = request.app[STATE]
    node = state.node
    problem = "loading" if node.loading else "leaving" if node.leaving else None
    if problem is None:
        return web.Response(text="ok\n")
    return web.Response(status=503, text=problem + "\n")


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)


async def metrics_page(request: web.Request) -> web.StreamResponse:
    """Prometheus's scrape: the node's metrics in the text format (observe/metrics.py),
    read on the loop and rendered in a worker thread (the long part, per queue)."""
    who = request.get(USER)
    if who is not None and who[2] is not None and not who[2].may_run("info", None):
        return error(403, "NOPERM /metrics needs a user that may run INFO")  # (queue names)
    body = await asyncio.to_thread(metrics.render, metrics.Scrape(request.app[STATE]))
    return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})


def build_app(state: ServerState, log: Logger | None = None) -> web.Application:
    """The HTTP application of a node: every route, made here and nowhere else."""
    app = web.Application(middlewares=[errors_middleware, security_middleware])
    app[STATE] = state
    app.on_response_prepare.append(security_headers)
    if log is not None:
        app[LOG] = log
    app.router.add_get("/", index)
    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/healthz", health)
    if STATIC_DIR.is_dir():
        app.router.add_static("/static", STATIC_DIR)
    add_routes(app)  # /api/... (http/api.py)
    return app


# --------------------------------------------------------------------------
# The listener.


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
        self.app = build_app(state, log)
        self.runner: web.AppRunner | None = None
        self.sockets: list[socket.socket] = []
        self.servers: list[asyncio.AbstractServer] = []
        self._serving: asyncio.Task[None] | None = None
        #: (addresses, port, over TLS) listened on.
        self._listening: tuple[tuple[str, ...], int, bool] | None = None
        self._timer: asyncio.TimerHandle | None = None  # the history's 1 s sampler

    @property
    def port(self) -> int:
        """The port listened on (0: off)."""
        return self._listening[1] if self._listening else 0

    async def start(self) -> str | None:
        """Set the application up and open the listener the config asks for; the reason
        it could not (a port in use: the server stops, as for its client port), or None."""
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.runner.setup()
        return self.reconfigure()

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
        if wanted == old or self.runner is None:
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
        self.sockets = sockets
        self._listening = listening
        self._serving = asyncio.get_running_loop().create_task(self._serve(sockets, tls))
        if self._timer is None:
            self._tick()
        self.log.notice(f"HTTP{'S' if tls else ''} port open on {where}")
        return None

    async def _serve(self, sockets: list[socket.socket], tls: bool) -> None:
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
        self.app[HISTORY].tick()
        self._timer = asyncio.get_running_loop().call_later(1.0, self._tick)

    async def close(self) -> None:
        """Stop listening and end the open requests (shutdown)."""
        self._close_listener()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
