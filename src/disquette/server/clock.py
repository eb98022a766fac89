"""The node's clock: the host's wall clock in milliseconds, shifted by a skew.

The core reads time only through the clock it is given, so this is the one place a
server process can be told that its machine's clock is off: ``DEBUG CLOCK-SKEW ms``
sets :attr:`NodeClock.skew_ms`, a test and operator hook that makes one process on a
shared host behave like a node whose clock is ``ms`` ahead (or behind, negative) of
its peers'. Everything the node times moves with it: job creation times, TTLs, retry,
delay and ack GC timers, blocked clients' deadlines, failure detection and the clock
readings PING and PONG carry, and the server's job timer and repair slices that run
the core on that clock.

The process's own bookkeeping, which never meets a timestamp of the core, keeps the
host's clock: log line stamps, client ages and idle times (CLIENT LIST, ``timeout``),
CLIENT PAUSE, TIME, INFO's uptime, AOF fsync and rewrite times, the latency monitor.

The core reads the clock a few times per request, so this module is compiled in the
compiled build (src/disquette/build.py): a call costs a native method call, not an
interpreted frame.
"""

from __future__ import annotations

from time import time as wall_seconds  # (a global: no module lookup per call)


def host_ms() -> int:
    """The host's wall clock, in whole milliseconds."""
    return int(wall_seconds() * 1000)


class NodeClock:
    """The clock a server's node reads: :func:`host_ms` plus ``skew_ms``."""

    __slots__ = ("skew_ms",)

    def __init__(self) -> None:
        self.skew_ms = 0

    def now_ms(self) -> int:
        return int(wall_seconds() * 1000) + self.skew_ms
