"""Parsing of numeric command arguments, with Disque's rules and error texts.

Disque parses integers like C ``strtoll``: an optional sign, digits, nothing
else (no spaces, no trailing bytes), leading zeros accepted, and the empty
string reads as zero. Python's ``int`` is more liberal (whitespace,
underscores), so arguments are checked against that grammar first.
"""

from __future__ import annotations

import re
from typing import Final

from disquette.core.errors import DisqueError
from disquette.protocol import reply

_STRICT_INT: Final = re.compile(rb"[+-]?[0-9]+\Z")
_LLONG_MIN, _LLONG_MAX = -(1 << 63), (1 << 63) - 1

TIMEOUT_NOT_INTEGER: Final = reply.err("timeout is not an integer or out of range")
TIMEOUT_NEGATIVE: Final = reply.err("timeout is negative")


def parse_int(value: bytes) -> int | None:
    """A strict 64-bit integer, or None."""
    if not value:
        return 0
    if not _STRICT_INT.match(value):
        return None
    digits = value.lstrip(b"+-").lstrip(b"0")
    if len(digits) > 19:  # beyond 64 bits (and int() refuses more than 4300 digits)
        return None
    n = int(value)
    if n < _LLONG_MIN or n > _LLONG_MAX:
        return None
    return n


def int_arg(value: bytes, error: bytes = reply.NOT_AN_INTEGER) -> int:
    n = parse_int(value)
    if n is None:
        raise DisqueError(error)
    return n


def timeout_arg(value: bytes) -> int:
    """A timeout in milliseconds: 0 means none. Beyond Disque, an empty timeout is
    refused as ``abc`` is (Disque reads it as 0, so ``disquette-cli -x ADDJOB q b`` with
    empty input silently added a job that waits forever)."""
    n = parse_int(value) if value else None
    if n is None:
        raise DisqueError(TIMEOUT_NOT_INTEGER)
    if n < 0:
        raise DisqueError(TIMEOUT_NEGATIVE)
    return n


def parse_cursor(value: bytes) -> int | None:
    """A scan cursor: an unsigned decimal, nothing else."""
    if not value or not value.isdigit() or len(value.lstrip(b"0")) > 20:
        return None
    n = int(value)
    return n if n < (1 << 64) else None
