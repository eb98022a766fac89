"""The job scheduler: when must the node next look at each job.

Every scheduled job has an awake time (absolute ms). Rather than one loop timer
per job, jobs sit in buckets of ``RESOLUTION`` ms keyed by awake time, with a
heap of bucket keys: the node's single job timer asks :meth:`next_awake` when
to fire and :meth:`due` for the jobs to process.

A bucket is a dict keyed by the job object (identity hash), so a job leaves the
schedule the moment it is rescheduled or cancelled: a deleted job is never kept
alive by a timer it no longer needs (an acknowledged job would otherwise stay
referenced until its retry or TTL came due, and memory would follow throughput
times five minutes instead of the dataset). An emptied bucket is dropped at
once; its key may stay in the heap, skipped when it comes up, and the heap is
rebuilt from the live buckets when stale keys outnumber them, so it too stays
proportional to what is scheduled.

Invariant: ``job.awake`` is non-zero exactly when the job sits in the bucket of
``job.awake // RESOLUTION``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import Final

from disquette.core.job import Job

RESOLUTION: Final = 10  # ms per bucket
STALE_SLACK: Final = 64  # stale heap keys tolerated beyond the live buckets before a rebuild


class Schedule:
    __slots__ = ("_buckets", "_keys")

    def __init__(self) -> None:
        self._buckets: dict[int, dict[Job, None]] = {}
        self._keys: list[int] = []  # a heap; may hold keys of dropped buckets

    def __len__(self) -> int:
        """How many jobs are scheduled."""
        return sum(map(len, self._buckets.values()))

    def add(self, job: Job, awake: int) -> None:
        """Schedule ``job`` at ``awake`` (ms), moving it if it was scheduled."""
        old = job.awake
        key = awake // RESOLUTION
        if old:
            if old // RESOLUTION == key:
                job.awake = awake
                return
            self._remove(job, old // RESOLUTION)
        job.awake = awake
        bucket = self._buckets.get(key)
        if bucket is None:
            self._open(key, job)
        else:
            bucket[job] = None

    def add_all(self, jobs: Iterable[Job]) -> None:
        """Schedule new jobs (never scheduled before) whose ``awake`` is already set."""
        buckets = self._buckets
        for job in jobs:
            key = job.awake // RESOLUTION
            bucket = buckets.get(key)
            if bucket is None:
                self._open(key, job)
            else:
                bucket[job] = None

    def cancel(self, job: Job) -> None:
        """Take ``job`` out of the schedule (nothing happens if it was not in it)."""
        awake = job.awake
        if awake:
            job.awake = 0
            self._remove(job, awake // RESOLUTION)

    def _open(self, key: int, job: Job) -> None:
        """A new bucket for ``key``, holding ``job``."""
        self._buckets[key] = {job: None}
        heapq.heappush(self._keys, key)

    def _remove(self, job: Job, key: int) -> None:
        buckets = self._buckets
        bucket = buckets[key]
        del bucket[job]
        if not bucket:
            del buckets[key]
            if not buckets:  # a fresh table: a dict never shrinks
                self._buckets = {}
                self._keys = []
            elif len(self._keys) > 2 * len(buckets) + STALE_SLACK:
                self._keys = sorted(buckets)  # a sorted list is a heap

    def entries(self) -> Iterator[tuple[int, Job]]:
        """Every scheduled job with its bucket's time in ms (for consistency checks)."""
        for key, bucket in self._buckets.items():
            for job in bucket:
                yield key * RESOLUTION, job

    def next_awake(self) -> int | None:
        """The earliest bucket's time in ms (a dropped bucket's key may make it early)."""
        return self._keys[0] * RESOLUTION if self._keys else None

    def due(self, now_ms: int, limit: int) -> list[Job]:
        """Take out up to ``limit`` jobs whose awake time is at or before ``now_ms``;
        they leave the schedule (``awake`` 0) until the caller schedules them again."""
        out: list[Job] = []
        keys, buckets = self._keys, self._buckets
        last = now_ms // RESOLUTION
        while keys and keys[0] <= last and len(out) < limit:
            key = keys[0]
            bucket = buckets.get(key)
            if bucket is not None:
                if key == last:  # the current bucket: some jobs may be a few ms ahead
                    ripe = [job for job in bucket if job.awake <= now_ms][: limit - len(out)]
                    for job in ripe:
                        del bucket[job]
                        job.awake = 0
                    out += ripe
                else:
                    while bucket and len(out) < limit:
                        job = bucket.popitem()[0]
                        job.awake = 0
                        out.append(job)
                if bucket:
                    break  # the limit, or jobs not due yet
                del buckets[key]
            heapq.heappop(keys)
        return out

    def clear(self) -> None:
        self._buckets.clear()
        self._keys.clear()
