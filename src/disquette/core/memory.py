"""Memory accounting and Disque's maxmemory warning levels.

``used_memory`` means what Disque's does: the bytes allocated for the dataset
(zmalloc counts each allocation at the size its allocator hands out), and the
75 % and 95 % rules of ``maxmemory`` act on it. disquette keeps it as a running
sum, O(1) per change and deterministic (the simulator replays it): every job,
queue and dummy ACK adds its cost when it is registered and takes it back when
it goes, on top of the fixed cost of the empty registries (``NODE_OVERHEAD``);
the server shell adds its clients' query and output buffers
(``Node.client_memory``, summed by its client cron).

Each cost is what CPython allocates for the object, derived at import time from
the interpreter's own sizes (``sys.getsizeof``, which includes the garbage
collector's header) and rounded as the allocator rounds a request
(:func:`block_size`): to pymalloc's 16-byte size classes up to 512 bytes, to a
glibc malloc chunk (an 8-byte header, 16-byte steps) beyond. A job costs:

- its ``Job`` record (``__slots__``, GC header included);
- its ID, its body and its queue name: ``bytes`` objects of its own (the
  protocol parser and the bus decoder make one per argument; the empty and
  one-byte strings are interpreter singletons and cost nothing);
- the large ints it owns: ``ctime`` (ms x 1 000 000), ``etime`` and ``qtime``,
  made by additions, which allocate one spare 30-bit digit, and ``awake``, made
  by a subtraction, which does not; counters, flags and settings are cached
  small ints or shared by the jobs of a request;
- its entry in the registry (a :class:`~disquette.core.scan.ScanDict` bucket)
  and in the scheduler (a dict bucket keyed by the job): a dict entry each,
  ``DICT_ENTRY``, averaged over one doubling of a dict's table (between two
  resizes a table is half to completely full);
- its slots in its queue's :class:`~disquette.core.joblist.JobList` (a list
  and an array; chunks are split in exact halves, so the slack is small);
- its nodes-delivered tuple when it lists more than one node (a job held here
  only shares the node's one-element tuple, and the node IDs are the
  membership table's own objects, see ``Membership.known_only``);
- its :class:`~disquette.core.job.Extra` record when it has one (beyond
  Disque): the record, the strings it owns, and for a de-duplication key the
  node's index entry (a dict entry and its key tuple).

The compiled build (mypyc) lays a job out as a native record whose int fields
are machine words: it owns no int objects (its ``Job`` record is larger, and
``INLINE_INTS`` says which layout runs).

An acknowledged job lets go of its queue slots and of its ``awake`` (then the
same int as ``qtime``): ``Node.acknowledge`` takes ``ACKED_SAVING`` back. A
dummy ACK (a record without body or queue) costs its record, ID, ``etime``,
``qtime`` and its two dict entries. A queue costs its ``Queue`` and ``JobList``
records, their lists and dicts, a time int, its name, its registry entry and
the first chunk of its job lists (so an empty queue is charged as if it held
jobs: idle empty queues are evicted); a queue that received a job with a
priority, its ten levels (``LEVELS_COST``, charged until the queue goes).

Calibrated against tracemalloc: tests/unit/test_memory.py builds a node
in-process while tracemalloc traces every allocation and compares the growth of
``used_memory`` with the growth of the traced blocks, each rounded by
:func:`block_size`, for many shapes of dataset (bodies of 0 to 100 000 bytes,
ADDJOB one by one and pipelined, replicas from REPLJOB one or many per frame,
jobs with three holders, acknowledged jobs, dummy ACKs, thousands of small
queues), then deletes everything and checks that both come back. tracemalloc,
not RSS: it sees exactly the blocks the dataset holds, neither the interpreter
nor the allocator's free memory, and the test is deterministic; the rounding
makes it the allocator's view, as zmalloc's. Every shape there is within
0.95-1.07 of it (0.95-1.16 compiled, where a job is smaller and the same fixed
over-count weighs more). The costs are fixed figures, so a shape that departs from the
typical one is off by a few percent: over for a run of replicas that share one
holders tuple, a pipelined batch that shares one ``etime``, an empty queue;
under for a ``retry`` above 256 decoded from the bus, a scheduler bucket
holding only a few jobs (a low rate), the transient tuples of replication and
ACK confirmations. The registry's 4 096 buckets get their first tables as they
fill: from 4 000 to 10 000 jobs they hold up to about 0.3 MB more than
accounted, beyond that a few percent of the entries' cost either way (with the
tables' fill).

Not covered, and not in ``used_memory``: the interpreter's and the server's
own baseline (modules, the event loop, the membership table, the AOF writer's
buffers, a few tens of MB), the allocator's fragmentation and the free memory
it keeps (pymalloc arenas and malloc free lists not yet returned to the system:
the server trims the C heap once the dataset has shrunk, server/allocator.py),
the high-water mark of the scheduler's dict of buckets while any job is
scheduled, and what a command holds while it runs (replies in flight, a GETJOB's job list).
"""

from __future__ import annotations

import struct
import sys
from array import array
from typing import Final

