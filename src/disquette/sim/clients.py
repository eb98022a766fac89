"""Simulated clients: producers and consumers talking to random nodes.

Clients speak to nodes exactly as network clients do: each request is a real
argv run through the node's ``ServerState.execute`` and the reply is RESP,
parsed with hiredis. A request that blocks (synchronous ADDJOB, GETJOB with
TIMEOUT) is answered later through ``Client.deliver``; if the node crashes
first, the client sees its connection drop and the request fails.

* A :class:`Producer` adds jobs to random nodes (REPLICATE R, synchronous or
  ASYNC, a short RETRY, sometimes a DELAY, sometimes at-most-once: RETRY 0
  REPLICATE 1) and records each acknowledged ADDJOB in the history.
* A :class:`Consumer` runs GETJOB (NOHANG, or blocking with TIMEOUT) on random
  nodes, records each delivery, and then handles each job in turn: ACKJOB on
  that node or on another one, FASTACK, NACK, a long piece of work announced
  with WORKING, or nothing at all (it forgets the job, so the retry timer must
  bring it back). At-most-once jobs are always acknowledged where they were
  delivered (nothing else would ever remove them before their TTL). In drain
  mode it always acknowledges, so the run can finish with every job consumed.

The features runs (queue policies, dead letters, de-duplicated ADDJOBs) add:

* producers that add every job with ``DEDUP <body>`` and, when no job ID comes
  back (an error, a timeout, a connection lost with its node), send the same
  ADDJOB again, to the same node if it is up, else to another; and that
  sometimes send it once more after it succeeded, to any node, as a client
  unsure its request went through would; a share of their jobs are *poison*
  (their body ends with ``POISON_MARK``);
* consumers that NACK every poison job they get (until the drain), so that it
  goes past its policy's ``max-nacks`` and is dead-lettered, and that also take
  jobs from the dead-letter queue and acknowledge them;
* a :class:`PolicyAdmin` that writes queue policies (QPOLICY SET and DEL) on
  random nodes during the fault window, sometimes the same policy on two nodes
  at the same instant.

The coordination runs (dependencies, claims, progress logs) add:

* producers that often add a *group* instead of one job: a chain (each job
  ``AFTER`` the one before), a fan-in (one job after two or three) or a fan-out
  (two jobs after one), parents first, each child naming the IDs its parents got
  (``IFGONE release`` for some, ``IFGONE fail`` or the default for the others);
  some roots are *doomed*: a short TTL in a queue nobody consumes, so that they
  expire unacknowledged and their children are failed or released;
* consumers that ask for claims (GETJOB ``WITHCLAIM``), pass them back (ACKJOB,
  NACK and WORKING with ``CLAIM n``) and record the claims refused as stale;
  whose WORKING often carries a progress text (recorded once answered), maybe
  several times for a job, after which they sometimes abandon the job, so that
  logs outlive the work and must converge on its holders.

The flow-to-disk runs (jobs spilled to a store and loaded back) add:

* producers that give some jobs a PRIORITY and delay some for longer than flow to
  disk's horizon (so that they spill while they wait), consumers that start late
  (a backlog builds, then drains), and an :class:`Inspector` reading jobs the ways
  that look at disk without loading back (QPEEK, JSCAN REPLY ALL) and the way that
  loads back (SHOW);
* checks as they go: every body a client is given (GETJOB, QPEEK, SHOW, JSCAN)
  is the one its job ID was added with (:meth:`History.note_body`), each GETJOB
  serves the head of its queue, spilled jobs included
  (:func:`served_out_of_order`), and each QPEEK lists a queue in the order GETJOB
  serves it.

The outcomes runs (postponed requeues, results, WAITJOB and CANCEL) add:

* producers that give some jobs a BACKOFF (fixed, or exponential with a cap) and
  add some to expire (a short TTL in a queue nobody consumes);
* consumers that NACK some jobs with a DELAY of a few seconds (recording the delay
  each NACK promised, or the job's backoff), acknowledge with a RESULT derived from
  the job, and work on some with WORKING again and again until they finish, or
  until -CANCELLED stops them;
* a :class:`Canceller` sending CANCEL for jobs being worked on (to another node than
  the worker's) or queued, and :class:`Waiter` clients sending WAITJOB, with a
  TIMEOUT or without, on random nodes (:class:`Budgeted`: a fixed number of
  requests, one at a time, as the policy administrator's, the inspector's and, a
  job at a time, the producers').

:func:`dependency_view` tells what a dependency looks like to the cluster at a
moment (property 11 judges a release by it). Every look the clients take at a
node's jobs goes through :meth:`SimNode.copy`, which never loads a spilled job
back (a look must not change the run).

Every choice comes from the actor's own random stream (the features runs draw
more only where the other runs draw nothing, so those keep their histories).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hiredis

from disquette.core.client import Client
from disquette.core.ids import is_at_least_once
from disquette.core.job import ACKED, ACTIVE, AFTER_FAILED, MAX_PRIORITY, QUEUED, WAIT_REPL, Job
from disquette.sim.history import (
    ACK,
    ACK_ELSEWHERE,
    ACKED_COPY,
    DEAD_LETTER,
    DROPPED,
    FASTACK,
    FIRST,
    FORGET,
    FORGOTTEN,
    GONE,
    HELD,
    LOST,
    NACK,
    NIL,
    POISON,
    RESEND,
    RETRY,
    WORKING,
    AddedJob,
    Cancel,
    Child,
    DedupAttempt,
    Delivery,
    History,
    Nack,
    PolicyWrite,
    ProgressEntry,
    StaleClaim,
    WaitCall,
    WorkingCall,
)
from disquette.sim.loop import VirtualLoop
from disquette.sim.process import SimNode
from disquette.sim.properties import peek_out_of_order, served_out_of_order
from disquette.sim.trace import Trace

RETRY_LATER_MS = 100  # when no node is up
ADD_RETRY_MS = (50, 300)  # before a producer sends an ADDJOB again
POISON_MARK = b"!poison"  # the end of a poison job's body
MAX_WORKINGS = 3  # WORKINGs a consumer sends for one delivery, at most
COMMANDS = {ACK: b"ACKJOB", ACK_ELSEWHERE: b"ACKJOB", FASTACK: b"FASTACK", NACK: b"NACK"}


class ConnectionLost:
    """The reply a request gets when its node dies first."""

    def __repr__(self) -> str:
        return "ConnectionLost"


CONNECTION_LOST = ConnectionLost()


@dataclass
class Workload:
    """What the clients of a run do."""

    queues: tuple[bytes, ...] = (b"q0", b"q1")
    producers: int = 1
    consumers: int = 2
    jobs: int = 20  # ADDJOB attempts per producer
    min_replicate: int = 1  # (jobs at most once are REPLICATE 1 anyway)
    max_replicate: int = 3
    async_rate: float = 0.25
    retry: tuple[int, int] = (1, 3)  # seconds
    delay_rate: float = 0.1  # jobs added with a DELAY
    delay: tuple[int, int] = (1, 1)  # its seconds
    at_most_once_rate: float = 0.05  # jobs added with RETRY 0 REPLICATE 1
    ttl: int = 3600
    add_timeout: int = 2000  # ms, synchronous ADDJOB
    think: tuple[int, int] = (0, 200)  # ms between requests
    process_time: tuple[int, int] = (1, 50)  # ms a consumer works on a job
    count: tuple[int, int] = (1, 3)  # GETJOB COUNT
    block_rate: float = 0.5  # GETJOB with TIMEOUT rather than NOHANG
    block_timeout: tuple[int, int] = (50, 500)  # ms
    ack_elsewhere_rate: float = 0.15
    fastack_rate: float = 0.1
    nack_rate: float = 0.05
    forget_rate: float = 0.05
    working_rate: float = 0.05
    # The nodes (by index) producers and consumers talk to (None: any). Apart, every
    # job a consumer takes has travelled by federation.
    producer_nodes: tuple[int, ...] | None = None
    consumer_nodes: tuple[int, ...] | None = None
    # Features runs (the defaults leave them out).
    dedup: bool = False  # ADDJOB ... DEDUP <body>
    add_attempts: int = 1  # ADDJOBs sent per job, at most, until one returns an ID
    resend_rate: float = 0.0  # jobs whose ADDJOB is sent once more after it succeeded
    poison_rate: float = 0.0  # jobs every consumer NACKs until the drain
    deadletter: bytes = b""  # a queue consumers take from too (the policies' deadletter)
    policy_writes: int = 0  # QPOLICY SET/DEL the administrator sends in the window
    admin_think: tuple[int, int] = (100, 1500)  # ms between them
    # Coordination runs (the defaults leave them out).
    groups: float = 0.0  # producer steps that start a chain, a fan-in or a fan-out
    release_rate: float = 0.0  # children added with IFGONE release (else fail)
    doomed_rate: float = 0.0  # group roots added to expire unacknowledged
    doomed_queue: bytes = b"qx"  # where they go (nobody consumes it)
    doomed_ttl: tuple[int, int] = (2, 4)  # s
    claim_rate: float = 0.0  # GETJOBs WITHCLAIM
    claim_ack_rate: float = 0.0  # ACKJOB, NACK and WORKING of a claimed job with CLAIM n
    progress_rate: float = 0.0  # WORKINGs with a progress text
    working_again_rate: float = 0.0  # another WORKING after one (at most MAX_WORKINGS)
    abandon_rate: float = 0.0  # a job forgotten after a WORKING (its log outlives the work)
    # Flow-to-disk runs (the defaults leave them out).
    priority_rate: float = 0.0  # jobs added with a PRIORITY (1 to 9)
    consume_after: tuple[int, int] = (0, 50)  # ms before a consumer's first GETJOB
    inspections: int = 0  # QPEEK, SHOW and JSCAN requests of the inspector
    check_bodies: bool = False  # every body given must be its job's (and GETJOB order)
    # Cron runs: the schedules set before the window, CRON SET's arguments after the body.
    crons: tuple[tuple[bytes, ...], ...] = ()
    # Outcomes runs (the defaults leave them out).
    expiring_rate: float = 0.0  # jobs added to expire (doomed_queue, doomed_ttl)
    backoff_rate: float = 0.0  # jobs added with BACKOFF fixed or exponential
    nack_delay_rate: float = 0.0  # NACKs with a DELAY
    nack_delay: tuple[int, int] = (1, 3)  # its seconds
    result_rate: float = 0.0  # ACKJOBs with a RESULT
    cancels: int = 0  # CANCELs the canceller sends in the window
    cancel_working_rate: float = 0.6  # of them, for a job a consumer is working on
    waiters: int = 0  # WAITJOB clients
    waits: int = 0  # WAITJOBs each of them sends in the window
    wait_timeout_rate: float = 0.0  # WAITJOBs with a TIMEOUT
    wait_timeout: tuple[int, int] = (100, 2000)  # ms
    unknown_rate: float = 0.0  # WAITJOBs for an ID nobody added

    def from_queues(self) -> tuple[bytes, ...]:
        """The queues consumers take jobs from."""
        return (*self.queues, self.deadletter) if self.deadletter else self.queues

    @property
    def coordination(self) -> bool:
        """Whether this is a coordination run's workload (properties 11 to 13)."""
        return bool(self.groups or self.claim_rate or self.progress_rate)

    @property
    def outcomes(self) -> bool:
        """Whether this is an outcomes run's workload (properties 20 to 23)."""
        return bool(self.waiters or self.cancels)


