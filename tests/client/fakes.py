"""An in-memory cluster for testing the client's plans without sockets.

:class:`FakeCluster` performs the three requests of a plan (acquire, release,
exchange) against :class:`FakeNode` objects whose replies are scripted, and
records every command sent, so tests can check what went where and that
nothing was sent twice. Nodes add jobs as disquette does with DEDUP keys (the
same key in the same queue gives the same job), and the pauses a plan asks
for are recorded, not slept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from disquette.client.calls import Acquire, Context, Exchange, Release, Sleep
from disquette.client.errors import LeavingError
from disquette.client.models import Hello, NodeInfo
from disquette.client.topology import Address, Topology

#: A reply that makes the node drop the connection after executing the command.
DROP = object()
#: The options among the IDs of ACKJOB and NACK (each with a value).
_ID_OPTIONS = frozenset({b"CLAIM", b"RESULT", b"DELAY"})
LEAVING = LeavingError(
    "LEAVING This node is leaving the cluster, please connect to a different one"
)


@dataclass
class FakeNode:
    id: str
    address: Address
    up: bool = True
    leaving: bool = False
    handler: Callable[[tuple[bytes, ...]], Any] | None = None
    #: Command names whose reply is lost once (the command is executed).
    drop_once: set[bytes] = field(default_factory=set)
    executed: list[tuple[bytes, ...]] = field(default_factory=list)
    #: (queue, DEDUP key) -> the ID of the job added with it.
    dedup: dict[tuple[bytes, bytes], bytes] = field(default_factory=dict)

    def handle(self, args: tuple[bytes, ...]) -> Any:
        self.executed.append(args)
        name = args[0].upper()
        reply = self.handler(args) if self.handler else default_reply(self, args)
        if name in self.drop_once:
            self.drop_once.discard(name)
            return DROP
        return reply


def default_reply(node: FakeNode, args: tuple[bytes, ...]) -> Any:
    name = args[0].upper()
    if node.leaving and name in (b"GETJOB", b"ADDJOB"):
        return LEAVING
    if name == b"ADDJOB":
        job = b"D-" + node.id[:8].encode() + b"-%024d-05a1" % len(node.executed)
        if b"DEDUP" in args[4:]:
            key = (args[1], args[args.index(b"DEDUP", 4) + 1])
            job = node.dedup.setdefault(key, job)
        return job
    if name in (b"ACKJOB", b"FASTACK", b"NACK", b"CANCEL"):  # the IDs
        return len(args) - 1 - 2 * sum(a.upper() in _ID_OPTIONS for a in args[1:])
    if name == b"GETJOB":
        return []
    if name == b"SHOW":
        return None
    if name == b"WORKING":
        return 5
    return b"OK"


@dataclass
class FakeLease:
    address: Address
    hello: Hello | None


class FakeCluster:
    def __init__(self, *nodes: FakeNode) -> None:
        self.nodes = {n.address: n for n in nodes}
        self.sent: list[tuple[Address, tuple[bytes, ...]]] = []
        self.connections: list[Address] = []
        self.pooled: set[Address] = set()
        self.slept: list[float] = []

    def hello(self, node: FakeNode) -> Hello:
        infos = []
        for other in self.nodes.values():
            priority = 100 if other.leaving else (1 if other.up else 10)
            infos.append(NodeInfo(other.id, other.address[0], other.address[1], priority))
        return Hello(1, node.id, tuple(infos))

    def run(self, topology: Topology, call: Any, pinned: Address | None = None) -> Any:
        plan = call.plan(Context(topology, pinned))
        value: Any = None
        while True:
            try:
                op = plan.send(value)
            except StopIteration as stop:
                return stop.value
            value = self.perform(op)

    def perform(self, op: Any) -> Any:
        if isinstance(op, Acquire):
            node = self.nodes.get(op.address)
            self.connections.append(op.address)
            if node is None or not node.up:
                self.pooled.discard(op.address)
                return ConnectionRefusedError(f"{op.address} refused")
            if op.address in self.pooled:  # a reused connection: no new handshake
                return FakeLease(op.address, None)
            self.pooled.add(op.address)
            return FakeLease(op.address, self.hello(node))
        if isinstance(op, Release):
            return None
        if isinstance(op, Sleep):
            self.slept.append(op.seconds)
            return None
        assert isinstance(op, Exchange)
        node = self.nodes[op.lease.address]
        batch = op.batch
        while not batch.done:
            for command in batch.outgoing():
                self.sent.append((node.address, command.args))
                reply = node.handle(command.args)
                if reply is DROP or not node.up:
                    self.pooled.discard(node.address)
                    batch.lost(ConnectionResetError("connection reset"))
                    return None
                batch.received([reply])
        return None


def node(letter: str, port: int, **kwargs: Any) -> FakeNode:
    return FakeNode(letter * 40, ("10.0.0.1", port), **kwargs)


def job_id(creator: FakeNode, n: int = 0) -> str:
    return f"D-{creator.id[:8]}-{n:024d}-05a1"
