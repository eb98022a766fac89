"""The cluster bus over TCP: the server's implementation of the core's ``Bus``.

Every node listens on its client port + 10000 (on the same bind addresses)
and keeps one outgoing connection per peer, opened when the core asks
(``connect``) and reported back with ``Node.link_up`` / ``Node.link_down``.
Messages go out on the outgoing link to their node (``send``) or back on the
inbound connection a message came from (``reply``: PONGs).

**Coalescing.** Messages are queued on their link; one callback per event-loop
iteration (``loop.call_soon``) turns each link's queue into a single frame and
a single write, so the REPLJOBs of a pipeline of ADDJOBs, or the GOTJOBs that
answer them, cross the network together.

**Untrusted input.** Frames are decoded strictly, by the shapes of the messages
this node's bus protocol knows (:mod:`disquette.protocol.frames`, the codec of
:mod:`disquette.core.dialect`): a malformed, oversized or unknown frame closes
that link and is logged; nothing a peer sends reaches the core unless it has the
exact shape of a message (a newer release's unknown types and extra fields aside:
skipped and counted). A peer that keeps sending what this node cannot read (a
release it does not speak with, reconnecting every 100 ms) is logged once a
minute per address and reason, with how many closes the minute held. With
``cluster-secret`` set, a link carries no frame before both ends have passed the
HMAC challenge of
:mod:`disquette.protocol.bus_auth`; a peer that fails it, or hangs up during
it, is refused and logged (and a node without the secret that is challenged
says so), whichever end sees the failure first.

**TLS.** With ``tls-cluster yes`` (server/tls.py) the bus listener accepts only TLS
connections whose certificate the node's CA signed, and outgoing links connect with
TLS, show the node's certificate and check the peer's: a plaintext peer, or a peer
with a certificate of another CA, fails the handshake and is refused and logged on
both ends. The cluster-secret handshake, when set, runs inside the TLS link.

Traffic is counted in ``node.cluster.stats`` (frames, bytes, refused links,
rejected frames) and ``node.cluster.messages_sent`` (INFO cluster and
CLUSTER INFO), as frames are written.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from disquette.core.membership import BUS_PORT_OFFSET
from disquette.core.messages import Header, Message
from disquette.protocol import bus_auth
from disquette.protocol.frames import (
    MAX_FRAME_BYTES,
    FrameError,
    FrameReader,
    decode_frame,
    encode_frame,
    encode_payload,
)
from disquette.server.tls import TlsShell, describe

if TYPE_CHECKING:
    from disquette.core.node import Node
    from disquette.server.log import Log

AUTH_TIMEOUT_S: Final = 5.0
#: A link closed again for the same reason from the same address is logged this often.
CLOSE_LOG_PERIOD_S: Final = 60.0
#: A peer that leaves this much of our output unread loses its link.
MAX_WRITE_BUFFER: Final = 4 * MAX_FRAME_BYTES

# Handshake steps of a link (only with cluster-secret).
_READY: Final = 0
_AWAIT_ANSWER: Final = 1  # inbound: challenge sent
_AWAIT_CHALLENGE: Final = 2  # outgoing: connected, nothing received yet
_AWAIT_PROOF: Final = 3  # outgoing: answer sent


def _plain_ip(host: str) -> bytes:
    """An address as the core writes it (IPv4-mapped IPv6 shown as IPv4)."""
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return host.encode()


class BusLink(asyncio.Protocol):
    """One bus connection: outgoing (``node_id`` set) or inbound (``node_id`` None).

    It is the ``link`` the core receives messages with (see
    :class:`disquette.core.membership.Link`).
    """

    def __init__(
        self, bus: ClusterBus, node_id: bytes | None = None, ip: bytes = b"", port: int = 0
    ) -> None:
        self.bus = bus
        self.node_id = node_id
        self.address = (ip, port)  # outgoing: the node's ip and bus port
        self.local_ip = b""
        self.peer_ip = ip
        self.peer = f"{ip.decode(errors='replace')}:{port}"
        self.transport: Any = None
        self.reader = FrameReader(bus_auth.MAX_AUTH_PAYLOAD if bus.secret else MAX_FRAME_BYTES)
        self.pending: list[Message] = []
        self.queued = False
        self.closed = False
        self.ready = False  # connected, authenticated (if need be) and not closed
        self.step = _READY
        self.nonce_a = b""
        self.nonce_c = b""
        self.task: asyncio.Task[Any] | None = None
        self._auth_timer: asyncio.TimerHandle | None = None

    # asyncio callbacks ---------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        self.transport = transport
        if self.closed:  # given up while connecting
            transport.close()
            return
        bus = self.bus
        sockname = transport.get_extra_info("sockname")
        if isinstance(sockname, tuple):
            self.local_ip = _plain_ip(sockname[0])
        if self.node_id is None:
            peer = transport.get_extra_info("peername")
            if isinstance(peer, tuple):
                self.peer_ip = _plain_ip(peer[0])
                self.peer = f"{peer[0]}:{peer[1]}"
            bus.inbound.add(self)
        if bus.secret is None:
            self._authenticated()
            return
        loop = asyncio.get_running_loop()
        self._auth_timer = loop.call_later(AUTH_TIMEOUT_S, self._auth_timeout)
        if self.node_id is None:
            self.nonce_a = os.urandom(bus_auth.NONCE_BYTES)
            self._write(encode_payload(bus_auth.challenge(self.nonce_a)))
            self.step = _AWAIT_ANSWER
        else:
            self.step = _AWAIT_CHALLENGE

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed and self.step != _READY and self.transport is not None:
            self._refuse("the peer closed the link during the cluster-secret handshake")
        self._closed()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        bus = self.bus
        bus.stats.bytes_received += len(data)
        reader = self.reader
        reader.feed(data)
        node = bus.node
        try:
            while not self.closed:
                payload = reader.next_payload()
                if payload is None:
                    break
                if self.step != _READY:
                    self._auth_step(payload)
                    continue
                if payload.startswith(bus_auth.CHALLENGE_TAG):
                    self._refuse("the peer asks for a cluster-secret this node does not have")
                    break
                fields, messages = decode_frame(payload, node.dialect.codec)
                bus.stats.frames_received += 1
                if messages:  # (none: all of a newer peer's kinds this node skips)
                    node.receive_frame(Header(*fields), messages, self, self.peer_ip)
        except FrameError as e:
            bus.stats.frames_rejected += 1
            speech = node.dialect.speech
            bus.warn_every_minute(
                (self.peer_ip, str(e)),
                f"Closing the cluster bus link {self._describe()}: {e} (this node speaks "
                f"bus protocols {speech.oldest} to {speech.version}: is the peer a release "
                "it cannot read?)",
            )
            self.close()
        except Exception:
            bus.log.warning(
                f"Closing the cluster bus link {self._describe()} after an error "
                f"handling its messages:\n{traceback.format_exc().rstrip()}"
            )
            self.close()
        if node.ready_queues:
            node.serve_blocked_clients()

    # The cluster-secret handshake ------------------------------------------------------

    def _auth_step(self, payload: bytes) -> None:
        secret = self.bus.secret
        assert secret is not None
        if self.step == _AWAIT_ANSWER:
            proof = bus_auth.check_answer(secret, self.nonce_a, payload)
            if proof is None:
                self._refuse("wrong or missing cluster-secret")
                return
            self._write(encode_payload(proof))
            self._authenticated()
        elif self.step == _AWAIT_CHALLENGE:
            self.nonce_c = os.urandom(bus_auth.NONCE_BYTES)
            answer = bus_auth.answer(secret, payload, self.nonce_c)
            if answer is None:
                self._refuse("the peer sent no cluster-secret challenge")
                return
            self.nonce_a = payload[len(bus_auth.CHALLENGE_TAG) :]
            self._write(encode_payload(answer))
            self.step = _AWAIT_PROOF
        elif not bus_auth.check_server_proof(secret, self.nonce_a, self.nonce_c, payload):
            self._refuse("the peer does not know the cluster-secret")
        else:
            self._authenticated()

    def _authenticated(self) -> None:
        self.step = _READY
        self.ready = True
        self.reader.limit = MAX_FRAME_BYTES
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        if self.node_id is not None:
            self.bus.link_ready(self)

    def _auth_timeout(self) -> None:
        self._auth_timer = None
        if not self.closed and self.step != _READY:
            self._refuse("no cluster-secret handshake in time")

    def _refuse(self, reason: str) -> None:
        self.bus.stats.links_refused += 1
        self.bus.log.warning(f"Refused the cluster bus link {self._describe()}: {reason}")
        self.close()

    # Output ---------------------------------------------------------------------------

    def queue(self, message: Message) -> None:
        self.pending.append(message)
        if not self.queued:
            self.queued = True
            self.bus.schedule_flush(self)

    def flush(self, frame_header: Any) -> None:
        self.queued = False
        messages, self.pending = self.pending, []
        if not messages or not self.ready:
            return
        frame = encode_frame(frame_header, messages)
        self._write(frame)
        bus = self.bus
        bus.node.cluster.messages_sent += len(messages)
        bus.stats.frames_sent += 1
        if self.transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
            bus.log.warning(
                f"Closing the cluster bus link {self._describe()}: the peer does not read"
            )
            self.close()

    def _write(self, data: bytes) -> None:
        self.bus.stats.bytes_sent += len(data)
        self.transport.write(data)

    # Closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection; the core hears of a lost outgoing link it still wanted."""
        if self.transport is not None and not self.closed:
            self.transport.close()
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self._closed()

    def _closed(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.ready = False
        self.pending = []
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        self.bus.link_closed(self)

    def _describe(self) -> str:
        if self.node_id is None:
            return f"from {self.peer}"
        return f"to node {self.node_id.decode()} ({self.peer})"


class ClusterBus:
    """The ``Bus`` of the core, over TCP (see the module docstring)."""

    def __init__(
        self,
        node: Node,
        log: Log,
        *,
        bind: list[str],
        secret: bytes | None,
        tls: TlsShell | None = None,
    ) -> None:
        self.node = node
        self.log = log
        self.bind = bind
        self.secret = secret
        self.tls = tls
        self.stats = node.cluster.stats
        self.outgoing: dict[bytes, BusLink] = {}
        self.inbound: set[BusLink] = set()
        self.servers: list[asyncio.AbstractServer] = []
        self._to_flush: list[BusLink] = []
        self._flush_handle: asyncio.Handle | None = None
        # (address, reason) -> (when last logged, closes not logged since).
        self._warned: dict[tuple[bytes, str], tuple[float, int]] = {}
        # Called before frames go out, so that what a message acknowledges (a
        # replica's LOADJOB behind a GOTJOB) is in the AOF first.
        self.before_write: Callable[[], None] | None = None

    async def listen(self, port: int, backlog: int) -> None:
        """Listen on ``port`` + 10000 on the bind addresses (OSError if it cannot)."""
        loop = asyncio.get_running_loop()
        factory: Callable[[], asyncio.Protocol] = lambda: BusLink(self)  # noqa: E731
        if self.tls is not None and self.tls.bus_server is not None:
            factory = self.tls.accepting(
                factory, "bus", lambda exc: self._tls_refused("from a peer", exc)
            )
        server = await loop.create_server(
            factory,
            list(self.bind) or None,
            port + BUS_PORT_OFFSET,
            backlog=backlog,
            reuse_address=True,
        )
        self.servers.append(server)

    def close(self) -> None:
        for server in self.servers:
            server.close()
        links = [*self.outgoing.values(), *self.inbound]
        self.outgoing.clear()
        for link in links:
            link.close()

    # The core's Bus ---------------------------------------------------------------------

    def send(self, node_id: bytes, message: Message) -> None:
        link = self.outgoing.get(node_id)
        if link is not None and link.ready:
            link.queue(message)

    def reply(self, link: Any, message: Message) -> None:
        if isinstance(link, BusLink) and link.ready:
            link.queue(message)

    def connect(self, node_id: bytes, ip: bytes, port: int) -> None:
        link = self.outgoing.get(node_id)
        if link is not None:
            if link.address == (ip, port):
                if link.ready:  # the core lost track of it: say again that it is up
                    self.link_ready(link)
                return
            del self.outgoing[node_id]
            link.close()
        link = BusLink(self, node_id, ip, port)
        self.outgoing[node_id] = link
        link.task = asyncio.get_running_loop().create_task(self._open(link))

    def disconnect(self, node_id: bytes) -> None:
        link = self.outgoing.pop(node_id, None)
        if link is not None:
            link.close()

    # Links ------------------------------------------------------------------------------

    async def _open(self, link: BusLink) -> None:
        ip, port = link.address
        host = ip.decode("ascii", "replace")
        local = None
        source = self.bind[0] if self.bind else None
        if source and (":" in source) == (":" in host):
            local = (source, 0)
        loop = asyncio.get_running_loop()
        context = self.tls.bus_client if self.tls is not None else None
        try:
            if not 0 < port <= 0xFFFF:  # uvloop would wrap it around
                raise ValueError(f"no bus port {port}")
            await loop.create_connection(
                lambda: link,
                host,
                port,
                local_addr=local,
                ssl=context,
                server_hostname=host if context is not None else None,
                ssl_handshake_timeout=AUTH_TIMEOUT_S if context is not None else None,
            )
        except (TimeoutError, ssl.SSLError) as e:
            self._tls_refused(f"to {host}:{port}", e)
            link.task = None
            link.close()
        except (OSError, ValueError, OverflowError) as e:
            self.log.debug(f"Cluster bus connection to {host}:{port}: {e}")
            link.task = None
            link.close()

    def warn_every_minute(self, key: tuple[bytes, str], text: str) -> None:
        """Log ``text`` unless the same ``key`` was logged less than a minute ago (then
        count it, and say how many the next line stands for)."""
        now = time.monotonic()
        last, unlogged = self._warned.get(key, (0.0, 0))
        if last and now - last < CLOSE_LOG_PERIOD_S:
            self._warned[key] = (last, unlogged + 1)
            return
        if len(self._warned) > 1000:  # (addresses come and go: keep the last minute's)
            self._warned = {
                k: v for k, v in self._warned.items() if now - v[0] < CLOSE_LOG_PERIOD_S
            }
        self._warned[key] = (now, 0)
        more = f" ({unlogged} more times in the last minute)" if unlogged else ""
        self.log.warning(text + more)

    def _tls_refused(self, where: str, exc: Exception) -> None:
        """A TLS handshake of the bus failed: a plaintext peer or an untrusted certificate."""
        self.stats.links_refused += 1
        self.log.warning(f"Refused the cluster bus link {where}: TLS: {describe(exc)}")

    def link_ready(self, link: BusLink) -> None:
        """An outgoing link is connected (and authenticated): tell the core."""
        assert link.node_id is not None
        if self.outgoing.get(link.node_id) is link:
            self.node.link_up(link.node_id)
            node = self.node
            if node.ready_queues:
                node.serve_blocked_clients()

    def link_closed(self, link: BusLink) -> None:
        if link.node_id is None:
            self.inbound.discard(link)
        elif self.outgoing.get(link.node_id) is link:
            del self.outgoing[link.node_id]
            self.node.link_down(link.node_id)

    def schedule_flush(self, link: BusLink) -> None:
        self._to_flush.append(link)
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Once per loop iteration: one frame, one write, per link with messages."""
        self._flush_handle = None
        if self.before_write is not None:
            self.before_write()
        links, self._to_flush = self._to_flush, []
        header = self.node.cluster.header()
        for link in links:
            link.flush(header)
