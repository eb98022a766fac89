"""Server statistics reported by INFO stats and reset by CONFIG RESETSTAT.

The instantaneous rates are Disque's: a sample of the counters every cron tick
into a ring of 16, and the rate is the mean over the ring. The memory peak is
not a counter: CONFIG RESETSTAT leaves it alone, as Disque does.

Beyond Disque, for ``/metrics`` (observe/metrics.py): error replies counted by
their prefix (``ERR``, ``NOAUTH``, ``PAUSED``...), as modern Redis's errorstats,
and the event loop's lag, measured by the server shell as the lateness of its cron
timer: the last one, and the largest since the previous scrape took it. Error
types are bounded (``MAX_ERROR_TYPES``; past it, ``OTHER``), so a stream of odd
errors cannot grow the table.
"""

from __future__ import annotations

from typing import Final

SAMPLES: Final = 16
MAX_ERROR_TYPES: Final = 64
MAX_ERROR_TYPE_LEN: Final = 32
OTHER_ERRORS: Final = b"OTHER"


class _Rate:
    __slots__ = ("_idx", "_last_ms", "_last_value", "_samples")

    def __init__(self) -> None:
        self._samples = [0.0] * SAMPLES
        self._idx = 0
        self._last_ms = 0
        self._last_value = 0

    def track(self, now_ms: int, value: int) -> None:
        elapsed = now_ms - self._last_ms
        if self._last_ms and elapsed > 0:
            self._samples[self._idx] = (value - self._last_value) * 1000 / elapsed
            self._idx = (self._idx + 1) % SAMPLES
        self._last_ms = now_ms
        self._last_value = value

    def value(self) -> float:
        return sum(self._samples) / SAMPLES


class Stats:
    def __init__(self) -> None:
        self.peak_memory = 0
        self.heap_trims = 0  # times the heap was given back (server/allocator.py)
        # Seconds the cron timer ran late: the last time, and the most since a scrape.
        self.loop_lag = 0.0
        self.loop_lag_max = 0.0
        self.reset()

    def track_memory(self, used: int) -> int:
        """Record a used-memory reading; return the peak so far."""
        if used > self.peak_memory:
            self.peak_memory = used
        return self.peak_memory

    def reset(self) -> None:
        self.connections_received = 0
        self.commands_processed = 0
        self.net_input_bytes = 0
        self.net_output_bytes = 0
        self.rejected_connections = 0
        self.errors: dict[bytes, int] = {}  # error replies by prefix
        self._ops = _Rate()
        self._input = _Rate()
        self._output = _Rate()

    def count_error(self, reply: bytes) -> None:
        """Count an error reply (``-PREFIX message\\r\\n``) under its prefix."""
        end = reply.find(b" ", 1, MAX_ERROR_TYPE_LEN + 2)
        if end < 0:
            end = reply.find(b"\r", 1, MAX_ERROR_TYPE_LEN + 2)
        kind = reply[1:end] if end > 1 else OTHER_ERRORS
        errors = self.errors
        if kind not in errors and len(errors) >= MAX_ERROR_TYPES:
            kind = OTHER_ERRORS
        errors[kind] = errors.get(kind, 0) + 1

    def track_lag(self, lag: float) -> None:
        """The cron timer ran ``lag`` seconds late."""
        self.loop_lag = lag
        if lag > self.loop_lag_max:
            self.loop_lag_max = lag

    def take_lag_max(self) -> float:
        """The largest lag since the previous call (a scrape), which starts a new span."""
        lag_max, self.loop_lag_max = self.loop_lag_max, self.loop_lag
        return lag_max

    def sample(self, now_ms: int) -> None:
        """Called every 100 ms by the server cron."""
        self._ops.track(now_ms, self.commands_processed)
        self._input.track(now_ms, self.net_input_bytes)
        self._output.track(now_ms, self.net_output_bytes)

    @property
    def ops_per_sec(self) -> int:
        return int(self._ops.value())

    @property
    def input_kbps(self) -> float:
        return self._input.value() / 1024

    @property
    def output_kbps(self) -> float:
        return self._output.value() / 1024
