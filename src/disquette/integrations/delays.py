"""Job timing the frameworks do not know about: delays against TTLs, and when a
fetched job needs a WORKING at once.

**Delays.**
Disque's DELAY is whole seconds and must be shorter than the job's TTL. The
frameworks count in milliseconds or datetimes and know no TTL, so a delay is
rounded (down for an ETA the consumer then waits out, up for a backoff that
must not run early) and the TTL is stretched by the delay, so the job still has
its whole TTL once it is due. Past the longest TTL a job ID carries (4 hex
digits of minutes, core/ids.py: about 45 days), the delay is cut: the job is
queued that much early and the consumer holds it until it is due.

**The requeue clock.** A job's retry timer runs from when it was queued, not from
when it was delivered (Disque's rule): a job that waited in its queue for most of
its retry time is queued again soon after a consumer fetched it, unless that
consumer sends WORKING first. Consumers send WORKING for what they hold every
third of the retry time; a job fetched after waiting more than a quarter of it
(or delivered before: its last queueing is unknown) gets one at once.
"""

from __future__ import annotations

#: The longest TTL a job ID carries, in seconds.
MAX_TTL = 0xFFFE * 60


def needs_working_now(queued_at: float | None, retry: float, now: float,
                      redelivered: bool) -> bool:  # fmt: skip
    """Whether a job just fetched must get a WORKING at once (see the module docstring).

    ``queued_at``: when the producer made it due (its clock, seconds), if known.
    """
    if retry <= 0:
        return False
    return redelivered or queued_at is None or now - queued_at > retry / 4


def delay_and_ttl(delay: int, ttl: int) -> tuple[int, int]:
    """DELAY and TTL for a job due in ``delay`` seconds that must live ``ttl`` after."""
    if delay <= 0:
        return 0, ttl
    ttl = min(ttl, MAX_TTL // 2)
    return min(delay, MAX_TTL - ttl), min(delay + ttl, MAX_TTL)