class SimClient(Client):
    """One connection to one node incarnation; replies go to ``on_reply``."""

    __slots__ = ("incarnation", "on_reply", "process")

    def __init__(
        self, process: SimNode, name: str, on_reply: Callable[[SimClient, Any], None]
    ) -> None:
        assert process.state is not None
        super().__init__(process.state.new_client_id(), name.encode(), process.clock())
        self.process = process
        self.incarnation = process.incarnation
        self.on_reply = on_reply

    def deliver(self, reply: bytes) -> None:
        self.on_reply(self, parse_reply(reply))

    def push(self, data: bytes) -> None:
        """MONITOR output: not used by simulated clients."""


def parse_reply(raw: bytes) -> Any:
    """A RESP reply as Python values; errors become :class:`hiredis.ReplyError`."""
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


def is_error(value: Any) -> bool:
    return isinstance(value, hiredis.ReplyError) or value is CONNECTION_LOST


@dataclass(eq=False, repr=False)  # (an actor is compared by identity)
class Actor:
    """A client program: one request at a time, to whichever node it picks."""

    name: str
    loop: VirtualLoop
    trace: Trace
    rng: random.Random
    processes: list[SimNode]
    history: History
    workload: Workload
    connections: dict[int, SimClient] = field(default_factory=dict, init=False)
    waiting: tuple[SimClient, Callable[[Any], None]] | None = field(default=None, init=False)
    stopped: bool = field(default=False, init=False)
    draining: bool = field(default=False, init=False)
    # A consumer takes no new job meanwhile (it keeps polling).
    paused: bool = field(default=False, init=False)

    # Requests ---------------------------------------------------------------------

    def allowed_nodes(self) -> tuple[int, ...] | None:
        """The nodes this actor talks to (None: any)."""
        return None

    def live_processes(self) -> list[SimNode]:
        allowed = self.allowed_nodes()
        return [p for p in self.processes if p.alive and (allowed is None or p.index in allowed)]

    def pick(self) -> SimNode | None:
        live = self.live_processes()
        return self.rng.choice(live) if live else None

    def connection(self, process: SimNode) -> SimClient:
        client = self.connections.get(process.index)
        if client is None or client.incarnation != process.incarnation:
            client = SimClient(process, self.name, self.reply)
            process.connect_client(client, lambda: self.disconnected(client))
            self.connections[process.index] = client
        return client

    def request(self, process: SimNode, argv: list[bytes], on_reply: Callable[[Any], None]) -> None:
        client = self.connection(process)
        self.trace.record(self.loop.now, "cmd", self.name, process.name, *argv[:2])
        self.waiting = (client, on_reply)
        response = process.execute(client, argv)
        if response is not None:
            self.reply(client, parse_reply(response))

    def reply(self, client: SimClient, value: Any) -> None:
        waiting = self.waiting
        if waiting is None or waiting[0] is not client:
            return
        self.waiting = None
        self.trace.record(self.loop.now, "reply", self.name, client.process.name, _summary(value))
        waiting[1](value)

    def disconnected(self, client: SimClient) -> None:
        if self.connections.get(client.process.index) is client:
            del self.connections[client.process.index]
        self.reply(client, CONNECTION_LOST)

    def later(self, delay: tuple[int, int], callback: Callable[[], None]) -> None:
        self.loop.call_later(self.rng.randint(*delay), callback)

    def start(self) -> None:
        self.later((0, 50), self.step)

    def step(self) -> None:
        raise NotImplementedError


