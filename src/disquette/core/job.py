"""The job: Disque's unit of work, its states and flags.

A job is a plain record with ``__slots__`` (a million of them must fit in a few
hundred megabytes). Times follow Disque: ``etime`` is absolute unix seconds,
``ctime`` is the creator's milliseconds x 1 000 000 plus a counter (so it
orders jobs and survives replication), ``qtime`` and ``awake`` are absolute
milliseconds. ``nodes_delivered`` and ``nodes_confirmed`` are tuples of node
IDs: immutable, so the common single-node case shares one tuple.

Beyond Disque, a job may have a priority (0-9, kept in the high nibble of
``flags``: it costs no field, and travels wherever the flags do) and rarer
extensions in an :class:`Extra` record (``extra``, None for most jobs: one
pointer per job): its de-duplication key, where a dead letter came from, the
jobs it waits for (core/dependency.py), its progress log (core/progress.py) and
its claim number (core/claim.py), its retry backoff (core/backoff.py) and its
fair-share group (core/joblist.py, docs/queues.md "Groups").
"""

from __future__ import annotations

from typing import Any, Final

# States, in Disque's order (the numbers are stored in the AOF).
WAIT_REPL: Final = 0
ACTIVE: Final = 1
QUEUED: Final = 2
ACKED: Final = 3
STATE_NAMES: Final = (b"wait-repl", b"active", b"queued", b"acked")
STATE_BY_NAME: Final = {name: i for i, name in enumerate(STATE_NAMES)}

# Flags.
BCAST_QUEUED: Final = 1  # next local queueing broadcasts QUEUED
BCAST_WILLQUEUE: Final = 2  # send WILLQUEUE 500 ms before queueing
DELIVERED: Final = 4  # handed to a client (or to another node) at least once
# Beyond Disque: a requeue postponed by NACK DELAY or a backoff (core/backoff.py) is
# due; its queueing counts nothing more (the NACK or the delivery was counted then).
POSTPONED: Final = 8

# The priority: flags >> PRIORITY_SHIFT, 0 (default) to MAX_PRIORITY (served first).
PRIORITY_SHIFT: Final = 4
MAX_PRIORITY: Final = 9
LEVELS: Final = MAX_PRIORITY + 1

NO_NODES: Final[tuple[bytes, ...]] = ()

# Requeue timing (ms): a holder requeues at its retry time plus a jitter in a centred
# window, and announces it with WILLQUEUE this long before.
REQUEUE_JITTER: Final = 500  # [-250, +249]
HALF_JITTER: Final = REQUEUE_JITTER // 2
WILLQUEUE_ADVANCE: Final = 500


#: The fields of a job (its ``__slots__``; the compiled class has no ``__slots__``).
FIELDS: Final = (
    "additional_deliveries",
    "awake",
    "body",
    "ctime",
    "delay",
    "etime",
    "extra",
    "flags",
    "gc_retry",
    "holders_epoch",
    "id",
    "nacks",
    "nodes_confirmed",
    "nodes_delivered",
    "qtime",
    "queue",
    "repl",
    "retry",
    "state",
    "waiter",
)


