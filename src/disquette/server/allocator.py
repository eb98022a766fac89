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
:meth:`Allocator.cron` with the dataset's accounted size ten times a second.
While the dataset shrinks, the heap is trimmed each time another ``TRIM_STEP``
is gone; once it stops shrinking, having lost at least ``TRIM_MIN`` since its
peak, it is trimmed once more (the end of a drain, when the registry's and the
queue's last tables go). That trim may come too early: a drain that pauses (a slow
consumer, a loaded machine) spends it at the pause, and what goes after it is not
all in the accounted size (the tables freed with the last jobs, the replies'
buffers written after the last call): so a dataset that shrank and has then stayed
the same size for ``SETTLE_TICKS`` calls is trimmed once more. A steady load never trims
(its size moves on every call), nor does a dataset that wavers by less than
``TRIM_MIN`` until it settles. Where the C library has no ``malloc_trim`` (musl,
macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

TRIM_STEP = 32 << 20  # bytes of dataset gone since the last trim, while shrinking
TRIM_MIN = 4 << 20  # bytes gone since the peak for a trim once shrinking stops
SETTLE_TICKS = 10  # calls at one size (a second of the cron) that make it settled


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
    __slots__ = ("_last", "_mark", "_peak", "_shrank", "_still", "_trim")

    def __init__(self, trim: Callable[[int], int] | None = None) -> None:
        self._trim = trim if trim is not None else _find_malloc_trim()
        self._peak = 0  # the highest size since the last trim that ended a shrink
        self._mark = 0  # the size at the last trim, or higher since
        self._last = 0  # the size at the previous call
        self._still = 0  # calls since the size last changed
        self._shrank = False  # since the last trim of a settled size

    @property
    def can_trim(self) -> bool:
        return self._trim is not None

    def cron(self, used: int) -> bool:
        """Look at the dataset's size ``used``; True when the heap was trimmed."""
        shrinking = used < self._last
        if shrinking:
            self._shrank = True
        self._still = self._still + 1 if used == self._last else 0
        self._last = used
        if used > self._peak:
            self._peak = used
        if used > self._mark:
            self._mark = used
        if self._mark - used >= TRIM_STEP:
            return self._trim_heap(used)
        if not shrinking and self._peak - used >= TRIM_MIN:
            self._peak = used
            if self._mark > used:
                return self._trim_heap(used)
        if self._still == SETTLE_TICKS and self._shrank:
            self._shrank = False
            return self._trim_heap(used)
        return False

    def _trim_heap(self, used: int) -> bool:
        self._mark = used
        if self._trim is None:
            return False
        self._trim(0)
        return True