def _summary(value: Any) -> Any:
    if isinstance(value, list):
        return len(value)
    if isinstance(value, hiredis.ReplyError):
        return str(value).split(" ", 1)[0]
    if isinstance(value, bytes | int | str):
        return value
    return repr(value)


@dataclass
class Member:
    """One job of a producer's group (coordination runs): the earlier members it waits
    for (by index), IFGONE release or fail, and whether it is a doomed root."""

    after: tuple[int, ...] = ()
    release: bool = False
    doomed: bool = False
    named: tuple[bytes, ...] = ()  # the IDs its ADDJOB named (AFTER)
    explicit: bool = False  # IFGONE fail given, not left to the default


class Budgeted(Actor):
    """An actor taking up to :meth:`budget` steps, one at a time, each sent to one of the
    live nodes (:meth:`send`: a request, or a producer's job), while it is not stopped."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent = 0

    def budget(self) -> int:
        raise NotImplementedError

    def send(self, live: list[SimNode]) -> None:
        raise NotImplementedError

    def step(self) -> None:
        if self.stopped or self.sent >= self.budget():
            return
        live = self.live_processes()
        if not live:
            self.loop.call_later(RETRY_LATER_MS, self.step)
            return
        self.sent += 1
        self.send(live)


class Producer(Budgeted):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group: list[Member] = []  # the group being added (coordination runs)
        self.group_ids: list[bytes | None] = []  # the IDs its members got so far
        self.member: Member | None = None  # the member whose ADDJOB is out

    def allowed_nodes(self) -> tuple[int, ...] | None:
        return self.workload.producer_nodes

    def budget(self) -> int:
        return self.workload.jobs

    def send(self, live: list[SimNode]) -> None:
        w = self.workload
        rng = self.rng
        process = rng.choice(live)
        if w.groups and not self.group and rng.random() < w.groups:
            self.plan_group()
        member = self.group[len(self.group_ids)] if self.group else None
        if w.expiring_rate and rng.random() < w.expiring_rate:
            member = Member(doomed=True)  # (outcomes runs: a lone job that expires)
        queue = rng.choice(w.queues)
        at_most_once = rng.random() < w.at_most_once_rate and member is None
        top = max(1, min(w.max_replicate, len(live)))
        repl = 1 if at_most_once else rng.randint(min(w.min_replicate, top), top)
        async_ = repl > 1 and rng.random() < w.async_rate
        retry = 0 if at_most_once else rng.randint(*w.retry)
        delay = 0
        if rng.random() < w.delay_rate:
            delay = w.delay[0] if w.delay[0] == w.delay[1] else rng.randint(*w.delay)
        priority = 0
        if w.priority_rate and rng.random() < w.priority_rate:
            priority = rng.randint(1, MAX_PRIORITY)
        ttl = w.ttl
        if member is not None and member.doomed:
            queue, retry, delay = w.doomed_queue, 1, 0
            ttl = rng.randint(*w.doomed_ttl)
        body = b"%s-%d" % (self.name.encode(), self.sent)
        if w.poison_rate and rng.random() < w.poison_rate:
            body += POISON_MARK
        self.history.add_issued(body, self.loop.now, retry, delay)
        argv = [
            b"ADDJOB",
            queue,
            body,
            b"%d" % w.add_timeout,
            b"REPLICATE",
            b"%d" % repl,
            b"RETRY",
            b"%d" % retry,
            b"TTL",
            b"%d" % ttl,
        ]
        if delay:
            argv += [b"DELAY", b"%d" % delay]
        if priority:
            argv += [b"PRIORITY", b"%d" % priority]
        if async_:
            argv.append(b"ASYNC")
        if w.dedup:
            argv += [b"DEDUP", body]
        if member is not None:
            argv += self.member_options(member)
        elif w.backoff_rate and rng.random() < w.backoff_rate:
            argv += self.backoff_option()
        self.member = member
        self.attempt(process, argv, repl, async_, 1, FIRST)

    def plan_group(self) -> None:
        """The next group (coordination runs): a chain of two to four jobs, a fan-in of
        two or three parents and a child, or a fan-out of a parent and two children;
        a root may be doomed, a child may be IFGONE release."""
        w = self.workload
        rng = self.rng
        shape = rng.randrange(3)
        if shape == 0:
            members = [Member((i - 1,) if i else ()) for i in range(rng.randint(2, 4))]
        elif shape == 1:
            parents = rng.randint(2, 3)
            members = [Member() for _ in range(parents)] + [Member(tuple(range(parents)))]
        else:
            members = [Member(), Member((0,)), Member((0,))]
        for m in members:
            if m.after:
                m.release = rng.random() < w.release_rate
                m.explicit = not m.release and rng.random() < 0.5
            else:
                m.doomed = rng.random() < w.doomed_rate
        self.group = members
        self.group_ids = []

    def backoff_option(self) -> list[bytes]:
        """ADDJOB's BACKOFF (outcomes runs): fixed 1 or 2 s, or exponential from 1 s
        up to 2 to 4 s."""
        rng = self.rng
        if rng.random() < 0.5:
            return [b"BACKOFF", b"fixed", b"%d" % rng.randint(1, 2)]
        return [b"BACKOFF", b"exponential", b"1", b"%d" % rng.randint(2, 4)]

    def member_options(self, member: Member) -> list[bytes]:
        """A member's AFTER options: the IDs its parents got (a parent whose ADDJOB failed
        is left out; with none left the member is an ordinary job) and IFGONE."""
        member.named = tuple(
            job_id for i in member.after if (job_id := self.group_ids[i]) is not None
        )
        if not member.named:
            return []
        options: list[bytes] = []
        for job_id in member.named:
            options += [b"AFTER", job_id]
        if member.release:
            options += [b"IFGONE", b"release"]
        elif member.explicit:
            options += [b"IFGONE", b"fail"]
        return options

    def member_done(self, process: SimNode, job_id: bytes | None) -> None:
        """The ADDJOB of the member out was answered (``job_id`` None: it failed): record
        a doomed root's expiry, or a child with what its dependencies look like now
        (and, when its node does not make it wait, its release now)."""
        member = self.member
        if member is None:
            return
        self.member = None
        if self.group:
            self.group_ids.append(job_id)
            if len(self.group_ids) == len(self.group):
                self.group, self.group_ids = [], []
        if job_id is None:
            return
        now = self.loop.now
        copy = _copy(process, job_id)
        if member.doomed:
            expiry = copy.etime * 1000 if copy is not None else now
            self.history.doomed[job_id] = expiry
            return
        if not member.named:
            return
        views = {d: dependency_view(self.processes, self.history, d) for d in member.named}
        self.history.children[job_id] = Child(job_id, member.named, member.release, now, views)
        if copy is not None and not copy.waiting:
            failed = copy.extra is not None and bool(copy.extra.after_flags & AFTER_FAILED)
            life = process.incarnation
            self.history.released(job_id, process.index, now, failed, views, life)
        elif copy is None and process.node is not None and job_id in process.node.deps.gone:
            # Failed at once.
            self.history.released(job_id, process.index, now, True, views, process.incarnation)

    def attempt(
        self, process: SimNode, argv: list[bytes], repl: int, async_: bool, tries: int, why: str
    ) -> None:
        """Send one ADDJOB (the ``tries``-th with these arguments, for the reason ``why``);
        without a job ID back, send it again while attempts are left; with one, maybe
        send it once more (features runs)."""
        w = self.workload
        queue = argv[1]
        dedup = self._dedup_attempt(process, queue, argv[2], why) if w.dedup else None

        def replied(value: Any) -> None:
            if dedup is not None:
                dedup.reply = value if isinstance(value, bytes) else str(_summary(value))
            if isinstance(value, bytes):
                node = process.node
                job = _copy(process, value)
                delivered = job.nodes_delivered if job is not None else ()
                external = node is None or node.myself not in delivered
                holders = self._holders(delivered)
                when = self.loop.now
                promised = repl
                if dedup is not None and value in dedup.held:
                    # A copy found by its key: as durable as the copies it has now (short
                    # when nobody acknowledged it yet: a job consumed has fewer, rightly).
                    live, acked = self._copies(value)
                    promised = min(repl, live)
                    acked = acked or value in self.history.acked
                    dedup.short = promised < repl and not acked
                added = AddedJob(
                    value, queue, promised, async_, process.index, when, holders, external
                )
                if w.check_bodies:
                    added.body = argv[2]
                    self.history.note_body(value, argv[2], f"ADDJOB on {process.name}", when)
                if self.member is None or not self.member.doomed:
                    self.history.add_acknowledged(added)
                if b"BACKOFF" in argv:
                    at = argv.index(b"BACKOFF") + 1
                    self.history.backoffs[value] = tuple(argv[at : at + 3])
                self.member_done(process, value)
                if why != RESEND and w.resend_rate and self.rng.random() < w.resend_rate:
                    self.later(ADD_RETRY_MS, lambda: self.resend(argv, repl, async_))
                    return
            elif why == RESEND:
                pass  # the job was added already
            elif tries < w.add_attempts and not self.stopped:
                self.later(ADD_RETRY_MS, lambda: self.again(process, argv, repl, async_, tries))
                return
            else:
                self.history.add_failed(str(_summary(value)))
                self.member_done(process, None)
            self.later(w.think, self.step)

        self.request(process, argv, replied)

    def again(
        self, process: SimNode, argv: list[bytes], repl: int, async_: bool, tries: int
    ) -> None:
        """Send an ADDJOB that got no job ID again: to the same node if it is up, else to
        another one (or later, when none is)."""
        if self.stopped:
            self.history.add_failed("stopped")
            return
        target = process if process.alive else self.pick()
        if target is None:
            self.loop.call_later(RETRY_LATER_MS, self.again, process, argv, repl, async_, tries)
            return
        self.attempt(target, argv, repl, async_, tries + 1, RETRY)

    def resend(self, argv: list[bytes], repl: int, async_: bool) -> None:
        """Send an ADDJOB that succeeded once more, to any node."""
        target = None if self.stopped else self.pick()
        if target is None:
            self.later(self.workload.think, self.step)
            return
        self.attempt(target, argv, repl, async_, 0, RESEND)

    def _copies(self, job_id: bytes) -> tuple[int, bool]:
        """How many running nodes hold a copy of a job not acknowledged there, and
        whether one holds it acknowledged."""
        states = [job.state for p in self.processes if (job := _copy(p, job_id)) is not None]
        return sum(1 for state in states if state != ACKED), ACKED in states

    def _dedup_attempt(self, process: SimNode, queue: bytes, key: bytes, why: str) -> DedupAttempt:
        """Record an ADDJOB with a DEDUP key, with the jobs of that key the node (and the
        other live nodes) hold as it runs."""
        held = jobs_with_key(process, queue, key)
        elsewhere = tuple(
            job.id
            for p in self.processes
            if p is not process
            for job in jobs_with_key(p, queue, key)
        )
        attempt = DedupAttempt(
            key,
            queue,
            process.index,
            self.loop.now,
            why,
            tuple(job.id for job in held),
            any(job.state == WAIT_REPL for job in held),
            elsewhere,
        )
        self.history.dedup_attempts.append(attempt)
        return attempt

    def _holders(self, node_ids: tuple[bytes, ...]) -> tuple[int, ...]:
        index = {p.node_id: p.index for p in self.processes}
        return tuple(index[n] for n in node_ids if n in index)


def _copy(process: SimNode, job_id: bytes) -> Job | None:
    """A node's copy of a job, in memory or on disk, never loaded back (None: no
    copy, or the node is down)."""
    return process.copy(job_id)


def _claim_of(process: SimNode, job_id: bytes) -> int:
    """The claim number of a node's copy of a job (0: none)."""
    job = _copy(process, job_id)
    return 0 if job is None or job.extra is None else job.extra.claim


