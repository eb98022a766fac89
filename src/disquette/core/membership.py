"""Cluster membership: the node table and what the rest of the core asks of it.

Every node keeps a table of the nodes it knows (itself included): ID, address,
flags (myself, PFAIL, FAIL, handshake, noaddr, meet, leaving), ping and pong
times, whether an outgoing bus link is up, and failure reports. Jobs need only
a few questions answered — how big is the cluster, who is reachable, who has a
link, who is known — and those answers live here.

The bus protocol that fills the table (MEET, PING/PONG gossip, FAIL, handshake
renaming, failure detection, FORGET and RESET, nodes.conf) is added by the
membership work of the cluster issue; this module holds the table and the
queries so the rest of the core can be written against them.
"""

from __future__ import annotations

from typing import Any

# Node flags (CLUSTER NODES order: myself, fail?, fail, handshake, noaddr, leaving).
MYSELF = 1
PFAIL = 2
FAIL = 4
HANDSHAKE = 8
NOADDR = 16
MEET = 32
LEAVING = 64

FLAG_NAMES = ((MYSELF, "myself"), (PFAIL, "fail?"), (FAIL, "fail"), (HANDSHAKE, "handshake"),
              (NOADDR, "noaddr"), (LEAVING, "leaving"))  # fmt: skip
UNREACHABLE = HANDSHAKE | LEAVING | PFAIL | FAIL


class ClusterNode:
    """One row of the node table."""

    __slots__ = (
        "ctime",
        "fail_reports",
        "fail_time",
        "flags",
        "id",
        "ip",
        "link",
        "ping_sent",
        "pong_received",
        "port",
    )

    def __init__(self, node_id: bytes, ip: bytes, port: int, flags: int, now_ms: int) -> None:
        self.id = node_id
        self.ip = ip
        self.port = port
        self.flags = flags
        self.ctime = now_ms
        self.ping_sent = 0
        self.pong_received = 0
        self.link = False  # an outgoing bus link to this node is up
        self.fail_reports: dict[bytes, int] = {}  # reporter ID -> time of the report
        self.fail_time = 0

    def flag_names(self) -> str:
        names = [name for bit, name in FLAG_NAMES if self.flags & bit]
        return ",".join(names) if names else "noflags"


class Membership:
    def __init__(self, myself_id: bytes, port: int, now_ms: int) -> None:
        self.myself = ClusterNode(myself_id, b"", port, MYSELF, now_ms)
        self.nodes: dict[bytes, ClusterNode] = {myself_id: self.myself}
        self._reachable: list[bytes] = []
        self.messages_sent = 0
        self.messages_received = 0

    # The questions jobs ask -------------------------------------------------

    def cluster_size(self) -> int:
        """Known nodes not in handshake, this one and failing ones included."""
        return sum(1 for n in self.nodes.values() if not n.flags & HANDSHAKE)

    def reachable_nodes(self) -> list[bytes]:
        """Other nodes not in handshake, leaving, PFAIL or FAIL (as last recomputed)."""
        return self._reachable

    def update_reachable(self) -> None:
        """Recompute the reachable list (Disque does it every 100 ms)."""
        me = self.myself
        self._reachable = [
            n.id for n in self.nodes.values() if n is not me and not n.flags & UNREACHABLE
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

    # Bus events (filled in by the membership protocol) --------------------

    def receive(self, header: Any, message: Any, link: Any, peer_ip: bytes) -> None:
        """PING, PONG, MEET and FAIL."""

    def accept(self, header: Any) -> bool:
        """Whether a job-level message from this sender is processed (known sender)."""
        return self.is_known(header.sender)

    def link_up(self, node_id: bytes) -> None:
        node = self.nodes.get(node_id)
        if node is not None:
            node.link = True

    def link_down(self, node_id: bytes) -> None:
        node = self.nodes.get(node_id)
        if node is not None:
            node.link = False

    def has_link(self, node_id: bytes) -> bool:
        node = self.nodes.get(node_id)
        return node is not None and node.link
