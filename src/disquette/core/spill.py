"""Flow to disk: jobs leave memory for a log on disk, and come back when needed.

When the node's memory passes a level (``flow-to-disk-level``), whole job
records are written to a :class:`SpillStore` the shell provides (the server's
segment files, the simulator's memory) and the jobs are dropped from memory;
what stays per spilled job is a few machine words in arrays, never a Python
object:

* the **index** (:class:`Index`): the job ID's 62-bit hash, the record's location
  and its size, in sorted arrays split in ``SHARDS`` by the hash's top bits
  (20 bytes a job; a lookup is a bisect, an insert a short memmove);
* for a queued job, its place in its queue (:class:`SpilledQueue`): its ctime
  and ID hash, in sorted chunks per priority (16 bytes);
* its **timer** (:class:`Timers`): the ID hash in the bucket of the second it
  must be back by, its expiry for a queued job, its requeue or delay for the
  others (8 bytes).

A spilled job never changes: anything that would change it (a command naming
it, a message of the cluster, its timer) first loads it back through the job
registry's miss handler (:meth:`Spill.fault`), and the code that then runs is
the code that runs for a job in memory. A queue is its jobs in memory and its
spilled jobs, two sorted sets: a fetch loads from disk first when the next job
in (priority, ctime) order is a spilled one (a read-ahead *miss*), and loads a
batch ahead of need when few jobs are left in memory (*read-ahead*), so GETJOB
order is exactly what it would be in memory.

What spills first: jobs not queued whose timer is far (replicas held for other
nodes, delayed jobs), then queued jobs from each queue's far end, keeping the
``WINDOW`` jobs nearest its head in memory. Jobs in flight (handed to a
consumer), jobs being replicated, acknowledged jobs and jobs with extensions
(de-duplication key, dependencies, progress log, claim, dead-letter origin)
stay in memory: other structures hold them.

A record is ``[payload length u32][crc32 u32][qtime i64][holders epoch i64]``
then the job in the AOF's layout (:mod:`disquette.core.serialize`); the CRC
covers everything after it, so a damaged or torn record is detected, counted
and logged, and its job dropped from this node (never served with a wrong
body). The spill log promises nothing across a restart (the AOF does): the
server discards it at startup.

Segments: the store appends to one segment at a time; the live bytes of each
are counted here, a segment with none left is dropped, and one whose live share
falls under a quarter is compacted (its live records appended again, a slice of
the index per tick) while the log's dead bytes outweigh its live ones. The
housekeeping of a tick (that slice, the timers) also stops after a few
milliseconds when the shell gives a clock, and goes on between requests.
"""

from __future__ import annotations

import heapq
import struct
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final, Protocol

from disquette.core import serialize
from disquette.core.job import (
    ACTIVE,
    BCAST_WILLQUEUE,
    DELIVERED,
    LEVELS,
    PRIORITY_SHIFT,
    QUEUED,
    Job,
)
from disquette.core.memory import LEVELS_COST, job_cost

if TYPE_CHECKING:
    from disquette.core.node import Node
    from disquette.core.queue import Queue

#: ID hashes keep 62 bits: a machine integer in the compiled build (63 bits, signed),
#: where 64 would make every hash a Python object and every comparison a call.
HASH_BITS: Final = 62
HASH_MASK: Final = (1 << HASH_BITS) - 1
SHARD_BITS: Final = 14
SHARDS: Final = 1 << SHARD_BITS
_SHARD_SHIFT: Final = HASH_BITS - SHARD_BITS
SEGMENT_SHIFT: Final = 40
OFFSET_MASK: Final = (1 << SEGMENT_SHIFT) - 1
#: Segments from this number on are the AOF's files (the segment is JOURNAL | the AOF's
#: generation): a queued job spilled right after its LOADJOB record was written is read
#: back from there, never written twice.
JOURNAL: Final = 1 << 23
_HEAD: Final = struct.Struct("<II")  # payload length, crc32 of what follows
_TAIL: Final = struct.Struct("<qq")  # qtime, holders epoch
FRAME: Final = _HEAD.size + _TAIL.size
# Bound once: the compiled build would look each method up at every call.
_PACK_HEAD: Final = _HEAD.pack
_PACK_TAIL: Final = _TAIL.pack
_HEAD_FROM: Final = _HEAD.unpack_from
_TAIL_FROM: Final = _TAIL.unpack_from
_CRC32: Final = zlib.crc32
_HEAD_SIZE: Final = _HEAD.size
WINDOW: Final = 256  # jobs kept in memory at the head of a queue, and a read-ahead batch
BATCH_BYTES: Final = 4 << 20  # a read-ahead batch stops past this many bytes
READ_GAP: Final = 4096  # records of a batch this close on disk are read together
#: Jobs one call spills at most (a few ms): a node far past its level gets there over
#: several calls (before each deny-OOM command and at each cron tick), never in one pause.
SPILL_PER_CALL: Final = 512
CHUNK: Final = 2048  # entries per chunk of a spilled queue
HORIZON_MS: Final = 10_000  # a job not queued spills only when its timer is this far
EXPIRY_MARGIN_S: Final = 2  # a queued job expiring within this stays in memory: it goes anyway
SWEEP_BUDGET: Final = 512  # registry entries a spill call looks at for jobs not queued
SWEEP_REST_MS: Final = 1000  # after a sweep round found nothing to spill
TIMERS_PER_TICK: Final = 1000  # spilled jobs brought back by their timers per cron tick
TIDY_PER_TICK: Final = 4096  # timer entries filtered per cron tick (an index lookup each)
COMPACT_ENTRIES_PER_TICK: Final = 16384  # index entries a compaction looks at per tick
COMPACT_MOVES_PER_TICK: Final = 2048  # records it copies per tick (a few ms)
#: With a clock (:attr:`Spill.budget_clock`, the server's), the housekeeping of a cron
#: tick (due timers, their tidy, a compaction's slice) also stops after this many
#: seconds and goes on at the next turns of the event loop (:meth:`Spill.housekeep`):
#: the counts above are 12 ms and more of CPU on a busy machine, one pause.
HOUSEKEEPING_S: Final = 0.003
HOUSEKEEPING_STEP: Final = 32  # records handled between two looks at the clock
TIDY_STEP: Final = 512  # timer entries filtered between two looks at the clock
#: The most jobs a queue's head holds in memory for its consumers' GETJOB COUNT (the
#: read-ahead window, or the COUNT of its last GETJOB if larger, up to this).
MAX_HEAD: Final = 4096
ENTRY_BYTES: Final = 44  # a queued job on disk: index 20, queue place 16, timer 8
COMPACT_SHARE: Final = 4  # a segment is compacted when under 1/4 of it is live
ROLL_BYTES: Final = 1 << 20  # the current segment, all dead, is dropped past this size