def dependency_view(processes: list[SimNode], history: History, dep_id: bytes) -> str:
    """What a dependency looks like to the cluster now (coordination runs): a node holds
    it acknowledged (ACKED_COPY), or remembers that it went without an ack (GONE), or
    holds it not acknowledged (HELD; a down node whose AOF names it may); else no node
    knows it: its every copy was destroyed by crashes (LOST), or it went and was
    forgotten (FORGOTTEN). The first that applies, in this order."""
    held = gone = False
    for p in processes:
        node = p.node
        if node is None:
            held = held or (p.settings.appendonly and dep_id in p.storage.aof)
            continue
        job = p.copy(dep_id)
        if job is not None:
            if job.state == ACKED:
                return ACKED_COPY
            held = True
        elif dep_id in node.deps.gone:
            gone = True
    if gone:
        return GONE
    if held:
        return HELD
    return LOST if dep_id in history.last_copy_lost else FORGOTTEN


def jobs_with_key(process: SimNode, queue: bytes, key: bytes) -> list[Job]:
    """The jobs of ``queue`` with the de-duplication key ``key`` a node holds (any state)."""
    node = process.node
    if node is None:
        return []
    return [
        job
        for job in node.jobs.values()
        if job.extra is not None and job.extra.dedup == key and job.queue == queue
    ]


