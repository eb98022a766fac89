"""A client connection: bytes in, requests through the command pipeline, bytes out.

This is the hot path. ``data_received`` feeds the request reader, runs every
complete request through :meth:`ServerState.execute` (a pipelined run of one
command through :meth:`ServerState.execute_run` when it can), lets the node serve
clients blocked on queues that just received jobs, and hands all replies of
the batch to the server's outbox, which writes them at the end of the event-loop
turn (server/outbox.py). A client blocked in GETJOB or ADDJOB
keeps its remaining requests until the node delivers its reply; a client
paused by CLIENT PAUSE keeps them until the pause ends. When the kernel's
send buffer fills up (a client that pipelines without reading), reading from
that client stops until it drains, so memory stays bounded. A client whose
connection ends is forgotten the moment the shell can tell (its end of file, or
a transport found closing when the core asks :meth:`ClientConnection.gone`), so
that no job or answer is ever handed to a connection that has gone.

One client gets at most ``TURN_REQUESTS`` requests run per event-loop turn: a
read can hold a few thousand pipelined requests (10 ms of work), and the rest of
a long pipeline waits for the next turn, with reading from that client stopped
meanwhile, so that other clients, the timers and the bus are served in between
(the longest pause stays a few milliseconds while a million jobs are loaded).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final

from disquette.core.client import REPLY_OFF, Client
from disquette.protocol.reader import ProtocolError, RequestReader
from disquette.protocol.reply import resp3
from disquette.server.clock import host_ms

if TYPE_CHECKING:
    from disquette.server.app import Server

MAX_CLIENTS_REACHED: Final = b"-ERR max number of clients reached\r\n"
PROTECTED_MODE: Final = (
    b"-DENIED disquette is running in protected mode because protected mode is enabled, "
    b"no bind address was specified and no authentication password is required. In this "
    b"mode connections are only accepted from the loopback interface. To accept clients "
    b"from other computers, do one of: 1) set a password with 'requirepass' (CONFIG SET "
    b"requirepass <password> from the loopback interface, or in the config file); 2) bind "
    b"to the interfaces clients should use with 'bind'; 3) disable protected mode with "
    b"'protected-mode no' (only if the network is trusted). Restart the server after "
    b"changing the config file.\r\n"
)
_LOOPBACK_PREFIXES: Final = ("127.", "::1", "::ffff:127.")
MAX_HELD_BYTES: Final = 1 << 30  # as the query buffer limit
TURN_REQUESTS: Final = 512  # requests of one client run per event-loop turn


class ClientConnection(asyncio.Protocol, Client):
    __slots__ = (
        "_reading_paused",
        "_resume_handle",
        "_turn_paused",
        "closed",
        "held_bytes",
        "node",
        "outbox",
        "pending",
        "reader",
        "server",
        "state",
        "transport",
    )

    def __init__(self, server: Server) -> None:
        self.server = server
        self.state = server.state
        self.node = server.state.node
        self.outbox = server.outbox
        self.transport: Any = None
        self.reader = RequestReader()
        self.pending: list[Any] = []
        self.held_bytes = 0
        self.closed = False
        self._reading_paused = False  # the client does not read its replies
        self._turn_paused = False  # the rest of a long pipeline waits for a turn
        self._resume_handle: asyncio.Handle | None = None

    # ------------------------------------------------------------------
    # asyncio callbacks.

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        self.transport = transport
        state = self.state
        peer = transport.get_extra_info("peername")
        unix = not isinstance(peer, tuple)
        if unix:
            addr = (self.server.config.unixsocket or "").encode()
        else:
            host = peer[0]
            addr = (f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}").encode()
        Client.__init__(self, state.new_client_id(), addr, host_ms())
        self.unix_socket = unix
        if len(state.clients) >= self.server.config.maxclients:
            state.stats.rejected_connections += 1
            self._refuse(MAX_CLIENTS_REACHED)
            return
        if not unix and self.server.protected_mode() and not peer[0].startswith(_LOOPBACK_PREFIXES):
            state.stats.rejected_connections += 1
            self._refuse(PROTECTED_MODE)
            return
        state.add_client(self)

    def _refuse(self, message: bytes) -> None:
        self.closed = True
        self.transport.write(message)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed and self.id not in self.state.clients:
            return
        self.closed = True
        if self._resume_handle is not None:
            self._resume_handle.cancel()
        self.state.remove_client(self)

    def eof_received(self) -> bool:
        """The client closed its side: forget it now, as Disque does when its read
        returns 0, not a loop turn later in :meth:`connection_lost`, when another
        client's ADDJOB could already have handed it a job."""
        self.close()
        return False

    def pause_writing(self) -> None:
        self._reading_paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._reading_paused = False
        if not self.closed and not self._turn_paused:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.state.stats.net_input_bytes += len(data)
        requests = self.reader.feed(data)
        if not requests:
            return
        if self.pending or self.blocked or self._resume_handle is not None:
            # Held until the client is unblocked or the pause ends; bounded like the
            # query buffer, since a blocked client may keep sending.
            self.held_bytes += len(data)
            if self.held_bytes > MAX_HELD_BYTES:
                self.close()
                return
            self.pending.extend(requests)
            return
        self.process(requests)

    # ------------------------------------------------------------------
    # Running requests.

    def process(self, requests: list[Any]) -> None:
        """Run ``requests`` in order until done, blocked, paused or closing; beyond
        ``TURN_REQUESTS`` of them, the rest waits for the next turn."""
        rest = None
        if len(requests) > TURN_REQUESTS:
            rest = requests[TURN_REQUESTS:]
            requests = requests[:TURN_REQUESTS]
        state = self.state
        self.last_interaction = host_ms()
        out: list[bytes] = []
        closing = False
        last = len(requests) - 1
        skip = 0
        for i, argv in enumerate(requests):
            if skip:
                skip -= 1
                continue
            if state.clients_paused_until and self._client_pause_holds(requests[i:]):
                break
            if state.stopping:
                break
            if argv.__class__ is ProtocolError:
                if argv.reply is not None:
                    out.append(argv.reply)
                closing = True
                break
            if i < last:
                count, replies = state.execute_run(self, requests, i)
                if count:
                    out.append(replies)
                    if i + count > last:
                        break
                    skip = count - 1
                    continue
            response = state.execute(self, argv)  # (a native call in the compiled build)
            if response is not None:
                out.append(response)
            if self.close_after_reply:
                closing = True
                break
            if self.blocked:
                self.pending = requests[i + 1 :]
                break
        if rest is not None and not closing:
            self._next_turn(rest)
        node = self.node
        if node.ready_queues:
            node.serve_blocked_clients()
        if out and not self.closed:
            data = out[0] if len(out) == 1 else b"".join(out)
            state.stats.net_output_bytes += len(data)
            if closing:
                self.outbox.send_now(self.transport, data)
            else:
                self.outbox.send(self.transport, data)
        if closing:
            self.close()

    def _client_pause_holds(self, requests: list[Any]) -> bool:
        wait_ms = self.state.clients_paused_until - host_ms()
        if wait_ms <= 0:
            self.state.clients_paused_until = 0
            return False
        self.pending = requests
        if self._resume_handle is None:
            loop = asyncio.get_running_loop()
            self._resume_handle = loop.call_later(wait_ms / 1000, self._process_pending)
        return True

    def _next_turn(self, rest: list[Any]) -> None:
        """Keep ``rest`` for a later turn (after requests already held for a block or
        a pause), reading nothing more from this client until it has run."""
        self.pending = self.pending + rest if self.pending else rest
        if not self._turn_paused:
            self._turn_paused = True
            self.transport.pause_reading()
        if self._resume_handle is None and not self.blocked:
            self._resume_handle = asyncio.get_running_loop().call_soon(self._process_pending)

    def _process_pending(self) -> None:
        self._resume_handle = None
        if self.closed or self.blocked:
            return
        requests, self.pending = self.pending, []
        self.held_bytes = 0
        if requests:
            self.process(requests)
        if self._turn_paused and not self.pending and not self.closed:
            self._turn_paused = False
            if not self._reading_paused:
                self.transport.resume_reading()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.state.remove_client(self)
            self.transport.close()

    # ------------------------------------------------------------------
    # The core's ways of talking to this client.

    def gone(self) -> bool:
        """Closed, or its transport is closing (a reset, a failed write) before
        :meth:`connection_lost` says so: forgotten from now on."""
        if self.closed:
            return True
        if self.transport.is_closing():
            self.close()
            return True
        return False

    def deliver(self, reply: bytes) -> None:
        if self.gone():
            return
        if reply.startswith(b"-"):  # a blocked ADDJOB's NOREPL, ...
            self.state.stats.count_error(reply)
        if self.reply_mode != REPLY_OFF:
            if self.resp3:
                reply = resp3(reply)
            self.state.stats.net_output_bytes += len(reply)
            self.outbox.send(self.transport, reply)
        if self.pending and self._resume_handle is None:
            self._resume_handle = asyncio.get_running_loop().call_soon(self._process_pending)

    def push(self, data: bytes) -> None:
        if not self.closed:
            self.state.stats.net_output_bytes += len(data)
            self.outbox.send(self.transport, data)

    # ------------------------------------------------------------------
    # For CLIENT LIST and INFO clients.

    @property
    def query_buffer(self) -> int:
        return self.reader.buffered

    @property
    def output_buffer(self) -> int:
        transport = self.transport
        if transport is None:
            return 0
        return transport.get_write_buffer_size() + self.outbox.pending(transport)
