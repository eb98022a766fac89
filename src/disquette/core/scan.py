"""A dictionary that can be walked with a stateless cursor, as JSCAN and QSCAN need.

Disque scans its hash tables with a cursor that survives inserts and deletes
between calls: every element present for the whole iteration is returned at
least once. Python dicts offer no such cursor, so this one keeps ``BUCKETS``
small dicts and routes each key by its (cached) hash: the cursor is the index
of the next bucket to visit. The extra cost of a lookup is one ``hash`` and one
list index; the scan cost of a call is bounded by the elements it examines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final, Generic, TypeVar

V = TypeVar("V")

BUCKETS: Final = 4096
_MASK: Final = BUCKETS - 1


class ScanDict(Generic[V]):
    __slots__ = ("_buckets", "_len", "miss")

    def __init__(self) -> None:
        self._buckets: list[dict[bytes, V]] = [{} for _ in range(BUCKETS)]
        self._len = 0
        # Where values kept elsewhere come from (the job registry's spilled jobs,
        # core/spill.py): called with a key not here, it brings the value back (and
        # adds it) or returns None. ``len``, ``values``, ``pop`` and ``scan`` see only
        # the values here.
        self.miss: Callable[[bytes], V | None] | None = None

    def __len__(self) -> int:
        return self._len

    def get(self, key: bytes) -> V | None:
        value = self._buckets[hash(key) & _MASK].get(key)
        if value is None and self.miss is not None:
            return self.miss(key)
        return value

    def __contains__(self, key: bytes) -> bool:
        return self.get(key) is not None

    def add(self, key: bytes, value: V) -> bool:
        """Insert if absent (here or elsewhere); return whether it was inserted."""
        miss = self.miss
        if (
            miss is not None
            and key not in self._buckets[hash(key) & _MASK]
            and miss(key) is not None
        ):
            return False
        return self.add_new(key, value)

    def add_new(self, key: bytes, value: V) -> bool:
        """:meth:`add` for a key that cannot be elsewhere (a job ID just made, with its
        144 random bits; a job just loaded back): the miss handler is not asked."""
        bucket = self._buckets[hash(key) & _MASK]
        if key in bucket:
            return False
        bucket[key] = value
        self._len += 1
        return True

    def pop(self, key: bytes) -> V | None:
        """Remove and return the value of ``key`` (None if absent). A bucket emptied
        gets a new empty dict: a dict never shrinks, and the table of a bucket that
        held part of a drained backlog would otherwise stay allocated."""
        buckets = self._buckets
        i = hash(key) & _MASK
        bucket = buckets[i]
        value = bucket.pop(key, None)
        if value is not None:
            self._len -= 1
            if not bucket:
                buckets[i] = {}
        return value

    def values(self) -> Iterator[V]:
        for bucket in self._buckets:
            yield from list(bucket.values())

    def clear(self) -> None:
        for bucket in self._buckets:
            bucket.clear()
        self._len = 0

    def scan(
        self, cursor: int, count: int, busyloop: bool, match: Callable[[V], bool]
    ) -> tuple[int, list[V]]:
        """Visit buckets from ``cursor``; return the next cursor (0 = done) and matches.

        Stops once ``count`` matches are found or ``10 * count`` elements were
        examined, unless ``busyloop`` asks for everything in one call. Disque's
        table is sized to its contents, so a small dataset comes back in one
        call; counting examined elements rather than (mostly empty) buckets
        keeps that true here.
        """
        out: list[V] = []
        if cursor >= BUCKETS:
            return 0, out
        examined = 0
        budget = count * 10
        buckets = self._buckets
        while cursor < BUCKETS:
            bucket = buckets[cursor]
            cursor += 1
            if not bucket:
                continue
            examined += len(bucket)
            for value in bucket.values():
                if match(value):
                    out.append(value)
            if not busyloop and (examined >= budget or len(out) >= count):
                break
        return (0 if cursor >= BUCKETS else cursor), out