class Consumer(Actor):
    def allowed_nodes(self) -> tuple[int, ...] | None:
        return self.workload.consumer_nodes

    def start(self) -> None:
        self.later(self.workload.consume_after, self.step)

    def step(self) -> None:
        if self.stopped:
            return
        process = None if self.paused else self.pick()
        if process is None:
            self.loop.call_later(RETRY_LATER_MS, self.step)
            return
        w = self.workload
        rng = self.rng
        argv = [b"GETJOB"]
        if rng.random() < w.block_rate:
            argv += [b"TIMEOUT", b"%d" % rng.randint(*w.block_timeout)]
        else:
            argv.append(b"NOHANG")
        argv += [b"COUNT", b"%d" % rng.randint(*w.count)]
        if w.claim_rate and rng.random() < w.claim_rate:
            argv.append(b"WITHCLAIM")
        argv += [b"FROM", *w.from_queues()]

        def got(value: Any) -> None:
            if isinstance(value, list) and value:
                deliveries = [self.record(process, *item) for item in value]
                if w.check_bodies:
                    for item in value:
                        problem = served_out_of_order(process, item[0], item[1])
                        if problem is not None:
                            self.history.misordered.append(f"{problem} at {self.loop.now}")
                self.handle(process, deliveries)
            else:
                self.later(self.workload.think, self.step)

        self.request(process, argv, got)

    def record(
        self, process: SimNode, queue: bytes, job_id: bytes, body: bytes, *claim: Any
    ) -> Delivery:
        """A job in a GETJOB reply, in the history; a dead letter with its origin, read
        from the delivering node's copy (what SHOW's origin-id says). In coordination
        runs, with its claim: the one in the reply (WITHCLAIM: ``claim`` is ``"claim",
        n``), else the one the delivery gave the node's copy, if any."""
        now = self.loop.now
        if self.workload.check_bodies:
            self.history.note_body(job_id, body, f"GETJOB on {process.name}", now)
        if queue == self.workload.deadletter:
            job = _copy(process, job_id)
            extra = job.extra if job is not None else None
            origin = extra.origin_id if extra is not None else None
            created = job.ctime // 1_000_000 if job is not None else now
            return self.history.dead_letter_delivered(
                job_id, origin or b"?", created, body, process.index, now
            )
        kind = POISON if body.endswith(POISON_MARK) else ""
        delivery = self.history.delivered(job_id, body, process.index, now, kind)
        if self.workload.claim_rate:
            delivery.claim = claim[-1] if claim else _claim_of(process, job_id)
        if self.workload.outcomes:
            delivery.incarnation = process.incarnation
        return delivery

    def choose(self, delivery: Delivery) -> str:
        if self.draining:
            return ACK
        job_id = delivery.job_id
        if delivery.kind == DEAD_LETTER:
            return FORGET if self.rng.random() < self.workload.forget_rate else ACK
        if delivery.kind == POISON and is_at_least_once(job_id):
            return NACK
        if not is_at_least_once(job_id):
            return FASTACK if self.rng.random() < self.workload.fastack_rate else ACK
        w = self.workload
        roll = self.rng.random()
        rates = (
            (FORGET, w.forget_rate),
            (NACK, w.nack_rate),
            (FASTACK, w.fastack_rate),
            (ACK_ELSEWHERE, w.ack_elsewhere_rate),
            (WORKING, w.working_rate),
        )
        for action, rate in rates:
            if roll < rate:
                return action
            roll -= rate
        return ACK

    def handle(self, process: SimNode, deliveries: list[Delivery]) -> None:
        """Work on each delivered job in turn, then ask for more."""
        if not deliveries:
            self.later(self.workload.think, self.step)
            return
        delivery, rest = deliveries[0], deliveries[1:]
        action = self.choose(delivery)
        self.history.decided(delivery, action)
        work = self.rng.randint(*self.workload.process_time)
        self.loop.call_later(work, self.finish, process, delivery, action, rest)

    def finish(
        self, process: SimNode, delivery: Delivery, action: str, rest: list[Delivery]
    ) -> None:
        if action != WORKING:
            self.history.in_work.pop(delivery.job_id, None)
        target = process
        if action == ACK_ELSEWHERE:
            others = [p for p in self.live_processes() if p is not process]
            target = self.rng.choice(others) if others else process
        if action == FORGET or not target.alive:
            if action != FORGET:
                self.history.decided(delivery, FORGET)  # the node is gone: so is the ack
            self.handle(process, rest)
            return
        if action == WORKING:
            self.working(process, delivery, rest)
            return

        before = _copy(target, delivery.job_id)
        requeued_by_nack = action == NACK and before is not None and before.state == ACTIVE
        argv = [COMMANDS[action], delivery.job_id]
        if action != FASTACK:
            argv += self.claim_option(delivery)
        outcomes = self.workload.outcomes
        if outcomes:
            argv += self.outcome_option(action, delivery.job_id)

        def done(value: Any) -> None:
            if is_error(value):
                self.refused(target, delivery, value, argv[0])
                self.history.decided(delivery, FORGET)
            elif action != NACK:
                self.history.ack_confirmed(delivery.job_id, self.loop.now)
                if outcomes:
                    result = argv[3] if len(argv) > 3 and argv[2] == b"RESULT" else None
                    self.history.ack_result(delivery.job_id, self.loop.now, result)
            elif requeued_by_nack and self.workload.deadletter:
                self._check_bound(target, delivery.job_id)
            elif outcomes and value == 1:
                self.nacked(target, delivery.job_id, argv)
            self.handle(process, rest)

        self.request(target, argv, done)

    def outcome_option(self, action: str, job_id: bytes) -> list[bytes]:
        """Outcomes runs: a NACK's DELAY, an ACKJOB's RESULT (derived from the job), or
        nothing, each sometimes."""
        w = self.workload
        if action == NACK and self.rng.random() < w.nack_delay_rate:
            return [b"DELAY", b"%d" % self.rng.randint(*w.nack_delay)]
        if action in (ACK, ACK_ELSEWHERE) and self.rng.random() < w.result_rate:
            return [b"RESULT", result_of(job_id)]
        return []

    def nacked(self, process: SimNode, job_id: bytes, argv: list[bytes]) -> None:
        """Outcomes runs: a NACK requeued (or postponed) the job on ``process``: record
        the delay it promised, its DELAY or else the job's backoff (by the counters of
        the node's copy, this NACK counted)."""
        delay = int(argv[-1]) * 1000 if argv[-2] == b"DELAY" else 0
        words = self.history.backoffs.get(job_id)
        job = _copy(process, job_id)
        if not delay and words is not None and job is not None:
            delay = backoff_ms(words, job.nacks + job.additional_deliveries)
        seen = len(self.history.deliveries.get(job_id, ()))
        life = process.incarnation
        self.history.nacks.append(Nack(job_id, process.index, self.loop.now, delay, seen, life))

    def claim_option(self, delivery: Delivery) -> list[bytes]:
        """``CLAIM n`` for a command on a delivery that got a claim, sometimes
        (coordination runs)."""
        w = self.workload
        if w.claim_ack_rate and delivery.claim and self.rng.random() < w.claim_ack_rate:
            return [b"CLAIM", b"%d" % delivery.claim]
        return []

    def refused(self, process: SimNode, delivery: Delivery, value: Any, command: bytes) -> None:
        """A command failed: record it if its claim was refused as stale."""
        if isinstance(value, hiredis.ReplyError) and str(value).startswith("STALECLAIM"):
            now = self.loop.now
            refused = StaleClaim(delivery.job_id, delivery.claim, process.index, now, command)
            self.history.stale_claims.append(refused)

    def working(self, process: SimNode, delivery: Delivery, rest: list[Delivery]) -> None:
        """WORKING on the delivering node (coordination runs: maybe with its claim and a
        progress text)."""
        w = self.workload
        argv = [b"WORKING", delivery.job_id, *self.claim_option(delivery)]
        text = None
        if w.progress_rate and self.rng.random() < w.progress_rate:
            text = b"%s-w%d-%d" % (self.name.encode(), delivery.workings, self.loop.now)
            argv.append(text)
        delivery.workings += 1
        self.request(process, argv, lambda value: self.worked(process, delivery, value, rest, text))

    def _check_bound(self, process: SimNode, job_id: bytes) -> None:
        """After a NACK that queued a job again: record it if the job went past its
        node's policy's bounds and is queued all the same (not dead-lettered)."""
        job = _copy(process, job_id)
        node = process.node
        if job is None or node is None or job.state != QUEUED:
            return
        rules = node.policies.for_queue(job.queue)  # type: ignore[arg-type]
        if rules is None:
            return
        max_nacks, max_deliveries = rules.get("max-nacks"), rules.get("max-deliveries")
        if (max_nacks and job.nacks > max_nacks) or (
            max_deliveries and job.nacks + job.additional_deliveries >= max_deliveries
        ):
            self.history.nack_overruns.append((job_id, process.index, self.loop.now))

    def worked(
        self,
        process: SimNode,
        delivery: Delivery,
        value: Any,
        rest: list[Delivery],
        text: bytes | None = None,
    ) -> None:
        """WORKING replied: finish the work within half the retry time, then ACKJOB (in
        coordination runs, sometimes WORKING again, or abandon the job instead)."""
        w = self.workload
        now = self.loop.now
        if w.outcomes and value is not CONNECTION_LOST:
            cancelled = isinstance(value, hiredis.ReplyError) and str(value).startswith("CANCELLED")
            call = WorkingCall(delivery.job_id, process.index, process.incarnation, now, cancelled)
            self.history.workings.append(call)
        if not isinstance(value, int):
            self.refused(process, delivery, value, b"WORKING")
            self.history.decided(delivery, FORGET)  # (-CANCELLED: the worker stops)
            self.history.in_work.pop(delivery.job_id, None)
            self.handle(process, rest)
            return
        if w.outcomes:
            self.history.in_work[delivery.job_id] = process.index
        if text is not None:
            self.history.progress.append(ProgressEntry(delivery.job_id, text, process.index, now))
        if self._working_reaches_every_copy(process, delivery.job_id):
            self.history.working(delivery.job_id, now, value)
        action = ACK
        if (w.progress_rate or w.outcomes) and not self.draining:
            roll = self.rng.random()
            if roll < w.abandon_rate:
                action = FORGET
                self.history.decided(delivery, FORGET)
            elif roll < w.abandon_rate + w.working_again_rate and delivery.workings < MAX_WORKINGS:
                action = WORKING
        self.loop.call_later(value * 500, self.finish, process, delivery, action, rest)

    def _working_reaches_every_copy(self, process: SimNode, job_id: bytes) -> bool:
        """WORKING goes to the holders the node knows; a copy federation moved elsewhere
        (YOURJOBS is not announced to the other holders) may not hear of it."""
        job = _copy(process, job_id)
        if job is None:
            return False
        told = set(job.nodes_delivered)
        return all(
            p.node_id in told
            for p in self.processes
            if p.node is not None and (copy := p.copy(job_id)) is not None and copy.state != ACKED
        )


