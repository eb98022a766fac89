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

Every choice comes from the actor's own random stream.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hiredis

from disquette.core.client import Client
from disquette.core.ids import is_at_least_once
from disquette.core.job import ACKED
from disquette.sim.history import (
    ACK,
    ACK_ELSEWHERE,
    FASTACK,
    FORGET,
    NACK,
    WORKING,
    AddedJob,
    Delivery,
    History,
)
from disquette.sim.loop import VirtualLoop
from disquette.sim.process import SimNode
from disquette.sim.trace import Trace

RETRY_LATER_MS = 100  # when no node is up
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
    delay_rate: float = 0.1  # jobs added with DELAY 1
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


class SimClient(Client):
    """One connection to one node incarnation; replies go to ``on_reply``."""

    __slots__ = ("incarnation", "on_reply", "process")

    def __init__(
        self, process: SimNode, name: str, on_reply: Callable[[SimClient, Any], None]
    ) -> None:
        assert process.state is not None
        super().__init__(process.state.new_client_id(), name.encode(), process.loop.now)
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


class Actor:
    """A client program: one request at a time, to whichever node it picks."""

    def __init__(
        self,
        name: str,
        loop: VirtualLoop,
        trace: Trace,
        rng: random.Random,
        processes: list[SimNode],
        history: History,
        workload: Workload,
    ) -> None:
        self.name = name
        self.loop = loop
        self.trace = trace
        self.rng = rng
        self.processes = processes
        self.history = history
        self.workload = workload
        self.connections: dict[int, SimClient] = {}
        self.waiting: tuple[SimClient, Callable[[Any], None]] | None = None
        self.stopped = False
        self.draining = False
        self.paused = False  # a consumer takes no new job meanwhile (it keeps polling)

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


class Producer(Actor):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent = 0

    def allowed_nodes(self) -> tuple[int, ...] | None:
        return self.workload.producer_nodes

    def step(self) -> None:
        w = self.workload
        if self.stopped or self.sent >= w.jobs:
            return
        process = self.pick()
        if process is None:
            self.loop.call_later(RETRY_LATER_MS, self.step)
            return
        rng = self.rng
        self.sent += 1
        queue = rng.choice(w.queues)
        at_most_once = rng.random() < w.at_most_once_rate
        live = len(self.live_processes())
        top = max(1, min(w.max_replicate, live))
        repl = 1 if at_most_once else rng.randint(min(w.min_replicate, top), top)
        async_ = repl > 1 and rng.random() < w.async_rate
        retry = 0 if at_most_once else rng.randint(*w.retry)
        delay = 1 if rng.random() < w.delay_rate else 0
        body = b"%s-%d" % (self.name.encode(), self.sent)
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
            b"%d" % w.ttl,
        ]
        if delay:
            argv += [b"DELAY", b"%d" % delay]
        if async_:
            argv.append(b"ASYNC")

        def replied(value: Any) -> None:
            if isinstance(value, bytes):
                node = process.node
                job = node.jobs.get(value) if node is not None else None
                delivered = job.nodes_delivered if job is not None else ()
                external = node is None or node.myself not in delivered
                holders = self._holders(delivered)
                when = self.loop.now
                added = AddedJob(value, queue, repl, async_, process.index, when, holders, external)
                self.history.add_acknowledged(added)
            else:
                self.history.add_failed(str(_summary(value)))
            self.later(w.think, self.step)

        self.request(process, argv, replied)

    def _holders(self, node_ids: tuple[bytes, ...]) -> tuple[int, ...]:
        index = {p.node_id: p.index for p in self.processes}
        return tuple(index[n] for n in node_ids if n in index)


class Consumer(Actor):
    def allowed_nodes(self) -> tuple[int, ...] | None:
        return self.workload.consumer_nodes

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
        argv += [b"COUNT", b"%d" % rng.randint(*w.count), b"FROM", *w.queues]

        def got(value: Any) -> None:
            if isinstance(value, list) and value:
                now = self.loop.now
                deliveries = [
                    self.history.delivered(job_id, body, process.index, now)
                    for _, job_id, body in value
                ]
                self.handle(process, deliveries)
            else:
                self.later(self.workload.think, self.step)

        self.request(process, argv, got)

    def choose(self, job_id: bytes) -> str:
        if self.draining:
            return ACK
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
        action = self.choose(delivery.job_id)
        self.history.decided(delivery, action)
        work = self.rng.randint(*self.workload.process_time)
        self.loop.call_later(work, self.finish, process, delivery, action, rest)

    def finish(
        self, process: SimNode, delivery: Delivery, action: str, rest: list[Delivery]
    ) -> None:
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
            self.request(
                target,
                [b"WORKING", delivery.job_id],
                lambda value: self.worked(process, delivery, value, rest),
            )
            return

        def done(value: Any) -> None:
            if is_error(value):
                self.history.decided(delivery, FORGET)
            elif action != NACK:
                self.history.ack_confirmed(delivery.job_id, self.loop.now)
            self.handle(process, rest)

        self.request(target, [COMMANDS[action], delivery.job_id], done)

    def worked(
        self, process: SimNode, delivery: Delivery, value: Any, rest: list[Delivery]
    ) -> None:
        """WORKING replied: finish the work within half the retry time, then ACKJOB."""
        if not isinstance(value, int):
            self.history.decided(delivery, FORGET)
            self.handle(process, rest)
            return
        if self._working_reaches_every_copy(process, delivery.job_id):
            self.history.working(delivery.job_id, self.loop.now, value)
        self.loop.call_later(value * 500, self.finish, process, delivery, ACK, rest)

    def _working_reaches_every_copy(self, process: SimNode, job_id: bytes) -> bool:
        """WORKING goes to the holders the node knows; a copy federation moved elsewhere
        (YOURJOBS is not announced to the other holders) may not hear of it."""
        node = process.node
        job = node.jobs.get(job_id) if node is not None else None
        if job is None:
            return False
        told = set(job.nodes_delivered)
        return all(
            p.node_id in told
            for p in self.processes
            if p.node is not None
            and (copy := p.node.jobs.get(job_id)) is not None
            and copy.state != ACKED
        )
