"""A sorted sequence of jobs: the storage behind a queue.

Disque keeps a queue in a skiplist ordered by ctime (ties by job ID). Here the
same order lives in a list of chunks, each a pair of parallel sequences (a
list of jobs, and an array of their ctimes for ``bisect``), at most ``2 * LOAD``
long. New jobs almost always carry the largest ctime so far and are appended to
the last chunk; requeued jobs are bisected into place. Popping the head,
removing any job and peeking at either end cost O(log n + LOAD) with C-speed
list and array operations, and a job costs 16 bytes of slots. The ctimes are
kept as 64-bit machine words rather than int objects: the compiled build holds
a job's ctime in its record, so a list of ints would hold a second copy of each.

Priorities (beyond Disque) are levels: the first job with a priority above 0
turns the list into one list per priority (``_levels``, the list's own chunks
moving to level 0), served from the highest level down, each level in ctime
order. A queue that never saw a priority pays one None check per operation.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator
from operator import attrgetter
from typing import Final

from disquette.core.job import LEVELS, PRIORITY_SHIFT, Job

LOAD: Final = 512
_ctime = attrgetter("ctime")


class JobList:
    __slots__ = ("_jobs", "_keys", "_len", "_levels", "_maxes")

    def __init__(self) -> None:
        self._jobs: list[list[Job]] = []
        self._keys: list[array[int]] = []
        self._maxes: list[int] = []
        self._len = 0
        # One list per priority once a job with a priority came (None until then).
        self._levels: list[JobList] | None = None

    def __len__(self) -> int:
        return self._len

    def _leveled(self) -> list[JobList]:
        """The lists by priority, made now if this list had none: its jobs are level 0."""
        levels = self._levels
        if levels is None:
            base = JobList()
            base._jobs, base._keys, base._maxes, base._len = (
                self._jobs,
                self._keys,
                self._maxes,
                self._len,
            )
            self._jobs, self._keys, self._maxes = [], [], []
            levels = [base] + [JobList() for _ in range(LEVELS - 1)]
            self._levels = levels
        return levels

    @property
    def has_levels(self) -> bool:
        return self._levels is not None

    def add(self, job: Job) -> None:
        if job.flags >> PRIORITY_SHIFT or self._levels is not None:
            self._leveled()[job.flags >> PRIORITY_SHIFT]._insert(job)
            self._len += 1
            return
        self._insert(job)

    def _insert(self, job: Job) -> None:
        """Add a job in ctime order, whatever its priority."""
        key = job.ctime
        maxes = self._maxes
        self._len += 1
        if not maxes:
            self._jobs.append([job])
            self._keys.append(array("Q", (key,)))
            maxes.append(key)
            return
        if key > maxes[-1]:
            i = len(maxes) - 1
            keys = self._keys[i]
            keys.append(key)
            self._jobs[i].append(job)
            maxes[i] = key
        else:
            i = bisect_left(maxes, key)
            keys = self._keys[i]
            jobs = self._jobs[i]
            j = bisect_left(keys, key)
            jid = job.id
            while j < len(keys) and keys[j] == key and jobs[j].id < jid:
                j += 1
            keys.insert(j, key)
            jobs.insert(j, job)
            maxes[i] = keys[-1]
        if len(keys) > 2 * LOAD:
            self._split(i)

    def extend(self, jobs: list[Job], priority: int = 0) -> None:
        """Add jobs of one priority given in increasing ctime order (new jobs, created
        together): in bulk at the end when they all sort after the jobs of their
        level here, else one by one."""
        if priority or self._levels is not None:
            self._leveled()[priority].extend(jobs)
            self._len += len(jobs)
            return
        maxes = self._maxes
        if maxes and jobs[0].ctime <= maxes[-1]:
            for job in jobs:
                self._insert(job)  # (here: this list is the priority's, or has no levels)
            return
        keys = array("Q", map(_ctime, jobs))
        if maxes:
            self._keys[-1] += keys
            self._jobs[-1] += jobs
            maxes[-1] = keys[-1]
        else:
            self._keys.append(keys)
            self._jobs.append(jobs[:])
            maxes.append(keys[-1])
        self._len += len(jobs)
        while len(self._keys[-1]) > 2 * LOAD:
            self._split(len(maxes) - 1)

    def _split(self, i: int) -> None:
        keys, jobs = self._keys[i], self._jobs[i]
        self._keys[i : i + 1] = [keys[:LOAD], keys[LOAD:]]
        self._jobs[i : i + 1] = [jobs[:LOAD], jobs[LOAD:]]
        self._maxes[i : i + 1] = [keys[LOAD - 1], keys[-1]]

    def _drop_chunk_if_empty(self, i: int) -> None:
        if self._keys[i]:
            self._maxes[i] = self._keys[i][-1]
        else:
            del self._keys[i], self._jobs[i], self._maxes[i]

    def pop_first(self) -> Job:
        levels = self._levels
        if levels is not None:
            for level in reversed(levels):
                if level._len:
                    self._len -= 1
                    return level.pop_first()
        job = self._jobs[0].pop(0)
        del self._keys[0][0]
        self._len -= 1
        if not self._keys[0]:
            del self._keys[0], self._jobs[0], self._maxes[0]
        return job

    def pop_last(self) -> Job:
        """Take the job served last (the lowest priority's newest): flow to disk spills
        a queue from this end."""
        levels = self._levels
        if levels is not None:
            for level in levels:
                if level._len:
                    self._len -= 1
                    return level.pop_last()
        job = self._jobs[-1].pop()
        keys = self._keys[-1]
        del keys[-1]
        self._len -= 1
        if keys:
            self._maxes[-1] = keys[-1]
        else:
            del self._keys[-1], self._jobs[-1], self._maxes[-1]
        return job

    def level(self, priority: int) -> JobList | None:
        """The jobs of one priority (this list itself for 0 before any priority came)."""
        levels = self._levels
        if levels is None:
            return self if priority == 0 else None
        return levels[priority]

    def top_level(self) -> int:
        """The highest priority with a job here (-1 when empty)."""
        levels = self._levels
        if levels is None:
            return 0 if self._len else -1
        for priority in range(len(levels) - 1, -1, -1):
            if levels[priority]._len:
                return priority
        return -1

    def remove(self, job: Job) -> bool:
        """Remove this very job object; return whether it was here."""
        levels = self._levels
        if levels is not None:
            if levels[job.flags >> PRIORITY_SHIFT].remove(job):
                self._len -= 1
                return True
            return False
        key = job.ctime
        i = bisect_left(self._maxes, key)
        while i < len(self._maxes):
            keys, jobs = self._keys[i], self._jobs[i]
            j = bisect_left(keys, key)
            while j < len(keys) and keys[j] == key:
                if jobs[j] is job:
                    del keys[j], jobs[j]
                    self._len -= 1
                    self._drop_chunk_if_empty(i)
                    return True
                j += 1
            if j < len(keys):
                return False
            i += 1
        return False

    def first(self) -> Job | None:
        """The job :meth:`pop_first` would take."""
        levels = self._levels
        if levels is not None:
            for level in reversed(levels):
                if level._len:
                    return level.first()
            return None
        return self._jobs[0][0] if self._jobs else None

    def __iter__(self) -> Iterator[Job]:
        """Jobs in the order they are served: by priority, then ctime."""
        levels = self._levels
        if levels is not None:
            for level in reversed(levels):
                yield from level
            return
        for chunk in self._jobs:
            yield from chunk

    def page(self, offset: int, count: int) -> list[Job]:
        """``count`` jobs from the ``offset``-th in serving order: whole chunks (and
        levels) before it are skipped, so a page costs O(chunks + count), not O(offset)."""
        out: list[Job] = []
        levels = self._levels
        if levels is not None:
            for level in reversed(levels):
                if len(out) >= count:
                    break
                if offset >= level._len:
                    offset -= level._len
                    continue
                out += level.page(offset, count - len(out))
                offset = 0
            return out
        for chunk in self._jobs:
            if len(out) >= count:
                break
            if offset >= len(chunk):
                offset -= len(chunk)
                continue
            out += chunk[offset : offset + count - len(out)]
            offset = 0
        return out

    def reversed(self) -> Iterator[Job]:
        levels = self._levels
        if levels is not None:
            for level in levels:
                yield from level.reversed()
            return
        for chunk in reversed(self._jobs):
            yield from reversed(chunk)
