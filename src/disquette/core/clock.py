"""A peer's clock offset, estimated from PING/PONG round trips (NTP's idea, one source).

A PING carries the sender's clock reading ``t0``; the PONG that answers it echoes
``t0`` and carries the peer's reading ``t1``; it arrives at ``t2`` on the sender's
clock. The peer read its clock at some instant between the PING leaving and the PONG
arriving, so the offset *peer minus us* lies within ``(t2 - t0) / 2`` of
``t1 - (t0 + t2) / 2``, however the round trip split between the two directions: a
hard bound, not a statistical one. Readings are whole milliseconds (each up to 1 ms
behind the instant read) and the halving rounds, so every interval is widened by
:data:`RESOLUTION_MS`.

While neither clock steps, every sample's interval holds the true offset, and so does
their intersection. A :class:`PeerClock` keeps the last :data:`WINDOW` samples and
reports that intersection: its midpoint is the offset, its half-width the bound —
never wider than the best round trip's (the minimum-delay sample is the most accurate
one) and narrower when samples pin the offset from both sides. When no offset fits
every sample of the window, a clock stepped (an operator, NTP, a VM resumed): the
older samples are dropped and the estimate restarts from the newest one, so a step
wider than the bounds is followed at the next PONG and a smaller one within
:data:`WINDOW` samples. A sample whose PONG seems to arrive before its PING left (the
local clock stepped back meanwhile) is discarded.

Whether a peer's skew is over a threshold is decided with the bound: certainly over
when ``|offset| - bound`` exceeds it, certainly under when ``|offset| + bound`` does
not; in between, the previous verdict stands (the membership logs the changes).
"""

from __future__ import annotations

from typing import Final, NamedTuple

WINDOW: Final = 4  # samples kept per peer
RESOLUTION_MS: Final = 3  # whole-millisecond readings and the halving (see above)
DEFAULT_WARN_MS: Final = 500  # clock-skew-warn-ms's default


class Sample(NamedTuple):
    """One PING/PONG: when the PING left (local clock) and the offset interval it gave."""

    sent: int
    low: int
    high: int
    rtt: int


def sample(sent: int, peer: int, received: int) -> Sample | None:
    """The interval one round trip gives (None when the PONG seems to precede the PING)."""
    rtt = received - sent
    if rtt < 0:
        return None
    middle = (2 * peer - sent - received) // 2
    bound = (rtt + 1) // 2 + RESOLUTION_MS
    return Sample(sent, middle - bound, middle + bound, rtt)


class PeerClock:
    """The estimated offset of one peer's clock from this node's (peer minus us, ms)."""

    __slots__ = ("bound", "offset", "rtt", "sampled_at", "samples", "skewed")

    def __init__(self) -> None:
        self.samples: list[Sample] = []  # the window, oldest first
        self.offset = 0  # the middle of the samples' common interval
        self.bound = 0  # its half-width: the true offset is within offset +/- bound
        self.rtt = 0  # the shortest round trip in the window
        self.sampled_at = 0  # local time the last sample arrived
        self.skewed = False  # the verdict against the threshold (see the module docstring)

    def add(self, sent: int, peer: int, received: int) -> bool:
        """A PONG arrived at ``received`` echoing ``sent`` with the peer's reading ``peer``;
        False when the sample was discarded."""
        new = sample(sent, peer, received)
        if new is None:
            return False
        samples = self.samples
        samples.append(new)
        if len(samples) > WINDOW:
            del samples[0]
        low = max(s.low for s in samples)
        high = min(s.high for s in samples)
        if low > high:  # no offset fits every sample: a clock stepped since the older ones
            samples[:] = [new]
            low, high = new.low, new.high
        self.offset = (low + high) // 2
        self.bound = (high - low + 1) // 2
        self.rtt = min(s.rtt for s in samples)
        self.sampled_at = received
        return True

    def certainly_over(self, threshold: int) -> bool:
        """Whether the skew is over ``threshold`` ms whatever the true offset in the bound."""
        return abs(self.offset) - self.bound > threshold

    def certainly_under(self, threshold: int) -> bool:
        """Whether the skew is ``threshold`` ms or less whatever the true offset in the bound."""
        return abs(self.offset) + self.bound <= threshold
