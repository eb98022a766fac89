"""Per-task time limits for tasks running on threads.

A thread cannot be killed; it can be interrupted. :class:`TimeLimits` keeps one
watchdog thread and a heap of deadlines; when a run passes its deadline the
watchdog raises :class:`TimeLimitExceeded` inside the running thread with
CPython's ``PyThreadState_SetAsyncExc`` (what Dramatiq's time limits do). The
exception arrives at the thread's next bytecode: a task blocked in a C call (a
``sleep``, a socket read) sees it when the call returns, so give blocking calls
their own timeouts too. Only tasks with a time limit pay for it (a heap push
and pop, and a lock, per run).
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class TimeLimitExceeded(Exception):
    """A task ran past its ``time_limit``: its job is NACKed like any failure."""


class TimeLimits:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int, int]] = []  # (deadline, run, thread ident)
        self._running: dict[int, int] = {}  # run -> thread ident, while it runs
        self._runs = itertools.count()
        self._watchdog: threading.Thread | None = None

    def run(self, limit: float, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in this thread, interrupted with :class:`TimeLimitExceeded`
        after ``limit`` seconds."""
        run, ident = next(self._runs), threading.get_ident()
        deadline = time.monotonic() + limit
        with self._lock:
            if self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=self._watch, name="disquette-time-limits", daemon=True
                )
                self._watchdog.start()
            self._running[run] = ident
            heapq.heappush(self._heap, (deadline, run, ident))
            if self._heap[0][1] == run:
                self._lock.notify()
        try:
            return fn(*args)
        finally:
            with self._lock:
                if self._running.pop(run, None) is None:  # the watchdog fired: clear it if
                    # it is still pending, so it cannot land after the task returned
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)

    def _watch(self) -> None:
        heap = self._heap
        while True:
            with self._lock:
                while not heap or heap[0][0] > time.monotonic():
                    self._lock.wait(heap[0][0] - time.monotonic() if heap else None)
                _, run, ident = heapq.heappop(heap)
                if self._running.pop(run, None) is not None:
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(ident), ctypes.py_object(TimeLimitExceeded)
                    )