from disquette import build
from disquette.core.ids import ID_LEN
from disquette.core.job import ACKED, LEVELS, Extra, Job
from disquette.core.joblist import JobList
from disquette.core.queue import Queue
from disquette.core.scan import BUCKETS

_PTR: Final = struct.calcsize("P")
_ALIGN: Final = 16  # pymalloc's size-class step on 64-bit builds, and glibc's chunk step
_SMALL: Final = 512  # pymalloc serves requests up to this size; malloc above
_MALLOC_HEADER: Final = 8  # glibc's chunk header
_BYTES_HEAD: Final = sys.getsizeof(b"")  # a bytes object's header and trailing NUL (33)
_EMPTY_LIST: Final = sys.getsizeof([])
_EMPTY_DICT: Final = sys.getsizeof({})


def block_size(size: int) -> int:
    """The size the allocator hands out for a request of ``size`` bytes."""
    if size <= _SMALL:
        return max(_ALIGN, (size + _ALIGN - 1) & -_ALIGN)
    return (size + _MALLOC_HEADER + _ALIGN - 1) & -_ALIGN


# bytes_cost() as arithmetic, for the hot paths: a bytes object of n > 1 bytes is one
# block of _BYTES_HEAD + n bytes, from pymalloc up to n = _SMALL_BODY, from malloc above.
_SMALL_BODY: Final = _SMALL - _BYTES_HEAD
_SMALL_ROUND: Final = _BYTES_HEAD + _ALIGN - 1
_LARGE_ROUND: Final = _BYTES_HEAD + _MALLOC_HEADER + _ALIGN - 1


def bytes_cost(n: int) -> int:
    """What a ``bytes`` object of ``n`` bytes holds (0 for the shared singletons)."""
    if n < 2:
        return 0
    if n <= _SMALL_BODY:
        return (n + _SMALL_ROUND) & -_ALIGN
    return (n + _LARGE_ROUND) & -_ALIGN


def _dict_entry() -> int:
    """Bytes per entry of a dict keyed by objects, averaged over one doubling of its
    table after 256 entries: a full table is replaced by one twice as large, so
    between two resizes a dict is half to completely full."""
    d: dict[int, None] = {}
    table = resizes = 0
    per_entry: list[float] = []
    n = 0
    while resizes < 2:
        n += 1
        d[n] = None
        size = block_size(sys.getsizeof(d) - _EMPTY_DICT)
        if size != table:
            table = size
            if n > 256:
                resizes += 1
        if resizes == 1:
            per_entry.append(size / n)
    return round(sum(per_entry) / len(per_entry))


def _list_items(n: int) -> int:
    """The item array of a list of ``n`` slots (a separate block from the list)."""
    return block_size(n * _PTR)


DICT_ENTRY: Final = _dict_entry()
_JOB_RECORD: Final = block_size(sys.getsizeof(Job(b"", None, None)))
_ID: Final = bytes_cost(ID_LEN)
# A time (ms or seconds) below 2^60 is an int of two 30-bit digits, a ctime (ms x
# 1 000 000) one of three; an addition allocates one digit more than its larger operand
# (a subtraction does not).
_TIME: Final = block_size(sys.getsizeof((1 << 60) - 1))
_TIME_SUM: Final = block_size(sys.getsizeof((1 << 60) - 1) + int.__itemsize__)
_CTIME: Final = block_size(sys.getsizeof((1 << 90) - 1) + int.__itemsize__)
_QUEUE_SLOTS: Final = 2 * _PTR

#: Whether a job keeps its times and counters in its record (the compiled build: mypyc
#: stores an int field as a machine word) rather than as int objects of its own.
INLINE_INTS: Final = build.is_compiled("disquette.core.job")
if INLINE_INTS:
    # No int objects; but what the registry's small bucket tables and the queue's
    # chunks hold beyond their entries at 20 000 jobs, 16 bytes a job (measured by
    # tests/unit/test_memory.py; the pure build's estimate of its ints covers it).
    _JOB_INTS = _DUMMY_INTS = _ALIGN
    _AWAKE = _QUEUE_TIME = 0
else:
    _JOB_INTS = _CTIME + 2 * _TIME_SUM + _TIME
    _DUMMY_INTS = 2 * _TIME_SUM
    _AWAKE = _QUEUE_TIME = _TIME

#: A job's cost without its body, queue name and nodes-delivered tuple.
JOB_COST: Final = _JOB_RECORD + _ID + _JOB_INTS + 2 * DICT_ENTRY + _QUEUE_SLOTS
#: What a job lets go when it is acknowledged: its queue slots, and its ``awake`` (the
#: GC time then, the same int as ``qtime``).
ACKED_SAVING: Final = _QUEUE_SLOTS + _AWAKE
#: A dummy ACK's cost without a nodes-delivered tuple.
DUMMY_ACK_COST: Final = _JOB_RECORD + _ID + _DUMMY_INTS + 2 * DICT_ENTRY