class SpillStore(Protocol):
    """Where spilled records live (the server's files, the simulator's memory)."""

    current: int  # the segment appends go to
    failed: str | None  # the error of the last write that failed; spilling stops meanwhile

    def append(self, data: bytes) -> int:
        """Store ``data``; return its location ``segment << 40 | offset``, readable
        at once. Never raises: a failed write stays pending and sets ``failed``."""

    def read(self, loc: int, size: int) -> bytes:
        """The ``size`` bytes at ``loc`` (fewer if the segment is shorter); OSError."""

    def drop(self, segment: int) -> None:
        """Delete a segment no live record is in (the current one: appends then go to
        a new segment)."""

    def disk_used(self) -> int:
        """Bytes held, on disk and pending."""

    def flush(self) -> None:
        """Write what is pending; on success ``failed`` is cleared."""

    def close(self) -> None:
        """Forget everything (the files are deleted)."""


def fingerprint(job_id: bytes) -> int:
    return hash(job_id) & HASH_MASK


def frame(job: Job) -> bytes:
    """The record of ``job`` as the spill log stores it."""
    payload = serialize.encode(job, bus=False)
    rest = _PACK_TAIL(job.qtime, job.holders_epoch) + payload
    return _PACK_HEAD(len(payload), _CRC32(rest)) + rest


class Damaged(ValueError):
    """A record that does not read back as written."""


def unframe(data: bytes) -> Job:
    """The job of a record, or :class:`Damaged`."""
    if len(data) < FRAME:
        raise Damaged(f"record of {len(data)} bytes is shorter than its frame")
    size, crc = _HEAD_FROM(data)
    if len(data) != FRAME + size:
        raise Damaged(f"record of {len(data)} bytes, its frame says {FRAME + size}")
    if _CRC32(memoryview(data)[_HEAD_SIZE:]) != crc:
        raise Damaged("checksum mismatch")
    qtime, epoch = _TAIL_FROM(data, _HEAD_SIZE)
    try:
        job, end = serialize.decode(data, False, 0, FRAME)
    except serialize.BadJob as e:
        raise Damaged(f"undecodable job: {e}") from None
    if end != FRAME + size:
        raise Damaged("trailing bytes after the job")
    job.qtime = qtime
    job.holders_epoch = epoch
    return job


# ----------------------------------------------------------------------
# The index: ID hash -> (location, size).


class Index:
    """Sorted arrays of ID hashes with their records' locations and sizes, in shards."""

    __slots__ = ("_fps", "_locs", "_sizes", "count")

    def __init__(self) -> None:
        self._fps: list[array[int] | None] = [None] * SHARDS
        self._locs: list[array[int] | None] = [None] * SHARDS
        self._sizes: list[array[int] | None] = [None] * SHARDS
        self.count = 0

    def add(self, fp: int, loc: int, size: int) -> None:
        s = fp >> _SHARD_SHIFT
        fps = self._fps[s]
        locs = self._locs[s]
        sizes = self._sizes[s]
        if fps is None or locs is None or sizes is None:
            fps = self._fps[s] = array("Q")
            locs = self._locs[s] = array("Q")
            sizes = self._sizes[s] = array("I")
        i = bisect_right(fps, fp)
        fps.insert(i, fp)
        locs.insert(i, loc)
        sizes.insert(i, size)
        self.count += 1

    def find(self, fp: int) -> list[tuple[int, int]]:
        """The (location, size) of every entry with this hash (almost always 0 or 1)."""
        s = fp >> _SHARD_SHIFT
        fps = self._fps[s]
        locs = self._locs[s]
        sizes = self._sizes[s]
        out: list[tuple[int, int]] = []
        if fps is None or locs is None or sizes is None:
            return out
        i = bisect_left(fps, fp)
        n = len(fps)
        while i < n and fps[i] == fp:
            out.append((locs[i], sizes[i]))
            i += 1
        return out

    def pop(self, fp: int) -> tuple[int, int] | None:
        """Remove the first entry with this hash; its (location, size), or None."""
        s = fp >> _SHARD_SHIFT
        fps = self._fps[s]
        locs = self._locs[s]
        sizes = self._sizes[s]
        if fps is None or locs is None or sizes is None:
            return None
        i = bisect_left(fps, fp)
        if i == len(fps) or fps[i] != fp:
            return None
        entry = (locs[i], sizes[i])
        del fps[i], locs[i], sizes[i]
        if not fps:
            self._fps[s] = self._locs[s] = self._sizes[s] = None
        self.count -= 1
        return entry

    def __contains__(self, fp: int) -> bool:
        fps = self._fps[fp >> _SHARD_SHIFT]
        if fps is None:
            return False
        i = bisect_left(fps, fp)
        return i < len(fps) and fps[i] == fp

    def _position(self, fp: int, loc: int) -> int:
        s = fp >> _SHARD_SHIFT
        fps = self._fps[s]
        locs = self._locs[s]
        if fps is None or locs is None:
            return -1
        i = bisect_left(fps, fp)
        n = len(fps)
        while i < n and fps[i] == fp:
            if locs[i] == loc:
                return i
            i += 1
        return -1

    def remove(self, fp: int, loc: int) -> bool:
        i = self._position(fp, loc)
        if i < 0:
            return False
        s = fp >> _SHARD_SHIFT
        fps = self._fps[s]
        locs = self._locs[s]
        sizes = self._sizes[s]
        assert fps is not None and locs is not None and sizes is not None
        del fps[i], locs[i], sizes[i]
        if not fps:  # an array never shrinks its buffer: let the emptied shard go
            self._fps[s] = self._locs[s] = self._sizes[s] = None
        self.count -= 1
        return True

    def relocate(self, fp: int, old: int, new: int, size: int) -> bool:
        i = self._position(fp, old)
        if i < 0:
            return False
        s = fp >> _SHARD_SHIFT
        locs = self._locs[s]
        sizes = self._sizes[s]
        assert locs is not None and sizes is not None
        locs[i] = new
        sizes[i] = size
        return True

    def shard(self, s: int) -> list[tuple[int, int, int]]:
        """The (hash, location, size) entries of one shard, for scans."""
        fps = self._fps[s]
        locs = self._locs[s]
        sizes = self._sizes[s]
        if fps is None or locs is None or sizes is None:
            return []
        return list(zip(fps, locs, sizes, strict=True))

    def nbytes(self) -> int:
        """What the arrays hold (their buffers, allocated with some slack, and headers)."""
        total = 0
        for group in (self._fps, self._locs, self._sizes):
            for a in group:
                if a is not None:
                    total += 64 + a.buffer_info()[1] * a.itemsize
        return total + 3 * 8 * SHARDS

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]


# ----------------------------------------------------------------------
# A queue's spilled jobs.


