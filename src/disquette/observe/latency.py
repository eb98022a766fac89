"""The latency monitor: per-event latest, maximum and a history of 160 samples.

Events (``command``, ``fast-command``, ``jobs-processing``, ``aof-*`` ...) are
sampled only when they last at least ``latency-monitor-threshold`` ms, and
samples within the same second are merged keeping the maximum, as in Disque.
"""

from __future__ import annotations

import time

HISTORY = 160


class LatencyEvent:
    __slots__ = ("max", "samples")

    def __init__(self) -> None:
        self.samples: list[tuple[int, int]] = []  # (unix time, ms), oldest first
        self.max = 0


class LatencyMonitor:
    def __init__(self) -> None:
        self.events: dict[str, LatencyEvent] = {}

    def add(self, event: str, latency_ms: int, now_s: int | None = None) -> None:
        now_s = int(time.time()) if now_s is None else now_s
        entry = self.events.get(event)
        if entry is None:
            entry = self.events[event] = LatencyEvent()
        if entry.samples and entry.samples[-1][0] == now_s:
            t, ms = entry.samples[-1]
            entry.samples[-1] = (t, max(ms, latency_ms))
        else:
            entry.samples.append((now_s, latency_ms))
            del entry.samples[:-HISTORY]
        entry.max = max(entry.max, latency_ms)

    def reset(self, events: list[str] | None = None) -> int:
        if not events:
            count = len(self.events)
            self.events.clear()
            return count
        return sum(1 for e in events if self.events.pop(e, None) is not None)
