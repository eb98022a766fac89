"""A progress bar for long command-line work, and plain output off a terminal.

On a terminal the bar redraws in place at most ten times a second, sized with
:func:`shutil.get_terminal_size`: ``[#####.....]  45%  4,500/10,000 jobs
1,250/s  ETA 4s``. When the stream is not a terminal nothing is drawn while
working; :meth:`Progress.close` prints one plain summary line either way.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

REDRAW_EVERY = 0.1


class Progress:
    def __init__(
        self, label: str, total: int | None = None, unit: str = "jobs", stream: TextIO | None = None
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.done = 0
        self.started = time.monotonic()
        self._drawn = 0.0

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.tty and now - self._drawn >= REDRAW_EVERY:
            self._drawn = now
            self._draw(now)

    def close(self, summary: str | None = None) -> None:
        """Erase the bar and print the summary line (default: count, time and rate)."""
        elapsed = time.monotonic() - self.started
        if summary is None:
            rate = self.done / elapsed if elapsed > 0 else 0.0
            summary = f"{self.label}: {self.done:,} {self.unit} in {elapsed:.2f}s ({rate:,.0f}/s)"
        if self.tty:
            self.stream.write("\r\x1b[K")
        self.stream.write(summary + "\n")
        self.stream.flush()

    def _draw(self, now: float) -> None:
        elapsed = now - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.total:
            fraction = min(self.done / self.total, 1.0)
            eta = f"ETA {(self.total - self.done) / rate:.0f}s" if rate and fraction < 1 else ""
            tail = (
                f" {fraction:4.0%}  {self.done:,}/{self.total:,} {self.unit}  {rate:,.0f}/s  {eta}"
            )
        else:
            fraction = None
            tail = f" {self.done:,} {self.unit}  {rate:,.0f}/s"
        columns = shutil.get_terminal_size().columns
        head = f"{self.label} "
        room = columns - len(head) - len(tail) - 3
        if fraction is not None and room >= 10:
            filled = int(room * fraction)
            bar = "[" + "#" * filled + "." * (room - filled) + "]"
        else:
            bar = ""
        line = (head + bar + tail)[: columns - 1]
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()
