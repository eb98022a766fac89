"""Printing for the command-line tools: replies as redis-cli prints them, tables.

:func:`format_tty` mirrors redis-cli's ``cliFormatReplyTTY`` (``(integer) 1``,
quoted strings, ``(nil)``, numbered nested arrays, ``(empty array)``,
``(error) ...``) and :func:`format_raw` its ``--raw`` mode (one element per
line, no quoting). Replies come from :class:`~disquette.client.resp.TypedParser`,
which keeps status replies (printed bare) apart from bulk strings (quoted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from disquette.client.errors import ResponseError
from disquette.client.resp import Status
from disquette.protocol.quoting import quote


def format_tty(reply: Any, prefix: bytes = b"") -> bytes:
    """A reply as redis-cli shows it on a terminal (ends with a newline)."""
    if isinstance(reply, ResponseError):
        return b"(error) " + str(reply).encode() + b"\n"
    if isinstance(reply, Status):
        return bytes(reply) + b"\n"
    if isinstance(reply, int):
        return b"(integer) %d\n" % reply
    if isinstance(reply, bytes):
        return quote(reply) + b"\n"
    if reply is None:
        return b"(nil)\n"
    if not reply:
        return b"(empty array)\n"
    width = len(str(len(reply)))
    nested = prefix + b" " * (width + 2)
    out = []
    for i, item in enumerate(reply):
        out.append((prefix if i else b"") + b"%*d) " % (width, i + 1))
        out.append(format_tty(item, nested))
    return b"".join(out)


def format_raw(reply: Any) -> bytes:
    """A reply as ``redis-cli --raw`` shows it (ends with a newline)."""
    return _raw(reply) + b"\n"


def _raw(reply: Any) -> bytes:
    if isinstance(reply, ResponseError):
        return str(reply).encode() + b"\n"
    if isinstance(reply, bytes):
        return bytes(reply)
    if isinstance(reply, int):
        return b"%d" % reply
    if reply is None:
        return b""
    return b"\n".join(_raw(item) for item in reply)


def verbatim(argv: Sequence[bytes]) -> bool:
    """Commands whose text reply redis-cli prints as it is, in every mode (INFO...)."""
    name = argv[0].lower()
    sub = argv[1].lower() if len(argv) > 1 else b""
    return (
        name == b"info"
        or (name == b"cluster" and len(argv) == 2 and sub in (b"nodes", b"info"))
        or (name == b"client" and sub == b"list")
        or (name == b"latency" and len(argv) == 3 and sub == b"graph")
        or (name == b"latency" and len(argv) == 2 and sub == b"doctor")
        or (name == b"debug" and sub == b"htstats")
    )


def format_reply(reply: Any, argv: Sequence[bytes], raw: bool) -> bytes:
    """What redis-cli prints for ``reply`` to ``argv``, in raw or terminal mode."""
    if verbatim(argv):
        return _raw(reply)
    return format_raw(reply) if raw else format_tty(reply)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces, with a header line."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines) + "\n"


def human_bytes(n: int | float) -> str:
    """``1.02M`` style, as Disque's ``used_memory_human``."""
    if n < 1024:
        return f"{int(n)}B"
    for unit in "KMGTP":
        n /= 1024
        if n < 1024 or unit == "P":
            break
    return f"{n:.2f}{unit}"