class Run:
    """(ctime, ID hash) pairs of one priority, sorted by ctime, in chunks."""

    __slots__ = ("_ctimes", "_fps", "_maxes", "count")

    def __init__(self) -> None:
        self._ctimes: list[array[int]] = []
        self._fps: list[array[int]] = []
        self._maxes: list[int] = []
        self.count = 0

    def add(self, ctime: int, fp: int) -> None:
        maxes = self._maxes
        self.count += 1
        if not maxes or ctime >= maxes[-1]:
            if not maxes or len(self._ctimes[-1]) >= CHUNK:
                self._ctimes.append(array("Q", (ctime,)))
                self._fps.append(array("Q", (fp,)))
                maxes.append(ctime)
                return
            self._ctimes[-1].append(ctime)
            self._fps[-1].append(fp)
            maxes[-1] = ctime
            return
        i = bisect_left(maxes, ctime)
        ctimes = self._ctimes[i]
        j = bisect_right(ctimes, ctime)
        ctimes.insert(j, ctime)
        self._fps[i].insert(j, fp)
        if len(ctimes) > 2 * CHUNK:
            half = len(ctimes) // 2
            fps = self._fps[i]
            self._ctimes[i : i + 1] = [ctimes[:half], ctimes[half:]]
            self._fps[i : i + 1] = [fps[:half], fps[half:]]
            self._maxes[i : i + 1] = [ctimes[half - 1], ctimes[-1]]

    def first_ctime(self) -> int:
        return self._ctimes[0][0]

    def pop_front(self, n: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        while n > 0 and self._ctimes:
            ctimes = self._ctimes[0]
            fps = self._fps[0]
            take = min(n, len(ctimes))
            out.extend(zip(ctimes[:take], fps[:take], strict=True))
            del ctimes[:take], fps[:take]
            n -= take
            if not ctimes:
                del self._ctimes[0], self._fps[0], self._maxes[0]
        self.count -= len(out)
        return out

    def remove(self, ctime: int, fp: int) -> bool:
        i = bisect_left(self._maxes, ctime)
        while i < len(self._maxes):
            ctimes = self._ctimes[i]
            fps = self._fps[i]
            j = bisect_left(ctimes, ctime)
            while j < len(ctimes) and ctimes[j] == ctime:
                if fps[j] == fp:
                    del ctimes[j], fps[j]
                    self.count -= 1
                    if ctimes:
                        self._maxes[i] = ctimes[-1]
                    else:
                        del self._ctimes[i], self._fps[i], self._maxes[i]
                    return True
                j += 1
            if j < len(ctimes):
                return False
            i += 1
        return False

    def ctime_of(self, fp: int) -> int:
        """The ctime of the entry with this ID hash, -1 if none (a linear search in C:
        for a damaged record, whose ctime cannot be read)."""
        for i, fps in enumerate(self._fps):
            try:
                return self._ctimes[i][fps.index(fp)]
            except ValueError:
                continue
        return -1

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for ctimes, fps in zip(self._ctimes, self._fps, strict=True):
            yield from zip(ctimes, fps, strict=True)

    def reversed(self) -> Iterator[tuple[int, int]]:
        for k in range(len(self._ctimes) - 1, -1, -1):
            ctimes = self._ctimes[k]
            fps = self._fps[k]
            for j in range(len(ctimes) - 1, -1, -1):
                yield ctimes[j], fps[j]

    def nbytes(self) -> int:
        return sum(64 + a.buffer_info()[1] * 8 for a in self._ctimes) * 2


class SpilledQueue:
    """A queue's spilled jobs: one :class:`Run` per priority that has some."""

    __slots__ = ("count", "runs")

    def __init__(self) -> None:
        self.runs: list[Run | None] = [None] * LEVELS
        self.count = 0

    def add(self, priority: int, ctime: int, fp: int) -> None:
        run = self.runs[priority]
        if run is None:
            run = self.runs[priority] = Run()
        run.add(ctime, fp)
        self.count += 1

    def remove(self, priority: int, ctime: int, fp: int) -> bool:
        run = self.runs[priority]
        if run is None or not run.remove(ctime, fp):
            return False
        self.count -= 1
        if not run.count:
            self.runs[priority] = None
        return True

    def discard(self, fp: int) -> bool:
        """Remove the entry with this ID hash, whatever its priority and ctime."""
        for priority, run in enumerate(self.runs):
            ctime = run.ctime_of(fp) if run is not None else -1
            if ctime >= 0:
                return self.remove(priority, ctime, fp)
        return False

    def top_level(self) -> int:
        for priority in range(LEVELS - 1, -1, -1):
            if self.runs[priority] is not None:
                return priority
        return -1

    def pop_front(self, priority: int, n: int) -> list[tuple[int, int]]:
        run = self.runs[priority]
        if run is None:
            return []
        out = run.pop_front(n)
        self.count -= len(out)
        if not run.count:
            self.runs[priority] = None
        return out


# ----------------------------------------------------------------------
# Timers of spilled jobs.


class Timers:
    """ID hashes by the second their job must be back in memory by, with a heap of
    seconds. A job loaded back early leaves its entry behind: each second counts its
    live entries, and once stale entries outnumber them three to one the second is
    put up for filtering. The cron filters (:meth:`tidy`) a bounded number of entries
    a tick, looking each up in the index, so that a second holding a large backlog's
    jobs is never filtered in one pause. A second whose jobs all leave is dropped
    without any lookup (a drain's seconds, mostly); one that keeps a quarter costs
    about four lookups in three jobs gone."""

    __slots__ = ("_buckets", "_dirty", "_filtering", "_keys", "_live")

    def __init__(self) -> None:
        self._buckets: dict[int, array[int]] = {}
        self._live: dict[int, int] = {}
        self._keys: list[int] = []
        self._dirty: dict[int, None] = {}  # seconds to filter, oldest first
        self._filtering: dict[int, tuple[int, array[int]]] = {}  # second -> (next, kept)

    def add(self, second: int, fp: int) -> None:
        bucket = self._buckets.get(second)
        if bucket is None:
            self._buckets[second] = array("Q", (fp,))
            self._live[second] = 1
            heapq.heappush(self._keys, second)
        else:
            bucket.append(fp)
            self._live[second] += 1

    def gone(self, second: int, count: int = 1) -> None:
        """``count`` jobs of this second left the disk some other way."""
        live = self._live.get(second)
        if live is None:
            return
        live -= count
        if live <= 0:
            del self._buckets[second], self._live[second]
            self._forget(second)
        else:
            self._live[second] = live
            if len(self._buckets[second]) > 4 * live + 64:
                self._dirty[second] = None

    @property
    def untidy(self) -> bool:
        """Whether seconds are put up for filtering."""
        return bool(self._dirty)

    def tidy(self, index: Index, budget: int) -> None:
        """Filter up to ``budget`` entries of the seconds put up for it: those whose
        job is on disk no more are dropped (a second's filter may span many calls;
        entries added meanwhile are at its end and filtered too)."""
        while budget > 0 and self._dirty:
            second = next(iter(self._dirty))
            bucket = self._buckets.get(second)
            if bucket is None:
                self._forget(second)
                continue
            start, kept = self._filtering.get(second, (0, array("Q")))
            end = min(len(bucket), start + budget)
            kept.extend([fp for fp in bucket[start:end] if fp in index])
            budget -= end - start
            if end < len(bucket):
                self._filtering[second] = (end, kept)
            else:
                self._buckets[second] = kept
                self._forget(second)

    def _forget(self, second: int) -> None:
        self._dirty.pop(second, None)
        self._filtering.pop(second, None)

    def due(self, now_s: int, limit: int) -> list[int]:
        out: list[int] = []
        keys = self._keys
        while keys and keys[0] <= now_s and len(out) < limit:
            second = keys[0]
            bucket = self._buckets.get(second)
            if bucket is None:
                heapq.heappop(keys)
                continue
            self._forget(second)  # (a filter under way would lose its place)
            take = min(limit - len(out), len(bucket))
            out.extend(bucket[len(bucket) - take :])
            del bucket[len(bucket) - take :]
            if not bucket:
                del self._buckets[second], self._live[second]
                heapq.heappop(keys)
            else:
                self._live[second] = max(0, self._live[second] - take)
        return out

    def nbytes(self) -> int:
        kept = [a for _, a in self._filtering.values()]
        return sum(64 + a.buffer_info()[1] * 8 for a in [*self._buckets.values(), *kept])

    def __len__(self) -> int:
        return sum(map(len, self._buckets.values()))

    def clear(self) -> None:
        self._buckets.clear()
        self._live.clear()
        self._keys.clear()
        self._dirty.clear()
        self._filtering.clear()


def _ignore(message: str) -> None:
    """``Spill.log`` without a shell."""


# ----------------------------------------------------------------------
# The node's flow to disk.


class Spill:
    __slots__ = (
        "_compact_cursor",
        "_compacting",
        "_heads",
        "_prefetching",
        "_queue_cursor",
        "_rate_at",
        "_rate_loaded",
        "_rate_spilled",
        "_sweep_cursor",
        "_sweep_rest_until",
        "asked",
        "budget_clock",
        "bytes",
        "compactions",
        "enabled",
        "housekeep_hook",
        "index",
        "loaded",
        "loaded_per_sec",
        "log",
        "max_disk",
        "node",
        "prefetch_hook",
        "read_errors",
        "readahead_hits",
        "readahead_loads",
        "readahead_misses",
        "seg_epoch",
        "seg_live",
        "seg_total",
        "spilled",
        "spilled_per_sec",
        "store",
        "threshold",
        "timers",
        "window",
        "write_failed_logged",
    )

    def __init__(self, node: Node) -> None:
        self.node = node
        self.store: SpillStore | None = None
        self.enabled = False
        self.threshold = 0  # bytes of memory above which jobs spill; 0 = never
        self.max_disk = 0  # bytes on disk past which nothing more spills; 0 = no limit
        self.window = WINDOW  # jobs kept at a queue's head, and a read-ahead batch
        self.index = Index()
        self.timers = Timers()
        self.seg_live: dict[int, int] = {}
        self.seg_total: dict[int, int] = {}
        # For an AOF file: the oldest repair epoch of the jobs spilled there (an AOF
        # record has no epoch; core/repair.py then checks the holders since this one).
        self.seg_epoch: dict[int, int] = {}
        self.bytes = 0  # live record bytes on disk
        self.log: Callable[[str], None] = _ignore
        # Counters (INFO).
        self.spilled = 0
        self.loaded = 0
        self.readahead_hits = 0
        self.readahead_misses = 0
        self.readahead_loads = 0
        self.read_errors = 0
        self.compactions = 0
        self.spilled_per_sec = 0
        self.loaded_per_sec = 0
        self.write_failed_logged = False
        self._rate_at = 0
        self._rate_spilled = 0
        self._rate_loaded = 0
        self._sweep_cursor = 0
        self._sweep_rest_until = 0
        self._queue_cursor = 0
        self._compacting: set[int] = set()
        self._compact_cursor = 0
        #: A monotonic clock in seconds (the server's ``perf_counter``) that bounds the
        #: housekeeping of a tick by time (:data:`HOUSEKEEPING_S`); None (the
        #: simulator, deterministic): its counts alone bound it.
        self.budget_clock: Callable[[], float] | None = None
        #: Called when a tick's housekeeping is left unfinished: the shell calls
        #: :meth:`housekeep` at its next turns until it returns False.
        self.housekeep_hook: Callable[[], None] | None = None
        # Read-ahead between requests: the shell calls prefetch() soon after
        # prefetch_hook() (once the reply in hand is sent); without one, read-ahead
        # loads within the GETJOB that finds few jobs left in memory.
        self.prefetch_hook: Callable[[], None] | None = None
        self._prefetching: dict[Queue, None] = {}
        #: The COUNT of the GETJOB being served (Node.get_jobs), and the head each
        #: queue with jobs on disk keeps in memory for its consumers (by its last one).
        self.asked = 0
        self._heads: dict[bytes, int] = {}

    # --------------------------------------------------------------
    # Setup.

    def attach(self, store: SpillStore | None) -> None:
        """Use ``store`` (None: none; the jobs it held are forgotten)."""
        if store is None and self.index.count:
            self._forget_all()
        self.store = store
        self.node.jobs.miss = self.fault if store is not None else None

    def configure(self, enabled: bool, threshold: int, max_disk: int, window: int) -> None:
        self.enabled = enabled
        self.threshold = threshold
        self.max_disk = max_disk
        self.window = window

    @property
    def count(self) -> int:
        return self.index.count

    def can_spill(self) -> bool:
        store = self.store
        return (
            store is not None
            and self.enabled
            and self.threshold > 0
            and store.failed is None
            and not (self.max_disk and store.disk_used() >= self.max_disk)
        )

    def refuses(self) -> bool:
        """Memory is past the level and the disk limit stops spilling: deny-OOM
        commands are refused, as Disque refuses them when memory is full."""
        store = self.store
        return (
            store is not None
            and self.enabled
            and self.max_disk > 0
            and 0 < self.threshold < self.node.memory_used
            and store.disk_used() >= self.max_disk
        )

    def admit(self) -> bool:
        """Before a deny-OOM command: spill if memory is past the level; False when
        the disk limit refuses the command."""
        if self.node.memory_used > self.threshold > 0:
            self.make_room()
            return not self.refuses()
        return True

    # --------------------------------------------------------------
    # Spilling.

    def make_room(self) -> None:
        """Spill until memory is a little under the level (if it is over it)."""
        node = self.node
        threshold = self.threshold
        if node.memory_used <= threshold or not self.can_spill():
            return
        target = threshold - max(threshold // 50, 64 << 10)
        limit = self.spilled + SPILL_PER_CALL
        now = node.clock()
        if now >= self._sweep_rest_until:
            self._sweep(now, target, limit)
        if node.memory_used > target and self.spilled < limit:
            self._spill_queues(target, limit)

    def _spillable(self, job: Job, now: int) -> bool:
        return (
            job.state == ACTIVE
            and job.extra is None
            and job.waiter is None
            and job.body is not None
            and not job.flags & DELIVERED
            and job.awake - now > HORIZON_MS
        )

    def _sweep(self, now: int, target: int, limit: int) -> None:
        """Spill jobs not queued whose timers are far, a slice of the registry (until
        ``spilled`` reaches ``limit``)."""
        node = self.node
        buckets = node.jobs._buckets
        n = len(buckets)
        cursor = self._sweep_cursor
        examined = 0
        found = False
        while examined < SWEEP_BUDGET:
            bucket = buckets[cursor]
            cursor += 1
            if cursor == n:
                cursor = 0
                if not found:
                    self._sweep_rest_until = now + SWEEP_REST_MS
                    break
                found = False
            if not bucket:
                continue
            examined += len(bucket)
            for job in list(bucket.values()):
                if self._spillable(job, now):
                    found = True
                    self._spill(job, None)
                    if node.memory_used <= target or self.spilled >= limit:
                        self._sweep_cursor = cursor
                        return
        self._sweep_cursor = cursor

    def _spill_queues(self, target: int, limit: int) -> None:
        """Spill queued jobs from the far end of the queues, a slice of queues a call
        (until ``spilled`` reaches ``limit``)."""
        node = self.node
        buckets = node.queues._buckets
        n = len(buckets)
        cursor = self._queue_cursor
        soon = node.clock() // 1000 + EXPIRY_MARGIN_S  # a job expiring by then stays
        for _ in range(n):
            bucket = buckets[cursor]
            cursor = (cursor + 1) % n
            if not bucket:
                continue
            for queue in list(bucket.values()):
                jobs = queue.jobs
                # Taken from the far end, written in queue order: a later read-ahead
                # finds them side by side on disk (one read), and each joins its
                # queue's spilled run at the end.
                taken: list[Job] = []
                excess = node.memory_used - target
                room = limit - self.spilled
                keep = self.head(queue)
                while len(jobs) > keep and excess > 0 and len(taken) < room:
                    job = jobs.pop_last()
                    if job.extra is not None or job.etime <= soon:
                        jobs.add(job)  # stays in memory
                        break
                    taken.append(job)
                    excess -= job_cost(job)
                if taken:
                    taken.reverse()
                    for job, loc, size in self._write(taken):
                        self._place(job, queue, loc, size)
                if node.memory_used <= target or self.spilled >= limit:
                    self._queue_cursor = cursor
                    return
        self._queue_cursor = cursor

    def _spill(self, job: Job, queue: Queue | None) -> None:
        """Write ``job`` out and drop it from memory (``queue``: it was just taken
        from that queue's jobs in memory)."""
        store = self.store
        assert store is not None
        record = frame(job)
        self._place(job, queue, store.append(record), len(record))

    def _write(self, jobs: list[Job]) -> list[tuple[Job, int, int]]:
        """Append the records of ``jobs`` in one go (side by side, in one segment);
        each job with its record's location and size."""
        store = self.store
        assert store is not None
        records = [frame(job) for job in jobs]
        loc = store.append(b"".join(records))
        out: list[tuple[Job, int, int]] = []
        for job, record in zip(jobs, records, strict=True):
            size = len(record)
            out.append((job, loc, size))
            loc += size
        return out

    def arrival_level(self) -> int:
        """The memory (``memory_used``) past which new queued jobs go straight to the
        log (:meth:`arrive`); 0 while nothing may spill."""
        return self.threshold if self.can_spill() else 0

    def arrive(self, queue: Queue, jobs: list[Job]) -> None:
        """New queued jobs of ``queue``, made past the level by a run of ADDJOBs
        (``Node.add_jobs``) behind jobs already filling the queue's head window, written
        straight to the log: where spilling them from the queue's far end at the next
        call would put them, without registering, scheduling and queueing them in
        memory first only to take them out again. They count as spilled."""
        spilled = queue.spilled
        if spilled is None:
            spilled = queue.spilled = SpilledQueue()
        for job, loc, size in self._write(jobs):
            self._file(job, spilled, loc, size)

    def journalled(self, job: Job, offset: int, size: int) -> None:
        """The job's LOADJOB record was just added to the AOF at ``offset`` (payload of
        ``size`` bytes), memory is past the level: a queued job far from its queue's
        head spills there, with nothing more written."""
        if job.state != QUEUED or job.extra is not None or not self.can_spill():
            return
        node = self.node
        queue = node.queues.get(job.queue)  # type: ignore[arg-type]
        aof = node.aof
        if queue is None or aof is None or len(queue.jobs) <= self.window:
            return
        queue.jobs.remove(job)
        self._place(job, queue, (JOURNAL | aof.generation) << SEGMENT_SHIFT | offset, size)

    def _place(self, job: Job, queue: Queue | None, loc: int, size: int) -> None:
        """Drop ``job`` from memory, its record being ``size`` bytes at ``loc``."""
        node = self.node
        spilled: SpilledQueue | None = None
        if queue is not None:
            spilled = queue.spilled
            if spilled is None:
                spilled = queue.spilled = SpilledQueue()
        self._file(job, spilled, loc, size)
        node.used_memory -= job_cost(job)
        node.jobs.pop(job.id)
        node.schedule.cancel(job)
        if node.aof is not None:
            node.aof.moved(job)  # a running rewrite may have passed both of its places

    def _file(self, job: Job, spilled: SpilledQueue | None, loc: int, size: int) -> None:
        """Note a job as on disk, its record being ``size`` bytes at ``loc`` (``spilled``:
        its queue's spilled jobs, for a queued job)."""
        fp = fingerprint(job.id)
        self.index.add(fp, loc, size)
        segment = loc >> SEGMENT_SHIFT
        if segment & JOURNAL:
            epoch = self.seg_epoch.get(segment)
            if epoch is None or job.holders_epoch < epoch:
                self.seg_epoch[segment] = job.holders_epoch
        self.seg_live[segment] = self.seg_live.get(segment, 0) + size
        self.seg_total[segment] = self.seg_total.get(segment, 0) + size
        self.bytes += size
        self.timers.add(self._second(job), fp)
        if spilled is not None:
            spilled.add(job.flags >> PRIORITY_SHIFT, job.ctime, fp)
        self.spilled += 1

    def _second(self, job: Job) -> int:
        """The second a spilled job must be back in memory by."""
        if job.state == QUEUED:
            return job.etime
        return self.node.awake_time(job) // 1000 - 1

    # --------------------------------------------------------------
    # Loading back.

    def fault(self, job_id: bytes) -> Job | None:
        """The registry's miss handler: the spilled job with this ID, loaded back."""
        if not self.index.count:
            return None
        fp = fingerprint(job_id)
        for loc, size in self.index.find(fp):
            job = self._read(fp, loc, size)
            if job is not None and job.id == job_id:
                self._unspill(job, fp, loc, size, True)
                return job
        return None

    def _read(self, fp: int, loc: int, size: int) -> Job | None:
        """The job of a record, or None when it is damaged (counted, logged, dropped)."""
        try:
            return self._decode(loc, self._fetch(loc, size))
        except (Damaged, OSError) as e:
            self._damaged(fp, loc, size, str(e))
            return None

    def _fetch(self, loc: int, size: int) -> bytes:
        """The bytes of a record, from the spill log or the AOF (OSError)."""
        segment = loc >> SEGMENT_SHIFT
        if segment & JOURNAL:
            aof = self.node.aof
            if aof is None or aof.reader is None:
                raise OSError("the AOF is not readable")
            return aof.reader(segment & ~JOURNAL, loc & OFFSET_MASK, size)
        store = self.store
        assert store is not None
        return store.read(loc, size)

    def _decode(self, loc: int, data: bytes) -> Job:
        """A record's job (:class:`Damaged`), from the spill log or the AOF."""
        if not loc >> SEGMENT_SHIFT & JOURNAL:
            return unframe(data)
        try:
            job, end = serialize.decode(data, bus=False)
        except serialize.BadJob as e:
            raise Damaged(f"undecodable LOADJOB record: {e}") from None
        if end != len(data):
            raise Damaged("LOADJOB record of another size")
        job.holders_epoch = self.seg_epoch.get(loc >> SEGMENT_SHIFT, 0)
        return job

    def _damaged(
        self, fp: int, loc: int, size: int, reason: str, listed: bool = True, indexed: bool = True
    ) -> None:
        """Drop a record that does not read back: from the index and, when it may
        still be listed in a queue (``listed``), from that queue's spilled jobs (found
        by its ID hash alone: the record cannot say which queue), so that QLEN and
        GETJOB never count a job this node no longer holds."""
        self.read_errors += 1
        self.log(
            f"Flow to disk: the record at segment {loc >> SEGMENT_SHIFT} offset "
            f"{loc & OFFSET_MASK} is damaged ({reason}); its job is dropped"
        )
        if indexed and not self.index.remove(fp, loc):
            return
        self._released(loc, size)
        if listed and fp not in self.index:  # (another record with this hash: left)
            for queue in self.node.queues.values():
                spilled = queue.spilled
                if spilled is not None and spilled.discard(fp):
                    if not spilled.count:
                        queue.spilled = None
                    break

    def _released(self, loc: int, size: int) -> None:
        """A record's bytes are no longer live: its segment goes once none are."""
        segment = loc >> SEGMENT_SHIFT
        live = self.seg_live.get(segment, 0) - size
        self.bytes -= size
        if live <= 0 and (not self._current(segment) or self._roll(segment)):
            self.seg_live.pop(segment, None)
            self.seg_total.pop(segment, None)
            self._compacting.discard(segment)
            self._drop(segment)
        else:
            self.seg_live[segment] = live

    def _roll(self, segment: int) -> bool:
        """Whether the spill log's current segment, all dead, is dropped (appends then
        start a new one): once it is large, or when its writes fail (its dead bytes are
        what fills the disk)."""
        store = self.store
        return (
            not segment & JOURNAL
            and store is not None
            and (self.seg_total.get(segment, 0) >= ROLL_BYTES or store.failed is not None)
        )

    def uses(self, generation: int) -> bool:
        """Whether a spilled job is read from the AOF file of this generation."""
        return (JOURNAL | generation) in self.seg_live

    def _current(self, segment: int) -> bool:
        """Whether appends still go to ``segment`` (the spill log's or the AOF's)."""
        if segment & JOURNAL:
            aof = self.node.aof
            return aof is not None and aof.generation == segment & ~JOURNAL
        store = self.store
        return store is not None and store.current == segment

    def _drop(self, segment: int) -> None:
        self.seg_epoch.pop(segment, None)
        if segment & JOURNAL:
            aof = self.node.aof
            if aof is not None and aof.retire is not None:
                aof.retire(segment & ~JOURNAL)  # an AOF file a rewrite replaced
        elif self.store is not None:
            self.store.drop(segment)

    def _unspill(
        self, job: Job, fp: int, loc: int, size: int, in_queue: bool, indexed: bool = True
    ) -> None:
        """Bring a job read from ``loc`` back into memory (``in_queue``: still listed
        in its queue's spilled jobs, when it is queued; ``indexed``: its entry is still
        in the index)."""
        node = self.node
        if indexed:
            self.index.remove(fp, loc)
        self._released(loc, size)
        self.timers.gone(self._second(job))
        queue: Queue | None = None
        if job.state == QUEUED:
            name: bytes = job.queue  # type: ignore[assignment]
            queue = node.queues.get(name)
            if queue is None:
                queue = node.create_queue(name)
            spilled = queue.spilled
            if in_queue and spilled is not None:
                spilled.remove(job.flags >> PRIORITY_SHIFT, job.ctime, fp)
            if spilled is not None and not spilled.count:
                queue.spilled = None
        self._restore(job, queue, node.clock(), bool(loc >> SEGMENT_SHIFT & JOURNAL))

    def _restore(self, job: Job, queue: Queue | None, now: int, journal: bool) -> None:
        """Put a job read back (``journal``: from the AOF) into memory: the registry,
        the scheduler and its queue (``queue``, for a queued job)."""
        node = self.node
        if job.state == QUEUED and job.retry and (job.qtime <= now or journal):
            # Its requeue time, as the timer of a job queued in memory would have kept
            # moving it (an AOF record has none: only queued jobs spill there).
            job.qtime = now + job.retry * 1000 + node.jitter()
            job.flags |= BCAST_WILLQUEUE
        delivered = job.nodes_delivered
        if delivered and delivered[0] == node.myself and len(delivered) == 1:
            job.nodes_delivered = node.myself_only
        else:
            job.nodes_delivered = node.known_only(delivered)
        node.jobs.add_new(job.id, job)  # (off the index already)
        node.used_memory += job_cost(job)
        node.schedule.add(job, node.awake_time(job))
        if queue is not None:
            if job.flags >> PRIORITY_SHIFT and not queue.jobs.has_levels:
                node.used_memory += LEVELS_COST
            queue.jobs.add(job)
        self.loaded += 1
        if node.aof is not None:
            node.aof.moved(job)

    def ready_head(self, queue: Queue) -> None:
        """Before a fetch: the next job in queue order is in memory (loaded now if it
        was on disk: a miss). Then, when few jobs are left in memory, a batch more."""
        jobs = queue.jobs
        missed = False
        while True:
            spilled = queue.spilled
            if spilled is None:
                break
            level = spilled.top_level()
            top = jobs.top_level()
            if level < top:
                break
            run = spilled.runs[level]
            assert run is not None
            here = jobs.level(level) if level == top else None
            head = None if here is None else here.first()
            if head is not None and run.first_ctime() >= head.ctime:
                break
            missed = True
            self._load_front(queue, level)  # takes one entry at least: this ends
        if self.asked > self.window:  # the head this queue's consumers take at once
            self._heads[queue.name] = min(self.asked, MAX_HEAD)
        if missed:
            self.readahead_misses += 1
        else:
            self.readahead_hits += 1
        spilled = queue.spilled
        if spilled is None:
            self._heads.pop(queue.name, None)
            return
        if self.prefetch_hook is not None:
            if len(jobs) < self.head(queue) and queue not in self._prefetching:
                self._prefetching[queue] = None
                if len(self._prefetching) == 1:
                    self.prefetch_hook()
        elif not missed and len(jobs) < self.window // 2:
            self._load_front(queue, spilled.top_level())

    def head(self, queue: Queue) -> int:
        """The jobs a queue keeps in memory at its head, nothing of which spills: the
        read-ahead window, or the COUNT of its consumers' last GETJOB if larger (up to
        :data:`MAX_HEAD`)."""
        return max(self.window, self._heads.get(queue.name, 0))

    def prefetch(self) -> bool:
        """Between requests (the shell, after :attr:`prefetch_hook`): one batch of
        read-ahead for a queue whose head is short of what its consumers take (memory
        allowing: under halfway from the level to Disque's 75 % mark); whether more
        are wanted (call again soon)."""
        while self._prefetching:
            queue = next(iter(self._prefetching))
            spilled = queue.spilled
            if (
                spilled is None
                or len(queue.jobs) >= self.head(queue)
                or self.node.queues.get(queue.name) is not queue
                or not self._room_to_load()
            ):
                del self._prefetching[queue]
                continue
            self._load_front(queue, spilled.top_level())
            return True
        return False

    def _room_to_load(self) -> bool:
        node = self.node
        maxmemory = node.settings.maxmemory
        mark = maxmemory // 100 * 75 if maxmemory else 0
        return not mark or node.memory_used < (max(self.threshold, 0) + mark) // 2

    def _load_front(self, queue: Queue, level: int) -> None:
        """Load the first spilled jobs of one priority of ``queue`` (a batch read as
        few contiguous ranges, and taken back together)."""
        spilled = queue.spilled
        assert spilled is not None
        batch: list[tuple[int, int, int, int]] = []  # ctime, hash, location, size
        total = 0
        index = self.index
        entries = spilled.pop_front(level, self.window)
        for k, (ctime, fp) in enumerate(entries):
            entry = index.pop(fp)  # (taken off the index now: see _take)
            if entry is None:
                continue  # dropped as damaged
            loc, size = entry
            batch.append((ctime, fp, loc, size))
            total += size
            if total > BATCH_BYTES:
                for ctime, fp in entries[k + 1 :]:  # for the next batch
                    spilled.add(level, ctime, fp)
                break
        if not spilled.count:
            queue.spilled = None
        self.readahead_loads += 1
        records = self._read_batch(batch)
        node = self.node
        now = node.clock()
        released: dict[int, int] = {}  # segment -> record bytes no longer live
        gone: dict[int, int] = {}  # timer second -> jobs
        for k, (ctime, fp, loc, size) in enumerate(batch):
            try:
                job = self._decode(loc, records[k])
            except Damaged:
                job = None
            if job is None or job.ctime != ctime or fingerprint(job.id) != fp:
                self._take(ctime, fp, loc, size, records[k])  # damaged, or another job's
                continue
            segment = loc >> SEGMENT_SHIFT
            released[segment] = released.get(segment, 0) + size
            second = self._second(job)
            gone[second] = gone.get(second, 0) + 1
            self._restore(job, queue, now, bool(segment & JOURNAL))
        for segment, size in released.items():
            self._released(segment << SEGMENT_SHIFT, size)
        for second, count in gone.items():
            self.timers.gone(second, count)

    def _read_batch(self, batch: list[tuple[int, int, int, int]]) -> list[bytes]:
        """The records of ``batch`` (ctime, hash, location, size each), read in the
        order they lie on disk as few ranges (records of one segment less than
        READ_GAP apart share a read), in the batch's order."""
        places = [entry[2] for entry in batch]
        by_place = list(range(len(batch)))
        if places != sorted(places):  # (a queue spilled in order lies in order)
            by_place.sort(key=places.__getitem__)
        records: list[bytes] = [b""] * len(batch)
        i = 0
        while i < len(by_place):
            start = batch[by_place[i]][2]
            end = start + batch[by_place[i]][3]
            j = i + 1
            while j < len(by_place):
                loc, size = batch[by_place[j]][2], batch[by_place[j]][3]
                if loc >> SEGMENT_SHIFT != start >> SEGMENT_SHIFT or loc - end > READ_GAP:
                    break
                end = max(end, loc + size)
                j += 1
            data = self._raw(start, end - start)
            for k in by_place[i:j]:
                at = batch[k][2] - start
                records[k] = data[at : at + batch[k][3]]
            i = j
        return records

    def _take(
        self, ctime: int, fp: int, loc: int, size: int, record: bytes, indexed: bool = False
    ) -> None:
        """A queued job read at the front of its queue's spilled jobs (``indexed``: its
        entry is still in the index; a read-ahead batch took it off already)."""
        try:
            job = self._decode(loc, record)
        except Damaged as e:
            self._damaged(fp, loc, size, str(e), listed=False, indexed=indexed)
            return
        if job.ctime != ctime or fingerprint(job.id) != fp:
            # Another job with the same ID hash: its entry stays; read this one by its own.
            if not indexed:
                self.index.add(fp, loc, size)
            for other_loc, other_size in self.index.find(fp):
                if other_loc != loc:
                    record = self._raw(other_loc, other_size)
                    self._take(ctime, fp, other_loc, other_size, record, indexed=True)
                    return
            self._damaged(fp, loc, size, "the record is another job's", listed=False)
            return
        self._unspill(job, fp, loc, size, False, indexed)

    def _raw(self, loc: int, size: int) -> bytes:
        try:
            return self._fetch(loc, size)
        except OSError:
            return b""

    # --------------------------------------------------------------
    # Reading without loading back (QPEEK, JSCAN).

    def _copy(self, loc: int, size: int) -> Job:
        """A spilled job read from disk and left there, its timer as it would be in
        memory (:class:`Damaged`)."""
        job = self._decode(loc, self._raw(loc, size))
        now = self.node.clock()
        if job.state == QUEUED and job.retry and job.qtime <= now:
            job.qtime = now + job.retry * 1000  # moved on while queued, as in memory
        job.awake = self.node.awake_time(job)
        return job

    def peek(self, fp: int, ctime: int = -1) -> Job | None:
        """A spilled job read from disk (``ctime``: the one with that ctime), left on
        disk: a copy nobody must change."""
        for loc, size in self.index.find(fp):
            try:
                job = self._copy(loc, size)
            except Damaged:
                continue
            if fingerprint(job.id) == fp and (ctime < 0 or job.ctime == ctime):
                return job
        return None

    def queue_order(self, queue: Queue, reverse: bool) -> Iterator[Job]:
        """Every job of ``queue`` in the order GETJOB serves them (or the reverse), the
        spilled ones read from disk without loading them back."""
        spilled = queue.spilled
        levels = range(LEVELS) if reverse else range(LEVELS - 1, -1, -1)
        for priority in levels:
            here = queue.jobs.level(priority)
            run = spilled.runs[priority] if spilled is not None else None
            memory: Iterator[Job] = (
                iter(()) if here is None else (here.reversed() if reverse else iter(here))
            )
            if run is None:
                yield from memory
                continue
            disk = run.reversed() if reverse else iter(run)
            job = next(memory, None)
            entry = next(disk, None)
            while job is not None or entry is not None:
                if entry is None or (
                    job is not None and (job.ctime > entry[0] if reverse else job.ctime <= entry[0])
                ):
                    assert job is not None
                    yield job
                    job = next(memory, None)
                else:
                    copy = self.peek(entry[1], entry[0])
                    if copy is not None:
                        yield copy
                    entry = next(disk, None)

    def copies(self, shard: int) -> list[Job]:
        """Copies of the spilled jobs of one shard of the index (repair's pass)."""
        out: list[Job] = []
        for fp, loc, size in self.index.shard(shard):
            try:
                job = self._copy(loc, size)
            except Damaged:
                continue
            if fingerprint(job.id) == fp:
                out.append(job)
        return out

    def scan(
        self, cursor: int, count: int, busyloop: bool, match: Callable[[Job], bool]
    ) -> tuple[int, list[Job]]:
        """JSCAN's walk over the spilled jobs: ``cursor`` is a shard; copies read from disk."""
        out: list[Job] = []
        examined = 0
        while cursor < SHARDS:
            entries = self.index.shard(cursor)
            cursor += 1
            examined += len(entries)
            for fp, loc, size in entries:
                try:
                    job = self._copy(loc, size)
                except Damaged:
                    continue
                if fingerprint(job.id) == fp and match(job):
                    out.append(job)
            if not busyloop and (examined >= count * 10 or len(out) >= count):
                break
        return (0 if cursor >= SHARDS else cursor), out

    # --------------------------------------------------------------
    # The cron: timers, writes, segments, rates.

    def cron(self, now: int) -> None:
        store = self.store
        if store is None:
            return
        store.flush()
        failed = store.failed is not None
        if failed != self.write_failed_logged:  # said once each way
            self.write_failed_logged = failed
            if failed:
                self.log(f"Flow to disk stopped: writing the spill log failed: {store.failed}")
            else:
                self.log("Flow to disk resumed: the spill log is written again")
        if self.housekeep() and self.housekeep_hook is not None:
            self.housekeep_hook()
        self.make_room()
        elapsed = now - self._rate_at
        if elapsed >= 1000:
            self.spilled_per_sec = (self.spilled - self._rate_spilled) * 1000 // elapsed
            self.loaded_per_sec = (self.loaded - self._rate_loaded) * 1000 // elapsed
            self._rate_at = now
            self._rate_spilled = self.spilled
            self._rate_loaded = self.loaded

    def housekeep(self) -> bool:
        """The spill log's housekeeping, at each cron tick: the timers' tidy, the jobs
        whose timers are due loaded back, a slice of a compaction. Bounded by counts
        and, with :attr:`budget_clock`, by :data:`HOUSEKEEPING_S`; whether more is
        left (the time ran out, a compaction is under way): the shell then calls it
        again at the next turn of its event loop, between requests, so that the work
        of a tick is spread over short stretches, never one long pause."""
        if self.store is None or not self.index.count:
            return False
        clock = self.budget_clock
        deadline = clock() + HOUSEKEEPING_S if clock is not None else 0.0
        timers = self.timers
        for _ in range(TIDY_PER_TICK // TIDY_STEP):
            if not timers.untidy or self._late(deadline):
                break
            timers.tidy(self.index, TIDY_STEP)
        done = self._load_due(self.node.clock() // 1000, deadline)
        self._compact(deadline)
        return not done or bool(self._compacting)

    def _late(self, deadline: float) -> bool:
        clock = self.budget_clock
        return clock is not None and clock() >= deadline

    def _load_due(self, now_s: int, deadline: float) -> bool:
        """Load back the spilled jobs whose timers are due (up to TIMERS_PER_TICK, in
        steps until ``deadline``); whether none is left."""
        taken = 0
        while taken < TIMERS_PER_TICK and not self._late(deadline):
            fps = self.timers.due(now_s, min(HOUSEKEEPING_STEP, TIMERS_PER_TICK - taken))
            if not fps:
                return True
            taken += len(fps)
            for fp in fps:
                for loc, size in self.index.find(fp):
                    job = self._read(fp, loc, size)
                    if job is not None and fingerprint(job.id) == fp:
                        self._unspill(job, fp, loc, size, True)
        return False

    def _compact(self, deadline: float) -> None:
        """Rewrite the live records of sparse segments, a slice of the index a call
        (until ``deadline``)."""
        store = self.store
        assert store is not None
        if not self._compacting:
            if store.failed is not None:
                return
            # The spill log's sparse segments only while its dead bytes outweigh its
            # live ones: a queue drained from its head leaves one sparse segment at a
            # time, which empties on its own.
            dead = sum(total - self.seg_live[seg] for seg, total in self.seg_total.items()
                       if not seg & JOURNAL)  # fmt: skip
            for segment, total in self.seg_total.items():
                if (
                    not self._current(segment)
                    and self.seg_live[segment] * COMPACT_SHARE < total
                    and (segment & JOURNAL or dead > self.bytes)
                ):
                    self._compacting.add(segment)
            if not self._compacting:
                return
            self._compact_cursor = 0
            self.compactions += 1
        shard = self._compact_cursor
        examined = 0
        moved = 0
        late = False
        while (
            shard < SHARDS
            and examined < COMPACT_ENTRIES_PER_TICK
            and moved < COMPACT_MOVES_PER_TICK
            and not late
        ):
            entries = self.index.shard(shard)
            shard += 1
            examined += len(entries) + 1
            for fp, loc, size in entries:
                if loc >> SEGMENT_SHIFT in self._compacting:
                    moved += 1
                    if not moved % HOUSEKEEPING_STEP and self._late(deadline):
                        shard -= 1  # (its records moved are skipped when it is seen again)
                        late = True
                        break
                    record = self._raw(loc, size)
                    try:
                        job = self._decode(loc, record)
                    except Damaged as e:
                        self._damaged(fp, loc, size, str(e))
                        continue
                    if loc >> SEGMENT_SHIFT & JOURNAL:
                        record = frame(job)  # from a replaced AOF file to the spill log
                    new = store.append(record)
                    self.index.relocate(fp, loc, new, len(record))
                    segment = new >> SEGMENT_SHIFT
                    self.seg_live[segment] = self.seg_live.get(segment, 0) + len(record)
                    self.seg_total[segment] = self.seg_total.get(segment, 0) + len(record)
                    self.bytes += len(record)
                    self._released(loc, size)
        self._compact_cursor = shard
        if shard >= SHARDS:
            for segment in self._compacting:  # nothing live is left in them
                if segment in self.seg_live and not self._current(segment):
                    del self.seg_live[segment], self.seg_total[segment]
                    self._drop(segment)
            self._compacting.clear()

    # --------------------------------------------------------------
    # Forgetting everything (DEBUG FLUSHALL, detaching).

    def _forget_all(self) -> None:
        self.index.clear()
        self.timers.clear()
        self.seg_live.clear()
        self.seg_total.clear()
        self.seg_epoch.clear()
        self._compacting.clear()
        self._prefetching.clear()
        self._heads.clear()
        self.bytes = 0
        for queue in self.node.queues.values():
            queue.spilled = None

    def clear(self) -> None:
        """Every spilled job is gone (the store's segments too; the AOF says so)."""
        store = self.store
        aof = self.node.aof
        if aof is not None and self.index.count:
            for s in range(SHARDS):
                for _fp, loc, size in self.index.shard(s):
                    try:
                        aof.deljob(self._decode(loc, self._raw(loc, size)).id)
                    except Damaged:
                        pass
        segments = list(self.seg_total)
        self._forget_all()
        if store is not None:
            for segment in segments:
                if not self._current(segment):
                    self._drop(segment)

    def footprint(self) -> int:
        """About what :meth:`index_bytes` counts, at no cost (for the allocator's
        trims: the index shrinks as a backlog drains while the dataset stays level)."""
        return self.index.count * ENTRY_BYTES

    def index_bytes(self) -> int:
        """What the spilled jobs cost in memory: the index, queue places and timers."""
        total = self.index.nbytes() + self.timers.nbytes()
        for queue in self.node.queues.values():
            spilled = queue.spilled
            if spilled is not None:
                for run in spilled.runs:
                    if run is not None:
                        total += run.nbytes()
        return total
