"""What the command-line tools say when they cannot talk to a node, in plain words.

A node listens on three ports: its client port (7711), which speaks Disque's
protocol; its cluster bus (the client port + 10000), which closes a connection
that does not speak the bus's frames; and, when configured, its HTTP port
(``make run`` puts it on the client port + 1000), which answers in HTTP. A tool
pointed at the wrong one used to say ``Server closed the connection``; a dead
address, Python's exception text. :func:`unreachable` words a failed connection
and :func:`not_a_client_port` finds out, when a connection closed before any
reply, which kind of port the address is by asking it once more.
"""

from __future__ import annotations

import contextlib
import socket

from disquette.client.topology import Address, format_address

#: Seconds the probe of :func:`not_a_client_port` waits for an answer.
PROBE_TIMEOUT = 2.0


def unreachable(error: BaseException) -> str:
    """Why a connection could not be opened, in plain words."""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused (no node listens on that port)"
    if isinstance(error, socket.gaierror):
        return "unknown host name"
    if isinstance(error, TimeoutError | socket.timeout):
        return "no answer (timed out)"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[0].lower() + error.strerror[1:]
    return str(error) or type(error).__name__


def not_a_client_port(address: Address) -> str:
    """Why the node at ``address`` closed a connection before replying: a short probe
    (an inline PING) tells an HTTP port from a cluster bus from a node that closed the
    connection for its own reasons."""
    where = format_address(address)
    answer = b""
    with (
        contextlib.suppress(OSError),
        socket.create_connection(address, timeout=PROBE_TIMEOUT) as sock,
    ):
        sock.sendall(b"PING\r\n\r\n")
        answer = sock.recv(64)
    if answer.startswith(b"HTTP/"):
        return (
            f"{where} answered in HTTP: it is a node's HTTP port (the dashboard and the JSON "
            "API), not its client port (make run puts the HTTP port on the client port + 1000)"
        )
    if answer.startswith((b"+", b"-")):
        return f"the node at {where} closed the connection (see its log)"
    if answer:
        return f"{where} does not speak Disque's protocol: is it a Disque node's client port?"
    return (
        f"{where} closed the connection without a reply: it is not a Disque client port "
        "(a node's cluster bus, on its client port + 10000, closes what is not the bus's)"
    )