class PolicyAdmin(Budgeted):
    """An administrator writing queue policies (QPOLICY SET and DEL) on random nodes.

    Dead-letter policies (``dl-*``) match the workload's queues (a queue's name, or
    a glob of it) with ``max-nacks`` 1 to 3, sometimes ``max-deliveries`` and a
    ``priority``, and the workload's dead-letter queue; other policies (``misc-*``)
    match queues nobody uses. A fifth of the writes set the same policy on two
    nodes at the same instant, which a partition keeps apart until it heals. Every
    write a node acknowledges is recorded with the version it made.
    """

    NAMES = (b"dl-a", b"dl-b", b"dl-c", b"misc-a", b"misc-b")
    CONCURRENT_RATE = 0.2
    DELETE_RATE = 0.25

    def setup(self, process: SimNode) -> None:
        """Before the window: the dead-letter queue's own policy (a short retry, so that
        a dead letter a consumer forgets comes back within the run; never changed)
        and a first dead-letter policy."""
        dlq = self.workload.deadletter
        self.write(process, dlq, dlq, {"retry": 2})
        self.write(process, self.NAMES[0], self.workload.queues[0][:1] + b"*",
                   {"max-nacks": self.rng.randint(1, 3), "deadletter": dlq})  # fmt: skip

    def budget(self) -> int:
        return self.workload.policy_writes

    def send(self, live: list[SimNode]) -> None:
        rng = self.rng
        name = rng.choice(self.NAMES)
        roll = rng.random()
        if roll < self.CONCURRENT_RATE and len(live) > 1:
            for process in rng.sample(live, 2):
                self.write(process, name, *self.policy(name))
        elif roll < self.CONCURRENT_RATE + self.DELETE_RATE:
            self.delete(rng.choice(live), name)
        else:
            self.write(rng.choice(live), name, *self.policy(name))
        self.later(self.workload.admin_think, self.step)

    def policy(self, name: bytes) -> tuple[bytes, dict[str, int | bytes]]:
        """A random pattern and options for the policy ``name``."""
        rng = self.rng
        options: dict[str, int | bytes]
        if name.startswith(b"dl-"):
            queue = rng.choice(self.workload.queues)
            pattern = rng.choice((queue, queue[:1] + b"*", queue[:-1] + b"?"))
            options = {"max-nacks": rng.randint(1, 3), "deadletter": self.workload.deadletter}
            if rng.random() < 0.3:
                options["max-deliveries"] = rng.randint(3, 6)
            if rng.random() < 0.3:
                options["priority"] = rng.randint(0, 9)
            return pattern, options
        pattern = rng.choice((b"x*", b"other-?", b"jobs:[ab]*"))
        options = {"ttl": rng.randint(60, 7200), "replicate": rng.randint(1, 3)}
        if rng.random() < 0.5:
            options["maxlen"] = rng.randint(1, 100)
        return pattern, options

    def write(
        self, process: SimNode, name: bytes, pattern: bytes, options: dict[str, int | bytes]
    ) -> None:
        """QPOLICY SET (the reply is immediate)."""
        argv = [b"QPOLICY", b"SET", name, pattern]
        for option, value in options.items():
            argv += [option.encode(), value if isinstance(value, bytes) else b"%d" % value]
        self.request(
            process, argv, lambda value: self.written(process, name, pattern, options, value)
        )

    def delete(self, process: SimNode, name: bytes) -> None:
        """QPOLICY DEL (``:0`` when the node holds no such policy: nothing written)."""
        self.request(
            process,
            [b"QPOLICY", b"DEL", name],
            lambda value: self.written(process, name, b"", {}, value),
        )

    def written(
        self,
        process: SimNode,
        name: bytes,
        pattern: bytes,
        options: dict[str, int | bytes],
        value: Any,
    ) -> None:
        """A write acknowledged (+OK, or :1 for a deletion): record the version the node
        gave it (what the admin sent, with the node's version)."""
        node = process.node
        if node is None or value not in (b"OK", 1):
            return
        version = node.policies.records[name].version
        when = self.loop.now
        write = PolicyWrite(name, version, value == 1, pattern, options, process.index, when)
        self.history.policy_writes.append(write)


