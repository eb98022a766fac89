"""A queue: jobs in best-effort ctime order, the clients waiting on it, and its
bookkeeping (pause flags, counters, federation import rate and sources).

Queues are created implicitly and evicted when idle, empty, unpaused and
unwatched (see ``Node.evict_idle_queues``). The jobs themselves live in a
:class:`JobList`; this class only adds what Disque's ``queue`` struct holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from disquette.core.joblist import JobList

if TYPE_CHECKING:
    from disquette.core.ratelimit import GroupLimits, QueueLimit
    from disquette.core.spill import SpilledQueue

PAUSE_IN: Final = 1
PAUSE_OUT: Final = 2
PAUSE_ALL: Final = PAUSE_IN | PAUSE_OUT
PAUSE_NAMES: Final = (b"none", b"in", b"out", b"all")

IMPORT_WINDOW_MS: Final = 5000
IMPORT_MIN_ELAPSED_MS: Final = 50


class Queue:
    __slots__ = (
        "additional_deliveries",
        "atime",
        "blocked",
        "ctime",
        "dropped_oldest",
        "group_limits",
        "import_cur",
        "import_cur_start",
        "import_prev",
        "import_prev_start",
        "jobs",
        "jobs_in",
        "jobs_out",
        "limit",
        "nacks",
        "name",
        "needjobs_adhoc_attempt",
        "needjobs_adhoc_time",
        "needjobs_bcast_attempt",
        "needjobs_bcast_time",
        "paused",
        "refill_at",
        "sources",
        "spilled",
    )

    def __init__(self, name: bytes, now_ms: int) -> None:
        self.name = name
        self.jobs = JobList()
        self.ctime = now_ms
        self.atime = now_ms
        # Clients blocked in GETJOB on this queue, served FIFO (dict = ordered set).
        self.blocked: dict[Any, None] = {}
        self.jobs_in = 0
        self.jobs_out = 0
        self.dropped_oldest = 0  # beyond Disque: jobs dropped to make room (overflow)
        # Beyond Disque: requeues here, by NACK and by an expired retry (the job's own
        # counters added on this node; the HTTP API and /metrics read them).
        self.nacks = 0
        self.additional_deliveries = 0
        self.paused = 0
        # Federation: nodes that recently gave us jobs, and the import rate buckets.
        self.sources: dict[bytes, int] = {}
        self.import_prev = 0
        self.import_cur = 0
        self.import_prev_start = 0
        self.import_cur_start = 0
        self.needjobs_bcast_time = 0
        self.needjobs_bcast_attempt = 0
        self.needjobs_adhoc_time = 0
        self.needjobs_adhoc_attempt = 0
        # The length at which a fetch asks the sources for more (half the last batch).
        self.refill_at = 0
        # Its jobs on disk (core/spill.py), None while it has none.
        self.spilled: SpilledQueue | None = None
        # Its policy's rate and concurrency limits here (core/ratelimit.py), None: none.
        self.limit: QueueLimit | None = None
        # Its policy's limits per group (core/ratelimit.py), None: none.
        self.group_limits: GroupLimits | None = None

    def __len__(self) -> int:
        """Its jobs, in memory and on disk."""
        spilled = self.spilled
        return len(self.jobs) if spilled is None else len(self.jobs) + spilled.count

    def count_import(self, now_ms: int) -> None:
        """Count one job imported by federation into the two rate buckets."""
        if now_ms - self.import_cur_start > 1000:
            self.import_prev = self.import_cur
            self.import_prev_start = self.import_cur_start
            self.import_cur = 0
            self.import_cur_start = now_ms
        self.import_cur += 1

    def import_rate(self, now_ms: int) -> int:
        if self.import_cur_start == 0 or now_ms - self.import_cur_start > IMPORT_WINDOW_MS:
            return 0
        start = self.import_prev_start or self.import_cur_start
        elapsed = max(IMPORT_MIN_ELAPSED_MS, now_ms - start)
        return -(-(self.import_prev + self.import_cur) * 1000 // elapsed)

    @property
    def pause_name(self) -> bytes:
        return PAUSE_NAMES[self.paused]
