"""Recurring jobs: named schedules that add one job per tick, cluster-wide (beyond Disque).

A schedule (``CRON SET``) names a queue, a body, ADDJOB's options and its
ticks: every N seconds (the multiples of N since the Unix epoch) or a cron
expression evaluated in UTC (five fields, or six with seconds first; parsed by
``cronsim``). Schedules live in a :class:`~disquette.core.replicated.ReplicatedTable`
(last writer wins, digest anti-entropy, ``vars cron <hex>`` lines in
nodes.conf), so every node holds them all and any node can fire any tick.
Ticks earlier than the write that set the schedule (``since``) never fire.

**Who fires a tick.** There is no leader. The job of tick T (Unix seconds) of
schedule S carries the de-duplication key ``cron:S:T`` and is added through
ADDJOB's normal path (its replication, its errors). For each (S, T) the nodes
are ranked by rendezvous hashing of (S, T, node ID) among the nodes this node
knows that are neither flagged FAIL nor leaving (a leaving node ranks itself
last); the node of rank r fires at T + r * step, where step is a second, or
less for short periods so that every rank fits before the next tick. A node
skips a tick it knows fired: it holds the job with that key (a replica reached
it), or the firer told it: a node that added a tick's job sends
``(CRONFIRED, (S, T))`` to every linked node at once, and every second it
sends every linked node the latest tick of each schedule it knows fired in the
grace period. When the usual firer is down or cut off, the next rank fires a
step later: a tick is late, not lost, while any node lives and the REPLICATE
level it asks for can be met.

**What it gives.** Without faults one job per tick. A crash of the firer
costs one step of lateness. Two jobs for a tick are possible when the firer's
news cannot reach the next rank within a step: a partition where both sides
live (each side fires: the availability side of the trade, as everything in
Disque), a bus slower than a step, a lost message, a firer crashing before its
news left, or nodes that disagree on who is FAIL around a crash. No tick is
fired twice by one node. The simulator's cron mode counts both kinds of
misses (``disquette.sim.properties``, property 19).

**Missed ticks.** A tick is due until the next tick comes or ``GRACE`` has
passed, whichever is first: after the whole cluster was down, only the latest
missed tick within the grace fires (as Celery beat's default), earlier ones
are skipped. A node that starts among peers holds back, for ``CATCHUP`` ms, the
ticks older than its start and those of its first ``CATCHUP`` ms (a node that
learns a schedule, the ticks older than that): it hears first whether they
fired (its links come up, a summary arrives). An
attempt that fails (NOREPL, -OOM, a paused queue, MAXLEN, a synchronous ADDJOB
timing out) is tried again every ``RETRY_MS`` within the tick's due time, while
the next rank tries too; a tick no one could add is skipped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import msgpack
from cronsim import CronSim, CronSimError

from disquette.core import messages as msg
from disquette.core import replies
from disquette.core.client import Client
from disquette.core.errors import DisqueError
from disquette.core.membership import FAIL, HANDSHAKE, LEAVING
from disquette.core.messages import Message
from disquette.core.policy import OPTIONS as POLICY_OPTIONS
from disquette.core.replicated import ReplicatedTable, unpack, valid_version

if TYPE_CHECKING:
    from disquette.core.node import Node

CRON_VAR: Final = b"cron"  # nodes.conf: ``vars cron <hex>``
MAX_NAME: Final = 200  # bytes of a schedule name (its key ``cron:name:T`` fits DEDUP's 256)
MAX_BODY: Final = 4096  # bytes of a schedule's job body (it names the work)
#: Schedules a node accepts to write: the whole table, their largest, fits one bus frame.
MAX_SCHEDULES: Final = 10_000
MAX_EXPR: Final = 256  # bytes of a cron expression
MAX_EVERY: Final = 1 << 32  # seconds
#: ADDJOB options a schedule may carry, with the range of their values.
OPTIONS: Final[dict[str, tuple[int, int]]] = {
    name: bounds
    for name, bounds in POLICY_OPTIONS.items()
    if name in ("replicate", "retry", "ttl", "delay", "maxlen", "priority") and bounds is not None
} | {"async": (1, 1)}
STEP_MAX: Final = 1000  # ms between the fire times of two ranks
GRACE: Final = 300_000  # ms after its time a tick may still fire
CATCHUP: Final = 3000  # ms a node holds back the ticks older than its start
RETRY_MS: Final = 1000  # ms between a node's attempts at one tick
SUMMARY_PERIOD: Final = 1000  # ms between the fired-tick summaries sent to linked nodes
NO_TICK: Final = -1


@dataclass(slots=True, eq=False, repr=False)
class Cron:
    """One version of a named schedule (``deleted``: the version that deleted it)."""

    name: bytes
    queue: bytes
    body: bytes
    every: int  # seconds, 0 for a cron expression
    expr: bytes  # b"" for EVERY
    options: dict[str, int]
    since: int  # ms: ticks before the write never fire
    counter: int
    origin: bytes
    deleted: bool = False

    def encode(self) -> bytes:
        """The record as the bus and nodes.conf carry it."""
        flat: list[object] = []
        for option in OPTIONS:
            if option in self.options:
                flat += [option, self.options[option]]
        fields = (self.name, self.queue, self.body, self.every, self.expr, flat, self.since,
                  self.counter, self.origin, self.deleted)  # fmt: skip
        return msgpack.packb(fields, use_bin_type=True)

    def latest(self, now_s: int) -> int | None:
        """The latest tick at or before ``now_s`` (None: none)."""
        if self.every:
            return now_s - now_s % self.every
        return _cron_tick(self.expr, now_s + 1, reverse=True)

    def following(self, at: int) -> int | None:
        """The first tick after ``at`` (None: none)."""
        if self.every:
            return at - at % self.every + self.every
        return _cron_tick(self.expr, at, reverse=False)

    def key(self, tick: int) -> bytes:
        """The de-duplication key of the job of ``tick``."""
        return b"cron:%s:%d" % (self.name, tick)

    def __repr__(self) -> str:
        spec = f"every {self.every}" if self.every else self.expr.decode()
        return f"Cron({self.name!r}, {self.queue!r}, {spec}, {self.options}, v{self.counter})"


def _cron_tick(expr: bytes, at: int, reverse: bool) -> int | None:
    """The tick of ``expr`` nearest to ``at`` (exclusive) in a direction, None when the
    expression names no such time (cronsim stops looking some years away)."""
    start = datetime.fromtimestamp(at, UTC)
    try:
        return int(next(CronSim(expr.decode("ascii"), start, reverse=reverse)).timestamp())
    except (StopIteration, CronSimError, ValueError, OverflowError):
        return None


def expression_error(expr: bytes) -> str | None:
    """Why ``expr`` is not a cron expression this module can run, or None."""
    if not 0 < len(expr) <= MAX_EXPR or not expr.isascii():
        return "cron expression must be 1 to 256 ASCII characters"
    try:
        CronSim(expr.decode("ascii"), datetime.fromtimestamp(0, UTC))
    except CronSimError as e:
        return f"bad cron expression: {e}"
    return None


def decode(data: bytes) -> Cron | None:
    """A record from a peer or a file, or None when it is not a valid one."""
    record = unpack(data, 10)
    if record is None:
        return None
    name, queue, body, every, expr, flat, since, counter, origin, deleted = record
    if not (
        type(name) is bytes
        and 0 < len(name) <= MAX_NAME
        and type(queue) is bytes
        and len(queue) <= MAX_NAME * 5
        and type(body) is bytes
        and len(body) <= MAX_BODY
        and type(every) is int
        and 0 <= every <= MAX_EVERY
        and type(expr) is bytes
        and type(since) is int
        and 0 <= since < 1 << 62
        and type(flat) is tuple
        and not len(flat) % 2
        and valid_version(counter, origin, deleted)
    ):
        return None
    if not deleted and (not queue or (every > 0) == bool(expr)):
        return None  # a live schedule has a queue and exactly one kind of ticks
    if expr and expression_error(expr) is not None:
        return None
    options: dict[str, int] = {}
    for option, value in zip(flat[::2], flat[1::2], strict=True):
        bounds = OPTIONS.get(option) if type(option) is str else None
        if bounds is None or type(value) is not int or not bounds[0] <= value <= bounds[1]:
            return None
        options[option] = value
    return Cron(name, queue, body, every, expr, options, since, counter, origin, deleted)


def _tombstone(name: bytes, counter: int, origin: bytes) -> Cron:
    return Cron(name, b"", b"", 0, b"", {}, 0, counter, origin, deleted=True)


class TickState:
    """What one node knows of a schedule's ticks (not replicated)."""

    __slots__ = ("deadline", "fired", "next", "record", "retry_at", "tick", "wake", "watch_start")

    def __init__(self, record: Cron, now: int) -> None:
        self.record = record
        self.watch_start = now  # ms: ticks older than this are held back for CATCHUP
        self.tick = NO_TICK  # the tick due now (seconds)
        self.next: int | None = None  # the tick after it
        self.deadline = 0  # ms: when ``tick`` stops being due
        self.fired = NO_TICK  # the latest tick known fired (by anyone)
        self.retry_at = 0  # ms: this node's next attempt at ``tick``
        self.wake = 0  # ms: before it, cron has nothing to do for this schedule


