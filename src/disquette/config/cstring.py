"""The C string helpers Disque's configuration code is built on.

Values are C strings in Disque, so an embedded NUL byte ends them
(:func:`c_str`); CONFIG REWRITE quotes strings with ``sdscatrepr``
(:func:`sds_repr`) and writes sizes in the largest exact unit
(:func:`format_memory`). The values themselves are read by
:mod:`disquette.config.values`, which refuses what Disque's ``atoi`` and
``memtoll`` silently misread.

Everything works on ``bytes``: configuration lines and CONFIG SET values are
byte strings, and the only text they ever become is the value stored on the
:class:`~disquette.config.model.Config` (decoded with ``surrogateescape`` so
it converts back to the same bytes, see :func:`to_str` and :func:`to_bytes`).
"""

from __future__ import annotations

import os

INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

_KB = 1024
_MB = 1024 * 1024
_GB = 1024 * 1024 * 1024


def c_str(value: bytes) -> bytes:
    """Return ``value`` as C sees it through a ``char *``: cut at the first NUL byte."""
    nul = value.find(0)
    return value if nul < 0 else value[:nul]


def to_str(value: bytes) -> str:
    """Decode a configuration byte string losslessly (``surrogateescape``)."""
    return value.decode("utf-8", "surrogateescape")


def to_bytes(value: str) -> bytes:
    """Encode a value decoded by :func:`to_str` back to the original bytes."""
    return value.encode("utf-8", "surrogateescape")


def sds_repr(value: bytes) -> bytes:
    """``sdscatrepr``: a double-quoted string that :func:`split_args` reads back.

    Backslash and double quote are escaped, ``\\n \\r \\t \\a \\b`` use their
    short escapes, other bytes outside printable ASCII become ``\\xHH``.
    """
    out = bytearray(b'"')
    for c in value:
        if c in (0x5C, 0x22):
            out += b"\\" + bytes((c,))
        elif c in _REPR_ESCAPES:
            out += _REPR_ESCAPES[c]
        elif 0x20 <= c <= 0x7E:
            out.append(c)
        else:
            out += b"\\x%02x" % c
    out += b'"'
    return bytes(out)


_REPR_ESCAPES = {10: b"\\n", 13: b"\\r", 9: b"\\t", 7: b"\\a", 8: b"\\b"}


def format_memory(value: int) -> bytes:
    """``rewriteConfigFormatMemory``: ``Ngb``/``Nmb``/``Nkb`` when exact, else bytes."""
    if value:
        for unit, suffix in ((_GB, b"gb"), (_MB, b"mb"), (_KB, b"kb")):
            if value % unit == 0:
                return b"%d%s" % (value // unit, suffix)
    return b"%d" % value


def strerror(error: OSError) -> str:
    """The C ``strerror`` text of an ``OSError`` (falling back to its message)."""
    if error.errno is not None:
        return os.strerror(error.errno)
    return str(error)
