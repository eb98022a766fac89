"""The job scheduler: when must the node next look at each job.

Every registered job has an awake time (absolute ms). Rather than one loop
timer per job, jobs sit in buckets of ``RESOLUTION`` ms keyed by awake time,
with a heap of bucket keys: scheduling a job is one list append, and the node's
single job timer asks :meth:`next_awake` when to fire and :meth:`due` for the
jobs to process. Rescheduling leaves a stale entry behind, recognised and
skipped later because the job's ``awake`` no longer points at that bucket.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from disquette.core.job import Job

RESOLUTION = 10  # ms per bucket


class Schedule:
    __slots__ = ("_buckets", "_keys")

    def __init__(self) -> None:
        self._buckets: dict[int, list[Job]] = {}
        self._keys: list[int] = []

    def add(self, job: Job, awake: int) -> None:
        job.awake = awake
        key = awake // RESOLUTION
        bucket = self._buckets.get(key)
        if bucket is None:
            self._open(key, job)
        else:
            bucket.append(job)

    def add_all(self, jobs: Iterable[Job]) -> None:
        """Schedule jobs whose ``awake`` is already set (new jobs, made together)."""
        buckets = self._buckets
        for job in jobs:
            key = job.awake // RESOLUTION
            bucket = buckets.get(key)
            if bucket is None:
                self._open(key, job)
            else:
                bucket.append(job)

    def _open(self, key: int, job: Job) -> None:
        """A new bucket for ``key``, holding ``job``."""
        self._buckets[key] = [job]
        heapq.heappush(self._keys, key)

    @staticmethod
    def cancel(job: Job) -> None:
        job.awake = 0

    def next_awake(self) -> int | None:
        """The earliest bucket's time in ms (stale entries may make it early)."""
        return self._keys[0] * RESOLUTION if self._keys else None

    def due(self, now_ms: int, limit: int) -> list[Job]:
        """Pop up to ``limit`` jobs whose awake time is at or before ``now_ms``."""
        out: list[Job] = []
        keys, buckets = self._keys, self._buckets
        last = now_ms // RESOLUTION
        early: list[Job] = []
        while keys and keys[0] <= last and len(out) < limit:
            key = keys[0]
            bucket = buckets[key]
            while bucket and len(out) < limit:
                job = bucket.pop()
                awake = job.awake
                if awake and awake // RESOLUTION == key:  # else a stale entry
                    if awake <= now_ms:
                        out.append(job)
                    else:  # in the current bucket but a few ms ahead
                        early.append(job)
            if not bucket:
                del buckets[key]
                heapq.heappop(keys)
        for job in early:
            self.add(job, job.awake)
        return out

    def clear(self) -> None:
        self._buckets.clear()
        self._keys.clear()
