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

Fair shares (beyond Disque) are groups: the first job with a group (ADDJOB GROUP)
turns a list of one priority into one list per group (``_groups``, a
:class:`Groups`; the list's own chunks move to the default group, ``b""``, where
jobs without a group go), kept in turn order: :meth:`pop_first` takes the head of
the group whose turn it is and sends that group to the back of the turn, so groups
are served round-robin, each in ctime order, and a group with a million jobs waits
its turn like one with ten. A group emptied by a fetch is dropped then; one emptied
otherwise (an acknowledged or deleted queued job) when its turn comes; a list whose
groups all emptied is a plain list again. With priorities too, each priority's list
has its groups: the highest priority is served first, its groups in turn. A queue
that never saw a group pays one None check per added job.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterator
from itertools import islice
from operator import attrgetter
from typing import Final

from disquette.core.job import LEVELS, PRIORITY_SHIFT, Job

LOAD: Final = 512
DEFAULT_GROUP: Final = b""  # the group of the jobs without one
_ctime = attrgetter("ctime")


class JobList:
    __slots__ = ("_groups", "_jobs", "_key", "_keys", "_len", "_levels", "_maxes")

    def __init__(self) -> None:
        self._jobs: list[list[Job]] = []
        self._keys: list[array[int]] = []
        self._maxes: list[int] = []
        self._len = 0
        # One list per priority once a job with a priority came (None until then).
        self._levels: list[JobList] | None = None
        # One list per group, while a job with a group is here (None until then, and
        # again once every group emptied).
        self._groups: Groups | None = None
        # The group this list holds the jobs of, when it is one of a Groups' lists.
        self._key = DEFAULT_GROUP

    def __len__(self) -> int:
        return self._len

    def _leveled(self) -> list[JobList]:
        """The lists by priority, made now if this list had none: its jobs are level 0."""
        levels = self._levels
        if levels is None:
            base = self._moved_out()
            base._groups, self._groups = self._groups, None
            levels = [base] + [JobList() for _ in range(LEVELS - 1)]
            self._levels = levels
        return levels

    def _moved_out(self) -> JobList:
        """A new list with this list's own chunks (it keeps none of them)."""
        moved = JobList()
        moved._jobs, moved._keys, moved._maxes, moved._len = (
            self._jobs,
            self._keys,
            self._maxes,
            self._len,
        )
        self._jobs, self._keys, self._maxes = [], [], []
        return moved

    @property
    def has_levels(self) -> bool:
        return self._levels is not None

    def add(self, job: Job) -> None:
        if job.flags >> PRIORITY_SHIFT or self._levels is not None:
            self._leveled()[job.flags >> PRIORITY_SHIFT]._place(job)
            self._len += 1
        elif self._groups is None and job.extra is None:
            self._insert(job)
        else:
            self._place(job)

    def _place(self, job: Job) -> None:
        """Add a job to this list of one priority: to its group's list when it has a
        group or this list has groups, else in ctime order here."""
        group = job.group
        if group is None and self._groups is None:
            self._insert(job)
            return
        self._member(group)._insert(job)
        self._len += 1

    def _member(self, group: bytes | None) -> JobList:
        """The list of ``group`` (None: the default group), made now if it has none."""
        groups = self._groups
        if groups is None:
            groups = self._groups = Groups()
            if self._len:  # this list's jobs are the default group's
                groups.add(DEFAULT_GROUP, self._moved_out())
        key = DEFAULT_GROUP if group is None else group
        members = groups.lists.get(key)
        if members is None:
            members = JobList()
            groups.add(key, members)
        return members

    def _taken(self, groups: Groups, at: int) -> None:
        """A job was fetched from the group at ``at`` in the turn: it goes to the back,
        or is dropped when it emptied (and every group once none has a job)."""
        self._len -= 1
        if not self._len:
            self._groups = None
            return
        turn = groups.turn
        if at:
            members = turn[at]
            del turn[at]
        else:
            members = turn.popleft()
        if members._len:
            turn.append(members)
        else:
            del groups.lists[members._key]

    def _emptied(self) -> None:
        """A job was taken from a group other than by a fetch: the turn stays as it is,
        the groups go once none has a job."""
        self._len -= 1
        if not self._len:
            self._groups = None

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
        """Add jobs of one priority and one group given in increasing ctime order (new
        jobs, created together): in bulk at the end when they all sort after the jobs
        of their level and group here, else one by one."""
        if priority or self._levels is not None:
            self._leveled()[priority].extend(jobs)
            self._len += len(jobs)
            return
        group = jobs[0].group
        if group is not None or self._groups is not None:
            self._member(group)._extend_here(jobs)
            self._len += len(jobs)
            return
        self._extend_here(jobs)

    def _extend_here(self, jobs: list[Job]) -> None:
        """:meth:`extend` in this list's own chunks (it has no levels nor groups)."""
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
        groups = self._groups
        if groups is not None:
            job = groups.next_turn().pop_first()
            self._taken(groups, 0)
            return job
        job = self._jobs[0].pop(0)
        del self._keys[0][0]
        self._len -= 1
        if not self._keys[0]:
            del self._keys[0], self._jobs[0], self._maxes[0]
        return job

    def pop_allowed(self, allow: Callable[[bytes], bool]) -> Job | None:
        """Take the job :meth:`pop_first` would, skipping the groups ``allow`` refuses
        (a group's limit, core/ratelimit.py; without groups the whole list is the
        default group's); None when it refuses every group with jobs here."""
        levels = self._levels
        if levels is not None:
            for level in reversed(levels):
                if level._len:
                    job = level.pop_allowed(allow)
                    if job is not None:
                        self._len -= 1
                        return job
            return None
        groups = self._groups
        if groups is None:
            return self.pop_first() if self._len and allow(DEFAULT_GROUP) else None
        for at, members in enumerate(groups.turn):
            if members._len and allow(members._key):
                job = members.pop_first()
                self._taken(groups, at)
                return job
        return None

    def pop_last(self) -> Job:
        """Take the job served last (the lowest priority's newest, of the group whose
        turn comes last): flow to disk spills a queue from this end."""
        levels = self._levels
        if levels is not None:
            for level in levels:
                if level._len:
                    self._len -= 1
                    return level.pop_last()
        groups = self._groups
        if groups is not None:
            job = max(reversed(groups.turn), key=_group_length).pop_last()
            self._emptied()
            return job
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
        groups = self._groups
        if groups is not None:
            group = job.group
            group_key = DEFAULT_GROUP if group is None else group
            members = groups.lists.get(group_key)
            if members is None or not members.remove(job):
                return False
            self._emptied()  # (an emptied group keeps its place until its turn)
            return True
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
        groups = self._groups
        if groups is not None:
            return next(members for members in groups.turn if members._len).first()
        return self._jobs[0][0] if self._jobs else None

    def __iter__(self) -> Iterator[Job]:
        """Jobs in the order they are served: by priority, then ctime."""
        levels = self._levels
        if levels is not None:
            for level in reversed(levels):
                yield from level
            return
        groups = self._groups
        if groups is not None:
            yield from _in_turns(groups)
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
        if self._groups is not None:  # (turns interleave the groups: no chunk to skip)
            return list(islice(self, offset, offset + count))
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
        groups = self._groups
        if groups is not None:
            yield from _in_turns_reversed(groups)
            return
        for chunk in reversed(self._jobs):
            yield from reversed(chunk)


