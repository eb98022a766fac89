"""The kinds of value a directive takes, each read by one parser, everywhere.

Disque reads its numbers with ``atoi`` and ``strtoll``, which stop at the first
byte that is not a digit and read nothing as 0, and its sizes with ``memtoll``,
whose unknown unit the config file ignores: ``maxmemory 100MBs`` is 100 bytes,
``port 77abc`` is port 77, ``timeout ''`` is 0, without a word. disquette reads
each kind of value one way, whether it comes from the config file, the command
line or CONFIG SET, and refuses what it cannot read whole:

* :func:`integer`: an optional sign and digits (``-1``, ``007``), nothing else;
* :func:`size`: bytes, or a number with Disque's units ``b``, ``k`` (1000),
  ``kb`` (1024), ``m``, ``mb``, ``g``, ``gb``, case-insensitive (``100mb``);
* :func:`duration`: a number in the directive's own unit (cluster-node-timeout's
  milliseconds, timeout's seconds), or with a unit of its own, ``us``, ``ms``,
  ``s``, ``m``, ``h`` or ``d`` (``15s``), which must give a whole number of the
  directive's unit;
* :func:`boolean`: ``yes`` or ``no``, case-insensitive, as in Disque;
* :func:`choice`: one of a directive's names, case-insensitive.

Each parser returns the value or raises :class:`Refused`, which says what was
wrong (``problem``) and what would have been accepted (``accepted``); the
config file's banner and CONFIG SET's callers put the directive's name and the
value in front (:meth:`Refused.explain`). A value is a C string, as in Disque:
it ends at a NUL byte.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Final, NamedTuple

from disquette.config.cstring import INT64_MAX, INT64_MIN, c_str, format_memory, to_str

#: A size's units (the empty unit and ``b`` are bytes), Disque's memtoll units.
SIZE_UNITS: Final = {
    "": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2,
    "g": 1000**3, "gb": 1024**3,
}  # fmt: skip
#: A duration's units, in microseconds.
DURATION_UNITS: Final = {
    "us": 1, "ms": 1000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000,
    "d": 86_400_000_000,
}  # fmt: skip
#: How the directives' own units are named in what :func:`duration` accepts.
UNIT_NAMES: Final = {"us": "microseconds", "ms": "milliseconds", "s": "seconds"}

_NUMBER: Final = re.compile(rb"([+-]?)([0-9]+)([a-zA-Z]*)\Z")
SIZE_FORMS: Final = (
    "a number of bytes, or a number with a unit: k (1000), kb (1024), m, mb, g or gb, "
    "in any case (such as 100mb)"
)


class Refused(ValueError):
    """A value its parser cannot read, or out of its directive's range.

    ``readable``: the value is of the right kind (a number out of range, a word
    that is not one of the choices), so the directive's own error text (Disque's
    ``Invalid port``) applies to it; a value that is not even of the kind (``77abc``
    for a port) gets the kind's words alone.
    """

    def __init__(self, raw: bytes, problem: str, accepted: str, readable: bool = False) -> None:
        self.value = to_str(c_str(raw))
        self.problem = problem
        self.accepted = accepted
        self.readable = readable
        super().__init__(f"'{self.value}' {problem}; accepted: {accepted}")

    def explain(self, name: str, headline: str | None = None) -> str:
        """``[<headline>: ]<name> '<value>' <problem>; accepted: <what>``; the headline
        only for a readable value."""
        text = f"{name} {self}"
        return f"{headline}: {text}" if headline and self.readable else text


def _bounds(lo: object, hi: object) -> str:
    if lo is not None and hi is not None:
        return f"from {lo} to {hi}"
    if lo is not None:
        return f"of {lo} or more"
    if hi is not None:
        return f"of {hi} or less"
    return ""


def _number(raw: bytes) -> tuple[int, str] | None:
    """``(signed number, lowercase unit)`` of ``[+-]digits[letters]``, or None."""
    match = _NUMBER.match(c_str(raw))
    if match is None:
        return None
    sign, digits, unit = match.groups()
    if len(digits.lstrip(b"0")) > 30:  # far beyond 64 bits with any unit
        return None
    value = int(digits)
    return (-value if sign == b"-" else value), to_str(unit.lower())


def _check(raw: bytes, value: int, lo: int | None, hi: int | None, accepted: str) -> int:
    if (
        (lo is not None and value < lo)
        or (hi is not None and value > hi)
        or not INT64_MIN <= value <= INT64_MAX
    ):
        raise Refused(raw, "is out of range", accepted, readable=True)
    return value


def integer(raw: bytes, lo: int | None = None, hi: int | None = None) -> int:
    """A whole number from ``lo`` to ``hi`` (None: unbounded on that side)."""
    accepted = f"a whole number {_bounds(lo, hi)}".rstrip()
    parsed = _number(raw)
    if parsed is None or parsed[1]:
        raise Refused(raw, "is not a whole number", accepted)
    return _check(raw, parsed[0], lo, hi, accepted)


def size(raw: bytes, lo: int | None = 0, hi: int | None = None) -> int:
    """A size in bytes (:data:`SIZE_UNITS`), from ``lo`` to ``hi`` bytes."""
    if (lo, hi) == (0, None):
        accepted = SIZE_FORMS
    elif (lo, hi) == (1, None):
        accepted = f"{SIZE_FORMS}, above 0"
    else:
        low, high = (None if n is None else format_memory(n).decode() for n in (lo, hi))
        accepted = f"{SIZE_FORMS}, {_bounds(low, high)}"
    parsed = _number(raw)
    if parsed is None or parsed[1] not in SIZE_UNITS:
        raise Refused(raw, "is not a size", accepted)
    return _check(raw, parsed[0] * SIZE_UNITS[parsed[1]], lo, hi, accepted)


def duration(raw: bytes, unit: str, lo: int | None = 0, hi: int | None = None) -> int:
    """A duration in ``unit`` (``us``, ``ms`` or ``s``), from ``lo`` to ``hi`` of it.

    A bare number is in ``unit``; a number with a unit of :data:`DURATION_UNITS` is
    converted, and must come to a whole number of ``unit``.
    """
    name = UNIT_NAMES[unit]
    accepted = (
        f"a whole number of {name} {_bounds(lo, hi)}".rstrip() + ", or a number with a unit: "
        "us, ms, s, m (minutes), h or d (such as 15s)"
    )
    parsed = _number(raw)
    if parsed is None or (parsed[1] and parsed[1] not in DURATION_UNITS):
        raise Refused(raw, "is not a duration", accepted)
    number, given = parsed
    if not given:
        return _check(raw, number, lo, hi, accepted)
    micros = number * DURATION_UNITS[given]
    value, rest = divmod(micros, DURATION_UNITS[unit])
    if rest:
        raise Refused(raw, f"is not a whole number of {name}", accepted)
    return _check(raw, value, lo, hi, accepted)


def boolean(raw: bytes) -> bool:
    """``yes`` or ``no``, in any case."""
    word = c_str(raw).lower()
    if word == b"yes":
        return True
    if word == b"no":
        return False
    raise Refused(raw, "is not yes or no", "yes or no", readable=True)


def choice(raw: bytes, names: Sequence[str]) -> str:
    """One of ``names`` (lowercase), in any case; returned lowercase."""
    word = to_str(c_str(raw).lower())
    if word not in names:
        raise Refused(raw, "is not one of the choices", ", ".join(names), readable=True)
    return word


def ip_address(raw: bytes) -> str:
    """An IPv4 or IPv6 literal, canonical (as inet_ntop writes it); empty: none."""
    text = to_str(c_str(raw)).strip()
    if not text:
        return ""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise Refused(raw, "is not an IP address", "an IPv4 or IPv6 address, or empty") from None


class Seed(NamedTuple):
    """A ``cluster-seeds`` entry: a DNS name or IP, a client port, a bus port (0: port +
    10000)."""

    host: str
    port: int
    bus_port: int


SEED_FORMS: Final = "host:port or host:port@bus-port, host a DNS name or an IP ([...] for IPv6)"
_HOST_NAME: Final = re.compile(rb"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}\Z")


def is_host_name(name: bytes) -> bool:
    """Whether ``name`` may be a DNS name (letters, digits, ``.``, ``-``, ``_``)."""
    return _HOST_NAME.match(name) is not None


def seed(raw: bytes) -> Seed:
    """``host:port[@bus-port]``: where to look for the cluster (a name is resolved again
    on every attempt)."""
    text = to_str(c_str(raw))
    address, at, bus_text = text.partition("@")
    host, colon, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ipaddress.ip_address(host)
        named = True
    except ValueError:
        named = host.isascii() and is_host_name(host.encode())
    ports = [port_text] + ([bus_text] if at else [])
    if not (colon and named and all(p.isdigit() and 0 < int(p) <= 65535 for p in ports)):
        raise Refused(raw, "is not a seed address", SEED_FORMS)
    return Seed(host, int(port_text), int(bus_text or 0))
