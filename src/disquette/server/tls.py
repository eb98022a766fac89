"""TLS for the client port, the cluster bus and the HTTP port: contexts and handshakes.

**Contexts.** :class:`TlsShell` builds, from the ``tls-*`` directives, three
:class:`ssl.SSLContext` objects: the server side of the client port (also the HTTP
port's, with ``tls-http``), whose client certificates follow ``tls-auth-clients``; and
the two sides of the cluster bus (``tls-cluster``), which always require the peer's
certificate, signed by the CA the node trusts (mutual authentication; bus peers are
reached by address, so the name in a certificate is not checked, as in Redis Cluster).
The same certificate and key serve every role, as a server and as a bus client. They
are built at start-up (an unreadable file or a key that does not match stops the server
with a message naming the file) and again by CONFIG SET of any ``tls-*`` directive: the
new contexts replace the old ones only if all three could be built.

**Handshakes.** Listeners are plain TCP listeners whose protocol factory is
:meth:`TlsShell.accepting`: for each new connection it makes the event loop's own TLS
protocol (uvloop's or asyncio's ``SSLProtocol``, what ``create_server(ssl=...)`` makes
per connection) around the real protocol (a client connection, a bus link, aiohttp's
handler), with *the context of the moment* and a handshake timeout. A listener made
with ``create_server(ssl=...)`` binds one context for its whole life; this way a
certificate reloaded by CONFIG SET is what every connection opened after it gets, while
those already open keep the one they were made with. (``loop.start_tls`` from the
plain protocol's ``connection_made`` would race: uvloop starts reading after
``connection_made``, and a ClientHello read before the switch is lost.) A handshake
is I/O on the loop like any other: a client that connects and sends nothing, or
handshakes a byte at a time, holds one socket until the timeout, never the loop.

**What Python's ssl module lacks.** ``tls-ciphersuites`` (TLS 1.3 suites) and
``tls-session-caching no`` have no Python API: they are set through OpenSSL's own
``SSL_CTX_set_ciphersuites`` and ``SSL_CTX_set_session_cache_mode`` on the context's
``SSL_CTX`` (:func:`_openssl_ctx`), after checking that the pointer found is the
context's (OpenSSL reads back the options Python set). Where that check fails the
directive is refused with a clear error rather than silently ignored.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import ssl
import warnings
from collections.abc import Callable
from typing import Any, Final

from disquette.config.tls import protocol_range
from disquette.server.log import Log

#: Seconds a TLS handshake may take before the connection is dropped.
HANDSHAKE_TIMEOUT_S: Final = 10.0
#: CONFIG SET of these builds new contexts (tls-port and tls-cluster need a restart).
RELOAD_DIRECTIVES: Final = frozenset(
    {
        "tls-cert-file",
        "tls-key-file",
        "tls-key-file-pass",
        "tls-ca-cert-file",
        "tls-ca-cert-dir",
        "tls-auth-clients",
        "tls-protocols",
        "tls-ciphers",
        "tls-ciphersuites",
        "tls-prefer-server-ciphers",
        "tls-session-caching",
        "tls-http",
    }
)
_AUTH_CLIENTS = {"yes": ssl.CERT_REQUIRED, "no": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL}


class TlsConfigError(Exception):
    """The TLS settings cannot make a context; ``str()`` says which file and why."""


def tls_in_use(config: Any) -> bool:
    """Whether anything listens or connects with TLS (only then are files read)."""
    return bool(config.tls_port or config.tls_cluster or config.tls_http)


def cluster_port(config: Any) -> int:
    """The client port the node announces to the cluster (its bus listens 10000 above).

    With ``tls-cluster yes`` it is ``tls-port`` (so that clients following the
    cluster's HELLO reach TLS ports, as Redis Cluster announces its TLS port then), and
    with ``port 0`` too; otherwise ``port``.
    """
    if config.tls_port and (config.tls_cluster or not config.port):
        return int(config.tls_port)
    return int(config.port)


# ----------------------------------------------------------------------------- contexts


def _load_identity(context: ssl.SSLContext, config: Any) -> None:
    cert, key = config.tls_cert_file, config.tls_key_file
    if not cert:
        raise TlsConfigError("No tls-cert-file configured")
    for what, path in (("certificate", cert), ("private key", key)):
        if path:
            try:
                with open(path, "rb") as f:
                    f.read(1)
            except OSError as e:
                raise TlsConfigError(f"Failed to load {what}: {path}: {e.strerror}") from None
    password = config.tls_key_file_pass
    try:
        context.load_cert_chain(cert, key or None, password=password)
    except ssl.SSLError as e:
        mismatch = "KEY_VALUES_MISMATCH" in str(e)
        reason = "the key does not match the certificate" if mismatch else e.reason or str(e)
        raise TlsConfigError(f"Failed to load private key: {key or cert}: {reason}") from None
    except (OSError, ValueError) as e:  # not PEM, or a certificate without its key
        raise TlsConfigError(f"Failed to load certificate: {cert}: {e}") from None


def _load_ca(context: ssl.SSLContext, config: Any, required: bool) -> None:
    cafile, capath = config.tls_ca_cert_file, config.tls_ca_cert_dir
    if not cafile and not capath:
        if required:
            raise TlsConfigError(
                "Either tls-ca-cert-file or tls-ca-cert-dir must be specified when "
                "tls-cluster is enabled or tls-auth-clients is not 'no'"
            )
        return
    try:
        context.load_verify_locations(cafile or None, capath or None)
    except (OSError, ssl.SSLError) as e:
        reason = getattr(e, "strerror", None) or getattr(e, "reason", None) or str(e)
        where = " ".join(p for p in (cafile, capath) if p)
        raise TlsConfigError(
            f"Failed to configure CA certificate(s) file/directory: {where}: {reason}"
        ) from None


def _apply_common(context: ssl.SSLContext, config: Any) -> None:
    low, high = protocol_range(config.tls_protocols or "")
    with warnings.catch_warnings():  # TLSv1 and TLSv1.1: deprecated, still Redis's words
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version, context.maximum_version = low, high
    if config.tls_ciphers:
        context.set_ciphers(config.tls_ciphers)  # (checked when the directive was read)
    if config.tls_prefer_server_ciphers:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if config.tls_ciphersuites:
        _set_ciphersuites(context, config.tls_ciphersuites)
    if not config.tls_session_caching:
        context.options |= ssl.OP_NO_TICKET
        _set_no_session_cache(context)


def server_context(config: Any, *, bus: bool = False) -> ssl.SSLContext:
    """The server side of the client port (``bus=False``) or of the bus."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_common(context, config)
    _load_identity(context, config)
    context.verify_mode = ssl.CERT_REQUIRED if bus else _AUTH_CLIENTS[config.tls_auth_clients]
    _load_ca(context, config, required=context.verify_mode != ssl.CERT_NONE)
    return context


def bus_client_context(config: Any) -> ssl.SSLContext:
    """The side of the bus that connects: it shows the node's certificate and checks
    the peer's against the CA (not its name: peers are reached by address)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    _apply_common(context, config)
    _load_identity(context, config)
    _load_ca(context, config, required=True)
    return context


# ------------------------------------------------------------ what ssl does not expose

_SSL_CTRL_SET_SESS_CACHE_MODE: Final = 44
_SSL_CTRL_GET_SESS_CACHE_MODE: Final = 45
_libssl: Any = None


def _openssl_ctx(context: ssl.SSLContext) -> tuple[Any, int]:
    """libssl and the ``SSL_CTX *`` of ``context`` (CPython's ``PySSLContext`` holds it
    right after the object header), checked by reading the options back through OpenSSL."""
    global _libssl
    if _libssl is None:
        import _ssl

        path = getattr(_ssl, "__file__", None) or ctypes.util.find_library("ssl")
        lib = ctypes.CDLL(path)
        lib.SSL_CTX_get_options.restype = ctypes.c_uint64
        lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
        lib.SSL_CTX_set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.SSL_CTX_ctrl.restype = ctypes.c_long
        lib.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
        _libssl = lib
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not pointer or _libssl.SSL_CTX_get_options(pointer) != int(context.options):
        raise TlsConfigError("this Python's ssl module does not let OpenSSL's context be reached")
    return _libssl, pointer


def _set_ciphersuites(context: ssl.SSLContext, suites: str) -> None:
    try:
        lib, pointer = _openssl_ctx(context)
    except (OSError, AttributeError, TlsConfigError) as e:
        raise TlsConfigError(f"Failed to configure ciphersuites: {e}") from None
    if lib.SSL_CTX_set_ciphersuites(pointer, suites.encode()) != 1:
        raise TlsConfigError(f"Failed to configure ciphersuites: {suites}")


def _set_no_session_cache(context: ssl.SSLContext) -> None:
    try:
        lib, pointer = _openssl_ctx(context)
    except (OSError, AttributeError, TlsConfigError) as e:
        raise TlsConfigError(f"Failed to turn off tls-session-caching: {e}") from None
    lib.SSL_CTX_ctrl(pointer, _SSL_CTRL_SET_SESS_CACHE_MODE, 0, None)  # SSL_SESS_CACHE_OFF
    if lib.SSL_CTX_ctrl(pointer, _SSL_CTRL_GET_SESS_CACHE_MODE, 0, None) != 0:
        raise TlsConfigError("Failed to turn off tls-session-caching")


# --------------------------------------------------------------------------- handshakes


def _ssl_protocol_class(loop: asyncio.AbstractEventLoop) -> Any:
    """The TLS protocol of ``loop``'s own TLS transport: uvloop's, or asyncio's."""
    if type(loop).__module__.startswith("uvloop"):
        from uvloop.loop import SSLProtocol  # type: ignore[attr-defined]

        return SSLProtocol
    from asyncio.sslproto import SSLProtocol as AsyncioSSLProtocol

    return AsyncioSSLProtocol


def tls_protocol(
    make_protocol: Callable[[], asyncio.BaseProtocol],
    context: ssl.SSLContext,
    on_failure: Callable[[Exception], None],
) -> Any:
    """The protocol for one accepted connection: the event loop's TLS protocol (what
    ``create_server(ssl=...)`` makes for each connection) around ``make_protocol()``,
    with ``context``; ``on_failure`` hears of a handshake that fails or times out
    (the loop has closed the connection then)."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def done(future: asyncio.Future[None]) -> None:
        exc = None if future.cancelled() else future.exception()
        if isinstance(exc, Exception):
            on_failure(exc)

    waiter.add_done_callback(done)
    return _ssl_protocol_class(loop)(
        loop,
        make_protocol(),
        context,
        waiter,
        server_side=True,
        ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S,
    )


class TlsShell:
    """The node's TLS contexts, rebuilt by CONFIG SET (module docstring)."""

    def __init__(self, config: Any, log: Log) -> None:
        self.config = config
        self.log = log
        self.clients: ssl.SSLContext | None = None
        self.bus_server: ssl.SSLContext | None = None
        self.bus_client: ssl.SSLContext | None = None
        #: Handshakes that failed or timed out (INFO's ``tls_handshake_failures``).
        self.handshake_failures = 0

    def configure(self) -> str | None:
        """Build the contexts the config asks for; on error keep the old ones and
        return the reason (Redis's words: ``Failed to load certificate: <file>: ...``)."""
        config = self.config
        if not tls_in_use(config):
            return None
        try:
            clients = server_context(config) if config.tls_port or config.tls_http else None
            bus_server = server_context(config, bus=True) if config.tls_cluster else None
            bus_client = bus_client_context(config) if config.tls_cluster else None
        except TlsConfigError as e:
            return str(e)
        self.clients, self.bus_server, self.bus_client = clients, bus_server, bus_client
        return None

    def accepting(
        self,
        make_protocol: Callable[[], asyncio.BaseProtocol],
        role: str,
        on_failure: Callable[[Exception], None] | None = None,
    ) -> Callable[[], Any]:
        """A protocol factory for a plain listener that does the TLS handshake first,
        with the ``role``'s context of the moment (``"clients"`` or ``"bus"``)."""

        def failed(exc: Exception) -> None:
            self.handshake_failures += 1
            if on_failure is not None:
                on_failure(exc)
            else:
                self.log.verbose(f"A client's TLS handshake failed: {describe(exc)}")

        def accept() -> Any:
            context = self.clients if role == "clients" else self.bus_server
            assert context is not None
            return tls_protocol(make_protocol, context, failed)

        return accept


def describe(exc: BaseException) -> str:
    """A handshake failure in a few words (the log line's reason)."""
    if isinstance(exc, asyncio.TimeoutError):
        return "no TLS handshake in time"
    if isinstance(exc, ConnectionError):
        return "the peer closed the connection during the TLS handshake"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):  # WRONG_VERSION_NUMBER -> "wrong version number"
        return exc.reason.replace("_", " ").lower() if exc.reason else str(exc)
    return str(exc) or type(exc).__name__
