"""The virtual network: bus links between simulated nodes, and their faults.

Each running node incarnation is attached through a :class:`NodeBus`, which
implements the core's ``Bus`` contract (``send``, ``reply``, ``connect``,
``disconnect``) the way the server's TCP bus does: one outgoing
:class:`Connection` per peer, opened by ``connect`` and reported back with
``Node.link_up`` / ``Node.link_down`` (a failed attempt too; a ``disconnect``
is not reported); ``send`` to a peer without a link that is up drops the
message; ``reply`` answers on the connection a message came from.

Messages cross the network as the server's bus frames them
(:mod:`disquette.protocol.frames`, one frame per message), so the receiving
core gets exactly what TCP would hand it, and a message the core could not
have sent over a real bus fails the run. Each side of a connection is a
:class:`LinkEnd`, the ``Link`` the membership reads: the outgoing side knows
the node ID it was opened for, the inbound side the local address the peer
reached.

What a real network does to those links is decided here, from the run's seed,
and follows TCP unless said otherwise:

* every message takes a random latency; a connection delivers in order;
* a lost message (``drop``) resets its connection, as loss does in TCP: that
  message and everything behind it on the connection are lost, and the owner
  sees the link go down and must reconnect (messages sent meanwhile are
  dropped by ``send``, as the Bus contract says);
* any directed pair of nodes can be cut (:meth:`Network.cut`,
  :meth:`Network.partition`) and healed: connecting across a cut times out,
  and messages on established connections are held — TCP retransmits — and
  arrive after the heal, late, unless the connection closed meanwhile; as with
  a real partition, nodes notice only through their own timeouts;
* a connection can be broken (:meth:`Network.break_link`);
* a crashed node's connections die with it; peers that can still reach it are
  told at once (the kernel closes the sockets of a killed process), the others
  when the partition heals or when they give up on the link themselves;
* beyond TCP, to stress the idempotence of the job protocols, a message can
  be duplicated, or reordered (allowed to overtake the ones sent before it).

Each node reads frames with its own codec (core/dialect.py): a node running an older
bus protocol refuses what it does not know, as that release's decoder does. A frame
refused closes its connection, as the server does, and is recorded in
:attr:`Network.unreadable`: the runner reports each as a violation (a node sent a
peer what the peer cannot read).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from disquette.core import messages as msg
from disquette.core.membership import BUS_PORT_OFFSET
from disquette.core.messages import Header, Message
from disquette.protocol.frames import FrameError, decode_frame, encode_frame
from disquette.sim.loop import VirtualLoop
from disquette.sim.trace import Trace

if TYPE_CHECKING:
    from disquette.core.node import Node

FRAME_PREFIX = 4  # the length prefix of a frame
_FLAG_NAMES = ("NOREPLY", "INCR_NACKS", "INCR_DELIV", "FULL_TABLE", "ASK")
MESSAGE_NAMES = {
    value: name
    for name, value in vars(msg).items()
    if name.isupper() and type(value) is int and value in msg.SHAPES and name not in _FLAG_NAMES
}
_JOB_ID_MESSAGES = frozenset(
    (
        msg.ENQUEUE,
        msg.QUEUED,
        msg.WILLQUEUE,
        msg.WORKING,
    )
)
_JOB_LIST_MESSAGES = frozenset((msg.GOTJOB, msg.DELJOB))
_JOB_PAIRS_MESSAGES = frozenset((msg.SETACK, msg.GOTACK))


def describe(message: Message) -> tuple[Any, ...]:
    """A short, hashable summary of a message for the trace."""
    kind = message[0]
    name = MESSAGE_NAMES.get(kind, kind)
    if kind in _JOB_ID_MESSAGES:
        return (name, *message[1:])
    if kind in _JOB_LIST_MESSAGES:
        return (name, len(message[1]))
    if kind in _JOB_PAIRS_MESSAGES:
        return (name, len(message[1]) // 2)
    if kind == msg.REPLJOB:
        return (name, bytes(message[1][4:44]))  # the job ID of the serialized job
    if kind == msg.YOURJOBS:
        return (name, len(message[1]))
    if kind in (msg.NEEDJOBS, msg.PAUSE):
        return (name, message[1], message[2])
    if kind == msg.FAIL:
        return (name, message[1][:8])
    return (name,)


@dataclass
class NetworkFaults:
    """How the network treats messages (the rates are per message)."""

    latency_min: int = 1  # ms
    latency_max: int = 4
    drop: float = 0.0  # a lost message resets its connection
    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_delay: int = 30  # extra ms at most for a reordered message or a duplicate
    connect_timeout: int = 1000  # ms for a connect attempt across a cut to fail


class LinkEnd:
    """One side of a connection, as the core receiving on it sees it (its ``Link``)."""

    __slots__ = ("bus", "conn", "local_ip", "node_id")

    def __init__(self, conn: Connection, bus: NodeBus, node_id: bytes | None) -> None:
        self.conn = conn
        self.bus = bus  # the node on this side
        self.node_id = node_id  # the outgoing side: the peer ID the link was opened for
        self.local_ip = bus.ip  # this side's address, as the other side reached it


class Connection:
    """One outgoing bus link: ``src`` connected to ``dst``, which ``src`` calls ``key``."""

    __slots__ = ("cid", "dst", "inbound", "key", "notified", "open", "outbound", "src", "streams")

    def __init__(self, cid: int, src: NodeBus, dst: NodeBus, key: bytes) -> None:
        self.cid = cid
        self.src = src
        self.dst = dst
        self.key = key
        self.outbound = LinkEnd(self, src, key)
        self.inbound = LinkEnd(self, dst, None)
        self.open = True
        self.notified = False  # the owner was told the link went down
        # Per direction (0: src to dst, 1: back), the messages on their way, in order.
        self.streams: tuple[deque[Arrival], deque[Arrival]] = (deque(), deque())

    def __repr__(self) -> str:
        return f"Connection({self.cid}, {self.src.name}->{self.dst.name})"


class Arrival(NamedTuple):
    """A message on its way: the frame the receiver decodes, the message for the trace."""

    when: int  # when it reaches the receiver (unless something is in the way)
    conn: Connection
    sender: NodeBus
    receiver: NodeBus
    frame: bytes
    message: Message


class NodeBus:
    """A node incarnation on the network: the ``Bus`` its core talks to.

    ``settle`` is what the process does at the end of every event it handles
    (serve blocked clients, write the AOF); the network calls it after each
    delivery and each link event.
    """

    __slots__ = (
        "alive",
        "index",
        "ip",
        "links",
        "name",
        "network",
        "node",
        "pending",
        "port",
        "settle",
    )

    def __init__(
        self, network: Network, index: int, ip: bytes, port: int, settle: Callable[[], None]
    ) -> None:
        self.network = network
        self.index = index
        self.name = f"n{index}"
        self.ip = ip
        self.port = port
        self.settle = settle
        self.node: Node | None = None  # set once the node is built around this bus
        self.alive = True
        self.links: dict[bytes, Connection] = {}  # peer ID (as the core names it) -> link
        self.pending: dict[bytes, bool] = {}  # connect attempts in progress

    # The Bus contract ---------------------------------------------------------------

    def send(self, node_id: bytes, message: Message) -> None:
        conn = self.links.get(node_id)
        if conn is None or not conn.open:
            self.network.trace_message("nolink", self, None, message)
            return
        self.sent_one()
        self.network.transmit(conn, self, message)

    def reply(self, link: Any, message: Message) -> None:
        if isinstance(link, LinkEnd) and link.bus is self and link.conn.open:
            self.sent_one()
            self.network.transmit(link.conn, self, message)

    def sent_one(self) -> None:
        """Count a message as the server's bus does (INFO cluster)."""
        assert self.node is not None
        self.node.cluster.messages_sent += 1

    def connect(self, node_id: bytes, ip: bytes, port: int) -> None:
        conn = self.links.get(node_id)
        if (conn is not None and conn.open) or node_id in self.pending or not self.alive:
            return
        # (the simulated nodes listen at their client port; their bus is 10000 above)
        self.network.open(self, node_id, ip, port - BUS_PORT_OFFSET)

    def disconnect(self, node_id: bytes) -> None:
        self.pending.pop(node_id, None)
        conn = self.links.pop(node_id, None)
        if conn is not None and conn.open:
            conn.notified = True
            self.network.close(conn, "disconnect")

    # From the network ------------------------------------------------------------------

    def link_down(self, conn: Connection) -> None:
        """The network tells the owner of ``conn`` that it is gone."""
        if conn.notified or not self.alive:
            return
        conn.notified = True
        if self.links.get(conn.key) is conn:
            del self.links[conn.key]
        assert self.node is not None
        self.node.link_down(conn.key)
        self.settle()