class Job:
    __slots__ = FIELDS

    def __init__(
        self,
        job_id: bytes,
        queue: bytes | None,
        body: bytes | None,
        state: int = WAIT_REPL,
        repl: int = 1,
        ctime: int = 0,
        etime: int = 0,
        delay: int = 0,
        retry: int = 0,
        qtime: int = 0,
        flags: int = 0,
        nodes_delivered: tuple[bytes, ...] = NO_NODES,
        holders_epoch: int = 0,
        nacks: int = 0,
        additional_deliveries: int = 0,
        gc_retry: int = 0,
    ) -> None:
        self.id = job_id
        self.queue = queue
        self.body = body
        self.state = state
        self.repl = repl
        self.ctime = ctime
        self.etime = etime
        self.delay = delay
        self.retry = retry
        self.nacks = nacks
        self.additional_deliveries = additional_deliveries
        self.nodes_delivered = nodes_delivered
        self.nodes_confirmed: tuple[bytes, ...] | None = None
        self.qtime = qtime
        self.awake = 0  # 0 = not scheduled
        self.gc_retry = gc_retry
        self.holders_epoch = holders_epoch  # the repair epoch nodes-delivered was checked at
        self.flags = flags
        # The client blocked in ADDJOB until this job is replicated, if any.
        self.waiter: Any = None
        self.extra: Extra | None = None

    @property
    def priority(self) -> int:
        return self.flags >> PRIORITY_SHIFT

    @property
    def dedup(self) -> bytes | None:
        extra = self.extra
        return None if extra is None else extra.dedup

    @property
    def group(self) -> bytes | None:
        """The fair-share group the job belongs to (ADDJOB GROUP), None: the default."""
        extra = self.extra
        return None if extra is None else extra.group

    @property
    def waiting(self) -> bool:
        """Whether the job waits for other jobs to be acknowledged (ADDJOB AFTER)."""
        extra = self.extra
        return extra is not None and bool(extra.after)

    @property
    def is_dummy_ack(self) -> bool:
        """An ACK for a job this node never held: no body, nobody delivered."""
        return self.body is None

    def __repr__(self) -> str:
        return f"Job({self.id!r}, {STATE_NAMES[self.state].decode()}, queue={self.queue!r})"


EXTRA_FIELDS: Final = (
    "after",
    "after_flags",
    "backoff",
    "claim",
    "dedup",
    "group",
    "log",
    "origin_deliveries",
    "origin_id",
    "origin_nacks",
    "origin_queue",
)

# Extra.after_flags.
AFTER_RELEASE: Final = 1  # IFGONE release: a dependency gone without an ack releases the job
AFTER_FAILED: Final = 2  # a dependency went without an ack (IFGONE fail): fail, not queue

# Extra.backoff's kind (core/backoff.py).
BACKOFF_FIXED: Final = 1
BACKOFF_EXPONENTIAL: Final = 2
BACKOFF_KINDS: Final = {b"fixed": BACKOFF_FIXED, b"exponential": BACKOFF_EXPONENTIAL}

#: The longest group key (ADDJOB GROUP), in bytes.
MAX_GROUP: Final = 256

#: A progress log entry: (unix ms, the ID of the node that recorded it, the text).
LogEntry = tuple[int, bytes, bytes]


class Extra:
    """What few jobs have: a de-duplication key (ADDJOB DEDUP, or a dead letter's
    original ID), for a dead letter the original job's ID, queue and counters, the
    jobs it still waits for (ADDJOB AFTER) and what a dependency gone without an ack
    does, its progress log (WORKING text), its latest claim number (GETJOB
    WITHCLAIM), its retry backoff (ADDJOB BACKOFF: kind, base and cap in seconds,
    core/backoff.py) and its fair-share group (ADDJOB GROUP)."""

    __slots__ = EXTRA_FIELDS

    def __init__(
        self,
        dedup: bytes | None = None,
        origin_id: bytes | None = None,
        origin_queue: bytes | None = None,
        origin_nacks: int = 0,
        origin_deliveries: int = 0,
    ) -> None:
        self.dedup = dedup
        self.origin_id = origin_id
        self.origin_queue = origin_queue
        self.origin_nacks = origin_nacks
        self.origin_deliveries = origin_deliveries
        self.after: tuple[bytes, ...] = NO_NODES
        self.after_flags = 0
        self.log: list[LogEntry] | None = None
        self.claim = 0
        self.backoff: tuple[int, int, int] | None = None
        self.group: bytes | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Extra) and all(
            getattr(self, name) == getattr(other, name) for name in EXTRA_FIELDS
        )

    def __hash__(self) -> int:
        return hash(self.dedup)