class Inspector(Budgeted):
    """A client reading jobs without consuming them (flow-to-disk runs): QPEEK (from
    the head or the tail) and JSCAN REPLY ALL read spilled jobs from disk and leave
    them there, SHOW loads one back. Every body it is given must be its job's
    (:meth:`History.note_body`), and each QPEEK must list its queue in the order
    GETJOB serves it (:func:`peek_out_of_order`). A JSCAN goes on from where the
    last one on that node stopped, so a scan walks the registry and then the spill
    index, shard by shard, across requests."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cursors: dict[int, int] = {}  # node -> the JSCAN cursor to go on from

    def budget(self) -> int:
        return self.workload.inspections

    def send(self, live: list[SimNode]) -> None:
        rng = self.rng
        process = rng.choice(live)
        roll = rng.random()
        if roll < 0.5:
            queue = rng.choice(self.workload.queues)
            count = rng.randint(1, 6) * rng.choice((1, -1))
            argv = [b"QPEEK", queue, b"%d" % count]
            self.request(process, argv, lambda value: self.peeked(process, value, count < 0))
        elif roll < 0.75 and self.history.added:
            job_id = rng.choice(list(self.history.added))
            self.request(process, [b"SHOW", job_id], lambda value: self.shown(process, value))
        else:
            cursor = self.cursors.get(process.index, 0)
            argv = [b"JSCAN", b"%d" % cursor, b"COUNT", b"%d" % rng.randint(1, 20)]
            self.request(process, [*argv, b"REPLY", b"all"], lambda v: self.scanned(process, v))

    def next_step(self) -> None:
        self.later(self.workload.think, self.step)

    def peeked(self, process: SimNode, value: Any, reverse: bool) -> None:
        if isinstance(value, list):
            where = f"QPEEK on {process.name}"
            for _queue, job_id, body in value:
                self.history.note_body(job_id, body, where, self.loop.now)
            ids = [item[1] for item in value]
            problem = peek_out_of_order(process, ids, reverse)
            if problem is not None:
                self.history.misordered.append(f"{problem} at {self.loop.now}")
            self.history.inspected["qpeek_jobs"] += len(value)
        self.next_step()

    def shown(self, process: SimNode, value: Any) -> None:
        if isinstance(value, list):
            self.show_fields(process, value, "SHOW")
        self.next_step()

    def scanned(self, process: SimNode, value: Any) -> None:
        if isinstance(value, list) and len(value) == 2:
            cursor, items = value
            self.cursors[process.index] = int(cursor)
            for fields in items:
                self.show_fields(process, fields, "JSCAN")
        self.next_step()

    def show_fields(self, process: SimNode, fields: list[Any], command: str) -> None:
        """A SHOW array (SHOW, or an item of JSCAN REPLY ALL): its body, if it has one
        (a dummy ack has none), must be its job's."""
        show = dict(zip(fields[::2], fields[1::2], strict=True))
        body = show.get(b"body")
        if body is not None:
            where = f"{command} on {process.name}"
            self.history.note_body(show[b"id"], body, where, self.loop.now)
            self.history.inspected[f"{command.lower()}_jobs"] += 1


