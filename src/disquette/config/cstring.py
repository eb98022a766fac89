"""The C string conversions Disque's configuration code is built on.

Disque reads its configuration with a handful of libc and sds helpers whose
quirks are part of the observable behaviour: ``atoi`` silently ignores
trailing junk (``port 77abc`` is port 77), ``strtoll`` saturates, ``memtoll``
accepts the ``k/kb/m/mb/g/gb`` units, CONFIG SET parses integers strictly,
``yesnotoi`` compares case-insensitively, and values are C strings, so an
embedded NUL byte ends them. Each function here reproduces one of those
helpers exactly (on a 64-bit Linux build), so the table in
:mod:`disquette.config.table` can say *which* conversion a directive uses
instead of re-deriving its edge cases.

Everything works on ``bytes``: configuration lines and CONFIG SET values are
byte strings, and the only text they ever become is the value stored on the
:class:`~disquette.config.model.Config` (decoded with ``surrogateescape`` so
it converts back to the same bytes, see :func:`to_str` and :func:`to_bytes`).
"""

from __future__ import annotations

import os

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MASK = (1 << 64) - 1

#: C ``isspace`` in the "C" locale.
_C_SPACE = frozenset(b" \t\n\v\f\r")
_DIGITS8 = frozenset(b"01234567")
_DIGITS10 = frozenset(b"0123456789")

_KB = 1024
_MB = 1024 * 1024
_GB = 1024 * 1024 * 1024

#: memtoll's units (compared case-insensitively); the empty unit and "b" are bytes.
_MEM_UNITS = {
    b"": 1,
    b"b": 1,
    b"k": 1000,
    b"kb": _KB,
    b"m": 1000 * 1000,
    b"mb": _MB,
    b"g": 1000 * 1000 * 1000,
    b"gb": _GB,
}


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


def wrap_int64(value: int) -> int:
    """Two's complement wrap to a signed 64-bit integer (C ``long long`` overflow)."""
    value &= UINT64_MASK
    return value - (1 << 64) if value > INT64_MAX else value


def wrap_int32(value: int) -> int:
    """Truncate to a signed 32-bit integer, as a C ``(int)`` cast does."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value > INT32_MAX else value


def _strtol(s: bytes, digits: frozenset[int], base: int) -> tuple[int, int, bool]:
    """libc ``strtol``/``strtoll`` on a 64-bit system.

    Returns ``(value, end, overflow)``: ``end`` is the index of the first
    unparsed byte (``0`` when no digits were found, because C then sets
    ``endptr`` back to the start of the string), ``overflow`` is C's ERANGE,
    in which case ``value`` is saturated to the ``long`` range.
    """
    n = len(s)
    i = 0
    while i < n and s[i] in _C_SPACE:
        i += 1
    negative = False
    if i < n and s[i] in b"+-":
        negative = s[i] == 0x2D
        i += 1
    start = i
    while i < n and s[i] in digits:
        i += 1
    if i == start:
        return 0, 0, False
    significant = s[start:i].lstrip(b"0")
    if len(significant) > 64:  # far beyond 2**63 in any base we use
        return (INT64_MIN if negative else INT64_MAX), i, True
    value = int(significant or b"0", base)
    if negative:
        value = -value
    if value > INT64_MAX:
        return INT64_MAX, i, True
    if value < INT64_MIN:
        return INT64_MIN, i, True
    return value, i, False


def strtoll(s: bytes) -> int:
    """``strtoll(s, NULL, 10)``: leading spaces and sign allowed, junk ignored, saturating."""
    return _strtol(s, _DIGITS10, 10)[0]


def atoi(s: bytes) -> int:
    """glibc ``atoi``: ``(int) strtol(s, NULL, 10)``, so huge values wrap to 32 bits."""
    return wrap_int32(_strtol(s, _DIGITS10, 10)[0])


def strtol_octal(s: bytes) -> tuple[int, bool]:
    """``strtol(s, NULL, 8)`` plus its ERANGE flag (used by ``unixsocketperm``)."""
    value, _end, overflow = _strtol(s, _DIGITS8, 8)
    return value, overflow


def strtoll_full(s: bytes) -> int | None:
    """``strtoll(s, &end, 10)`` accepted only when ``*end == '\\0'``; else ``None``.

    Leading whitespace and a sign are allowed, an empty string is 0, and
    overflow saturates silently (no ERANGE check), as in CONFIG SET
    client-output-buffer-limit.
    """
    s = c_str(s)
    value, end, _overflow = _strtol(s, _DIGITS10, 10)
    if end != len(s):
        return None
    return value


def strict_int(s: bytes) -> int | None:
    """Redis 3.0 ``getLongLongFromObject`` on a string; ``None`` when it fails.

    ``strtoll`` base 10 with: no leading whitespace, a sign allowed, leading
    zeros allowed, nothing after the digits, no overflow, and the empty string
    parsing as 0 (the reference's "strict integer", section 0).
    """
    s = c_str(s)
    if s and s[0] in _C_SPACE:
        return None
    value, end, overflow = _strtol(s, _DIGITS10, 10)
    if overflow or end != len(s):
        return None
    return value


def memtoll(s: bytes) -> tuple[int, bool]:
    """Redis 3.0 ``memtoll``: an amount of memory with an optional unit.

    Returns ``(bytes, error)``. Units are ``b``, ``k`` (1000), ``kb`` (1024),
    ``m``, ``mb``, ``g``, ``gb``, case-insensitive. An unknown unit sets the
    error flag but still returns the leading number (the config file ignores
    the flag, so ``maxmemory 100xyz`` is 100 bytes). The product wraps like C.
    """
    s = c_str(s)
    n = len(s)
    u = 1 if s[:1] == b"-" else 0
    while u < n and s[u] in _DIGITS10:
        u += 1
    mul = _MEM_UNITS.get(s[u:].lower())
    error = mul is None
    if mul is None:
        mul = 1
    if u >= 128:
        return INT64_MAX, True
    return wrap_int64(strtoll(s[:u]) * mul), error


def yesnotoi(s: bytes) -> int:
    """``yesnotoi``: 1 for ``yes``, 0 for ``no`` (any case), -1 otherwise."""
    s = c_str(s).lower()
    if s == b"yes":
        return 1
    if s == b"no":
        return 0
    return -1


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
    """``rewriteConfigFormatMemory``: ``Ngb``/``Nmb``/``Nkb`` when exact, else bytes.

    ``value`` is read as a C ``long long`` (unsigned limits above 2**63 print
    as negative numbers, exactly as the C code does; they load back the same).
    """
    value = wrap_int64(value)
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
