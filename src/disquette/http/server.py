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

:func:`build_app` is called by the listener (http/listener.py) the first time a port
is opened, so a node without an HTTP port never imports aiohttp.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import web

from disquette.config.cstring import to_bytes
from disquette.core.acl import DEFAULT
from disquette.http.api import STATE, USER, add_routes
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
