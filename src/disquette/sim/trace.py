"""The event log of a simulated run: a fingerprint of the whole history and its tail.

Every component of the simulator records what it does (a message sent, dropped
or delivered, a client request and its reply, a fault) as ``(now, kind,
fields)``. Two things are kept: a running digest over every record, so two runs
of one seed can be compared for an exactly identical history, and the last
``keep`` records, which a failing run prints as its trace. With ``echo`` set
(``--verbose``) every record is also printed as it happens.

The digest chains Python's own tuple hash, which is fast enough to run on every
record of every seed. Hashes of ``bytes`` and ``str`` depend on
``PYTHONHASHSEED``, so digests are comparable between runs in one process or
between processes started with the same ``PYTHONHASHSEED`` (the simulator's
command line and its test workers pin it to 0, see :mod:`disquette.sim.batch`).
Fields must therefore be hashable: ints, strings, bytes and tuples of them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

Record = tuple[int, str, tuple[Any, ...]]


def format_record(record: Record, start_ms: int = 0) -> str:
    """One record as a line: virtual ms since ``start_ms``, kind, fields."""
    now, kind, fields = record
    parts = [_show(f) for f in fields]
    return f"{now - start_ms:>9} {kind:<10} {' '.join(parts)}"


def _show(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return str(value)


class Trace:
    __slots__ = ("_digest", "_echo", "_tail", "count", "start_ms")

    def __init__(
        self, start_ms: int, keep: int = 300, echo: Callable[[str], None] | None = None
    ) -> None:
        self.start_ms = start_ms
        self._tail: deque[Record] = deque(maxlen=keep)
        self._digest = 0
        self._echo = echo
        self.count = 0

    def record(self, now: int, kind: str, *fields: Any) -> None:
        entry = (now, kind, fields)
        self._tail.append(entry)
        self._digest = hash((self._digest, now, kind, fields))
        self.count += 1
        if self._echo is not None:
            self._echo(format_record(entry, self.start_ms))

    def digest(self) -> str:
        """A fingerprint of every record so far (see the module docstring)."""
        return f"{self._digest & 0xFFFFFFFFFFFFFFFF:016x}:{self.count}"

    def tail(self, limit: int | None = None) -> list[str]:
        """The most recent records, formatted, oldest first."""
        records = list(self._tail)
        if limit is not None:
            records = records[-limit:]
        return [format_record(r, self.start_ms) for r in records]