def _queue_cost() -> int:
    """A queue's cost without its name (see the module docstring)."""
    queue = Queue(b"", 0)
    records = block_size(sys.getsizeof(queue)) + block_size(sys.getsizeof(queue.jobs))
    # JobList's three lists, the blocked clients' and the sources' dicts.
    containers = 3 * block_size(_EMPTY_LIST) + 2 * block_size(_EMPTY_DICT)
    # The first chunk: each of the three outer lists grows to 4 slots; a chunk is a list
    # of jobs and an array of ctimes, each an object with its item block.
    chunk = block_size(_EMPTY_LIST) + block_size(sys.getsizeof(array("Q"))) + 2 * _list_items(1)
    first_chunk = 3 * _list_items(4) + chunk
    return records + containers + _QUEUE_TIME + DICT_ENTRY + first_chunk


QUEUE_COST: Final = _queue_cost()
#: What a queue's job list adds when its first job with a priority comes: a list of ten
#: job lists (one per priority), each a record and its three empty lists.
LEVELS_COST: Final = block_size(sys.getsizeof([None] * LEVELS)) + LEVELS * (
    block_size(sys.getsizeof(JobList())) + 3 * block_size(_EMPTY_LIST)
)

# An empty ScanDict: its list of buckets and the empty dicts in it.
_SCANDICT: Final = (
    block_size(_EMPTY_LIST) + _list_items(BUCKETS) + BUCKETS * block_size(_EMPTY_DICT)
)
#: What an empty node holds: its empty job and queue registries.
NODE_OVERHEAD: Final = 2 * _SCANDICT

_TUPLE_HEAD: Final = sys.getsizeof(())  # header and GC header
_TUPLE_ROUND: Final = _TUPLE_HEAD + _ALIGN - 1


def delivered_cost(n: int) -> int:
    """A nodes-delivered tuple of ``n`` node IDs: a job's own when it lists more than
    one node (the single-node tuple of a job held here only is the node's)."""
    return (n * _PTR + _TUPLE_ROUND) & -_ALIGN if n > 1 else 0


_EXTRA_RECORD: Final = block_size(sys.getsizeof(Extra()))
_INDEX_ENTRY: Final = DICT_ENTRY + block_size(sys.getsizeof((b"", b"")))
#: What a job's de-duplication key costs but the key's bytes: an Extra record holding
#: only the key, and the key's entry in the node's index.
KEY_COST: Final = _EXTRA_RECORD + _INDEX_ENTRY


_LIST: Final = block_size(sys.getsizeof([]))
_BACKOFF: Final = block_size(sys.getsizeof((1, 2, 3))) + 2 * _TIME  # kind, base, cap
#: A progress log entry but its text: the tuple, its time and its node ID.
_LOG_ENTRY: Final = block_size(sys.getsizeof((0, b"", b""))) + _TIME + _ID


def extra_cost(extra: Extra) -> int:
    """A job's :class:`Extra` record, its strings, its de-duplication index entry, the
    IDs it waits for, its progress log, its claim number and its group key. Callers that change an
    Extra of a registered job account for the difference (``Node.extra_changed``)."""
    dedup = extra.dedup
    cost = _EXTRA_RECORD if dedup is None else KEY_COST + bytes_cost(len(dedup))
    if extra.origin_id is not None:
        cost += _ID + bytes_cost(len(extra.origin_queue or b""))
    after = len(extra.after)
    if after:
        cost += ((after * _PTR + _TUPLE_ROUND) & -_ALIGN) + after * _ID
    log = extra.log
    if log is not None:
        cost += _LIST + _list_items(len(log))
        for entry in log:
            cost += _LOG_ENTRY + bytes_cost(len(entry[2]))
    if extra.claim > 256:  # smaller ints are shared
        cost += _TIME
    if extra.backoff is not None:
        cost += _BACKOFF
    if extra.group is not None:
        cost += bytes_cost(len(extra.group))
    return cost


def job_cost(job: Job) -> int:
    """What ``job`` holds (a dummy ACK when it has no body)."""
    body = job.body
    cost = delivered_cost(len(job.nodes_delivered))
    if job.extra is not None:
        cost += extra_cost(job.extra)
    if body is None:
        return DUMMY_ACK_COST + cost
    if job.state == ACKED:
        cost -= ACKED_SAVING
    return held_here_cost(job.queue) + cost + bytes_cost(len(body))  # type: ignore[arg-type]


def held_here_cost(queue: bytes) -> int:
    """:func:`job_cost` of a job of ``queue`` that only this node holds, but its body."""
    return JOB_COST + bytes_cost(len(queue))


def queue_cost(name: bytes) -> int:
    return QUEUE_COST + bytes_cost(len(name))


def warning_level(used: int, maxmemory: int) -> int:
    """0 normal, 1 above 75 %, 2 above 95 % (0 maxmemory counts as always above)."""
    if maxmemory == 0:
        return 2
    if used > maxmemory // 100 * 95:
        return 2
    if used > maxmemory // 100 * 75:
        return 1
    return 0


def human_bytes(n: int) -> str:
    """Disque's human-readable size: ``123B``, then two decimals with K, M, G, T, P."""
    if n < 1024:
        return f"{n}B"
    value = float(n)
    for suffix in "KMGTP":
        value /= 1024
        if value < 1024 or suffix == "P":
            return f"{value:.2f}{suffix}"
    raise AssertionError("unreachable")