class Network:
    def __init__(self, loop: VirtualLoop, rng: random.Random, trace: Trace) -> None:
        self.loop = loop
        self.rng = rng
        self.trace = trace
        self.faults = NetworkFaults()
        self.listeners: dict[tuple[bytes, int], NodeBus] = {}
        self.cuts: set[tuple[int, int]] = set()  # (from index, to index) pairs that are cut
        self.connections: dict[int, Connection] = {}  # open connections by ID, oldest first
        self.stalled: list[tuple[Connection, int]] = []  # streams stopped at a cut
        self.held: list[Arrival] = []  # reordered messages that reached a cut
        self._next_cid = 0
        self.sent = 0
        self.delivered = 0
        #: Messages and frame bytes delivered, by message type (bench/cluster_size.py).
        self.by_type: dict[int, list[int]] = {}
        self.dropped = 0
        self.unreadable: list[str] = []  # frames a node could not read (see the module doc)

    # Topology ----------------------------------------------------------------------------

    def attach(self, bus: NodeBus) -> None:
        """A node incarnation starts listening at its address."""
        self.listeners[(bus.ip, bus.port)] = bus

    def detach(self, bus: NodeBus) -> None:
        """A node incarnation dies: its connections die with it."""
        bus.alive = False
        if self.listeners.get((bus.ip, bus.port)) is bus:
            del self.listeners[(bus.ip, bus.port)]
        for conn in list(self.connections.values()):
            if conn.src is bus or conn.dst is bus:
                self.close(conn, "crash")
        bus.links.clear()
        bus.pending.clear()

    def can_reach(self, a: int, b: int) -> bool:
        return (a, b) not in self.cuts

    def cut(self, a: int, b: int) -> None:
        """Lose every message from node ``a`` to node ``b`` (one way) until healed."""
        self.cuts.add((a, b))
        self.trace.record(self.loop.now, "cut", a, b)

    def partition(self, groups: list[list[int]]) -> None:
        """Cut every pair of nodes that are in different groups, both ways."""
        for i, group in enumerate(groups):
            for other in groups[i + 1 :]:
                for a in group:
                    for b in other:
                        self.cuts.add((a, b))
                        self.cuts.add((b, a))
        self.trace.record(self.loop.now, "partition", *(tuple(g) for g in groups))

    def heal(self) -> None:
        """Remove every cut: held messages go on, in order, and links that died
        meanwhile are now reported to their owners."""
        self.cuts.clear()
        self.trace.record(self.loop.now, "heal")
        stalled, self.stalled = self.stalled, []
        for conn, direction in stalled:
            self.loop.call_later(self._latency(), self._pump, conn, direction)
        held, self.held = self.held, []
        for arrival in held:
            self.loop.call_later(self._latency(), self._arrive_alone, arrival)
        for bus in list(self.listeners.values()):
            for conn in list(bus.links.values()):
                if not conn.open:
                    self.loop.call_later(self._latency(), bus.link_down, conn)

    # Connections -------------------------------------------------------------------------

    def open(self, bus: NodeBus, node_id: bytes, ip: bytes, port: int) -> None:
        bus.pending[node_id] = True
        rtt = 2 * self._latency()
        self.loop.call_later(rtt, self._connected, bus, node_id, ip, port)

    def _connected(self, bus: NodeBus, node_id: bytes, ip: bytes, port: int) -> None:
        if not bus.alive or node_id not in bus.pending:
            return  # the node died, or gave up on this link meanwhile
        target = self.listeners.get((ip, port))
        reachable = target is None or (
            self.can_reach(bus.index, target.index) and self.can_reach(target.index, bus.index)
        )
        if target is not None and reachable:
            del bus.pending[node_id]
            self._next_cid += 1
            conn = Connection(self._next_cid, bus, target, node_id)
            self.connections[conn.cid] = conn
            bus.links[node_id] = conn
            self.trace.record(self.loop.now, "link-up", bus.name, target.name, conn.cid)
            assert bus.node is not None
            bus.node.link_up(node_id)
            bus.settle()
            return
        # Refused at once when nobody listens there; timed out across a cut.
        delay = 0 if reachable else self.faults.connect_timeout
        self.loop.call_later(delay, self._connect_failed, bus, node_id)

    def _connect_failed(self, bus: NodeBus, node_id: bytes) -> None:
        if not bus.alive or bus.pending.pop(node_id, None) is None:
            return
        self.trace.record(self.loop.now, "conn-fail", bus.name, node_id[:8])
        assert bus.node is not None
        bus.node.link_down(node_id)
        bus.settle()

    def close(self, conn: Connection, why: str) -> None:
        """Close a connection; its owner learns it when a reset can reach it."""
        if not conn.open:
            return
        conn.open = False
        self.connections.pop(conn.cid, None)
        self.trace.record(self.loop.now, "link-down", conn.src.name, conn.dst.name, conn.cid, why)
        owner = conn.src
        if not conn.notified and owner.alive and self.can_reach(conn.dst.index, owner.index):
            self.loop.call_later(self._latency(), owner.link_down, conn)

    def break_link(self, conn: Connection) -> None:
        """A fault: the connection resets (its owner sees the link go down)."""
        self.close(conn, "broken")

    # Messages ----------------------------------------------------------------------------

    def _latency(self) -> int:
        f = self.faults
        return self.rng.randint(f.latency_min, f.latency_max)

    def transmit(self, conn: Connection, sender: NodeBus, message: Message) -> None:
        receiver = conn.dst if sender is conn.src else conn.src
        self.sent += 1
        f = self.faults
        rng = self.rng
        if f.drop and rng.random() < f.drop:
            self.trace_message("drop", sender, receiver, message)
            self.dropped += 1
            self.close(conn, "reset")
            return
        assert sender.node is not None
        frame = encode_frame(sender.node.cluster.header(), [message])
        self.trace_message("send", sender, receiver, message)
        now = self.loop.now
        when = now + self._latency()
        if f.reorder and rng.random() < f.reorder:
            when += rng.randint(0, f.reorder_delay)
            arrival = Arrival(when, conn, sender, receiver, frame, message)
            self.loop.call_at(when, self._arrive_alone, arrival)
        else:
            stream = conn.streams[0 if sender is conn.src else 1]
            if stream:
                when = max(when, stream[-1].when)
            else:
                self.loop.call_at(when, self._pump, conn, 0 if sender is conn.src else 1)
            stream.append(Arrival(when, conn, sender, receiver, frame, message))
        if f.duplicate and rng.random() < f.duplicate:
            self.trace_message("dup", sender, receiver, message)
            again = when + rng.randint(0, f.reorder_delay)
            self.loop.call_at(
                again, self._arrive_alone, Arrival(again, conn, sender, receiver, frame, message)
            )

    def _pump(self, conn: Connection, direction: int) -> None:
        """Deliver a connection's messages in order, stopping at a cut (TCP retransmits)."""
        stream = conn.streams[direction]
        while stream:
            arrival = stream[0]
            if not conn.open or not arrival.receiver.alive:
                for lost in stream:
                    self.trace_message("lost", lost.sender, lost.receiver, lost.message)
                    self.dropped += 1
                stream.clear()
                return
            if arrival.when > self.loop.now:
                self.loop.call_at(arrival.when, self._pump, conn, direction)
                return
            if not self.can_reach(arrival.sender.index, arrival.receiver.index):
                self.trace_message("held", arrival.sender, arrival.receiver, arrival.message)
                self.stalled.append((conn, direction))
                return
            stream.popleft()
            self._deliver(arrival)

    def _arrive_alone(self, arrival: Arrival) -> None:
        """A message outside its connection's order (reordered or duplicated)."""
        if not arrival.conn.open or not arrival.receiver.alive:
            self.trace_message("lost", arrival.sender, arrival.receiver, arrival.message)
            self.dropped += 1
        elif not self.can_reach(arrival.sender.index, arrival.receiver.index):
            self.trace_message("held", arrival.sender, arrival.receiver, arrival.message)
            self.held.append(arrival)
        else:
            self._deliver(arrival)

    def _deliver(self, arrival: Arrival) -> None:
        conn, sender, receiver = arrival.conn, arrival.sender, arrival.receiver
        self.delivered += 1
        counts = self.by_type.setdefault(arrival.message[0], [0, 0])
        counts[0] += 1
        counts[1] += len(arrival.frame)
        self.trace_message("recv", sender, receiver, arrival.message)
        node = receiver.node
        assert node is not None
        try:
            fields, messages = decode_frame(arrival.frame[FRAME_PREFIX:], node.dialect.codec)
        except FrameError as e:
            self.unreadable.append(
                f"{receiver.name} could not read {sender.name}'s {describe(arrival.message)}: {e}"
            )
            self.close(conn, "unreadable")
            return
        header = Header(*fields)
        link = conn.inbound if receiver is conn.dst else conn.outbound
        for decoded in messages:
            node.receive(header, decoded, link, sender.ip)
        receiver.settle()

    def trace_message(
        self, what: str, sender: NodeBus, receiver: NodeBus | None, message: Message
    ) -> None:
        to = receiver.name if receiver is not None else "-"
        self.trace.record(self.loop.now, what, sender.name, to, *describe(message))
