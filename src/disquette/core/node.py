"""The node: every job, every queue, and the rules that move jobs between states.

This is Disque's server state without its I/O. The shell feeds it client
operations (through the command layer), ticks (``cron`` at ``hz``, and
``process_jobs`` when :meth:`next_wakeup` says a job is due) and, later,
cluster messages; the node answers with return values, :class:`DisqueError`,
calls to ``Client.deliver`` for clients it had blocked, records for the AOF
and messages for the bus. Time comes from ``clock()`` (milliseconds) and
randomness from the ``rng`` and ``randbytes`` it is given, so the same inputs
replay the same history in the simulator.

The state machine follows Disque's README and reference sections 3-9: jobs are
created ``wait-repl`` or directly queued, requeued by their retry timer,
acknowledged and then garbage collected; queues wake the clients blocked on
them after every command.

The node owns the state; the cluster protocols that act on it live in their
own modules, which register their bus message handlers here and are called at
the points where a single node would stop: :mod:`~disquette.core.replication`
(REPLJOB/GOTJOB, synchronous and asynchronous ADDJOB),
:mod:`~disquette.core.requeue` (WILLQUEUE/QUEUED/WORKING/ENQUEUE),
:mod:`~disquette.core.acks` (SETACK/GOTACK/DELJOB, dummy acks, GC) and
:mod:`~disquette.core.federation` (NEEDJOBS/YOURJOBS, PAUSE); beyond Disque,
:mod:`~disquette.core.repair` makes new copies of the jobs whose copies were
lost with failed nodes, and :mod:`~disquette.core.dependency`,
:mod:`~disquette.core.progress` and :mod:`~disquette.core.claim` carry the
coordination extensions (AFTER, progress logs, claim numbers), and
:mod:`~disquette.core.cron` adds the jobs of recurring schedules.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol

from disquette.core import (
    acks,
    acl,
    backoff,
    claim,
    cron,
    deadletter,
    dependency,
    federation,
    outcome,
    policy,
    progress,
    ratelimit,
    repair,
    replication,
    replies,
    requeue,
    tags,
)
from disquette.core import messages as msg
from disquette.core.acl import AclTable
from disquette.core.client import BLOCK_ADDJOB, BLOCK_GETJOB, BLOCK_NONE, BLOCK_WAITJOB, Client
from disquette.core.cron import CronTable
from disquette.core.dialect import CURRENT, Dialects, Speech
from disquette.core.errors import DisqueError
from disquette.core.ids import IdGenerator, is_at_least_once
from disquette.core.job import (
    ACKED,
    ACTIVE,
    AFTER_FAILED,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    DELIVERED,
    HALF_JITTER,
    NO_NODES,
    POSTPONED,
    PRIORITY_SHIFT,
    QUEUED,
    REQUEUE_JITTER,
    WAIT_REPL,
    WILLQUEUE_ADVANCE,
    Extra,
    Job,
)
from disquette.core.membership import Membership
from disquette.core.memory import (
    ACKED_SAVING,
    LEVELS_COST,
    NODE_OVERHEAD,
    bytes_cost,
    delivered_cost,
    extra_cost,
    held_here_cost,
    human_bytes,
    job_cost,
    queue_cost,
    warning_level,
)
from disquette.core.messages import Header, Message
from disquette.core.policy import PolicyTable
from disquette.core.queue import PAUSE_IN, PAUSE_OUT, Queue
from disquette.core.scan import BUCKETS, ScanDict
from disquette.core.schedule import Schedule
from disquette.core.spill import EXPIRY_MARGIN_S, Spill

DEFAULT_TTL: Final = 86400
MAX_DEFAULT_RETRY: Final = 300
JOBS_PER_RUN: Final = 10_000
QUEUE_MAX_IDLE: Final = (300_000, 10_000, 2_000)  # ms, by memory warning level
RECLAIM_MAX_MISSES: Final = 10
RECLAIM_MAX_PICKS: Final = 1000
EVICT_BUCKETS_PER_RUN: Final = 512  # queue-table buckets the eviction cron looks at per tick
COMPACT_MIN: Final = 4096  # dedup index entries below which it is never copied
ANNOUNCE_RETRIES: Final = 5  # retry periods after a failure during which queued copies speak up

NOREPL_REACHABLE: Final = replies.error(
    "NOREPL Not enough reachable nodes for the requested replication level"
)
_NOREPL_NO_COPY: Final = (
    "NOREPL Not enough reachable nodes for the requested replication level, since I'm "
    "unable to hold a copy of the message for the following reason: "
)
NOREPL_LEAVING: Final = replies.error(_NOREPL_NO_COPY + "I'm leaving the cluster")
NOREPL_OOM: Final = replies.error(_NOREPL_NO_COPY + "I'm out of memory")
MAXLEN_ERROR: Final = replies.error(
    "MAXLEN Queue is already longer than the specified MAXLEN count"
)
PAUSED_ERROR: Final = replies.error("PAUSED Queue paused in input, try later")
NOJOB_ERROR: Final = replies.error("NOJOB Job not known in the context of this node.")
TOOLATE_ERROR: Final = replies.error(
    "TOOLATE Half of job TTL already elapsed, you are no longer allowed to postpone "
    "the next delivery."
)
DEDUP_PENDING: Final = replies.error(
    "TRYAGAIN A job with this DEDUP key is still being replicated, retry later"
)
RETRY_ZERO_REPLICATE: Final = replies.err(
    "With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)"
)
DELAY_TOO_LONG: Final = replies.err(
    "The specified DELAY is greater than TTL. Job refused since would never be delivered"
)


def check_job_options(repl: int, retry: int, delay: int, ttl: int) -> None:
    """ADDJOB's rules that join its options (0, or -1 for RETRY and DELAY: not given):
    RETRY 0 with more than one copy, a DELAY not shorter than the TTL."""
    if repl > 1 and retry == 0:
        raise DisqueError(RETRY_ZERO_REPLICATE)
    if delay > 0 and delay >= (ttl or DEFAULT_TTL):
        raise DisqueError(DELAY_TOO_LONG)


class Settings(Protocol):
    """The configuration the core reads (the server's Config satisfies it)."""

    maxmemory: int
    maxmemory_policy: str
    hz: int
    cluster_node_timeout: int
    replica_repair: bool
    replica_repair_delay: int
    result_ttl: int


def _drop(node_id: bytes, message: Message) -> None:
    """``Node.send`` without a bus."""


def _no_wakeup(when: int) -> None:
    """``Node.wake_by`` without a shell that runs timers."""


class Bus(Protocol):
    """The cluster bus as the core sees it (the server's TCP bus, or the simulator).

    Messages to one peer within one event-loop iteration may be coalesced into
    one frame; a message to a node without an outgoing link is dropped (the
    protocols above retry: PING, REPLJOB resend, GC backoff, WILLQUEUE).
    """

    def send(self, node_id: bytes, message: Message) -> None:
        """Send on the outgoing link to ``node_id``."""

    def reply(self, link: Any, message: Message) -> None:
        """Send on the inbound connection ``link`` a message came from (PONG)."""

    def connect(self, node_id: bytes, ip: bytes, port: int) -> None:
        """Open (or keep) an outgoing link to the bus of the node at ip:port (its bus port);
        report it with :meth:`Node.link_up` / :meth:`Node.link_down`."""

    def disconnect(self, node_id: bytes) -> None:
        """Close the outgoing link to ``node_id`` (forgotten, renamed, or timed out)."""


class AofSink(Protocol):
    generation: int
    last_size: int
    reader: Callable[[int, int, int], bytes] | None
    retire: Callable[[int], None] | None

    def loadjob(self, job: Job) -> int: ...

    def deljob(self, job_id: bytes) -> None: ...

    def moved(self, job: Job) -> None: ...


class Node:
    def __init__(
        self,
        settings: Settings,
        node_id: bytes,
        clock: Callable[[], int],
        rng: random.Random,
        randbytes: Callable[[int], bytes],
        *,
        port: int = 7711,
        bus: Bus | None = None,
        aof: AofSink | None = None,
        speech: Speech = CURRENT,
    ) -> None:
        self.settings = settings
        self.myself = node_id
        self.myself_only: tuple[bytes, ...] = (node_id,)
        self.ip = b""
        self.port = port
        self.clock = clock
        self.rng = rng
        self.ids = IdGenerator(node_id, randbytes)
        # What this node and its peers speak on the bus (core/dialect.py).
        self.dialect = Dialects(self, speech)
        self.bus = bus  # also binds send (the bus setter)
        self.aof = aof
        self.cluster = Membership(self)
        # Job-level message handlers by type: (node, sender ID, message) -> None.
        self.message_handlers: dict[int, Callable[[Node, bytes, Message], None]] = {}
        self.message_handlers[msg.ADDRESS] = self.cluster.on_address
        # Types whose consecutive messages in a frame are handled together (REPLJOB):
        # (node, sender ID, messages) -> None.
        self.run_handlers: dict[int, Callable[[Node, bytes, Sequence[Message]], None]] = {}
        self.jobs: ScanDict[Job] = ScanDict()
        self.jobs_acked = 0  # registered jobs in state acked (/metrics: jobs by state)
        self.queues: ScanDict[Queue] = ScanDict()
        self.schedule = Schedule()
        self.ready_queues: dict[Queue, None] = {}
        self.blocked_clients: dict[Client, None] = {}
        # Blocked ADDJOB clients: when a replica was last added for their job (ms).
        self.replication_time: dict[Client, int] = {}
        self.used_memory = NODE_OVERHEAD
        self.client_memory = 0  # buffers of connected clients, kept by the shell
        self.leaving = False
        self.loading = False
        self.last_ctime = 0
        self._evict_cursor = 0
        # Ack messages waiting to go, per destination, and when the oldest must (ms, 0:
        # none); see acks.AckBatch.
        self.ack_outbox: dict[bytes, acks.AckBatch] = {}
        self.ack_deadline = 0
        # The shell's timer: process_jobs must run by this absolute ms (an earlier
        # deadline than next_wakeup said when the timer was set).
        self.wake_by: Callable[[int], None] = _no_wakeup
        self.repair = repair.Repair(self)
        # Beyond Disque: queue policies, the jobs by de-duplication key, and counters.
        self.policies = PolicyTable(self)
        self.crons = CronTable(self)  # recurring jobs
        self.acl = AclTable(self)  # users and their permissions
        # The replicated tables (nodes.conf).
        self.tables: tuple[Any, ...] = (self.policies, self.crons, self.acl)
        self.dedup_index: dict[tuple[bytes, bytes], Job] = {}
        # More jobs held with a key already indexed (rare: see index_extra).
        self.dedup_others: dict[tuple[bytes, bytes], list[Job]] = {}
        self.dedup_peak = 0  # the index's largest size seen by cron since it was compacted
        self.dedup_hits = 0
        self.dead_lettered = 0
        self.dropped_by_limits = 0
        self.postponed = 0  # requeues postponed by NACK DELAY or a backoff
        self.dropped_oldest = 0  # jobs dropped by a policy's overflow drop-oldest
        self.outcomes = outcome.Outcomes(self)
        self.deps = dependency.Dependencies(self)
        # Progress logs not confirmed yet: job ID -> {node ID: the log size sent}.
        self.progress_pending: dict[bytes, dict[bytes, int]] = {}
        self.progress_resend_at = 0
        # Flow to disk: jobs spilled past a memory level (off until the shell attaches a store).
        self.spill = Spill(self)
        self.rates = ratelimit.RateLimits(self)  # the queues with rate or concurrency limits
        self.tags = tags.Tags(self)  # jobs delivered under a name (GETJOB TAG)
        for protocol in (
            replication, requeue, acks, federation, repair, policy, dependency, progress, claim,
            backoff, outcome, ratelimit, cron, acl,
        ):  # fmt: skip
            protocol.install(self)

    # ------------------------------------------------------------------
    # Cluster view, from the membership table.

    def cluster_size(self) -> int:
        return self.cluster.cluster_size()

    def reachable_nodes(self) -> list[bytes]:
        return self.cluster.reachable_nodes()

    def linked_nodes(self) -> list[bytes]:
        return self.cluster.linked_nodes()

    def known_nodes(self) -> list[bytes]:
        return self.cluster.known_nodes()

    @property
    def bus(self) -> Bus | None:
        return self._bus

    @bus.setter
    def bus(self, bus: Bus | None) -> None:
        """Attach the bus (see :meth:`bind_send`)."""
        self._bus = bus
        self.bind_send()

    def bind_send(self) -> None:
        """``send(node_id, message)`` becomes the bus's ``send``, bound once (every
        replica, ack and requeue message goes through it), or drops messages while
        there is no bus; while some peer does not speak every feature, it is the
        dialect's check first (core/dialect.py). ``bus_send`` is always the bus's own."""
        bus = self._bus
        self.bus_send: Callable[[bytes, Message], None] = _drop if bus is None else bus.send
        self.send: Callable[[bytes, Message], None] = (
            self.dialect.send_checked if bus is not None and self.dialect.partial else self.bus_send
        )

    def receive(
        self, header: Header, message: Message, link: Any = None, peer_ip: bytes = b""
    ) -> None:
        """One message from the bus (see :meth:`receive_frame`)."""
        self.receive_frame(header, (message,), link, peer_ip)

    def receive_frame(
        self, header: Header, messages: Sequence[Message], link: Any = None, peer_ip: bytes = b""
    ) -> None:
        """The messages of one bus frame: ``link`` is the inbound connection they arrived
        on and ``peer_ip`` the address they came from. Membership messages go to the
        membership; others are ignored unless their sender is a known node (asked once
        per run of them: only a membership message can change the answer). A type with a
        run handler gets its consecutive messages in one call. Messages have the shapes
        :mod:`~disquette.core.messages` gives (the bus shell checks them)."""
        cluster = self.cluster
        handlers = self.message_handlers
        run_handlers = self.run_handlers
        sender = header.sender
        dialect = self.dialect
        if dialect.refused and sender in dialect.refused:
            peer = cluster.nodes.get(sender)
            if peer is not None and not dialect.from_refused(peer, header, messages, link, peer_ip):
                return
        accepted = None
        count = len(messages)
        cluster.messages_received += count
        i = 0
        while i < count:
            message = messages[i]
            i += 1
            kind = message[0]
            if kind <= msg.FAIL:
                cluster.receive(header, message, link, peer_ip)
                accepted = None
                continue
            if kind == msg.VERSION:  # (read while loading too: it is about the link)
                if accepted is None:
                    accepted = cluster.accept(header)
                if accepted:
                    dialect.on_version(self, sender, message)
                continue
            if self.loading:
                continue  # a replica stored now would miss the AOF being loaded; senders retry
            if accepted is None:
                accepted = cluster.accept(header)
            if not accepted:
                continue
            run_handler = run_handlers.get(kind)
            if run_handler is not None:
                start = i - 1
                while i < count and messages[i][0] == kind:
                    i += 1
                run_handler(self, sender, messages[start:i])
                continue
            handler = handlers.get(kind)
            if handler is not None:
                handler(self, sender, message)

    def link_up(self, node_id: bytes) -> None:
        self.cluster.link_up(node_id)

    def link_down(self, node_id: bytes) -> None:
        self.cluster.link_down(node_id)

    def tell_holders(self, job: Job, message: tuple[Any, ...]) -> None:
        """Send ``message`` to every other node that may hold a copy of ``job``."""
        me = self.myself
        for node_id in job.nodes_delivered:
            if node_id != me:
                self.send(node_id, message)

    def known_only(self, nodes: tuple[bytes, ...]) -> tuple[bytes, ...]:
        """The node IDs of a received job that this node knows (others are dropped)."""
        return self.cluster.known_only(nodes)

    def set_delivered(self, job: Job, nodes: tuple[bytes, ...]) -> None:
        """Replace a job's nodes-delivered set, keeping the memory accounting right."""
        if self.jobs.get(job.id) is job:
            old = len(job.nodes_delivered)
            self.used_memory += delivered_cost(len(nodes)) - delivered_cost(old)
        job.nodes_delivered = nodes

    def merge_delivered(self, job: Job, nodes: Iterable[bytes]) -> tuple[bytes, ...]:
        """Add nodes that may hold a copy of ``job`` to its nodes-delivered set (after
        dropping the holders known lost since it was last checked); return the added."""
        self.repair.normalize(job)
        delivered = job.nodes_delivered
        new = [node_id for node_id in nodes if node_id not in delivered]
        if not new:
            return ()
        added = tuple(dict.fromkeys(new))
        self.set_delivered(job, delivered + added)
        if job.extra is not None and job.extra.log:
            progress.new_holders(self, job, added)  # they may not have its log
        return added

    # ------------------------------------------------------------------
    # Memory.

    @property
    def memory_used(self) -> int:
        return self.used_memory + self.client_memory

    def memory_level(self) -> int:
        maxmemory = self.settings.maxmemory
        used = self.used_memory + self.client_memory
        return warning_level(used, maxmemory)

    def memory_high(self) -> bool:
        """Usage above 75 % of maxmemory: the only case where reclaiming may be needed."""
        maxmemory = self.settings.maxmemory
        return not maxmemory or self.used_memory + self.client_memory > maxmemory // 100 * 75

    def check_fits(self, queue_name: bytes, body: bytes) -> None:
        """Beyond Disque: while the dataset is under 75 % of maxmemory, refuse a job
        that cannot fit in what it leaves under 95 % (where deny-OOM commands are
        refused), saying how much it needs and how much is left. Disque takes it, and
        then refuses every later ADDJOB with an OOM that does not say why. The clients'
        buffers, which hold the job itself while it arrives, are not counted: they
        would send it to the OOM or external-replication paths, which do not say why."""
        maxmemory = self.settings.maxmemory
        if not maxmemory or self.used_memory > maxmemory // 100 * 75:
            return  # Disque's rules apply (external replication, reclaim, OOM)
        cost = held_here_cost(queue_name) + bytes_cost(len(body))
        room = maxmemory // 100 * 95 - self.used_memory
        if cost > room:
            raise DisqueError(
                replies.error(
                    f"OOM job cannot fit in memory: it needs {human_bytes(cost)}, "
                    f"maxmemory ({human_bytes(maxmemory)}) leaves {human_bytes(max(room, 0))} "
                    "under its 95 % limit"
                )
            )

    def reclaim_memory(self) -> bool:
        """Disque's freeMemoryIfNeeded: False when usage stays above 95 %."""
        if self.memory_level() < 2:
            return True
        if self.settings.maxmemory_policy == "noeviction":
            return False
        if not len(self.jobs):
            return self.evict_idle_queues(self.clock(), budget=None) > 0 and (
                self.memory_level() < 2
            )
        misses = 0
        for _ in range(RECLAIM_MAX_PICKS):
            job = self._random_job()
            if job is None:
                break
            if job.state == ACKED or (job.retry == 0 and job.flags & DELIVERED):
                self.delete_job(job)
                misses = 0
                if self.memory_level() < 2:
                    return True
            else:
                misses += 1
                if misses > RECLAIM_MAX_MISSES:
                    break
        return self.memory_level() < 2

    def _random_job(self) -> Job | None:
        buckets = self.jobs._buckets
        for _ in range(64):
            bucket = buckets[self.rng.randrange(len(buckets))]
            if bucket:
                return self.rng.choice(list(bucket.values()))
        for bucket in buckets:
            if bucket:
                return next(iter(bucket.values()))
        return None

    # ------------------------------------------------------------------
    # Registry and scheduling.

    def register(self, job: Job, schedule: bool = True, fresh: bool = False) -> bool:
        """Add a job to the registry (and, unless told otherwise, to the scheduler;
        ``fresh``: its ID was just made here, so no spilled job can have it).

        Two hot paths write these steps out for their runs of new jobs and must keep
        in step with them: :meth:`add_jobs` and ``replication.on_repljobs``."""
        if not (self.jobs.add_new(job.id, job) if fresh else self.jobs.add(job.id, job)):
            return False
        job.holders_epoch = self.repair.epoch
        self.used_memory += job_cost(job)
        if job.state == ACKED:
            self.jobs_acked += 1
        if job.extra is not None:
            self.index_extra(job)
        if schedule:
            self.schedule.add(job, self.awake_time(job))
        return True

    def index_extra(self, job: Job) -> None:
        """A registered job with an Extra. With a de-duplication key: findable by it.
        The first job registered with a key is the one found; others with the same key
        (added on nodes that held no copy, then replicated here) wait in
        ``dedup_others`` to take its place when it goes. Waiting for other jobs: its
        dependencies are tracked, and it is never requeued by its timer."""
        extra: Extra = job.extra  # type: ignore[assignment]
        if extra.after:
            job.qtime = 0
            job.flags &= ~BCAST_WILLQUEUE
            self.deps.track(job)
        key = extra.dedup
        if key is not None:
            index_key = (job.queue, key)
            if self.dedup_index.setdefault(index_key, job) is not job:  # type: ignore[arg-type]
                self.dedup_others.setdefault(index_key, []).append(job)  # type: ignore[arg-type]

    def _unindex(self, job: Job, key: bytes) -> None:
        """A job with a de-duplication key is deleted: another job held with that key,
        if any, becomes the one found."""
        index_key = (job.queue, key)
        others = self.dedup_others.get(index_key)  # type: ignore[arg-type]
        if self.dedup_index.get(index_key) is job:  # type: ignore[arg-type]
            if others:
                self.dedup_index[index_key] = others.pop(0)  # type: ignore[index]
            else:
                del self.dedup_index[index_key]  # type: ignore[arg-type]
                if not self.dedup_index:
                    self.dedup_index = {}  # let the emptied table go
        elif others and job in others:
            others.remove(job)
        if others is not None and not others:
            del self.dedup_others[index_key]  # type: ignore[arg-type]

    def delete_job(self, job: Job) -> None:
        """Remove a job from this node only (Disque's unregisterJob + freeJob)."""
        if self.rates.held:
            self.rates.release(job)
        if job.state == QUEUED:
            self._unqueue(job)
        if (job.state == ACTIVE or job.state == QUEUED) and self.aof is not None:
            self.aof.deljob(job.id)
        if self.jobs.pop(job.id) is not None:
            self.used_memory -= job_cost(job)
            if job.state == ACKED:
                self.jobs_acked -= 1
            if job.extra is not None:
                if job.extra.dedup is not None:
                    self._unindex(job, job.extra.dedup)
                if self.progress_pending:
                    self.progress_pending.pop(job.id, None)
            if self.deps.watchers:
                self.deps.watchers.pop(job.id, None)  # nobody is told of it any longer
            if job.extra is not None and job.extra.after:
                self.deps.untrack(job, job.extra.after)  # deleted while waiting
        self.schedule.cancel(job)

    # Beyond Disque: a job's Extra record, changed after the job was registered.

    def extra_of(self, job: Job) -> Extra:
        """The job's Extra, created (and accounted for) when it has none."""
        extra = job.extra
        if extra is None:
            extra = job.extra = Extra()
            if self.jobs.get(job.id) is job:
                self.used_memory += extra_cost(extra)
        return extra

    def extra_size(self, job: Job) -> int:
        """What the job's Extra costs now (call before changing it: extra_changed)."""
        return 0 if job.extra is None else extra_cost(job.extra)

    def extra_changed(self, job: Job, before: int) -> None:
        """The job's Extra changed from costing ``before``: the memory follows."""
        if self.jobs.get(job.id) is job:
            self.used_memory += self.extra_size(job) - before

    def persist(self, job: Job) -> None:
        """A job held here changed beyond Disque's fields: its AOF record is written
        again (DELJOB then LOADJOB: records are facts about presence, core/aof.py)."""
        aof = self.aof
        if aof is not None and (job.state == ACTIVE or job.state == QUEUED):
            aof.deljob(job.id)
            aof.loadjob(job)

    def awake_time(self, job: Job) -> int:
        when = job.etime * 1000 + 1000
        if job.state == ACKED:
            gc_time = job.qtime
            if gc_time and gc_time < when:
                when = gc_time
        elif job.state != WAIT_REPL and job.qtime:
            t = job.qtime - WILLQUEUE_ADVANCE if job.flags & BCAST_WILLQUEUE else job.qtime
            if t < when:
                when = t
        return when

    def reschedule(self, job: Job) -> None:
        self.schedule.add(job, self.awake_time(job))

    def next_wakeup(self) -> int | None:
        """Absolute ms at which :meth:`process_jobs` should next run, if any job or
        ack batch waits."""
        when = self.schedule.next_awake()
        deadline = self.ack_deadline
        if deadline and (when is None or deadline < when):
            return deadline
        return when

    def scan_jobs(
        self, cursor: int, count: int, busyloop: bool, match: Callable[[Job], bool]
    ) -> tuple[int, list[Job]]:
        """JSCAN's walk: the registry's buckets, then the spilled jobs' shards (cursors
        from ``BUCKETS`` on; their jobs are copies read from disk)."""
        jobs: list[Job] = []
        if cursor < BUCKETS:
            cursor, jobs = self.jobs.scan(cursor, count, busyloop, match)
            if cursor or not self.spill.count:
                return cursor, jobs
            if not busyloop:
                return BUCKETS, jobs
            cursor = BUCKETS
        cursor, more = self.spill.scan(cursor - BUCKETS, count, busyloop, match)
        return (cursor + BUCKETS if cursor else 0), jobs + more

    def jitter(self) -> int:
        return int(self.rng.random() * REQUEUE_JITTER) - HALF_JITTER

    def next_ctime(self, now_ms: int) -> int:
        ctime = now_ms * 1_000_000
        if ctime <= self.last_ctime:
            ctime = self.last_ctime + 1
        self.last_ctime = ctime
        return ctime

    # ------------------------------------------------------------------
    # Queues.

    def get_queue(self, name: bytes) -> Queue | None:
        return self.queues.get(name)

    def create_queue(self, name: bytes) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            queue = Queue(name, self.clock())
            self.queues.add(name, queue)
            self.used_memory += queue_cost(name)
            if self.policies.active:
                self.rates.attach(queue)
        return queue

    def destroy_queue(self, queue: Queue) -> None:
        if self.queues.pop(queue.name) is not None:
            self.used_memory -= queue_cost(queue.name)
            if queue.jobs.has_levels:
                self.used_memory -= LEVELS_COST
        self.ready_queues.pop(queue, None)

    def enqueue(
        self,
        job: Job,
        nack: bool = False,
        queue: Queue | None = None,
        now: int = 0,
        delay: int = -1,
    ) -> bool:
        """Put a job in its queue (Disque's enqueueJob); False when the rules refuse.

        ``queue`` and ``now`` may be passed when the caller already has them. Beyond
        Disque, a requeue may be postponed instead (core/backoff.py): by ``delay`` ms
        (NACK DELAY; 0: queued now), else (-1) by the job's backoff.
        """
        if job.state == QUEUED or job.qtime == 0:
            return False
        flags = job.flags
        if job.retry == 0 and flags & DELIVERED:
            return False
        if self.rates.held:
            self.rates.release(job)
        extra = job.extra
        if extra is not None and extra.after_flags & AFTER_FAILED:
            return self.deps.fail(job)
        if not now:
            now = self.clock()
        flag = 0  # a requeue: the counter it adds, told to the other holders
        announce = False
        if nack or (flags & BCAST_QUEUED and not flags & POSTPONED):
            if queue is None:  # its counters see the requeue (also diverted or postponed)
                queue = self.create_queue(job.queue)  # type: ignore[arg-type]
            if nack:
                job.nacks += 1
                queue.nacks += 1
                flag = msg.INCR_NACKS
            else:
                job.additional_deliveries += 1
                queue.additional_deliveries += 1
                flag = msg.INCR_DELIV
            job.flags = flags & ~POSTPONED
            announce = True
            if self.policies.active and deadletter.divert(self, job):
                return True
            if delay < 0:
                delay = backoff.delay_of(self, job) if self.policies.active or extra else 0
            if delay > 0:
                backoff.postpone(self, job, delay, flag, now)
                return True
        elif flags & POSTPONED:  # the end of a postponed requeue: counted already
            job.flags = flags & ~POSTPONED
            announce = True
        else:
            job.flags = flags | BCAST_QUEUED
        job.state = QUEUED
        if job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = (
                now + job.retry * 1000 + int(self.rng.random() * REQUEUE_JITTER) - HALF_JITTER
            )
        else:
            job.qtime = 0
        if announce and job.nodes_delivered is not self.myself_only:
            self.tell_holders(job, (msg.QUEUED, job.id, flag))
        if queue is None:
            queue = self.queues.get(job.queue)  # type: ignore[arg-type]
            if queue is None:
                queue = self.create_queue(job.queue)  # type: ignore[arg-type]
        if job.flags >> PRIORITY_SHIFT and not queue.jobs.has_levels:
            self.used_memory += LEVELS_COST
        queue.jobs.add(job)
        self._queued(queue, 1, now)
        self.schedule.add(job, self.awake_time(job))
        return True

    def _unqueue(self, job: Job) -> None:
        queue = self.queues.get(job.queue)  # type: ignore[arg-type]
        if queue is not None:
            queue.jobs.remove(job)

    def dequeue(self, job: Job) -> bool:
        """Take a queued job out of its queue; it becomes ``active``."""
        if job.state != QUEUED:
            return False
        self._unqueue(job)
        job.state = ACTIVE
        return True

    def fetch(
        self, queue: Queue, now_ms: int, allow: Callable[[bytes], bool] | None = None
    ) -> Job | None:
        """Hand the queue's next job to a consumer (GETJOB, blocked client, NEEDJOBS):
        its oldest, or its next group's in turn (``allow``: skipping the groups it
        refuses, core/ratelimit.py); None when the queue turns out empty (its jobs on
        disk had damaged records) or ``allow`` refused every group."""
        if queue.spilled is not None:
            self.spill.ready_head(queue)
            if not queue.jobs:
                return None
        if allow is None:
            job = queue.jobs.pop_first()
        else:
            found = queue.jobs.pop_allowed(allow)
            if found is None:
                return None
            job = found
        job.state = ACTIVE
        job.flags |= DELIVERED
        queue.jobs_out += 1
        queue.atime = now_ms
        return job

    def fetch_for_client(self, queue: Queue, now_ms: int) -> Job | None:
        """:meth:`fetch` for a GETJOB (or a client blocked in one): through the queue's
        group limits when its policy sets some (core/ratelimit.py)."""
        groups = queue.group_limits
        if groups is None:
            return self.fetch(queue, now_ms)
        return self.rates.take(queue, groups, now_ms)

    # ------------------------------------------------------------------
    # ADDJOB.

    def add_job(
        self,
        client: Client | None,
        queue_name: bytes,
        body: bytes,
        timeout_ms: int,
        *,
        repl: int = 0,
        delay: int = -1,
        retry: int = -1,
        ttl: int = 0,
        maxlen: int = 0,
        async_: bool = False,
        priority: int = -1,
        dedup: bytes | None = None,
        extra: Extra | None = None,
        after: list[bytes] | None = None,
        release: bool = False,
        retry_backoff: tuple[int, int, int] | None = None,
        group: bytes | None = None,
    ) -> Job | None:
        """Create a job; return it, or None when the client waits for replication.

        Beyond Disque: the options not given (0, or -1 for DELAY, RETRY and PRIORITY)
        come from the queue's policy when it sets them; with a de-duplication key
        (``dedup``, or ``extra.dedup`` for a dead letter) the job of this queue
        already holding it here is returned instead of a new one. With ``after`` (job
        IDs), the job waits for them to be acknowledged (core/dependency.py;
        ``release``: IFGONE release). ``group``: its fair-share group (core/joblist.py)."""
        if extra is None and (dedup is not None or retry_backoff is not None or group):
            extra = Extra(dedup)
        if retry_backoff is not None:
            extra.backoff = retry_backoff  # type: ignore[union-attr]
        if group is not None:
            extra.group = group  # type: ignore[union-attr]
        if extra is not None and extra.dedup is not None:
            found = self.dedup_index.get((queue_name, extra.dedup))
            if found is not None:
                if found.state == WAIT_REPL:
                    raise DisqueError(DEDUP_PENDING)
                self.dedup_hits += 1
                return found
        if self.policies.active:
            repl, delay, retry, ttl, maxlen, priority = self.policy_defaults(
                queue_name, repl, delay, retry, ttl, maxlen, priority
            )
        if delay < 0:
            delay = 0
        ttl, retry, repl = self.job_defaults(ttl, retry, repl)
        if after:
            pending, gone = self.deps.prefilter(after)
            if pending or (gone and not release):
                extra = dependency.waiting_extra(pending, release, extra)
                if not pending:
                    extra.after_flags |= AFTER_FAILED
        if not self.leaving:
            self.check_fits(queue_name, body)
        extrepl = self.leaving or self.memory_high()
        additional = repl if extrepl else repl - 1
        if additional:
            reachable = len(self.reachable_nodes())
            if additional > reachable:
                if extrepl and additional - 1 == reachable:
                    raise DisqueError(NOREPL_LEAVING if self.leaving else NOREPL_OOM)
                raise DisqueError(NOREPL_REACHABLE)
        queue = self.queues.get(queue_name)
        if queue is not None:
            if maxlen and len(queue) >= maxlen and not self.drop_oldest(queue, maxlen):
                raise DisqueError(MAXLEN_ERROR)
            if queue.paused & PAUSE_IN:
                raise DisqueError(PAUSED_ERROR)
        now = self.clock()
        job = Job(self.ids.new(ttl, retry), queue_name, body, WAIT_REPL, repl,
                  self.next_ctime(now), now // 1000 + ttl, delay, retry)  # fmt: skip
        job.qtime = now + (delay or retry) * 1000
        if priority > 0:
            job.flags = priority << PRIORITY_SHIFT
        if extra is not None:
            job.extra = extra
        if not extrepl:
            job.nodes_delivered = self.myself_only
        immediate = async_ or (repl == 1 and not extrepl)
        if not (async_ and extrepl):
            # An immediate job is scheduled when it is queued (or delayed) below.
            while not self.register(job, schedule=not immediate, fresh=True):
                job.id = self.ids.new(ttl, retry)  # an ID collision: practically never

        if immediate:
            if not extrepl:
                self.job_is_ready(job, queue, now)
            if additional:
                replication.replicate_now(self, job, additional, extrepl)
            return job
        # Synchronous replication: the client waits (cluster operation).
        assert client is not None, "only an ADDJOB from a client waits for its copies"
        job.nodes_confirmed = NO_NODES if extrepl else self.myself_only
        job.waiter = client
        client.blocked = BLOCK_ADDJOB
        client.block_job = job
        client.block_deadline = now + timeout_ms if timeout_ms else 0
        self.blocked_clients[client] = None
        replication.start_sync(self, client, job, additional)
        return None

    def drop_oldest(self, queue: Queue, maxlen: int) -> bool:
        """A full queue whose policy says ``overflow drop-oldest``: acknowledge the jobs
        at its head (its copies go everywhere, as after ACKJOB) until one more fits;
        False when the policy says otherwise (MAXLEN refuses the new job)."""
        rules = self.policies.for_queue(queue.name) if self.policies.active else None
        if rules is None or rules.options.get("overflow") != b"drop-oldest":
            return False
        now = self.clock()
        while len(queue) >= maxlen:
            job = self.fetch(queue, now)
            if job is None:
                break
            queue.jobs_out -= 1  # dropped, not delivered
            self.ack_jobs((job.id,))
            queue.dropped_oldest += 1
            self.dropped_oldest += 1
        return True

    def policy_defaults(
        self,
        queue_name: bytes,
        repl: int,
        delay: int,
        retry: int,
        ttl: int,
        maxlen: int,
        priority: int,
    ) -> tuple[int, int, int, int, int, int]:
        """ADDJOB's options with those it did not give (0, or -1 for DELAY, RETRY and
        PRIORITY) taken from the queue's policy, checked as ADDJOB checks its own."""
        rules = self.policies.for_queue(queue_name)
        if rules is None:
            return repl, delay, retry, ttl, maxlen, priority
        repl = repl or rules.get("replicate")
        ttl = ttl or rules.get("ttl")
        maxlen = maxlen or rules.get("maxlen")
        if retry < 0 and "retry" in rules.options:
            retry = rules.get("retry")
        if delay < 0:
            delay = rules.get("delay")
        if priority < 0:
            priority = rules.get("priority")
        check_job_options(repl, retry, delay, ttl)
        return repl, delay, retry, ttl, maxlen, priority

    def job_defaults(self, ttl: int, retry: int, repl: int) -> tuple[int, int, int]:
        """ADDJOB's TTL, RETRY and REPLICATE with Disque's defaults for those not given
        (0, -1 and 0): one day, a tenth of the TTL up to five minutes, up to 3 copies."""
        if not ttl:
            ttl = DEFAULT_TTL
        if retry < 0:
            retry = min(ttl // 10, MAX_DEFAULT_RETRY) or 1
        if not repl:
            repl = min(3, self.cluster.cluster_size())
        return ttl, retry, repl

    def add_jobs(
        self,
        items: Iterable[tuple[bytes, bytes, bytes | None]],
        repl: int,
        retry: int,
        ttl: int,
        maxlen: int,
        priority: int = -1,
        group: bytes | None = None,
    ) -> list[Job]:
        """A run of ADDJOBs with the same options (``group``: ADDJOB GROUP's), (queue,
        body, de-duplication key or None) each, as far as they are REPLICATE 1 jobs
        without DELAY queued here at once: the jobs of the leading requests that are
        (maybe none), which is all of them in the common case of a pipelining
        producer; a request whose key this node holds gets that job. The requests
        after them go through :meth:`add_job`, which applies the rule that stopped the
        run (memory, MAXLEN, a paused queue, a policy's options); jobs made either way
        are the same."""
        maxmemory = self.settings.maxmemory
        if self.leaving or not maxmemory:
            return []
        given = (repl, retry, ttl, maxlen, priority)
        base = self._run_options(None, *given)
        if base is None:
            return []
        # What register() and enqueue() do for a job is written out here for new
        # jobs (the first queueing sets BCAST_QUEUED and, with a retry,
        # BCAST_WILLQUEUE and a jittered requeue time; the awake time is the
        # earlier of expiry and WILLQUEUE), and the jobs of a queue go in together.
        memory_limit = maxmemory // 100 * 75 - self.client_memory
        oom_limit = maxmemory // 100 * 95  # (check_fits: the dataset's room)
        used = self.used_memory
        now = self.clock()
        random = self.rng.random
        ids = self.ids
        registry = self.jobs  # (method calls on it, not bound methods: native calls)
        epoch = self.repair.epoch
        myself_only = self.myself_only
        policies = self.policies
        dedup_index = self.dedup_index
        ctime = now * 1_000_000
        last_ctime = self.last_ctime
        jobs: list[Job] = []
        replied: list[Job] | None = None  # jobs and de-duplicated ones, once there are some
        kept: list[Job] = []  # the jobs kept in memory
        first = 0  # kept[first:] are for ``queue``, not in it yet
        queue: Queue | None = None
        # Past flow to disk's level, a queue's new jobs behind its head window go
        # straight to the spill log, never registered (core/spill.py: Spill.arrive).
        # (With the AOF on, they are spilled to it as their LOADJOB is written.)
        spill = self.spill
        level = spill.arrival_level() if self.aof is None else 0  # (0: nothing may spill)
        spill_at = max(level - self.client_memory, 1) if level else 0
        window = spill.window
        arrived: list[Job] = []  # jobs of ``queue`` going to the spill log
        options = base
        cost = 0
        qtime = 0
        ttl, retry, maxlen, flags = base
        etime = now // 1000 + ttl
        expire = etime * 1000 + 1000
        requeue = now + retry * 1000 - HALF_JITTER
        awake = expire
        for queue_name, body, key in items:
            if used > memory_limit:
                break
            if queue is None or queue.name != queue_name:
                if first < len(kept):
                    self.used_memory = used  # (the first prioritized job charges levels)
                    self._queue_batch(queue, kept[first:], now, flags)  # type: ignore[arg-type]
                    used = self.used_memory
                    first = len(kept)
                if arrived:
                    self._arrive(queue, arrived, now)  # type: ignore[arg-type]
                    arrived = []
                run_options = base
                if policies.active and policies.for_queue(queue_name) is not None:
                    queue_options = self._run_options(queue_name, *given)
                    if queue_options is None:
                        break  # the policy's options make it an add_job
                    run_options = queue_options
                if run_options is not options:
                    options = run_options
                    ttl, retry, maxlen, flags = options
                    etime = now // 1000 + ttl
                    expire = etime * 1000 + 1000
                    requeue = now + retry * 1000 - HALF_JITTER
                    awake = expire
                queue = self.queues.get(queue_name)
                if queue is None:
                    self.used_memory = used
                    queue = self.create_queue(queue_name)
                    used = self.used_memory
                elif queue.paused & PAUSE_IN:
                    break
                cost = held_here_cost(queue_name)
            index_key: tuple[bytes, bytes] | None = None
            if key is not None:
                index_key = (queue_name, key)
                found = dedup_index.get(index_key)
                if found is not None:
                    if found.state == WAIT_REPL:
                        break  # add_job answers -TRYAGAIN
                    if replied is None:
                        replied = jobs[:]
                    replied.append(found)
                    self.dedup_hits += 1
                    continue
            if maxlen and len(queue) + len(kept) - first + len(arrived) >= maxlen:
                break
            if used + cost + bytes_cost(len(body)) > oom_limit:
                break  # add_job refuses it
            if ctime <= last_ctime:  # next_ctime(), per job of the run
                ctime = last_ctime + 1
            last_ctime = ctime
            job_id = ids.new(ttl, retry)
            if retry:
                qtime = requeue + int(random() * REQUEUE_JITTER)
                awake = qtime - WILLQUEUE_ADVANCE
                if awake > expire:
                    awake = expire
            job = Job(job_id, queue_name, body, QUEUED, 1, ctime, etime, 0, retry,
                      qtime, flags, myself_only, epoch)  # fmt: skip
            size = cost + bytes_cost(len(body))
            if (
                spill_at
                and key is None
                and group is None
                and used + size > spill_at
                and len(queue.jobs) + len(kept) - first >= window
                and ttl > EXPIRY_MARGIN_S
            ):
                arrived.append(job)
                jobs.append(job)
                if replied is not None:
                    replied.append(job)
                continue
            if key is not None or group is not None:
                extra = job.extra = Extra(key)
                extra.group = group
                size += extra_cost(extra)
            # (add_new: fresh IDs, so no job on disk can have one)
            while not registry.add_new(job.id, job):
                job.id = ids.new(ttl, retry)  # an ID collision: practically never
            job.awake = awake
            used += size
            if index_key is not None:
                dedup_index[index_key] = job
            jobs.append(job)
            kept.append(job)
            if replied is not None:
                replied.append(job)
        self.last_ctime = last_ctime
        self.used_memory = used
        self.schedule.add_all(kept)
        if first < len(kept):
            self._queue_batch(queue, kept[first:] if first else kept, now, flags)  # type: ignore[arg-type]
        if arrived:
            self._arrive(queue, arrived, now)  # type: ignore[arg-type]
        aof = self.aof
        if aof is not None:
            journal = self.used_memory > spill.threshold > 0
            for job in jobs:
                at = aof.loadjob(job)
                if journal and at >= 0:
                    spill.journalled(job, at, aof.last_size)
        return jobs if replied is None else replied

    def _run_options(
        self,
        queue_name: bytes | None,
        repl: int,
        retry: int,
        ttl: int,
        maxlen: int,
        priority: int,
    ) -> tuple[int, int, int, int] | None:
        """(ttl, retry, maxlen, flags) of the jobs :meth:`add_jobs` makes for a queue with
        these ADDJOB options (and its policy's, for a named queue), or None when they
        are not for it (not REPLICATE 1, a DELAY, or a rule broken)."""
        if queue_name is not None:
            try:
                repl, delay, retry, ttl, maxlen, priority = self.policy_defaults(
                    queue_name, repl, -1, retry, ttl, maxlen, priority
                )
            except DisqueError:
                return None
            if delay > 0:
                return None
        ttl, retry, repl = self.job_defaults(ttl, retry, repl)
        if repl != 1:
            return None
        flags = BCAST_QUEUED | BCAST_WILLQUEUE if retry else BCAST_QUEUED
        if priority > 0:
            flags |= priority << PRIORITY_SHIFT
        return ttl, retry, maxlen, flags

    def _arrive(self, queue: Queue, jobs: list[Job], now: int) -> None:
        """New queued jobs of ``queue`` that go straight to the spill log."""
        self.spill.arrive(queue, jobs)
        self._queued(queue, len(jobs), now)

    def _queue_batch(self, queue: Queue, jobs: list[Job], now: int, flags: int) -> None:
        if flags >> PRIORITY_SHIFT and not queue.jobs.has_levels:
            self.used_memory += LEVELS_COST
        queue.jobs.extend(jobs, flags >> PRIORITY_SHIFT)
        self._queued(queue, len(jobs), now)

    def _queued(self, queue: Queue, count: int, now: int) -> None:
        """``count`` jobs just went into ``queue``: its counters, and its blocked
        consumers to serve."""
        queue.atime = now
        queue.jobs_in += count
        if queue.blocked and not queue.paused & PAUSE_OUT:
            self.ready_queues[queue] = None

    def job_is_ready(self, job: Job, queue: Queue | None = None, now: int = 0) -> None:
        """A job with its local copy is complete: queue it or wait for its delay."""
        job.state = ACTIVE
        if job.delay == 0:
            self.enqueue(job, False, queue, now)
        else:
            self.reschedule(job)
        aof = self.aof
        if aof is not None:
            at = aof.loadjob(job)
            if at >= 0 and self.used_memory > self.spill.threshold > 0:
                self.spill.journalled(job, at, aof.last_size)

    # ------------------------------------------------------------------
    # GETJOB and blocked consumers.

    def get_jobs(self, queue_names: list[bytes], count: int, withclaim: bool = False) -> list[Job]:
        """Fetch up to ``count`` jobs in passes over the queues, one per queue per pass
        (``withclaim``: each with its next claim number, core/claim.py)."""
        now = self.clock()
        jobs: list[Job] = []
        queues = self.queues
        self.spill.asked = count  # (read-ahead: the head its consumers take at once)
        while True:
            before = len(jobs)
            for name in queue_names:
                queue = queues.get(name)
                if queue is None or not len(queue) or queue.paused & PAUSE_OUT:
                    if queue is None:
                        queue = self.create_queue(name)
                    self.need_jobs(queue)
                    continue
                limit = queue.limit
                if limit is not None and not self.rates.allow(limit, now):
                    continue  # at its limit here (core/ratelimit.py): served as if empty
                job = self.fetch_for_client(queue, now)
                if job is None:
                    continue
                if limit is not None:
                    self.rates.delivered(limit, job)
                if withclaim or (job.extra is not None and job.extra.claim):
                    claim.deliver(self, job)
                jobs.append(job)
                left = len(queue)
                if left == queue.refill_at or not left:
                    self.need_jobs(queue, reached_zero=True)
                if len(jobs) == count:
                    self.spill.asked = 0
                    return jobs
            if len(jobs) == before:
                self.spill.asked = 0
                return jobs

    def need_jobs(self, queue: Queue, reached_zero: bool = False) -> None:
        """Ask other nodes for jobs for this queue (:func:`federation.need_jobs`):
        clients wait on it, or (``reached_zero``) a fetch just brought it down to its
        ``refill_at`` mark or to zero."""
        if reached_zero and not queue.import_cur_start:
            return  # a queue that never imported has no stream to keep flowing
        federation.need_jobs(self, queue, reached_zero)

    def block_for_jobs(
        self, client: Client, queue_names: list[bytes], timeout_ms: int, shape: int
    ) -> None:
        """Block a GETJOB; ``shape`` is how its jobs are shown (replies.WITH_COUNTERS,
        replies.WITH_CLAIM)."""
        queues: list[Queue] = []
        for name in dict.fromkeys(queue_names):
            queue = self.create_queue(name)
            queue.blocked[client] = None
            queues.append(queue)
        client.blocked = BLOCK_GETJOB
        client.block_queues = queues
        client.block_shape = shape
        client.block_deadline = self.clock() + timeout_ms if timeout_ms else 0
        self.blocked_clients[client] = None

    def unblock(self, client: Client) -> None:
        """Forget a client's blocking state (it has been answered, or is gone)."""
        if client.blocked == BLOCK_GETJOB:
            now = self.clock()
            for queue in client.block_queues:
                queue.blocked.pop(client, None)
                if not queue.blocked:
                    self._maybe_evict(queue, now, QUEUE_MAX_IDLE[0])
            client.block_queues = []
        elif client.blocked == BLOCK_ADDJOB:
            job = client.block_job
            if job is not None and job.waiter is client:
                job.waiter = None
            client.block_job = None
            self.replication_time.pop(client, None)
        elif client.blocked == BLOCK_WAITJOB:
            self.deps.forget_client(client)
            client.block_job = None
        client.blocked = BLOCK_NONE
        self.blocked_clients.pop(client, None)

    def wake(self, client: Client, response: bytes) -> None:
        self.unblock(client)
        client.deliver(response)

    def serve_blocked_clients(self) -> None:
        """Give jobs to clients blocked on queues that received some (Disque's
        handleClientsBlockedOnQueues), after every command and timer run."""
        while self.ready_queues:
            ready = self.ready_queues
            self.ready_queues = {}
            now = self.clock()
            for queue in ready:
                limit = queue.limit
                while queue.blocked and len(queue) and not queue.paused & PAUSE_OUT:
                    if limit is not None and not self.rates.allow(limit, now):
                        break  # served again when a token or a slot frees up
                    client = next(iter(queue.blocked))
                    if client.gone():
                        self.unblock(client)  # (the shell forgot it already)
                        continue
                    job = self.fetch_for_client(queue, now)
                    if job is None:
                        break
                    if limit is not None:
                        self.rates.delivered(limit, job)
                    shape = client.block_shape
                    if shape & replies.WITH_CLAIM or (job.extra is not None and job.extra.claim):
                        claim.deliver(self, job)
                    self.wake(client, replies.job_entries([job], shape))
                    left = len(queue)
                    if left == queue.refill_at or not left:
                        self.need_jobs(queue, reached_zero=True)

    def client_gone(self, client: Client) -> None:
        """A blocked client disconnected: forget it; an unreplicated job is dropped."""
        job = client.block_job if client.blocked == BLOCK_ADDJOB else None
        self.unblock(client)
        if job is not None and job.state == WAIT_REPL:
            self._abandon_replication(job)

    def _abandon_replication(self, job: Job) -> None:
        """Best-effort cleanup of a job whose synchronous replication failed."""
        acks.deljob_holders(self, job)
        self.delete_job(job)

    def _fail_addjob(self, job: Job, response: bytes) -> None:
        client = job.waiter
        if client is not None:
            self.wake(client, response)
        if job.state == WAIT_REPL:
            self._abandon_replication(job)

    # ------------------------------------------------------------------
    # Acknowledgements.

    def ack_jobs(self, job_ids: Iterable[bytes]) -> int:
        """ACKJOB: acknowledge the known jobs (dummy acks for unknown retried ones
        while in a cluster and not leaving) and start collecting them at once."""
        count = 0
        for jid in job_ids:
            job = self.jobs.get(jid)
            if job is None:
                if self.cluster_size() > 1 and not self.leaving and is_at_least_once(jid):
                    job = acks.dummy_ack(self, jid)
                else:
                    continue
            elif job.state != ACKED:
                self.acknowledge(job, schedule=False)  # the GC attempt schedules it
                count += 1
            acks.gc_attempt(self, job)
        return count

    def flush_acks(self) -> None:
        """Send the ack batches now (a graceful shutdown)."""
        acks.flush_all(self)

    def acknowledge(self, job: Job, schedule: bool = True) -> None:
        """Mark a registered job not acknowledged yet acknowledged (ACKJOB, SETACK): out
        of its queue, never requeued, its GC to be attempted by the scheduler. An ADDJOB
        still waiting for its copies gets the ID (a copy was delivered: as when a SETACK
        confirms it, core/acks.py), not a job deleted under it at its deadline."""
        if job.state == QUEUED:
            self._unqueue(job)
        else:
            if job.waiter is not None:
                self.wake(job.waiter, replies.job_id(job))
            if self.rates.held:
                self.rates.release(job)
        was_live = job.state == ACTIVE or job.state == QUEUED
        job.state = ACKED
        self.jobs_acked += 1
        if self.deps.watchers:
            self.deps.acked(job.id)
        self.used_memory -= ACKED_SAVING  # see job_cost
        job.nodes_confirmed = None
        if was_live and self.aof is not None:
            self.aof.deljob(job.id)
        if schedule:
            job.qtime = acks.next_gc_time(self, job)
            self.reschedule(job)

    def fast_ack(self, job_ids: Iterable[bytes]) -> int:
        count = 0
        jobs = self.jobs
        myself_only = self.myself_only
        for jid in job_ids:
            job = jobs.get(jid)
            if job is None:
                for node_id in self.linked_nodes():
                    acks.send_deljob(self, node_id, jid)
                continue
            if job.nodes_delivered is not myself_only:  # (a job held here only: nobody)
                acks.deljob_holders(self, job)
            if self.deps.watchers:
                self.deps.acked(jid)
            self.delete_answering_waiter(job)
            count += 1
        return count

    def delete_answering_waiter(self, job: Job) -> None:
        """Delete a job here; an ADDJOB still waiting for it gets -NOREPL (FASTACK,
        the DELJOB message)."""
        if job.state == WAIT_REPL and job.waiter is not None:
            self.wake(job.waiter, replies.NOREPL_REMOVED)
        self.delete_job(job)

    # ------------------------------------------------------------------
    # WORKING, NACK, ENQUEUE, DEQUEUE, DELJOB.

    def working(self, job_id: bytes, text: bytes | None = None) -> int:
        """WORKING: postpone the job's requeue; beyond Disque, ``text`` goes to its
        progress log (core/progress.py)."""
        job = self.jobs.get(job_id)
        if job is None:
            raise DisqueError(NOJOB_ERROR)
        if text is not None:
            progress.check_text(text)
        now = self.clock()
        created_ms = job.ctime // 1_000_000
        lifetime = job.etime * 1000 - created_ms
        if lifetime > 0 and now - created_ms > lifetime / 2:
            raise DisqueError(TOOLATE_ERROR)
        self.dequeue(job)
        job.flags = (job.flags | BCAST_WILLQUEUE) & ~POSTPONED
        if job.retry and job.qtime:
            job.qtime = now + job.retry * 1000 + self.jitter()
            self.reschedule(job)
        self.tell_holders(job, (msg.WORKING, job.id))
        if text is not None:
            progress.append(self, job, text)
        return job.retry

    def requeue_jobs(self, job_ids: Iterable[bytes], nack: bool, delay: int = -1) -> int:
        """NACK (``nack=True``, maybe postponed by ``delay`` ms: -1 for the job's backoff)
        and ENQUEUE (at once): queue again the jobs that are active. ENQUEUE also
        releases a job waiting for others (core/dependency.py)."""
        count = 0
        for jid in job_ids:
            job = self.jobs.get(jid)
            if job is None or job.state != ACTIVE:
                continue
            if job.waiting:
                if nack:
                    continue
                self.deps.cancel(job)
                self.deps.release(job, now_here=True)
                count += 1
            elif self.enqueue(job, nack=nack, delay=delay if nack else 0):
                count += 1
        return count

    def dequeue_jobs(self, job_ids: Iterable[bytes]) -> int:
        count = 0
        for jid in job_ids:
            job = self.jobs.get(jid)
            if job is not None and self.dequeue(job):
                count += 1
        return count

    def delete_jobs(self, job_ids: Iterable[bytes]) -> int:
        count = 0
        for jid in job_ids:
            job = self.jobs.get(jid)
            if job is None:
                continue
            if job.state == WAIT_REPL:
                self._fail_addjob(job, replies.NOREPL_REMOVED)
            else:
                if job.state != ACKED:
                    self.deps.vanished(jid)
                self.delete_job(job)
            count += 1
        return count

    # ------------------------------------------------------------------
    # PAUSE.

    def pause(self, name: bytes, flags: int | None, bcast: bool) -> int:
        """Set a queue's pause flags (None = leave them); return the resulting flags."""
        queue = self.queues.get(name)
        if flags is not None:
            if queue is None and flags:
                queue = self.create_queue(name)
            if queue is not None:
                was_out = queue.paused & PAUSE_OUT
                queue.paused = flags
                if was_out and not flags & PAUSE_OUT and queue.blocked:
                    self.ready_queues[queue] = None
        result = queue.paused if queue is not None else 0
        if bcast:
            for node_id in self.linked_nodes():
                self.send(node_id, (msg.PAUSE, name, result))
        return result

    # ------------------------------------------------------------------
    # Timers.

    def process_jobs(self) -> None:
        """Run every job whose awake time has come (Disque's processJobs), and send
        the ack batches whose delay is over."""
        now = self.clock()
        if self.ack_deadline and self.ack_deadline <= now:
            acks.flush_all(self)
        now_s = now // 1000
        for job in self.schedule.due(now, JOBS_PER_RUN):
            if self.jobs.get(job.id) is not job:
                continue
            state = job.state
            if job.etime <= now_s:
                self._expire(job)
                continue
            if state in (ACTIVE, QUEUED):
                if job.flags & BCAST_WILLQUEUE and job.qtime - WILLQUEUE_ADVANCE <= now:
                    if state == ACTIVE and len(job.nodes_delivered) > 1:
                        self.tell_holders(job, (msg.WILLQUEUE, job.id))
                        answered_by = now + self.cluster.answer_time()
                        if job.qtime < answered_by:
                            # Late timers (a busy node) or a slow bus: the other holders
                            # still get the time to answer before this copy is queued.
                            job.qtime = answered_by
                    job.flags &= ~BCAST_WILLQUEUE
                if state == ACTIVE and job.qtime and job.qtime <= now:
                    queue = self.queues.get(job.queue)  # type: ignore[arg-type]
                    if job.retry and queue is not None and queue.paused & PAUSE_IN:
                        job.qtime = now + job.retry * 1000 + self.jitter()
                    elif self.enqueue(job):
                        continue  # scheduled by the enqueue
                elif state == QUEUED and job.qtime and job.qtime <= now and job.retry:
                    if now - self.cluster.disturbed_at < ANNOUNCE_RETRIES * job.retry * 1000:
                        # Still queued a retry period on, not long after a failure: say
                        # so, in case a copy elsewhere is queued too (requeue.learn_holder).
                        self.tell_holders(job, (msg.QUEUED, job.id, 0))
                    job.flags |= BCAST_WILLQUEUE
                    job.qtime = now + job.retry * 1000 + self.jitter()
            elif state == ACKED:
                acks.gc_attempt(self, job)  # schedules the next attempt, or deletes it
                continue
            self.reschedule(job)

    def _expire(self, job: Job) -> None:
        if job.state == WAIT_REPL:
            self._fail_addjob(job, replies.NOREPL_REMOVED)
        else:
            if job.state != ACKED:
                self.deps.vanished(job.id)
            self.delete_job(job)

    def cron(self) -> None:
        """The per-tick work at ``hz``: blocked clients (deadlines, -LEAVING, one more
        replica for a pending ADDJOB, NEEDJOBS for a waiting GETJOB) and idle queues."""
        now = self.clock()
        for client in list(self.blocked_clients):
            if client.block_deadline and client.block_deadline <= now:
                if client.blocked != BLOCK_ADDJOB:  # GETJOB, WAITJOB
                    self.wake(client, replies.NULL_ARRAY)
                else:
                    job = client.block_job
                    if job is not None:
                        self._fail_addjob(job, replies.NOREPL_TIMEOUT)
                    else:
                        self.wake(client, replies.NOREPL_TIMEOUT)
            elif client.blocked == BLOCK_WAITJOB:
                continue  # answered by its wait (core/outcome.py), leaving or not
            elif self.leaving:
                job = client.block_job if client.blocked == BLOCK_ADDJOB else None
                if job is not None:
                    self._fail_addjob(job, replies.LEAVING)
                else:
                    self.wake(client, replies.LEAVING)
            elif client.blocked == BLOCK_GETJOB:
                for queue in client.block_queues:
                    if queue.limit is None or not len(queue):  # (not for a throttled one)
                        self.need_jobs(queue)
            else:
                replication.cron(self, client, now)
        self.evict_idle_queues(now)
        self.dialect.cron(now)
        self.repair.cron(now)
        self.policies.cron(now)
        self.rates.cron(now)
        self.crons.cron(now)
        self.acl.cron(now)
        self.crons.tick_cron(now)
        self.deps.cron(now)
        self.outcomes.cron(now)
        progress.cron(self, now)
        self.tags.cron(now)
        self._compact_dedup_index()
        if self.spill.store is not None:
            self.spill.cron(now)

    def _compact_dedup_index(self) -> None:
        """Copy the de-duplication index once it holds under a quarter of its peak: a
        dict keeps the table of its largest size, and keys come and go in bulk."""
        size = len(self.dedup_index)
        if size > self.dedup_peak:
            self.dedup_peak = size
        elif self.dedup_peak > COMPACT_MIN and size * 4 < self.dedup_peak:
            self.dedup_index = dict(self.dedup_index)
            self.dedup_peak = size

    def evict_idle_queues(self, now_ms: int, budget: int | None = 200) -> int:
        """Destroy idle, empty, unwatched, unpaused queues; a slice of them per call."""
        max_idle = QUEUE_MAX_IDLE[min(self.memory_level(), 2)]
        buckets = self.queues._buckets
        size = len(buckets)
        span = size if budget is None else min(size, EVICT_BUCKETS_PER_RUN)
        cursor = self._evict_cursor
        window = buckets[cursor : cursor + span]
        if len(window) < span:
            window += buckets[: span - len(window)]
        evicted = visited = 0
        for bucket in filter(None, window):  # the non-empty buckets, skipped at C speed
            for queue in list(bucket.values()):
                visited += 1
                evicted += self._maybe_evict(queue, now_ms, max_idle)
            if budget is not None and visited >= budget:
                span = window.index(bucket) + 1  # resume after it next time
                break
        self._evict_cursor = (cursor + span) % size
        return evicted

    def _maybe_evict(self, queue: Queue, now_ms: int, max_idle: int) -> int:
        if (
            not len(queue)
            and not queue.blocked
            and not queue.paused
            and now_ms - queue.atime >= max_idle
        ):
            self.destroy_queue(queue)
            return 1
        return 0

    # ------------------------------------------------------------------
    # DEBUG FLUSHALL and CLUSTER RESET.

    def flush_all(self) -> None:
        for job in list(self.jobs.values()):
            if job.state == WAIT_REPL:
                self._fail_addjob(job, replies.NOREPL_REMOVED)
            elif self.jobs.get(job.id) is job:
                self.delete_job(job)
        for client in list(self.blocked_clients):
            if client.blocked != BLOCK_ADDJOB:  # GETJOB, WAITJOB
                self.wake(client, replies.NULL_ARRAY)
        self.queues.clear()
        self.ready_queues.clear()
        self.schedule.clear()
        self.jobs.clear()
        self.jobs_acked = 0
        self.dedup_index.clear()
        self.dedup_others.clear()
        self.deps.waits.clear()
        self.deps.watchers.clear()
        self.progress_pending.clear()
        self.outcomes.clear()
        self.spill.clear()
        self.rates = ratelimit.RateLimits(self)
        self.used_memory = NODE_OVERHEAD
        self.repair.data_lost()

    # ------------------------------------------------------------------
    # AOF loading (reference 12.5; the records themselves: core/aof.py).

    def load_job(self, job: Job, enqueue: bool) -> bool:
        """Register a job read from a LOADJOB record; False when it is dropped.

        A job recorded ``queued`` comes back ``active``, and is queued again at
        once only when ``enqueue`` (aof-enqueue-jobs-once) is on -- which a
        retry-0 job refuses, its requeue time being 0. An expired job or one
        already registered is dropped. The requeue timer restarts from now
        (delay + retry), and nodes-delivered keeps the known nodes plus this
        one: the copy is here even if the file was written under another ID.
        """
        now = self.clock()
        if job.etime <= now // 1000:
            return False
        requeue = False
        if job.state == QUEUED:
            job.state = ACTIVE
            requeue = enqueue
        job.flags &= ~POSTPONED  # the requeue timer restarts (below)
        if job.retry:
            job.qtime = now + (job.delay + job.retry) * 1000 + self.jitter()
            job.flags |= BCAST_WILLQUEUE
        else:
            job.qtime = 0
        if job.nodes_delivered == self.myself_only:
            job.nodes_delivered = self.myself_only  # the shared tuple of a local-only job
        else:
            me = self.myself
            others = tuple(n for n in self.known_only(job.nodes_delivered) if n != me)
            job.nodes_delivered = (me, *others) if others else self.myself_only
        if not self.register(job):
            return False
        if job.extra is not None and job.extra.log:
            progress.reloaded(self, job)  # its holders may not all have it
        if requeue:
            self.enqueue(job)
        if self.used_memory > self.spill.threshold > 0:
            # A backlog larger than memory, reloaded: room is made once the job is where
            # it belongs (made before, it could spill this very job, not yet queued, and
            # the enqueue would then queue a copy the registry no longer held).
            self.spill.make_room()
        return True
