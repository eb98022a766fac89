"""Repair: new copies for the jobs whose copies were lost with failed nodes (beyond Disque).

Disque makes a job's copies once, when it is added. A job waiting in a backlog
therefore dies once every node that held a copy has failed at some point, even
if never more than one was down at a time. Repair keeps every unacknowledged
job at its REPLICATE count of live copies while it lives.

**Knowing a copy is gone.** Every bus frame carries its sender's *data
generation* (:mod:`~disquette.core.membership`), a number that grows each time
a node starts without the jobs it held. A peer that sees a node's generation
grow treats every copy it believed that node held as lost. Per node this is
recorded as an *epoch* (a counter of the changes seen here); every job carries
the epoch at which its nodes-delivered list was last checked
(``Job.holders_epoch``), so a holder whose change is newer than the job's epoch
is known lost without visiting millions of jobs at once. The list is cleaned
(:meth:`Repair.normalize`) whenever it is about to change or be used. A node
flagged FAIL for longer than ``replica-repair-delay`` (default: twice the node
timeout) counts as lost too, for repair only: it stays in nodes-delivered, so
that if it comes back with its AOF it still gets the acks and the GC.

**Repair.** A job whose live copies are fewer than its REPLICATE count is
repaired by one of its live holders, the same for every holder that sees the
same live set: the one whose ID, mixed with the job ID as in the requeue
comparison, is greatest. It picks new holders among the reachable nodes with a
link that do not hold the job, adds them to nodes-delivered at once (so that an
ack racing the repair garbage collects the new copies too: their SETACK
follows the REPLJOB on the same link), and sends them REPLJOB. A new holder
counts as live only once its GOTJOB came back. A target that does not confirm
within a second is sent REPLJOB again; one that becomes unreachable, lost, or
stays silent for a few attempts is dropped for another. When every target
confirmed, HOLDERS tells the other holders the new list (after the copies
exist, so nobody counts a copy that is not there).

**Pacing.** Nothing scans the jobs while nothing fails. A generation change,
or a node staying FAIL past the delay, starts a *pass*: the cron walks the job
table a slice per tick (at most ``SCAN_PER_TICK`` jobs examined,
``STARTS_PER_TICK`` repairs started and ``TICK_BUDGET_MS`` spent, as the node's
clock tells, and at most ``MAX_IN_FLIGHT`` repairs waiting for confirmation),
so a million jobs neither flood the bus nor stall the event loop. While a pass runs
(:attr:`Repair.scanning`) the shell also runs a slice every ``REPAIR_TICK_MS``
(:meth:`Repair.tick`) between its crons, so the pass is done in seconds with
short slices and the clients served in between. A failure during a pass
queues another one; jobs that could not be repaired (no node to copy to, or
targets that never confirmed) are looked at again by another pass a second
later (doubling up to a minute while passes keep leaving jobs short; a new
failure starts one at once). Repairs in flight survive further failures: each
tick re-examines them, replacing lost targets and adding targets for copies
lost meanwhile. If the repairing holder fails, the others
see it lost after the delay and one of them repairs the job.

With ``replica-repair no`` nothing here runs: Disque's behaviour.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Final

from disquette.core import messages as msg
from disquette.core import requeue, serialize
from disquette.core.job import ACTIVE, QUEUED, Job
from disquette.core.membership import FAIL, HANDSHAKE
from disquette.core.messages import Message
from disquette.core.scan import BUCKETS
from disquette.core.spill import SHARDS

if TYPE_CHECKING:
    from disquette.core.node import Node

SCAN_PER_TICK: Final = 5000  # jobs examined per cron tick during a pass, at most
STARTS_PER_TICK: Final = 200  # repairs started per cron tick, at most
TICK_BUDGET_MS: Final = 3  # and no more time than this (by the node's clock) per tick
MAX_IN_FLIGHT: Final = 2000  # repairs waiting for their GOTJOBs
RESEND_PERIOD: Final = 1000  # ms before REPLJOB goes again to a target that did not confirm
MAX_ATTEMPTS: Final = 3  # REPLJOBs to one target before another is chosen
PASS_PAUSE: Final = 1000  # ms before a new pass, when the last one left jobs short of copies
MAX_PASS_PAUSE: Final = 60_000  # the pause doubles while passes keep leaving jobs short
RESENDS_PER_TICK: Final = 500  # in-flight repairs looked at again per tick, at most
DELAY_TIMEOUTS: Final = 2  # default replica-repair-delay: node timeouts
REPAIR_TICK_MS: Final = 10  # while a pass runs, the shell runs a slice this often between crons


class InFlight:
    """A repair waiting for its new holders to confirm."""

    __slots__ = ("attempts", "confirmed", "sent", "targets")

    def __init__(self, targets: tuple[bytes, ...], sent: int) -> None:
        self.targets = targets  # new holders that have not confirmed yet
        self.sent = sent  # ms of the last REPLJOB
        self.attempts = 1
        self.confirmed = 0  # new holders that confirmed


class Repair:
    """The repair state of one node (``node.repair``)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.epoch = 0  # generation changes seen by this node
        self.lost_epoch: dict[bytes, int] = {}  # node ID -> epoch of its last change
        self.down: frozenset[bytes] = frozenset()  # nodes FAIL for longer than the delay
        # Job ID -> repair waiting for GOTJOBs, oldest REPLJOB first. (An OrderedDict:
        # taking the first item of a dict whose front was deleted from costs a scan.)
        self.in_flight: OrderedDict[bytes, InFlight] = OrderedDict()
        self.scanning = False
        self.cursor = 0  # next bucket of the job table to examine
        self.again = False  # another pass is needed after this one
        self.next_pass = 0  # ms when that pass may start
        self.deferred = 0  # jobs left short of copies for the next pass to look at again
        self.pause = PASS_PAUSE  # before that pass
        # Counters (INFO cluster).
        self.generation_changes = 0
        self.copies_lost = 0
        self.jobs_repaired = 0

    @property
    def enabled(self) -> bool:
        return bool(self.node.settings.replica_repair)

    def delay(self) -> int:
        settings = self.node.settings
        return settings.replica_repair_delay or DELAY_TIMEOUTS * settings.cluster_node_timeout

    @property
    def backlog(self) -> int:
        """Jobs still to examine or repair: the rest of the pass (estimated from the
        buckets left, at least 1 until it ends), the repairs in flight, and those left
        short of copies for the next pass."""
        left = 0
        if self.scanning:
            left = max(1, len(self.node.jobs) * (BUCKETS - self.cursor) // BUCKETS)
        return left + len(self.in_flight) + self.deferred

    def info_fields(self) -> list[tuple[str, int]]:
        """INFO cluster: this node's data generation and the repair counters."""
        return [
            ("cluster_data_generation", self.node.cluster.generation),
            ("cluster_generation_changes", self.generation_changes),
            ("repair_enabled", int(self.enabled)),
            ("repair_copies_lost", self.copies_lost),
            ("repair_jobs_repaired", self.jobs_repaired),
            ("repair_backlog", self.backlog),
            ("repair_in_flight", len(self.in_flight)),
            ("repair_nodes_down", len(self.down)),
        ]

    # Events ------------------------------------------------------------------------

    def generation_changed(self, node_id: bytes) -> None:
        """A node started a new data generation: every copy it held is lost."""
        self.generation_changes += 1
        if not self.enabled:
            return
        self.epoch += 1
        self.lost_epoch[node_id] = self.epoch
        self._trigger()

    def data_lost(self) -> None:
        """This node dropped every job (DEBUG FLUSHALL, CLUSTER RESET): a new generation."""
        self.in_flight.clear()
        self.node.cluster.new_generation()

    def _trigger(self) -> None:
        self.again = True
        self.next_pass = 0
        self.pause = PASS_PAUSE

    # Liveness ----------------------------------------------------------------------

    def normalize(self, job: Job) -> None:
        """Drop from nodes-delivered the holders whose generation changed since the
        job's list was last checked, and mark it checked now."""
        epoch = job.holders_epoch
        if epoch == self.epoch:
            return
        lost = self.lost_epoch
        delivered = job.nodes_delivered
        kept = tuple(n for n in delivered if lost.get(n, 0) <= epoch)
        if len(kept) != len(delivered):
            self.node.set_delivered(job, kept)
        job.holders_epoch = self.epoch

    def live_holders(self, job: Job) -> list[bytes]:
        """The holders of ``job`` that have a copy as far as this node knows: itself,
        and known nodes neither lost (generation, FAIL past the delay) nor still to
        confirm a repair."""
        node = self.node
        me = node.myself
        table = node.cluster.nodes
        lost = self.lost_epoch
        epoch = job.holders_epoch
        down = self.down
        pending = self.in_flight.get(job.id)
        waiting = pending.targets if pending is not None else ()
        live = (
            [me] if job.state == ACTIVE or job.state == QUEUED or me in job.nodes_delivered else []
        )
        for node_id in job.nodes_delivered:
            if node_id == me or node_id in down or node_id in waiting:
                continue
            entry = table.get(node_id)
            if entry is None or entry.flags & HANDSHAKE or lost.get(node_id, 0) > epoch:
                continue
            live.append(node_id)
        return live

    def _is_repairer(self, job: Job, live: list[bytes]) -> bool:
        best = live[0]
        for node_id in live[1:]:
            if requeue.sender_wins(node_id, best, job.id):
                best = node_id
        return best == self.node.myself

    # The cron ----------------------------------------------------------------------

    def cron(self, now: int) -> None:
        """Per cron tick: note nodes down past the delay, look again at repairs in
        flight, and examine a slice of the jobs while a pass runs."""
        if not self.enabled:
            return
        self._note_down(now)
        if self.in_flight:
            self._resend(now)
        self.tick(now)

    def tick(self, now: int) -> None:
        """A slice of the current pass (starting the next one when due)."""
        if not self.enabled:
            return
        if not self.scanning and self.again and now >= self.next_pass:
            self.again = False
            self.scanning = True
            self.cursor = 0
            self.deferred = 0  # they are in this pass
        if self.scanning:
            self._scan(now)

    def _note_down(self, now: int) -> None:
        delay = self.delay()
        down = frozenset(
            n.id
            for n in self.node.cluster.nodes.values()
            if n.flags & FAIL and now - n.fail_time > delay
        )
        if down != self.down:
            if down - self.down:
                self._trigger()
            self.down = down

    def _scan(self, now: int) -> None:
        buckets = self.node.jobs._buckets
        clock = self.node.clock
        examined = started = 0
        while self.cursor < BUCKETS:
            if examined >= SCAN_PER_TICK or clock() - now >= TICK_BUDGET_MS:
                return
            bucket = buckets[self.cursor]
            if bucket:
                jobs = list(bucket.values())
                for job in jobs:
                    if job.id in self.in_flight or self._healthy(job):
                        continue
                    if self._tick_spent(started, now):
                        return  # this bucket again next tick
                    started += self._examine(job, now)
                examined += len(jobs)
            self.cursor += 1
        spill = self.node.spill
        while self.cursor - BUCKETS < SHARDS and spill.count:
            # Then the spilled jobs (core/spill.py), read from disk and judged there;
            # only one this node must repair is loaded back (the registry's miss
            # handler): after a generation change every record's epoch is stale, and
            # loading them all would bring the backlog on disk back into memory.
            if examined >= SCAN_PER_TICK or clock() - now >= TICK_BUDGET_MS:
                return
            copies = spill.copies(self.cursor - BUCKETS)
            for copy in copies:
                if copy.id in self.in_flight or self._healthy(copy) or not self._shortfall(copy):
                    continue
                if self._tick_spent(started, now):
                    return  # this shard again next tick
                loaded = self.node.jobs.get(copy.id)
                if loaded is not None:
                    started += self._examine(loaded, now)
            examined += len(copies)
            self.cursor += 1
        self.scanning = False
        if self.deferred:
            self._defer(now)
            self.pause = min(2 * self.pause, MAX_PASS_PAUSE)

    def _tick_spent(self, started: int, now: int) -> bool:
        """Whether this tick may start no more repairs: its starts, the repairs in
        flight or its time used up."""
        return (
            started >= STARTS_PER_TICK
            or len(self.in_flight) >= MAX_IN_FLIGHT
            or self.node.clock() - now >= TICK_BUDGET_MS
        )

    def _healthy(self, job: Job) -> bool:
        """The common case, cheaply: not a live job, or no holder can have been lost."""
        if job.state != ACTIVE and job.state != QUEUED:
            return True
        delivered = job.nodes_delivered
        if len(delivered) < job.repl:
            return False
        if job.holders_epoch != self.epoch:
            return False
        down = self.down
        return not down or not any(n in down for n in delivered)

    def _shortfall(self, job: Job) -> int:
        """The copies ``job`` lacks if this node is its repairer, else 0. The same
        before :meth:`normalize` as after it (the holders it drops are not live), so a
        spilled job's copy read from disk is judged without loading it back."""
        live = self.live_holders(job)
        need = job.repl - len(live)
        return need if need > 0 and live and self._is_repairer(job, live) else 0

    def _examine(self, job: Job, now: int) -> int:
        """Repair ``job`` if it lacks live copies and this node is its repairer;
        return 1 when a repair started."""
        self.normalize(job)
        need = self._shortfall(job)
        if not need:
            return 0
        targets = self._pick(job, need)
        if not targets:
            self.deferred += 1
            self._defer(now)
            return 0
        self.copies_lost += need
        self.node.set_delivered(job, job.nodes_delivered + targets)
        self.in_flight[job.id] = InFlight(targets, now)
        self._send(job, targets)
        return 1

    def _pick(self, job: Job, count: int) -> tuple[bytes, ...]:
        """Up to ``count`` new holders: reachable nodes with a link, in random order."""
        node = self.node
        delivered = job.nodes_delivered
        candidates = [n for n in node.cluster.replica_targets() if n not in delivered]
        node.rng.shuffle(candidates)
        return tuple(candidates[:count])

    def _send(self, job: Job, targets: tuple[bytes, ...]) -> None:
        node = self.node
        payload = serialize.encode(job, bus=True, now_s=node.clock() // 1000)
        for node_id in targets:
            node.send(node_id, (msg.REPLJOB, payload, 0))

    def _resend(self, now: int) -> None:
        """Look again at the repairs whose REPLJOBs went out a while ago."""
        in_flight = self.in_flight
        clock = self.node.clock
        for _ in range(min(RESENDS_PER_TICK, len(in_flight))):
            job_id, pending = next(iter(in_flight.items()))
            if now - pending.sent < RESEND_PERIOD or clock() - now >= TICK_BUDGET_MS:
                return
            del in_flight[job_id]
            job = self.node.jobs.get(job_id)
            if job is None or (job.state != ACTIVE and job.state != QUEUED):
                continue  # gone or acknowledged: the GC reaches the targets (nodes-delivered)
            self._retry(job, pending, now)

    def _retry(self, job: Job, pending: InFlight, now: int) -> None:
        """Send again to the targets still worth waiting for; replace the others, and
        add targets for copies lost since the repair started."""
        node = self.node
        self.normalize(job)  # a target that changed generation is gone from the list
        usable = set(node.cluster.replica_targets())
        pending.attempts += 1
        keep: list[bytes] = []
        dropped = 0
        for target in pending.targets:
            if target not in job.nodes_delivered:
                dropped += 1
            elif target in usable and pending.attempts <= MAX_ATTEMPTS:
                keep.append(target)
            else:  # given up: a copy it may have made reaches the holders with WILLQUEUE
                node.set_delivered(job, tuple(n for n in job.nodes_delivered if n != target))
                dropped += 1
        live = [n for n in self.live_holders(job) if n not in keep]
        need = job.repl - len(live) - len(keep)
        added: tuple[bytes, ...] = ()
        if need > 0 and self._is_repairer(job, live):
            added = self._pick(job, need)
            self.copies_lost += max(0, need - dropped)
            node.set_delivered(job, job.nodes_delivered + added)
        if not keep:
            if not added:
                self._finish(job, pending, now)
                return
            pending.attempts = 1
        pending.targets = (*keep, *added)
        pending.sent = now
        self.in_flight[job.id] = pending
        self._send(job, pending.targets)

    # Messages ----------------------------------------------------------------------

    def on_gotjob(self, job: Job, sender: bytes) -> None:
        """A new holder confirmed its copy of a repaired job."""
        pending = self.in_flight.get(job.id)
        if pending is None or sender not in pending.targets:
            return
        pending.targets = tuple(n for n in pending.targets if n != sender)
        pending.confirmed += 1
        self.normalize(job)
        self.node.merge_delivered(job, (sender,))
        if not pending.targets:
            del self.in_flight[job.id]
            self._finish(job, pending, self.node.clock())

    def _finish(self, job: Job, pending: InFlight, now: int) -> None:
        """No target left to wait for: tell the holders the new list if new copies were
        made; a job still short of copies is looked at again by a later pass."""
        if pending.confirmed:
            self.node.tell_holders(job, (msg.HOLDERS, job.id, job.nodes_delivered))
        if len(self.live_holders(job)) >= job.repl:
            self.jobs_repaired += 1
        else:
            self.deferred += 1
            self._defer(now)

    def _defer(self, now: int) -> None:
        """Some job is still short of copies: another pass, a moment from now (a second,
        doubling while passes leave jobs short, up to a minute; a failure resets it)."""
        if not self.again:
            self.again = True
            self.next_pass = now + self.pause


def install(node: Node) -> None:
    """Register the HOLDERS handler."""
    node.message_handlers[msg.HOLDERS] = on_holders


def on_holders(node: Node, sender: bytes, message: Message) -> None:
    """A job's holders, from its repairer or a holder that learned of another one: add
    the new ones, and tell them what they need to keep one copy queued
    (:func:`~disquette.core.requeue.speak_to_new_holders`)."""
    job = node.jobs.get(message[1])
    if job is None:
        return
    added = node.merge_delivered(job, node.known_only(message[2]))
    if added:
        requeue.speak_to_new_holders(node, job, added)
