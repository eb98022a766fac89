"""Giving memory back to the operating system once the dataset has shrunk.

CPython serves objects up to 512 bytes from its own arenas, and returns an
arena as soon as it is empty; everything larger (the dict tables of the job
registry and the scheduler, a queue's job-list chunks, bodies over 479 bytes)
comes from the C library's ``malloc``. glibc keeps what is freed in its heap
for later allocations and returns it only from the top of the heap, so after a
backlog of a million jobs drains, a node's RSS stays at about 90-120 MB above
its empty size, without any job left (measured in-process: 599 MB full, 83-113
MB drained, 31-38 MB after a trim).

``malloc_trim(0)`` walks the heap and releases every free page in it (glibc
2.8+), taking 1.5-4 ms after a million-job drain. The server cron calls
:meth:`Allocator.cron` with the dataset's accounted size: once it has fallen by
``TRIM_STEP`` below its peak since the last trim (or by ``TRIM_MIN`` to half of
it: the tail of a drain), the heap is trimmed and the peak restarts from there.
A steady load never trims; a drain trims once per ``TRIM_STEP`` it frees and
once at its end, each pause a few milliseconds. Where the C library has
no ``malloc_trim`` (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

TRIM_STEP = 32 << 20  # bytes of dataset freed since the peak before a trim
TRIM_MIN = 4 << 20  # ... or this much, once the dataset is down to half its peak


def _find_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


class Allocator:
    __slots__ = ("_peak", "_trim", "trims")

    def __init__(self, trim: Callable[[int], int] | None = None) -> None:
        self._trim = trim if trim is not None else _find_malloc_trim()
        self._peak = 0
        self.trims = 0

    @property
    def can_trim(self) -> bool:
        return self._trim is not None

    def cron(self, used: int) -> bool:
        """Trim the heap when ``used`` has fallen ``TRIM_STEP`` below its peak, or
        ``TRIM_MIN`` and to half of it; True when it did."""
        if used > self._peak:
            self._peak = used
            return False
        freed = self._peak - used
        if freed < TRIM_STEP and (freed < TRIM_MIN or used > self._peak // 2):
            return False
        if self._trim is None:
            return False
        self._trim(0)
        self._peak = used
        self.trims += 1
        return True