class Groups:
    """The groups of a list of one priority: each one's jobs, and whose turn it is."""

    __slots__ = ("lists", "turn")

    def __init__(self) -> None:
        self.lists: dict[bytes, JobList] = {}
        # The list of every group (its ``_key`` names it), the next to serve first. A
        # group emptied by a removal keeps its place until its turn comes (it is dropped
        # then). Lists, not (key, list) pairs: a fetch sends its group to the back, and a
        # pair would be a tuple made again each time.
        self.turn: deque[JobList] = deque()

    def add(self, key: bytes, members: JobList) -> None:
        """A new group: its turn comes after every other's."""
        members._key = key
        self.lists[key] = members
        self.turn.append(members)

    def next_turn(self) -> JobList:
        """The list of the group whose turn it is (it has a job), the emptied groups
        before it dropped."""
        turn = self.turn
        members = turn[0]
        while not members._len:
            turn.popleft()
            del self.lists[members._key]
            members = turn[0]
        return members


def _group_length(members: JobList) -> int:
    return members._len


def _in_turns(groups: Groups) -> Iterator[Job]:
    """The jobs of the groups in the order :meth:`JobList.pop_first` serves them: one
    of each group in turn, round after round, a group leaving once it has no more."""
    turns = [iter(members) for members in groups.turn]
    while turns:
        left = []
        for jobs in turns:
            job = next(jobs, None)
            if job is not None:
                yield job
                left.append(jobs)
        turns = left


def _in_turns_reversed(groups: Groups) -> Iterator[Job]:
    """:func:`_in_turns` backwards: round ``r`` (from the last) has the groups longer than
    ``r``, each its ``r``-th job, in reverse turn order."""
    members = list(groups.turn)
    starts: dict[int, list[int]] = {}  # round -> the groups whose last job is in it
    for i, group in enumerate(members):
        starts.setdefault(group._len - 1, []).append(i)
    jobs = [group.reversed() for group in members]
    active: list[int] = []  # the groups in the round, in turn order
    for r in range(max(starts, default=-1), -1, -1):
        for i in starts.get(r, ()):
            insort(active, i)
        for i in reversed(active):
            yield next(jobs[i])
