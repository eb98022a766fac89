"""Virtual time: one event queue drives every node, link and client of a run.

A simulated run has no wall clock. Time is an integer number of milliseconds
that jumps from one event to the next; an event is a callback due at some
virtual time. Events due at the same millisecond run in the order they were
scheduled (a sequence number breaks ties), so a run is a pure function of its
seed. Every node's ``clock()`` reads :attr:`VirtualLoop.now`, plus its machine's
skew (:meth:`~disquette.sim.process.SimNode.clock`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any


class Timer:
    """A scheduled callback; :meth:`cancel` keeps it from running."""

    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: int, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualLoop:
    __slots__ = ("_queue", "_seq", "events_run", "now")

    def __init__(self, start_ms: int) -> None:
        self.now = start_ms
        self._queue: list[tuple[int, int, Timer]] = []
        self._seq = 0
        self.events_run = 0

    def clock(self) -> int:
        """The current virtual time in ms (what nodes get as their clock)."""
        return self.now

    def call_at(self, when: int, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` at virtual time ``when`` (never in the past)."""
        if when < self.now:
            when = self.now
        timer = Timer(when, callback, args)
        self._seq += 1
        heapq.heappush(self._queue, (when, self._seq, timer))
        return timer

    def call_later(self, delay_ms: int, callback: Callable[..., Any], *args: Any) -> Timer:
        return self.call_at(self.now + delay_ms, callback, *args)

    def run_until(self, deadline: int) -> None:
        """Run every event due up to ``deadline``, then set the time to it."""
        queue = self._queue
        pop = heapq.heappop
        while queue and queue[0][0] <= deadline:
            when, _, timer = pop(queue)
            if timer.cancelled:
                continue
            self.now = when
            self.events_run += 1
            timer.callback(*timer.args)
        self.now = deadline
