"""Quoting of binary strings for humans: MONITOR lines and logs.

Disque prints arguments the way ``sdscatrepr`` does: in double quotes, with
``\\\\`` and ``\\"`` escaped, ``\\n \\r \\t \\a \\b`` as escapes, other
non-printable bytes as ``\\xHH``.
"""

from __future__ import annotations

from typing import Any

_REPR = {
    ord("\\"): b"\\\\",
    ord('"'): b'\\"',
    10: b"\\n",
    13: b"\\r",
    9: b"\\t",
    7: b"\\a",
    8: b"\\b",
}
_TABLE = [_REPR.get(c, bytes([c]) if 32 <= c < 127 else b"\\x%02x" % c) for c in range(256)]


def quote(data: bytes) -> bytes:
    return b'"' + b"".join([_TABLE[c] for c in data]) + b'"'


def monitor_line(now: float, client: Any, argv: list[bytes]) -> bytes:
    """``+<secs>.<usec> [<addr>] "arg" ...`` as a status reply."""
    secs = int(now)
    usec = int((now - secs) * 1_000_000)
    where = b"unix:" + client.addr if client.unix_socket else client.addr
    args = b" ".join([quote(a) for a in argv])
    return b"+%d.%06d [%s] %s\r\n" % (secs, usec, where, args)