def result_of(job_id: bytes) -> bytes:
    """The result consumers acknowledge a job with (outcomes runs)."""
    return b"done:" + job_id[-12:]


def backoff_ms(words: tuple[bytes, ...], attempts: int) -> int:
    """The delay a backoff (ADDJOB BACKOFF's words) gives a requeue, after ``attempts``
    NACKs and additional deliveries (this requeue's included), in ms."""
    if words[0] == b"fixed":
        return int(words[1]) * 1000
    base, cap = int(words[1]), int(words[2])
    return min(cap, base << max(attempts - 1, 0)) * 1000


def unknown_id(rng: random.Random) -> bytes:
    """A valid job ID (at least once) that no node made."""
    letters = b"abcdefghijklmnopqrstuvwxyz"
    return b"D-00000000-" + bytes(rng.choice(letters) for _ in range(24)) + b"-0e11"


class Waiter(Budgeted):
    """A client waiting for jobs' outcomes (outcomes runs): WAITJOB on a random node,
    holding the job or not, for a job added so far (or, sometimes, an ID nobody
    added), with a TIMEOUT or without; every call and its answer go to the history
    (an ``unknown`` answer with what the job looked like to the cluster then)."""

    def budget(self) -> int:
        return self.workload.waits

    def send(self, live: list[SimNode]) -> None:
        w = self.workload
        rng = self.rng
        h = self.history
        process = rng.choice(live)
        known = [*h.added, *h.doomed]
        job_id = rng.choice(known) if known and rng.random() >= w.unknown_rate else unknown_id(rng)
        timeout = rng.randint(*w.wait_timeout) if rng.random() < w.wait_timeout_rate else 0
        call = WaitCall(job_id, process.index, process.incarnation, self.loop.now, timeout)
        h.waits.append(call)
        argv = [b"WAITJOB", job_id]
        if timeout:
            argv += [b"TIMEOUT", b"%d" % timeout]
        self.request(process, argv, lambda value: self.answered(call, value))

    def answered(self, call: WaitCall, value: Any) -> None:
        call.answered = self.loop.now
        if value is CONNECTION_LOST:
            call.kind = DROPPED
        elif value is None:
            call.kind = NIL
        elif isinstance(value, list) and len(value) == 2:
            call.kind, call.result = value[0].decode(), value[1]
            if call.kind == "unknown":
                call.view = dependency_view(self.processes, self.history, call.job_id)
        else:
            call.kind = f"bad reply {value!r}"
        self.later(self.workload.think, self.step)


class Canceller(Budgeted):
    """A client cancelling jobs (outcomes runs): CANCEL, often of a job a consumer is
    working on (sent to another node than the worker's), else of a job added and not
    acknowledged yet, queued or not, on a random node; every CANCEL answered goes to
    the history."""

    THINK = (200, 1200)  # ms between CANCELs

    def budget(self) -> int:
        return self.workload.cancels

    def send(self, live: list[SimNode]) -> None:
        rng = self.rng
        h = self.history
        working = list(h.in_work.items())
        if working and rng.random() < self.workload.cancel_working_rate:
            job_id, worker = rng.choice(working)
            process = rng.choice([p for p in live if p.index != worker] or live)
        else:
            pending = [job_id for job_id in h.added if job_id not in h.acked]
            if not pending:
                self.later(self.THINK, self.step)
                return
            job_id, process = rng.choice(pending), rng.choice(live)
        self.request(process, [b"CANCEL", job_id], lambda v: self.answered(process, job_id, v))

    def answered(self, process: SimNode, job_id: bytes, value: Any) -> None:
        if isinstance(value, int):
            h = self.history
            seen = len(h.deliveries.get(job_id, ()))
            now = self.loop.now
            h.cancelled(Cancel(job_id, process.index, now, value, process.incarnation, seen))
        self.later(self.THINK, self.step)
