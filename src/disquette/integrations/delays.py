"""DELAY and TTL for a job that is due later (a countdown, an ETA, a retry backoff).

Disque's DELAY is whole seconds and must be shorter than the job's TTL. The
frameworks count in milliseconds or datetimes and know no TTL, so a delay is
rounded (down for an ETA the consumer then waits out, up for a backoff that
must not run early) and the TTL is stretched by the delay, so the job still has
its whole TTL once it is due. Past the longest TTL a job ID carries (4 hex
digits of minutes, core/ids.py: about 45 days), the delay is cut: the job is
queued that much early and the consumer holds it until it is due.
"""

from __future__ import annotations

#: The longest TTL a job ID carries, in seconds.
MAX_TTL = 0xFFFE * 60


def delay_and_ttl(delay: int, ttl: int) -> tuple[int, int]:
    """DELAY and TTL for a job due in ``delay`` seconds that must live ``ttl`` after."""
    if delay <= 0:
        return 0, ttl
    ttl = min(ttl, MAX_TTL // 2)
    return min(delay, MAX_TTL - ttl), min(delay + ttl, MAX_TTL)
