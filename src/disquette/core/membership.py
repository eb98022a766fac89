"""Cluster membership: the node table, gossip, failure detection and nodes.conf.

Every node keeps a table of the nodes it knows (itself included): ID, address,
flags (myself, PFAIL, FAIL, handshake, noaddr, meet, leaving), ping and pong
times, whether an outgoing bus link is up, and failure reports. Jobs need only
a few questions answered (how big is the cluster, who is reachable, who has a
link, who is known); the rest of this module is the protocol that keeps the
table true, Disque's (and Redis Cluster 3.0's) as in reference section 10:

* **Joining.** CLUSTER MEET adds a *handshake* node under a random temporary
  ID, flagged to be sent a MEET. The MEET makes the other side add us as a
  handshake node of its own; the first PONG over the link we opened tells us
  the real ID, and the temporary node is renamed (or dropped, when that ID is
  known already). PING, PONG and MEET carry *gossip* about a few other nodes;
  a known sender gossiping about an unknown node starts a handshake with it, so
  a chain of MEETs becomes a full mesh.
* **Failure detection.** Every 100 ms the cluster cron connects to nodes
  without a link, pings those whose pong is getting old, reconnects links that
  stay silent (half the node timeout, but at least a second: beyond Disque, a
  slow link is kept, since what is sent while one reconnects is lost), and flags
  PFAIL a node whose ping has been unanswered for ``cluster-node-timeout`` (beyond
  Disque, a PING or MEET from a node this node has no link to opens one at once,
  without waiting for the cron: a restarted node's PONG clears its flags within a
  round trip). The
  slowest recent round trip sets how long a node waits for its peers' answers
  (``answer_time``). Gossip reports of PFAIL/FAIL from other nodes are
  kept for twice that time; when a majority of the cluster (this node
  included) agrees, the node is flagged FAIL and a FAIL message is broadcast.
  A PONG from the node clears both flags.
* **Leaving.** Every message header carries the sender's LEAVING flag.
* **Announced addresses** (beyond Disque, Redis's ``cluster-announce-ip``, ``-port``
  and ``-bus-port``). A node tells its peers the address to reach it at, whatever it
  binds: its frames' headers carry the announced client port, and an ADDRESS message
  (feature ``addresses``, never sent to a peer that does not speak it) carries the
  announced IP and bus port, sent on each new link and whenever CONFIG SET changes
  them. A peer that announced an IP is known at that IP, not at the source address
  of its connections (a NAT's, a container host's); the others are known as before, at
  the address their PINGs come from. A bus port other than the client port + 10000 is
  kept per node (``vars node-bus-port ID N`` in nodes.conf, a line 0.1.0 skips), passed
  on in ADDRESS for the nodes the receiver may not know yet, and given to CLUSTER MEET
  as a third argument; peers that do not speak ``addresses`` (0.1.0) reach the bus at
  the announced client port + 10000.
* **Clock skew** (beyond Disque). PING and MEET carry the sender's clock reading,
  and the PONG that answers echoes it with the responder's own: each PONG is a
  sample of the peer's clock offset with a round-trip bound, which
  :mod:`~disquette.core.clock` turns into an estimate. A peer whose skew is
  certainly over ``clock-skew-warn-ms`` is logged once as a warning, and once
  (a notice) when it is certainly back under; CLUSTER CLOCKS and INFO cluster
  show the estimates.
* **Data generation** (beyond Disque). Every header also carries the sender's
  data generation, a number that grows each time the node starts without the
  jobs it held (see :mod:`~disquette.core.repair`). A known node announcing a
  higher generation than before lost every copy it held: the change is logged
  and handed to the repair. With repair on, a frame announcing a lower
  generation than the one known comes from a dead incarnation and is ignored.
  The generation is kept in nodes.conf (``vars data-generation N``, a line
  Disque skips) so that a node that reloads its AOF keeps it, and so are the
  last generations seen from the others (``vars node-generation ID N``), so
  that a node restarted with its AOF notices a peer that restarted empty
  meanwhile.
* **nodes.conf.** The table is persisted as CLUSTER NODES lines (Disque's six
  fields) whenever it changes, and reloaded at start so a restarted node keeps its
  identity and peers. Beyond Disque, the file says its format with a ``vars
  nodes-conf-format N RELEASE`` line, which the releases before versions skip
  (they skip every ``vars`` line they do not know): a file without one is format
  1 (0.1.0's); format 2 (0.2.0) is format 1 with that line, so 0.1.0 reads it; a
  format above :data:`NODES_CONF_FORMAT` is refused at start, both formats named.
  Saving is requested while handling an event and done once at the end of it,
  like Disque's ``clusterDoBeforeSleep``.

Like the rest of the core this never does I/O: time comes from the node's
clock, randomness from its rng, messages leave through its bus, and nodes.conf
is written through a :class:`ConfigStore` the shell provides.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

from disquette import __version__
from disquette.core import messages as msg
from disquette.core.clock import DEFAULT_WARN_MS, PeerClock
from disquette.core.dialect import V1_FEATURES
from disquette.core.job import WILLQUEUE_ADVANCE
from disquette.core.messages import Header, Message
from disquette.protocol.frames import VERSION_SHIFT

if TYPE_CHECKING:
    import random

    from disquette.core.node import Node

# Node flags (CLUSTER NODES order: myself, fail?, fail, handshake, noaddr, leaving).
MYSELF: Final = 1
PFAIL: Final = 2
FAIL: Final = 4
HANDSHAKE: Final = 8
NOADDR: Final = 16
MEET: Final = 32  # internal: send a MEET rather than a PING on the first link
LEAVING: Final = 64

FLAG_NAMES: Final = ((MYSELF, "myself"), (PFAIL, "fail?"), (FAIL, "fail"), (HANDSHAKE, "handshake"),
              (NOADDR, "noaddr"), (LEAVING, "leaving"))  # fmt: skip
FLAGS_BY_NAME: Final = {name.encode(): bit for bit, name in FLAG_NAMES} | {b"noflags": 0}
UNREACHABLE: Final = HANDSHAKE | LEAVING | PFAIL | FAIL
GOSSIP_FLAGS: Final = PFAIL | FAIL | HANDSHAKE | NOADDR | LEAVING

NODE_ID_LEN: Final = 40
BUS_PORT_OFFSET: Final = 10000
MAX_PORT: Final = 65535 - BUS_PORT_OFFSET  # a client port whose bus port exists
CRON_PERIOD_MS: Final = 100
RANDOM_PING_EVERY: Final = 10  # cron runs: once a second
RANDOM_PING_SAMPLE: Final = 5
MIN_HANDSHAKE_TIMEOUT: Final = 1000
FAIL_REPORT_VALIDITY_MULT: Final = 2
BLACKLIST_TTL_MS: Final = 60_000
#: A link whose PONG is overdue by half the node timeout is reconnected (Disque), but
#: never sooner than this: a short node timeout on a busy node would otherwise recycle
#: working links, and every message sent while one reconnects is lost.
LINK_SILENCE_MIN_MS: Final = 1000
ROUND_TRIP_DECAY: Final = 15  # sixteenths kept per cron run: a slow round trip halves in ~1 s
#: The nodes.conf format this release writes (1: the files of the releases before versions).
NODES_CONF_FORMAT: Final = 2
FORMAT_VAR: Final = b"nodes-conf-format"
GENERATION_VAR: Final = b"data-generation"
PEER_GENERATION_VAR: Final = b"node-generation"
BUS_PORT_VAR: Final = b"node-bus-port"
# Beyond Disque: ``vars <table> <hex>``, a record of a replicated table (core/replicated.py):
# ``policy`` (core/policy.py), ``cron`` (core/cron.py) or ``acl`` (core/acl.py).
TABLE_VARS: Final = (b"policy", b"cron", b"acl")


class Link(Protocol):
    """A bus connection a message arrived on, as the shell describes it to the core.

    PINGs and MEETs arrive on inbound links (the peer's outgoing ones) and are
    answered there with ``Bus.reply``; PONGs come back on this node's outgoing
    links. Each attribute is read only on the side where it means something.
    """

    #: Read for PONGs: the node ID the outgoing link was opened for (``Bus.connect``).
    node_id: bytes | None
    #: Read for PINGs and MEETs: this node's IP address as the peer reached it (or b"").
    local_ip: bytes


class ConfigStore(Protocol):
    """Where nodes.conf lives: a locked file in the server, a dict in the simulator."""

    def save(self, content: bytes, fsync: bool) -> None:
        """Replace the file's content (raise OSError on failure)."""


def _no_log(level: str, text: str) -> None:
    """The default event log: drop (the server routes events to its log)."""


class BusStats:
    """Bus traffic counters, kept by the shell's bus and reported by INFO cluster."""

    __slots__ = ("bytes_received", "bytes_sent", "frames_received", "frames_rejected",
                 "frames_sent", "links_refused", "links_silent")  # fmt: skip

    def __init__(self) -> None:
        self.frames_sent = 0
        self.frames_received = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.frames_rejected = 0  # malformed, oversized or unknown: the link was closed
        self.links_refused = 0  # failed the cluster-secret handshake
        self.links_silent = 0  # reconnected by this node: its PONG was overdue


class ClusterNode:
    """One row of the node table."""

    __slots__ = (
        "announce_ip",
        "announced",
        "bus_port",
        "bus_version",
        "clock",
        "connecting",
        "ctime",
        "dialect_sure",
        "fail_reports",
        "fail_time",
        "features",
        "flags",
        "generation",
        "id",
        "ip",
        "last_ping",
        "link",
        "link_time",
        "oldest",
        "ping_sent",
        "pong_received",
        "port",
        "release",
    )

    def __init__(self, node_id: bytes, ip: bytes, port: int, flags: int, now_ms: int) -> None:
        self.id = node_id
        self.ip = ip
        self.port = port
        self.flags = flags
        self.ctime = now_ms
        self.ping_sent = 0  # ms of the oldest unanswered PING, 0 when none is outstanding
        self.last_ping = 0  # ms of the last PING sent on the current link, until answered
        self.pong_received = 0
        self.link = False  # an outgoing bus link to this node is up
        self.connecting = False  # an outgoing link was asked for and is not up yet
        self.link_time = 0  # when the current (or pending) link was asked for
        self.fail_reports: dict[bytes, int] = {}  # reporter ID -> time of the report
        self.fail_time = 0
        self.generation = 0  # the data generation its frames announce (0: not seen yet)
        self.clock: PeerClock | None = None  # its clock's offset, once a PONG measured it
        # What it speaks (core/dialect.py): protocol 1's features until it says otherwise.
        self.bus_version = 0  # the protocol its frames announce (0: none seen yet)
        self.oldest = 1
        self.release = b""
        self.features: frozenset[bytes] = V1_FEATURES
        self.dialect_sure = False  # a frame of it was seen since the current link came up
        self.announced = False  # this node's VERSION went out on the current link
        self.bus_port = 0  # its bus port, when not port + 10000 (ADDRESS, CLUSTER MEET)
        self.announce_ip = b""  # the IP its ADDRESS announced (b"": its links' source)

    def flag_names(self) -> str:
        names = [name for bit, name in FLAG_NAMES if self.flags & bit]
        return ",".join(names) if names else "noflags"

    def line(self, more: bytes = b"") -> bytes:
        """This node's nodes.conf line: Disque's six CLUSTER NODES fields (``more``: the
        fields CLUSTER NODES adds after them)."""
        state = b"connected" if self.link or self.flags & MYSELF else b"disconnected"
        return b"%s %s:%d %s %d %d %s%s%s\n" % (self.id, self.ip, self.port,
                                                self.flag_names().encode(), self.ping_sent,
                                                self.pong_received, state, b" " if more else b"",
                                                more)  # fmt: skip


# --------------------------------------------------------------------------
# Helpers.


def random_node_id(rng: random.Random) -> bytes:
    """A node ID: 40 lowercase hex characters (160 random bits)."""
    return b"%040x" % rng.getrandbits(160)


def normalize_ip(ip: bytes) -> bytes | None:
    """The canonical text of an IPv4 or IPv6 literal (as inet_ntop writes it), or None."""
    try:
        text = ip.decode("ascii")
    except UnicodeDecodeError:
        return None
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_ntop(family, socket.inet_pton(family, text)).encode()
        except (OSError, ValueError):
            continue
    return None


# --------------------------------------------------------------------------
# nodes.conf.


class NodesConfError(ValueError):
    """nodes.conf cannot be loaded: fatal at start-up."""

    def __init__(self, line: bytes, reason: str) -> None:
        text = line.decode("utf-8", "backslashreplace")
        super().__init__(f'Unrecoverable error: corrupted cluster config file "{text}": {reason}.')


class NodesConfNewer(NodesConfError):
    """nodes.conf was written by a newer release, in a format this one cannot read."""

    def __init__(self, version: int, writer: str) -> None:
        ValueError.__init__(
            self,
            f"Unrecoverable error: the cluster config file is in nodes.conf format {version}, "
            f"written by disquette {writer}; this release (disquette {__version__}) reads "
            f"formats 1 to {NODES_CONF_FORMAT}. Start the release that wrote it, or see "
            "docs/operations.md (Downgrading).",
        )


class NodesConf(NamedTuple):
    """A parsed nodes.conf: this node's ID, every row (this node's included), the
    data generation it last announced (0 when the file has none) and the encoded
    records of the replicated tables it holds, (table, record) pairs."""

    myself: bytes
    nodes: list[ClusterNode]
    generation: int = 0
    records: tuple[tuple[bytes, bytes], ...] = ()


_LEADING_INT: Final = re.compile(rb"[+-]?[0-9]+")


def _atoi(field: bytes) -> int:
    """C ``atoi``: the leading integer, 0 when there is none."""
    match = _LEADING_INT.match(field)
    return int(match.group()) if match else 0


def parse_nodes_conf(content: bytes, now_ms: int) -> NodesConf | None:
    """Parse nodes.conf; None when it is empty (a new node). Raise NodesConfError.

    Blank lines and ``vars`` lines are skipped (but ``vars data-generation N``, this
    node's data generation, ``vars node-generation ID N``, the last one seen from
    another node, and ``vars node-bus-port ID N``, its bus port); every other line has exactly six
    fields: a 40-character ID, ``ip:port``, known flag names, ping and pong times
    (non-zero ones become ``now_ms``) and a link state (ignored). Exactly one line
    is ``myself``.
    """
    if not content:
        return None
    myself: bytes | None = None
    nodes: dict[bytes, ClusterNode] = {}
    generation = 0
    peers: dict[bytes, int] = {}
    bus_ports: dict[bytes, int] = {}
    records: list[tuple[bytes, bytes]] = []
    for raw in content.split(b"\n"):
        fields = raw.split()
        if not fields:
            continue
        if fields[0] == b"vars":
            if len(fields) >= 3 and fields[1] == FORMAT_VAR and fields[2].isdigit():
                if int(fields[2]) > NODES_CONF_FORMAT:
                    writer = b" ".join(fields[3:4]).decode(errors="replace") or "(newer)"
                    raise NodesConfNewer(int(fields[2]), writer)
            elif len(fields) == 3 and fields[1] == GENERATION_VAR and fields[2].isdigit():
                generation = int(fields[2])
            elif len(fields) == 4 and fields[1] == PEER_GENERATION_VAR and fields[3].isdigit():
                peers[fields[2]] = int(fields[3])
            elif len(fields) == 4 and fields[1] == BUS_PORT_VAR and fields[3].isdigit():
                bus_ports[fields[2]] = int(fields[3]) & 0xFFFF
            elif len(fields) == 3 and fields[1] in TABLE_VARS:
                try:
                    records.append((fields[1], bytes.fromhex(fields[2].decode("ascii"))))
                except ValueError:
                    what = fields[1].decode()
                    raise NodesConfError(raw, f"a {what} is not in hexadecimal") from None
            continue
        if len(fields) != 6:
            raise NodesConfError(raw, f"{len(fields)} fields instead of 6")
        node_id, address, flag_list, ping_sent, pong_received, _state = fields
        if len(node_id) != NODE_ID_LEN:
            raise NodesConfError(raw, "the node ID is not 40 characters long")
        if node_id in nodes:
            raise NodesConfError(raw, "the node ID is repeated")
        ip, colon, port_text = address.rpartition(b":")
        if not colon or not port_text.isdigit() or int(port_text) > 65535:
            raise NodesConfError(raw, "the address is not ip:port")
        flags = 0
        for name in flag_list.split(b","):
            bit = FLAGS_BY_NAME.get(name)
            if bit is None:
                raise NodesConfError(raw, f"unknown flag {name.decode(errors='replace')!r}")
            flags |= bit
        node = ClusterNode(node_id, ip, int(port_text), flags, now_ms)
        if _atoi(ping_sent):
            node.ping_sent = now_ms
        if _atoi(pong_received):
            node.pong_received = now_ms
        if flags & MYSELF:
            if myself is not None:
                raise NodesConfError(raw, "more than one node is flagged myself")
            myself = node_id
        nodes[node_id] = node
    if myself is None:
        raise NodesConfError(b"", "no node is flagged myself")
    for node_id, peer_generation in peers.items():
        if node_id in nodes and node_id != myself:
            nodes[node_id].generation = peer_generation
    for node_id, bus_port in bus_ports.items():
        if node_id in nodes and node_id != myself:
            nodes[node_id].bus_port = bus_port
    return NodesConf(myself, list(nodes.values()), generation, tuple(records))


# --------------------------------------------------------------------------


class Membership:
    """The node table of one node and the membership protocol that maintains it."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.myself = ClusterNode(node.myself, b"", node.port, MYSELF, node.clock())
        self.nodes: dict[bytes, ClusterNode] = {node.myself: self.myself}
        self.store: ConfigStore | None = None
        #: ``on_log(level, text)`` with Disque's level names; the shell routes it.
        self.on_log: Callable[[str, str], None] = _no_log
        self.blacklist: dict[bytes, int] = {}  # forgotten node ID -> expiry (ms)
        self.messages_sent = 0  # counted by the bus shell, as messages leave
        self.messages_received = 0
        # When a node last failed, came back or lost its data (ms; starting counts):
        # copies of a job may then be queued apart (see requeue.learn_holder).
        self.disturbed_at = node.clock()
        #: The slowest recent PING round trip (ms), decaying: how long an answer over
        #: the bus takes now, busy loops and full links included (``answer_time``).
        self.slow_round_trip = 0
        self.stats = BusStats()
        #: The skew (ms) over which a peer's clock is logged; 0: never. The shell sets it
        #: from ``clock-skew-warn-ms`` with :meth:`set_clock_skew_warn`.
        self.clock_skew_warn_ms = DEFAULT_WARN_MS
        self._reachable: list[bytes] = []
        self._replica_targets: list[bytes] = []
        self.generation = 0  # this node's data generation, chosen by start()
        #: cluster-announce-ip (b"": the address peers reach this node at, learned).
        self.announce_ip = b""
        #: Bus ports of nodes not known yet, from the ADDRESS of peers (for handshakes).
        self.bus_ports: dict[bytes, int] = {}
        self._header = Header(node.myself, node.port, node.dialect.flag_bits)
        self._cron_runs = 0
        self._todo_save = False
        self._todo_fsync = False
        self._save_error = ""

    def start(
        self, store: ConfigStore | None, loaded: NodesConf | None, keep_generation: bool = False
    ) -> None:
        """Attach nodes.conf: restore the table it held, or write it for a new node.

        ``keep_generation`` says the node is about to reload the jobs it held (an
        AOF with content): it keeps the data generation nodes.conf recorded.
        Otherwise it starts a new one (see :meth:`new_generation`).
        """
        self.store = store
        if keep_generation and loaded is not None and loaded.generation:
            self._set_generation(loaded.generation)
        else:
            self.new_generation(loaded.generation if loaded is not None else 0)
        if loaded is None:
            self.save_later(fsync=True)
        else:
            if loaded.myself != self.myself.id:
                raise ValueError("nodes.conf belongs to another node ID")
            for row in loaded.nodes:
                if row.id == self.myself.id:
                    self.myself.ip = self.announce_ip or row.ip
                    if row.port != self.myself.port:
                        self.save_later()
                    self._set_leaving(bool(row.flags & LEAVING))
                else:
                    row.flags &= ~MYSELF
                    self.nodes[row.id] = row
            for table in self.node.tables:
                table.load(data for var, data in loaded.records if var == table.var)
        self.update_reachable()
        self._flush()

    # The questions jobs ask -------------------------------------------------

    def cluster_size(self) -> int:
        """Known nodes not in handshake, this one and failing ones included."""
        nodes = self.nodes
        if len(nodes) == 1:
            return 1  # alone: the hot path of every ADDJOB without REPLICATE
        return sum(1 for n in nodes.values() if not n.flags & HANDSHAKE)

    def reachable_nodes(self) -> list[bytes]:
        """Other nodes not in handshake, leaving, PFAIL or FAIL (as last recomputed)."""
        return self._reachable

    def update_reachable(self) -> None:
        """Recompute the reachable list (every 100 ms, on FORGET and RESET, and when a
        handshake completes or a PONG clears a failure flag)."""
        me = self.myself
        refused = self.node.dialect.refused
        self._reachable = [
            n.id
            for n in self.nodes.values()
            if n is not me and not n.flags & UNREACHABLE and n.id not in refused
        ]
        self._update_replica_targets()

    def replica_targets(self) -> list[bytes]:
        """The reachable nodes (as last recomputed) with an outgoing link up now: where
        new copies of a job can go. Kept up to date on every change of either."""
        return self._replica_targets

    def _update_replica_targets(self) -> None:
        nodes = self.nodes
        self._replica_targets = [
            n for n in self._reachable if (node := nodes.get(n)) is not None and node.link
        ]

    def linked_nodes(self) -> list[bytes]:
        """Other nodes with an outgoing link up (PAUSE BCAST, FASTACK of unknown jobs)."""
        me = self.myself
        return [n.id for n in self.nodes.values() if n is not me and n.link]

    def known_nodes(self) -> list[bytes]:
        """Every known node but those in handshake (the dummy-ACK GC's audience)."""
        return [n.id for n in self.nodes.values() if not n.flags & HANDSHAKE]

    def is_known(self, node_id: bytes) -> bool:
        node = self.nodes.get(node_id)
        return node is not None and not node.flags & HANDSHAKE

    def known_only(self, node_ids: tuple[bytes, ...]) -> tuple[bytes, ...]:
        """``node_ids`` without the nodes not known, as this table's own ID objects: a
        received job keeps the tuple for its life, and the IDs a message decoded would
        otherwise be copies of its own (80 bytes each, see core/memory.py)."""
        nodes = self.nodes
        known = []
        for node_id in node_ids:
            node = nodes.get(node_id)
            if node is not None and not node.flags & HANDSHAKE:
                known.append(node.id)
        return tuple(known)

    def has_link(self, node_id: bytes) -> bool:
        node = self.nodes.get(node_id)
        return node is not None and node.link

    def header(self) -> Header:
        """The header of every frame this node sends: ID, client port, LEAVING flag."""
        return self._header

    # What commands show ------------------------------------------------------

    def nodes_text(self) -> bytes:
        """CLUSTER NODES: one line per node, handshake nodes included, each with what
        it speaks after Disque's fields (core/dialect.py)."""
        fields = self.node.dialect.node_fields
        return b"".join(
            n.line(fields(n) + (b" bus-port=%d" % n.bus_port if n.bus_port else b""))
            for n in self.nodes.values()
        )

    def config_text(self) -> bytes:
        """The content of nodes.conf: the CLUSTER NODES lines of non-handshake nodes,
        then this node's data generation."""
        rows = [n for n in self.nodes.values() if not n.flags & HANDSHAKE]
        peers = b"".join(
            b"vars %s %s %d\n" % (PEER_GENERATION_VAR, n.id, n.generation)
            for n in rows
            if n.generation and n is not self.myself
        ) + b"".join(
            b"vars %s %s %d\n" % (BUS_PORT_VAR, n.id, n.bus_port)
            for n in rows
            if n.bus_port and n is not self.myself
        )
        return (
            b"vars %s %d %s\n" % (FORMAT_VAR, NODES_CONF_FORMAT, __version__.encode())
            + b"".join(n.line() for n in rows)
            + b"vars %s %d\n" % (GENERATION_VAR, self.generation)
            + peers
            + b"".join(table.config_lines() for table in self.node.tables)
        )

    def answer_time(self) -> int:
        """How long (ms) a node that asked its peers something waits for the answers:
        WILLQUEUE's 500 ms, or twice the slowest recent round trip when the bus is slower
        (a lagging cluster would otherwise queue copies the answers would have stopped)."""
        return max(WILLQUEUE_ADVANCE, 2 * self.slow_round_trip)

    def traffic_fields(self) -> list[tuple[str, int]]:
        """INFO cluster: bus messages, frames and bytes (frames carry several messages)."""
        stats = self.stats
        return [
            ("cluster_stats_messages_sent", self.messages_sent),
            ("cluster_stats_messages_received", self.messages_received),
            ("cluster_bus_frames_sent", stats.frames_sent),
            ("cluster_bus_frames_received", stats.frames_received),
            ("cluster_bus_bytes_sent", stats.bytes_sent),
            ("cluster_bus_bytes_received", stats.bytes_received),
            ("cluster_bus_frames_rejected", stats.frames_rejected),
            ("cluster_bus_links_refused", stats.links_refused),
            ("cluster_bus_links_silent", stats.links_silent),
            ("cluster_bus_slow_round_trip_ms", self.slow_round_trip),
        ]

    def clock_fields(self) -> list[tuple[str, int]]:
        """INFO cluster: the largest estimated skew of a peer's clock (0 when none is
        measured), the warning threshold, and how many peers are measured and over it."""
        clocks = [n.clock for n in self.nodes.values() if n.clock is not None]
        return [
            ("clock_skew_max_ms", max((abs(c.offset) for c in clocks), default=0)),
            ("clock_skew_warn_ms", self.clock_skew_warn_ms),
            ("clock_skew_peers_measured", len(clocks)),
            ("clock_skew_peers_over", sum(c.skewed for c in clocks)),
        ]

    def clocks_text(self) -> bytes:
        """CLUSTER CLOCKS: one line per other node (handshakes aside), like CLUSTER NODES:
        ``<id> <ip>:<port> offset=<ms> bound=<ms> rtt=<ms> age=<ms> <ok|skewed|unknown>``,
        the offset being its clock minus this node's, the age the time since the last
        sample; a node not measured yet shows ``-`` for the four numbers."""
        now = self._now()
        lines = []
        for n in self.nodes.values():
            if n is self.myself or n.flags & HANDSHAKE:
                continue
            c = n.clock
            if c is None:
                numbers = b"offset=- bound=- rtt=- age=- unknown"
            else:
                numbers = b"offset=%d bound=%d rtt=%d age=%d %s" % (
                    c.offset, c.bound, c.rtt, max(0, now - c.sampled_at),
                    b"skewed" if c.skewed else b"ok",
                )  # fmt: skip
            lines.append(b"%s %s:%d %s\n" % (n.id, n.ip, n.port, numbers))
        return b"".join(lines)

    def hello_entries(self) -> list[tuple[bytes, bytes, int, int]]:
        """HELLO's (ID, ip, client port, priority) for every node, handshake included.

        Priority: 1; 5 for another node without a link; 10 when PFAIL; 100 when
        FAIL or leaving (this node included).
        """
        me = self.myself
        entries = []
        for n in self.nodes.values():
            priority = 1
            if n is not me and not n.link:
                priority = 5
            if n.flags & PFAIL:
                priority = 10
            if n.flags & (FAIL | LEAVING):
                priority = 100
            entries.append((n.id, n.ip, n.port, priority))
        return entries

    # Commands ------------------------------------------------------------------

    def start_handshake(self, ip: bytes, port: int, bus_port: int = 0) -> bool:
        """CLUSTER MEET (and gossip): add a handshake node for ip:port (client port),
        whose bus listens on ``bus_port`` (0: port + 10000).

        Raise ValueError for an address that is not an IP literal with a port in
        1..55535 (any port up to 65535 with a bus port); return False when a handshake
        with that address is in progress.
        """
        norm = normalize_ip(ip)
        highest = 0xFFFF if bus_port else MAX_PORT
        if norm is None or not 0 < port <= highest or not 0 <= bus_port <= 0xFFFF:
            raise ValueError("invalid node address")
        for n in self.nodes.values():
            if n.flags & HANDSHAKE and n.ip == norm and n.port == port:
                return False
        temp_id = self._new_id()
        node = ClusterNode(temp_id, norm, port, HANDSHAKE | MEET, self._now())
        node.bus_port = 0 if bus_port == port + BUS_PORT_OFFSET else bus_port
        self.nodes[temp_id] = node
        return True

    def set_announced(self, ip: bytes, port: int, bus_port: int) -> None:
        """cluster-announce-ip, -port and -bus-port (b"" and 0: not announced): what
        this node's peers are told, at start and whenever CONFIG SET changes them."""
        me = self.myself
        was = self.announce_ip
        self.announce_ip = normalize_ip(ip) or b"" if ip else b""
        if self.announce_ip or was:  # (no longer announced: learned again from the peers)
            me.ip = self.node.ip = self.announce_ip
        me.port = port or self.node.port
        bus = bus_port or self.node.port + BUS_PORT_OFFSET
        me.bus_port = 0 if bus == me.port + BUS_PORT_OFFSET else bus
        self._header = self._header._replace(port=me.port)
        for peer in self.nodes.values():
            if peer.link and peer is not me:
                self.tell_address(peer)
        self.save_later()
        self._flush()

    def bus_port(self, node: ClusterNode) -> int:
        """Where ``node``'s bus listens."""
        return node.bus_port or node.port + BUS_PORT_OFFSET

    def tell_address(self, peer: ClusterNode) -> None:
        """Send ``peer`` this node's ADDRESS, if it speaks ``addresses``."""
        if b"addresses" not in peer.features or peer.id in self.node.dialect.refused:
            return
        me = self.myself
        others = tuple(
            value
            for n in self.nodes.values()
            if n.bus_port and n is not me and n is not peer and not n.flags & HANDSHAKE
            for value in (n.id, n.bus_port)
        )
        message = (msg.ADDRESS, self.announce_ip, me.port, self.bus_port(me), others)
        self.node.bus_send(peer.id, message)

    def on_address(self, node: Node, sender_id: bytes, message: Message) -> None:
        """A peer's ADDRESS: where to reach it, and the bus ports of nodes it knows."""
        sender = self.nodes.get(sender_id)
        if sender is None or sender is self.myself:
            return
        _, ip, port, bus_port, others = message
        ip = normalize_ip(ip) or b"" if ip else b""
        sender.announce_ip = ip
        bus = 0 if bus_port == port + BUS_PORT_OFFSET else bus_port
        if (ip and ip != sender.ip) or port != sender.port or bus != sender.bus_port:
            sender.ip = ip or sender.ip
            sender.port = port
            sender.bus_port = bus
            sender.flags &= ~NOADDR
            self._drop_link(sender)
            self.on_log(
                "notice",
                f"Node {sender_id.decode()} announces {sender.ip.decode()}:{port} "
                f"(bus port {self.bus_port(sender)})",
            )
            self.save_later()
        for i in range(0, len(others), 2):
            node_id, other_bus = others[i], others[i + 1]
            known = self.nodes.get(node_id)
            if known is None:
                if len(self.bus_ports) < msg.MAX_GOSSIP_ENTRIES:  # (bounded, whatever is sent)
                    self.bus_ports[node_id] = other_bus
            elif known is not self.myself and not known.announce_ip and not known.link:
                known.bus_port = other_bus
        self._flush()

    def forget(self, node_id: bytes) -> None:
        """CLUSTER FORGET: drop another node, and ignore gossip about it for 60 s."""
        node = self.nodes[node_id]
        self.bus_ports.pop(node_id, None)
        self.blacklist[node_id] = self._now() + BLACKLIST_TTL_MS
        self._delete(node)
        self.update_reachable()
        self.save_later()
        self._flush()

    def reset(self, hard: bool) -> None:
        """CLUSTER RESET: forget every other node; HARD also takes a new node ID."""
        self.bus_ports.clear()
        for node in list(self.nodes.values()):
            if node is not self.myself:
                self._delete(node)
        if hard:
            self._set_myself_id(self._new_id())
            self.on_log("notice", f"Node hard reset, now I'm {self.myself.id.decode()}")
        self.update_reachable()
        self.save_later(fsync=True)
        self._flush()

    def set_leaving(self, leaving: bool) -> None:
        """CLUSTER LEAVING yes|no: persisted, and announced in every header."""
        self._set_leaving(leaving)
        self._flush()

    def set_clock_skew_warn(self, threshold_ms: int) -> None:
        """clock-skew-warn-ms changed: judge every measured peer against it at once."""
        self.clock_skew_warn_ms = threshold_ms
        for node in self.nodes.values():
            if node.clock is not None:
                self._judge_clock(node, node.clock)

    def save_config(self) -> None:
        """CLUSTER SAVECONFIG: write and fsync nodes.conf now (OSError on failure)."""
        if self.store is not None:
            self.store.save(self.config_text(), True)
        self._todo_save = self._todo_fsync = False

    # Bus events ------------------------------------------------------------------

    def new_generation(self, previous: int = 0) -> None:
        """This node no longer holds the jobs it held (a start without them, DEBUG
        FLUSHALL, CLUSTER RESET): announce a new data generation, greater than the
        previous one and than the last one announced (the clock's milliseconds
        usually), and keep it in nodes.conf."""
        self._set_generation(max(self._now(), previous + 1, self.generation + 1))
        self.save_later(fsync=True)

    def _set_generation(self, generation: int) -> None:
        self.generation = self.myself.generation = generation
        self._header = self._header._replace(generation=generation)

    def accept(self, header: Header) -> bool:
        """A job-level message: note the header, say whether its sender is known."""
        sender = self._note_header(header)
        if self._todo_save:
            self._flush()
        return sender is not None

    def receive(self, header: Header, message: Message, link: Link | None, peer_ip: bytes) -> None:
        """PING, PONG, MEET and FAIL, arrived on ``link`` from ``peer_ip``."""
        if self._stale(header):
            return
        sender = self._note_header(header)
        if message[0] == msg.FAIL:
            self._receive_fail(sender, message[1])
        else:
            self._receive_ping(header, message, sender, link, peer_ip)
        self._flush()

    def link_up(self, node_id: bytes) -> None:
        """The outgoing link asked for is up: greet the node with a PING (or MEET)."""
        node = self.nodes.get(node_id)
        if node is None or node is self.myself:
            if self.node.bus is not None:
                self.node.bus.disconnect(node_id)
            return
        node.link = True
        node.connecting = False
        self.node.dialect.link_up(node)
        self._update_replica_targets()
        old_ping_sent = node.ping_sent
        self._send_ping(node, msg.MEET if node.flags & MEET else msg.PING)
        if old_ping_sent:
            node.ping_sent = old_ping_sent
        node.flags &= ~MEET

    def link_down(self, node_id: bytes) -> None:
        node = self.nodes.get(node_id)
        if node is not None:
            node.link = False
            node.connecting = False
            self.node.dialect.link_down(node)
            self._update_replica_targets()

    def cron(self) -> None:
        """The cluster cron, every 100 ms (Disque's clusterCron)."""
        now = self._now()
        timeout = self.node.settings.cluster_node_timeout
        handshake_timeout = max(timeout, MIN_HANDSHAKE_TIMEOUT)
        silence = max(timeout // 2, LINK_SILENCE_MIN_MS)
        me = self.myself
        self._cron_runs += 1
        self.slow_round_trip = self.slow_round_trip * ROUND_TRIP_DECAY // 16
        if self.blacklist:
            self.blacklist = {k: t for k, t in self.blacklist.items() if t > now}

        for node in list(self.nodes.values()):
            if node.flags & (MYSELF | NOADDR):
                continue
            if node.flags & HANDSHAKE and now - node.ctime > handshake_timeout:
                self._delete(node)
                continue
            if not node.link and not node.connecting:
                self._connect(node, now)

        if self._cron_runs % RANDOM_PING_EVERY == 0:
            # Ping the node with the oldest pong among a few random ones.
            candidates = list(self.nodes.values())
            oldest: ClusterNode | None = None
            for _ in range(RANDOM_PING_SAMPLE):
                n = self.node.rng.choice(candidates)
                if not n.link or n.ping_sent or n.flags & (MYSELF | HANDSHAKE):
                    continue
                if oldest is None or n.pong_received < oldest.pong_received:
                    oldest = n
            if oldest is not None:
                self._send_ping(oldest, msg.PING)

        for node in list(self.nodes.values()):
            if node is me or node.flags & (NOADDR | HANDSHAKE):
                continue
            if (
                (node.link or node.connecting)
                and now - node.link_time > timeout
                and node.ping_sent
                and node.pong_received < node.ping_sent
                and now - node.ping_sent > silence
            ):
                # Connected but silent for too long: reconnect on the next run.
                self.stats.links_silent += 1
                self._drop_link(node)
            if node.link and not node.ping_sent and now - node.pong_received > timeout // 2:
                self._send_ping(node, msg.PING)
                continue
            if (
                node.ping_sent
                and now - node.ping_sent > timeout
                and not node.flags & (PFAIL | FAIL)
            ):
                node.flags |= PFAIL
                self.on_log("debug", f"*** NODE {node.id.decode()} possibly failing")

        self.update_reachable()
        self._flush()

    # Message handling ------------------------------------------------------------

    def _note_header(self, header: Header) -> ClusterNode | None:
        """The sender if it is a known node; its LEAVING flag is taken from the header.

        The sender is this node itself when it met its own address: the handshake
        then ends by dropping the temporary node.
        """
        sender = self.nodes.get(header.sender)
        if sender is None or sender.flags & HANDSHAKE:
            return None
        if sender is not self.myself:
            version = header.flags >> VERSION_SHIFT or 1
            if version != sender.bus_version or not sender.dialect_sure:
                self.node.dialect.heard(sender, version)
            if (header.flags ^ sender.flags) & LEAVING:
                sender.flags ^= LEAVING
                self.save_later()
            generation = header.generation
            if generation != sender.generation and generation:
                if generation > sender.generation:
                    self._generation_seen(sender, generation)
                elif self.node.repair.enabled:
                    return None  # a frame of a dead incarnation
        return sender

    def _stale(self, header: Header) -> bool:
        """Whether a frame comes from a dead incarnation of a known node (repair on)."""
        known = self.nodes.get(header.sender)
        return (
            known is not None
            and 0 < header.generation < known.generation
            and self.node.repair.enabled
        )

    def _generation_seen(self, sender: ClusterNode, generation: int) -> None:
        previous = sender.generation
        sender.generation = generation
        self.save_later()  # known after a restart too (vars node-generation)
        if previous:
            self.on_log(
                "notice",
                f"Node {sender.id.decode()} started a new data generation ({previous} -> "
                f"{generation}): the job copies it held are lost",
            )
            self.node.repair.generation_changed(sender.id)
            self.disturbed_at = self._now()

    def _receive_ping(
        self,
        header: Header,
        message: Message,
        sender: ClusterNode | None,
        link: Link | None,
        peer_ip: bytes,
    ) -> None:
        kind, gossip = message[0], message[1]
        me = self.myself
        now = self._now()
        if kind != msg.PONG:
            # Our own address is how the peer reached us (a MEET, or while unknown).
            local_ip = normalize_ip(link.local_ip) if link is not None and link.local_ip else None
            if (
                (kind == msg.MEET or not me.ip)
                and local_ip
                and local_ip != me.ip
                and not self.announce_ip
            ):
                me.ip = self.node.ip = local_ip
                self.on_log("warning", f"IP address for this node updated to {local_ip.decode()}")
                self.save_later()
            if sender is None and kind == msg.MEET:
                temp_id = self._new_id()
                self.nodes[temp_id] = ClusterNode(temp_id, peer_ip, header.port, HANDSHAKE, now)
                self._process_gossip(gossip, None)
            if link is not None and self.node.bus is not None:
                self.node.bus.reply(link, (msg.PONG, self._gossip(), message[2], now))

        link_node = self._link_node(link) if kind == msg.PONG else None
        if link_node is not None:
            if link_node.flags & HANDSHAKE:
                if sender is None and header.sender in self.nodes:
                    self._delete(link_node)  # names another handshake node: not a real ID
                    return
                if sender is not None:
                    # Someone we know under another address: keep the known node.
                    if sender is not me and self._update_address(sender, peer_ip, header.port):
                        self.save_later()
                    self._delete(link_node)
                    return
                self._rename(link_node, header.sender)
                link_node.flags &= ~HANDSHAKE
                self.on_log("verbose", f"Handshake with node {header.sender.decode()} completed.")
                self.save_later()
                self.update_reachable()  # (CLUSTER INFO agrees with CLUSTER NODES at once)
            elif link_node.id != header.sender:
                # Another node answers at that address now: forget the address.
                self.on_log(
                    "verbose",
                    f"PONG contains mismatching sender ID {header.sender.decode()} "
                    f"for node {link_node.id.decode()}",
                )
                link_node.flags |= NOADDR
                link_node.ip = b""
                link_node.port = 0
                self._drop_link(link_node)
                self.save_later()
                return
        if (
            sender is not None
            and kind == msg.PING
            and sender is not me
            and self._update_address(sender, peer_ip, header.port)
        ):
            self.save_later()
        if link_node is not None:
            if link_node.last_ping:
                if now - link_node.last_ping > self.slow_round_trip:
                    self.slow_round_trip = now - link_node.last_ping
                link_node.last_ping = 0
            link_node.pong_received = now
            link_node.ping_sent = 0
            self._clock_sample(link_node, message[2], message[3], now)
            if link_node.flags & PFAIL:
                link_node.flags &= ~PFAIL
                self.update_reachable()
            elif link_node.flags & FAIL:
                link_node.flags &= ~FAIL
                self.disturbed_at = now
                self.on_log("notice", f"Clear FAIL state for node {link_node.id.decode()}")
                self.save_later()
                self.update_reachable()
        if sender is not None and sender is not me:
            if kind != msg.PONG and not (sender.link or sender.connecting) and sender.ip:
                # A node that talks to us while we have no link to it (it restarted, say):
                # link and ping it now rather than at the next cron run, so that a PONG
                # clears its failure flags at once.
                self._connect(sender, now)
            self._process_gossip(gossip, sender)

    def _clock_sample(self, node: ClusterNode, sent: int, peer: int, now: int) -> None:
        """A PONG from ``node`` echoed our reading ``sent`` with its own, ``peer``; the
        node is measured from its first sample kept (a discarded one measures nothing)."""
        clock = node.clock or PeerClock()
        if clock.add(sent, peer, now):
            node.clock = clock
            self._judge_clock(node, clock)

    def _judge_clock(self, node: ClusterNode, clock: PeerClock) -> None:
        """Log a peer's skew going certainly over the threshold, and certainly back under
        (a verdict cleared silently when the warning is turned off)."""
        threshold = self.clock_skew_warn_ms
        if not clock.skewed:
            if threshold and clock.certainly_over(threshold):
                clock.skewed = True
                self.on_log(
                    "warning",
                    f"Clock skew: node {node.id.decode()} is {clock.offset:+d} ms "
                    f"(+/- {clock.bound} ms) from this node's clock, over "
                    f"clock-skew-warn-ms ({threshold} ms)",
                )
        elif not threshold:
            clock.skewed = False
        elif clock.certainly_under(threshold):
            clock.skewed = False
            self.on_log(
                "notice",
                f"Clock skew: node {node.id.decode()} is back within clock-skew-warn-ms "
                f"({threshold} ms): {clock.offset:+d} ms (+/- {clock.bound} ms)",
            )

    def _receive_fail(self, sender: ClusterNode | None, failing_id: bytes) -> None:
        if sender is None:
            self.on_log("verbose", "Ignoring FAIL message from unknown node")
            return
        failing = self.nodes.get(failing_id)
        if failing is not None and not failing.flags & (FAIL | MYSELF):
            self.on_log(
                "notice",
                f"FAIL message received from {sender.id.decode()} about {failing_id.decode()}",
            )
            failing.flags = (failing.flags | FAIL) & ~PFAIL
            failing.fail_time = self.disturbed_at = self._now()
            self.save_later()

    def _process_gossip(self, gossip: Any, sender: ClusterNode | None) -> None:
        me = self.myself
        for node_id, _ping_sent, _pong_received, ip, port, flags in gossip:
            node = self.nodes.get(node_id)
            if node is not None:
                if sender is not None and node is not me:
                    if flags & (PFAIL | FAIL):
                        if sender.id not in node.fail_reports:
                            self.on_log(
                                "verbose",
                                f"Node {sender.id.decode()} reported node "
                                f"{node_id.decode()} as not reachable.",
                            )
                        node.fail_reports[sender.id] = self._now()
                        self._mark_failing_if_needed(node)
                    elif node.fail_reports.pop(sender.id, None) is not None:
                        self.on_log(
                            "verbose",
                            f"Node {sender.id.decode()} reported node {node_id.decode()} "
                            "is back online.",
                        )
                # A failing node gossiped at another address may have moved there.
                if (
                    node.flags & (PFAIL | FAIL)
                    and not flags & NOADDR
                    and not node.link
                    and (node.ip != ip or node.port != port)
                ):
                    self._try_handshake(ip, port)
            elif sender is not None and not flags & NOADDR and node_id not in self.blacklist:
                self._try_handshake(ip, port, self.bus_ports.get(node_id, 0))

    def _try_handshake(self, ip: bytes, port: int, bus_port: int = 0) -> None:
        try:
            self.start_handshake(ip, port, bus_port)
        except ValueError:
            pass  # gossip with an unusable address

    def _mark_failing_if_needed(self, node: ClusterNode) -> None:
        """PFAIL becomes FAIL when reports + this node reach a majority of the cluster."""
        if not node.flags & PFAIL or node.flags & FAIL:
            return
        now = self._now()
        validity = self.node.settings.cluster_node_timeout * FAIL_REPORT_VALIDITY_MULT
        reports = node.fail_reports
        for reporter, when in list(reports.items()):
            if now - when > validity:
                del reports[reporter]
        if len(reports) + 1 < self.cluster_size() // 2 + 1:
            return
        self.on_log("notice", f"Marking node {node.id.decode()} as failing (quorum reached).")
        node.flags = (node.flags | FAIL) & ~PFAIL
        node.fail_time = self.disturbed_at = now
        for other in self.nodes.values():
            if other.link and not other.flags & (MYSELF | HANDSHAKE):
                self.node.send(other.id, (msg.FAIL, node.id))
        self.save_later()

    def _update_address(self, node: ClusterNode, peer_ip: bytes, port: int) -> bool:
        """A known node talks to us from another address (a PING on an inbound link,
        or the PONG that ends a handshake with it under a new address)."""
        if node.announce_ip:
            peer_ip = node.announce_ip  # (a NAT's address is not where to reach it)
        if not peer_ip:
            return False
        if node.ip == peer_ip and node.port == port:
            return False
        node.ip = peer_ip
        node.port = port
        if node.link or node.connecting:
            self._drop_link(node)
        node.flags &= ~NOADDR
        self.on_log(
            "warning", f"Address updated for node {node.id.decode()}, now {peer_ip.decode()}:{port}"
        )
        return True

    # Sending ------------------------------------------------------------------------

    def _send_ping(self, node: ClusterNode, kind: int) -> None:
        now = self._now()
        if kind == msg.PING:
            node.ping_sent = node.last_ping = now
        self.node.send(node.id, (kind, self._gossip(), now))

    def _gossip(self) -> list[tuple[bytes, int, int, bytes, int, int]]:
        """A few entries about other nodes, biased towards failing ones (Redis 3.0's
        selection: about a tenth of the table, at least 3, never handshake, noaddr or
        disconnected nodes)."""
        nodes = list(self.nodes.values())
        fresh = len(nodes) - 2
        wanted = min(max(len(nodes) // 10, 3), fresh)
        iterations = wanted * 3
        chosen: dict[bytes, tuple[bytes, int, int, bytes, int, int]] = {}
        me = self.myself
        rng = self.node.rng
        while fresh > 0 and len(chosen) < wanted and iterations > 0:
            iterations -= 1
            n = rng.choice(nodes)
            if n is me:
                continue
            if iterations > wanted * 2 and not n.flags & (PFAIL | FAIL):
                continue
            if n.flags & (HANDSHAKE | NOADDR) or not (n.link or n.connecting):
                fresh -= 1
                continue
            chosen[n.id] = (n.id, n.ping_sent, n.pong_received, n.ip, n.port,
                            n.flags & GOSSIP_FLAGS)  # fmt: skip
        return list(chosen.values())

    # Table changes ---------------------------------------------------------------------

    def _connect(self, node: ClusterNode, now: int) -> None:
        node.connecting = True
        node.link_time = now
        if not node.flags & MEET and not node.ping_sent:
            node.ping_sent = now  # the PING that the link will carry
        if self.node.bus is not None:
            self.node.bus.connect(node.id, node.ip, self.bus_port(node))

    def _drop_link(self, node: ClusterNode) -> None:
        if (node.link or node.connecting) and self.node.bus is not None:
            self.node.bus.disconnect(node.id)
        node.link = node.connecting = False
        self.node.dialect.link_down(node)
        self._update_replica_targets()

    def _link_node(self, link: Link | None) -> ClusterNode | None:
        """The node the outgoing link a PONG arrived on was opened for."""
        if link is None or link.node_id is None:
            return None
        node = self.nodes.get(link.node_id)
        return None if node is self.myself else node

    def _delete(self, node: ClusterNode) -> None:
        self._drop_link(node)
        del self.nodes[node.id]
        for other in self.nodes.values():
            other.fail_reports.pop(node.id, None)
        self.node.dialect.forget(node.id)

    def _rename(self, node: ClusterNode, new_id: bytes) -> None:
        """A handshake node gets its real ID; its link, opened under the temporary
        ID, is dropped and reopened under the real one by the next cron run."""
        self._drop_link(node)
        del self.nodes[node.id]
        node.id = new_id
        self.nodes[new_id] = node
        learned = self.bus_ports.pop(new_id, 0)
        if learned and not node.bus_port:
            node.bus_port = learned

    def _set_myself_id(self, new_id: bytes) -> None:
        me = self.myself
        del self.nodes[me.id]
        me.id = new_id
        self.nodes[new_id] = me
        node = self.node
        node.myself = new_id
        node.myself_only = (new_id,)
        node.ids.set_node(new_id)
        self._header = self._header._replace(sender=new_id)

    def _set_leaving(self, leaving: bool) -> None:
        me = self.myself
        self.node.leaving = leaving
        if bool(me.flags & LEAVING) != leaving:
            me.flags ^= LEAVING
            self._header = self._header._replace(
                flags=me.flags & LEAVING | self.node.dialect.flag_bits
            )
            self.save_later()

    def _new_id(self) -> bytes:
        while True:
            node_id = random_node_id(self.node.rng)
            if node_id not in self.nodes:
                return node_id

    def _now(self) -> int:
        return self.node.clock()

    # nodes.conf ----------------------------------------------------------------------

    def save_later(self, fsync: bool = False) -> None:
        """Write nodes.conf at the end of the event being handled (the cluster cron or the
        next frame at the latest)."""
        self._todo_save = True
        self._todo_fsync |= fsync

    def _flush(self) -> None:
        """Write nodes.conf if the event just handled changed it."""
        if not self._todo_save:
            return
        if self.store is None:
            self._todo_save = self._todo_fsync = False
            return
        try:
            self.store.save(self.config_text(), self._todo_fsync)
        except OSError as e:
            if str(e) != self._save_error:  # retried every cron run: log each new error once
                self._save_error = str(e)
                self.on_log("warning", f"Can't update the cluster config file: {e}")
            return
        self._save_error = ""
        self._todo_save = self._todo_fsync = False