class CronClient(Client):
    """The client a synchronous ADDJOB of a tick waits with: its reply says whether the
    job was added."""

    __slots__ = ("state", "table", "tick")

    def __init__(self, table: CronTable, state: TickState, tick: int, now: int) -> None:
        super().__init__(0, b"cron", now)
        self.table = table
        self.state = state
        self.tick = tick

    def deliver(self, reply: bytes) -> None:
        self.table.outcome(self.state, self.tick, not reply.startswith(b"-"))

    def push(self, data: bytes) -> None:
        """Never called: this client does not MONITOR."""


class CronTable(ReplicatedTable[Cron]):
    """The schedules this node knows, and the ticks it fires."""

    def __init__(self, node: Node) -> None:
        super().__init__(node, msg.CRONDIGEST, msg.CRONS, CRON_VAR, decode, _tombstone)
        self.states: dict[bytes, TickState] = {}  # live schedules by name
        self.inflight: dict[TickState, CronClient] = {}  # synchronous ADDJOBs waiting
        self.fired = 0  # ticks this node added a job for
        self.errors = 0  # attempts that failed (tried again while the tick is due)
        self.skipped = 0  # ticks this node was due to fire and gave up
        self.started = node.clock()  # ms: ticks until CATCHUP after it are held back
        self._next_summary = 0
        self._next_check = 0  # ms: no schedule needs a look before it

    def __len__(self) -> int:
        return len(self.states)

    def set(
        self, name: bytes, queue: bytes, body: bytes, every: int, expr: bytes,
        options: dict[str, int],
    ) -> None:  # fmt: skip
        """CRON SET: a new version written here, sent to every linked node."""
        node = self.node
        record = Cron(name, queue, body, every, expr, options, node.clock(), self.next_counter(),
                      node.myself)  # fmt: skip
        self.write(record)

    def changed(self) -> None:
        """Keep a tick state per live schedule (what it knew survives a new version)."""
        now = self.node.clock()
        states = self.states
        for name, record in self.records.items():
            state = states.get(name)
            if record.deleted:
                if state is not None:
                    del states[name]
                    self.inflight.pop(state, None)
            elif state is None:
                states[name] = TickState(record, now)
            elif state.record is not record:
                state.record = record
                state.tick = NO_TICK
                state.wake = 0
        self._next_check = 0
        super().changed()

    # Firing ------------------------------------------------------------------

    def tick_cron(self, now: int) -> None:
        """At ``hz``: fire the ticks due here, and send the fired-tick summary."""
        states = self.states
        if not states:
            return
        if now >= self._next_check:
            soonest = 1 << 62
            for state in list(states.values()):
                if now >= state.wake:
                    self._check(state, now)
                soonest = min(soonest, state.wake)
            self._next_check = soonest  # (a new or changed schedule resets it)
        if now >= self._next_summary:
            self._next_summary = now + SUMMARY_PERIOD
            self._send_summary(now)

    def _check(self, state: TickState, now: int) -> None:
        record = state.record
        now_s = now // 1000
        stale = state.tick == NO_TICK or (state.next is not None and now_s >= state.next)
        if stale and not self._advance(state, now_s):
            return
        tick = state.tick
        if state.fired >= tick or state in self.inflight:
            state.wake = now + 100 if state in self.inflight else self._next_wake(state)
            return
        node = self.node
        key = record.key(tick)
        if (record.queue, key) in node.dedup_index:
            self._learned(state, tick)  # a replica of the tick's job reached this node
            return
        rank, count = self._rank(record.name, tick)
        period = (state.next - tick) * 1000 if state.next is not None else GRACE
        step = min(STEP_MAX, period // (count + 1))
        base = tick * 1000
        if count > 1 and (base < state.watch_start or base < self.started + CATCHUP):
            base = max(base, state.watch_start + CATCHUP, self.started + CATCHUP)
        fire_at = max(base + rank * step, state.retry_at)
        if fire_at >= state.deadline:
            state.wake = self._next_wake(state)
            return
        if now < fire_at:
            state.wake = fire_at
            return
        self._fire(state, tick, key, now)

    def _advance(self, state: TickState, now_s: int) -> bool:
        """Move to the tick due now; False (and the wake-up set) when there is none."""
        record = state.record
        tick = record.latest(now_s)
        if state.retry_at and state.fired < state.tick:
            self.skipped += 1  # this node tried, and no one added the job in time
        state.retry_at = 0
        if tick is None or tick * 1000 < record.since:
            state.tick = NO_TICK
            state.next = record.following(now_s)
            state.wake = state.next * 1000 if state.next is not None else 1 << 62
            return False
        state.tick = tick
        state.next = record.following(tick)
        state.deadline = tick * 1000 + GRACE
        if state.next is not None:
            state.deadline = min(state.deadline, state.next * 1000)
        return True

    @staticmethod
    def _next_wake(state: TickState) -> int:
        return state.next * 1000 if state.next is not None else 1 << 62

    def _rank(self, name: bytes, tick: int) -> tuple[int, int]:
        """This node's rank for the tick, and how many nodes are ranked (see the module
        docstring): rendezvous hashing over the nodes not failed nor leaving."""
        node = self.node
        me = node.myself
        salt = b"%s:%d:" % (name, tick)

        def score(node_id: bytes) -> bytes:
            return hashlib.blake2b(salt + node_id, digest_size=8).digest() + node_id

        others = [
            n.id
            for n in node.cluster.nodes.values()
            if n.id != me and not n.flags & (FAIL | LEAVING | HANDSHAKE)
        ]
        if node.leaving:
            return len(others), len(others) + 1
        mine = score(me)
        return sum(1 for n in others if score(n) > mine), len(others) + 1

    def _fire(self, state: TickState, tick: int, key: bytes, now: int) -> None:
        """One attempt at adding the tick's job here."""
        record = state.record
        node = self.node
        opts = record.options
        client = CronClient(self, state, tick, now)
        state.retry_at = now + RETRY_MS
        try:
            if node.settings.maxmemory and node.memory_high() and not node.reclaim_memory():
                raise DisqueError(replies.OOM)
            if node.spill.store is not None and not node.spill.admit():
                raise DisqueError(replies.OOM)
            job = node.add_job(
                client, record.queue, record.body, max(state.deadline - now, 100),
                repl=opts.get("replicate", 0), delay=opts.get("delay", -1),
                retry=opts.get("retry", -1), ttl=opts.get("ttl", 0),
                maxlen=opts.get("maxlen", 0), async_=bool(opts.get("async")),
                priority=opts.get("priority", -1), dedup=key,
            )  # fmt: skip
        except DisqueError:
            self.errors += 1
            state.wake = state.retry_at
            return
        if job is None:
            self.inflight[state] = client  # the reply comes to CronClient.deliver
            state.wake = now + 100
        else:
            self.outcome(state, tick, True)

    def outcome(self, state: TickState, tick: int, added: bool) -> None:
        """How an attempt at ``tick`` ended: the job added, or not (tried again)."""
        if self.inflight.get(state) is not None:
            del self.inflight[state]
        if self.states.get(state.record.name) is not state:
            return  # deleted meanwhile
        if not added:
            self.errors += 1
            state.wake = state.retry_at
            return
        self.fired += 1
        self._learned(state, tick)
        news = (msg.CRONFIRED, (state.record.name, tick))
        for node_id in self.node.linked_nodes():
            self.node.send(node_id, news)

    def _learned(self, state: TickState, tick: int) -> None:
        if tick > state.fired:
            state.fired = tick
        if tick >= state.tick:
            state.wake = self._next_wake(state)

    def _send_summary(self, now: int) -> None:
        """The latest fired tick of each schedule, when within the grace, to every
        linked node: what a node that just started must hear before it fires."""
        oldest = (now - GRACE) // 1000
        flat: list[object] = []
        for name, state in self.states.items():
            if state.fired >= oldest:
                flat += [name, state.fired]
        if flat:
            news = (msg.CRONFIRED, tuple(flat))
            for node_id in self.node.linked_nodes():
                self.node.send(node_id, news)

    def on_fired(self, node: Node, sender: bytes, message: Message) -> None:
        """CRONFIRED from a peer: these ticks fired."""
        pairs = message[1]
        states = self.states
        for name, tick in zip(pairs[::2], pairs[1::2], strict=True):
            state = states.get(name)
            if state is not None:
                self._learned(state, tick)

    # What commands show ------------------------------------------------------

    def next_tick(self, record: Cron) -> int | None:
        """The first tick after now that may fire (seconds)."""
        now_s = self.node.clock() // 1000
        tick = record.following(now_s)
        while tick is not None and tick * 1000 < record.since:
            tick = record.following(tick)
        return tick


def install(node: Node) -> None:
    table = node.crons
    table.install()
    node.message_handlers[msg.CRONFIRED] = table.on_fired
