"""How a connection describes itself: a CLIENT LIST line, in Disque's fields.

CLIENT LIST shows every connection this way and ACL LOG records the one it refused
(``client-info``), so the line lives with the state both read. Besides the core's
:class:`~disquette.core.client.Client` fields it reads, when the shell's connection
has them, its transport's socket (``fd``), its buffers (``qbuf``, ``omem``) and
whether its reading is paused (``events``); the simulator's clients have none.
"""

from __future__ import annotations

from typing import Any

from disquette.core.client import BLOCK_NONE, Client

#: Redis builds its reply list out of 16 KiB chunks; CLIENT LIST's ``oll`` and
#: INFO's ``client_longest_output_list`` count pending output in those units.
REPLY_CHUNK_BYTES = 16 * 1024


def output_list_length(output_bytes: int) -> int:
    """Pending output expressed as a count of Redis reply-list chunks."""
    return -(-output_bytes // REPLY_CHUNK_BYTES)


def peer_id(client: Client) -> bytes:
    """The ``addr`` of CLIENT LIST / KILL: ``ip:port``, or ``<socket path>:0``."""
    return client.addr + b":0" if client.unix_socket else client.addr


def _fd(client: Any) -> int:
    transport = getattr(client, "transport", None)
    if transport is None:
        return -1
    try:
        sock = transport.get_extra_info("socket")
        return sock.fileno() if sock is not None else -1
    except (OSError, AttributeError, ValueError):
        return -1


def client_flags(client: Client) -> bytes:
    flags = b""
    if client.monitor:
        flags += b"O"
    if client.blocked != BLOCK_NONE:
        flags += b"b"
    if client.close_after_reply:
        flags += b"c"
    if getattr(client, "closed", False):
        flags += b"A"
    if client.unix_socket:
        flags += b"U"
    return flags or b"N"


def client_info_line(client: Client, now_ms: int) -> bytes:
    """One CLIENT LIST line (without the newline), fields in Disque's order."""
    qbuf = getattr(client, "query_buffer", 0)
    omem = getattr(client, "output_buffer", 0)
    events = b"" if getattr(client, "_reading_paused", False) else b"r"
    if omem:
        events += b"w"
    return (
        b"id=%d addr=%s fd=%d name=%s age=%d idle=%d flags=%s qbuf=%d qbuf-free=0 "
        b"obl=0 oll=%d omem=%d events=%s cmd=%s"
    ) % (
        client.id,
        peer_id(client),
        _fd(client),
        client.name or b"",
        max(0, now_ms - client.ctime) // 1000,
        max(0, now_ms - client.last_interaction) // 1000,
        client_flags(client),
        qbuf,
        output_list_length(omem),
        omem,
        events,
        client.last_command,
    )
