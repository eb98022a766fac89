"""Bus dialects: the protocol version and the features each node speaks (beyond Disque).

A cluster is upgraded one node at a time, so for a while it runs two releases side
by side. Every node therefore knows what each peer can read, and never sends it
more:

* **Protocol versions.** Each release speaks a range of bus protocol versions,
  from :data:`OLDEST` to :data:`PROTOCOL`. Version 1 is the dialect of the
  releases that had no version on the bus (0.1.0, commit 48ade79): their frames
  leave the version bits of the header at 0, and their decoders close a link on
  any message type they do not know. Version 2 (0.2.0) adds the VERSION message
  and the tolerance of newer peers described in :mod:`disquette.protocol.frames`:
  a message of an unknown type from a newer peer is skipped and counted, extra
  elements of a known one are dropped and counted. Every frame's header carries
  its sender's version, so a node learns a peer's version from the peer's first
  frame, and again from every restarted incarnation.
* **Features.** Beyond the version, a node speaks a set of named features (queue
  policies, users, cron, rate limits, ...), each owning message types
  (:data:`FEATURE_OF`). A node of protocol 1 speaks :data:`V1_FEATURES`; a node of
  protocol 2 or later says which it speaks with a VERSION message, sent on each
  new outgoing link once a frame of the peer showed a version of 2 or more (never
  before: a peer restarted as an older release must not get a type it cannot
  read). A VERSION from a node the receiver does not know yet (the first moments of
  a handshake) is lost, so a node still without the VERSION of a linked peer of
  protocol 2 or more asks for it (its own VERSION with ASK) once a second, and the
  peer answers with its own. A message of a feature a peer does not speak is not sent to it
  (``withheld``, INFO cluster); while every peer speaks every feature the node
  sends straight to the bus, with no check at all.
* **Cluster-wide features.** A command whose effect needs every node (a policy, a
  user, a schedule, a dependency, a wait for an outcome) is refused with an error
  naming the node that lacks the feature (:meth:`Dialects.require`) while any
  reachable node does; the other features degrade as docs/cluster.md ("Bus
  versions") states. With one release everywhere, nothing is ever refused.
* **Incompatible peers.** A peer whose protocol range does not meet this node's
  (its version below :data:`OLDEST`, or its oldest above :data:`PROTOCOL`) is
  *refused*: it counts as unreachable, it is sent nothing but this node's VERSION
  (answered to its PINGs, so that it learns why), and its frames are read for
  their VERSION only. Both sides log why, once a minute, as long as it lasts.

**Rehearsal.** The next release's tolerance is tested before it exists: a node
given a :class:`Speech` with a higher version, extra or fewer features, and
``probe`` set (the server reads it from ``DISQUETTE_BUS_REHEARSAL``, see
:func:`rehearsal`) sends every peer of an older protocol, 2 or more, once a second,
a message of a type no release knows and a VERSION with an element too many: its
peers must skip both and keep the link.

Like the rest of the core this does no I/O: the node's clock, its bus, its log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, NamedTuple

from disquette import __version__
from disquette.core import messages as msg
from disquette.core.errors import DisqueError
from disquette.core.messages import Header, Message
from disquette.protocol import reply
from disquette.protocol.frames import OLDEST, PROTOCOL, VERSION_SHIFT, Codec

if TYPE_CHECKING:
    from disquette.core.membership import ClusterNode, Link
    from disquette.core.node import Node

#: The release that speaks protocol 1 (it says nothing of itself on the bus).
V1_RELEASE: Final = b"0.1.0"

#: The features and their message types. Every release of protocol 1 speaks them all.
FEATURE_OF: Final[dict[int, bytes]] = {
    msg.HOLDERS: b"repair",
    msg.POLICYDIGEST: b"policies",
    msg.POLICIES: b"policies",
    msg.DEPQUERY: b"dependencies",
    msg.DEPSTATE: b"dependencies",
    msg.PROGRESS: b"progress",
    msg.GOTPROGRESS: b"progress",
    msg.CLAIM: b"claims",
    msg.CRONDIGEST: b"cron",
    msg.CRONS: b"cron",
    msg.CRONFIRED: b"cron",
    msg.RATEDEMAND: b"rate-limits",
    msg.OUTCOME: b"outcomes",
    msg.POSTPONE: b"backoff",
    msg.ACLDIGEST: b"users",
    msg.ACLUSERS: b"users",
    msg.ADDRESS: b"addresses",  # 0.2.0: announced addresses (core/membership.py)
}
#: The features that own message types (a peer lacking one of them makes sends checked).
MESSAGE_FEATURES: Final = frozenset(FEATURE_OF.values())
V1_FEATURES: Final = MESSAGE_FEATURES - {b"addresses"}
#: 0.2.0 adds addresses and groups (fair shares, core/joblist.py), which owns no message
#: type: a job carries its group in a tagged field that a release without the feature
#: skips (core/serialize.py), serving the job in its queue's default order; a group
#: limit, which every node must apply, waits for every node to speak it (QPOLICY SET).
FEATURES: Final = MESSAGE_FEATURES | {b"groups"}

#: How often the reason a peer is refused is logged again (ms).
REFUSED_LOG_PERIOD: Final = 60_000
#: How often a rehearsing node probes its peers (ms), and a node asks a peer for the
#: VERSION it has not had.
PROBE_PERIOD: Final = 1000
ASK_PERIOD: Final = 1000
#: The message type of the rehearsal's probe: one no release knows.
PROBE_TYPE: Final = 0xFA
#: ``DISQUETTE_BUS_REHEARSAL``: the environment variable the server reads.
REHEARSAL_VARIABLE: Final = "DISQUETTE_BUS_REHEARSAL"


class Speech(NamedTuple):
    """What a node speaks: its protocol version, the oldest it still speaks, its
    release and its features."""

    version: int
    oldest: int
    release: bytes
    features: frozenset[bytes]
    probe: bool = False  # a rehearsal: probe the peers' tolerance (see the module doc)

    def describe(self) -> str:
        """``disquette 0.2.0, bus protocol 2`` (and the range when it is one)."""
        protocols = (
            f"bus protocol {self.version}"
            if self.oldest == self.version
            else f"bus protocols {self.oldest} to {self.version}"
        )
        release = self.release.decode(errors="replace") or "an unknown release"
        return f"disquette {release}, {protocols}"


CURRENT: Final = Speech(PROTOCOL, OLDEST, __version__.encode(), FEATURES)
V1: Final = Speech(1, 1, V1_RELEASE, V1_FEATURES)


def shapes_for(version: int) -> dict[int, tuple[type, ...]]:
    """The message shapes a node of protocol ``version`` reads (types never leave:
    a later version only adds)."""
    types = set().union(*(added for v, added in msg.ADDED_IN.items() if v <= version))
    return {kind: shape for kind, shape in msg.SHAPES.items() if kind in types}


def codec_for(speech: Speech) -> Codec:
    """The bus codec of a node that speaks ``speech`` (protocol 1: no tolerance)."""
    shapes = shapes_for(min(speech.version, PROTOCOL))
    contents = {kind: checks for kind, checks in msg.CONTENTS.items() if kind in shapes}
    return Codec(shapes, contents, speech.version, tolerant=speech.version >= 2)


def rehearsal(spec: str) -> Speech:
    """The speech of a rehearsing node from ``DISQUETTE_BUS_REHEARSAL``: comma-separated
    ``version=N``, ``oldest=N``, ``release=TEXT``, ``add=NAME+NAME``,
    ``drop=NAME+NAME`` and ``probe``; what is not given is this release's (raise
    ValueError naming what is wrong)."""
    version, oldest, release, features, probe = (
        PROTOCOL,
        OLDEST,
        CURRENT.release,
        set(FEATURES),
        False,
    )
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, _, value = item.partition("=")
        if key in ("version", "oldest") and value.isdigit() and 1 <= int(value) <= 0xFF:
            if key == "version":
                version = int(value)
            else:
                oldest = int(value)
        elif key == "release" and value:
            release = value.encode()
        elif key in ("add", "drop") and value:
            names = {name.encode() for name in value.split("+")}
            features = features | names if key == "add" else features - names
        elif item == "probe":
            probe = True
        else:
            raise ValueError(f"{REHEARSAL_VARIABLE}: can't read {item!r}")
    if not oldest <= version:
        raise ValueError(f"{REHEARSAL_VARIABLE}: oldest={oldest} is above version={version}")
    return Speech(version, oldest, release, frozenset(features), probe)


class Dialects:
    """What this node speaks, what each peer speaks, and the sending rules between them.

    The per-peer facts live on the membership's rows (:class:`ClusterNode`):
    ``bus_version`` (0 until a frame is seen), ``oldest``, ``release``, ``features``,
    ``dialect_sure`` (a frame of it was seen since the current link came up) and
    ``announced`` (this node's VERSION went out on that link).
    """

    def __init__(self, node: Node, speech: Speech = CURRENT) -> None:
        self.node = node
        self.speech = speech
        self.codec = codec_for(speech)
        #: The header flags' version bits (none in protocol 1, which had none).
        self.flag_bits = speech.version << VERSION_SHIFT if speech.version >= 2 else 0
        self.versioned = speech.version >= 2  # protocol 1 knew nothing of this module
        #: Messages not sent because the peer does not speak their feature.
        self.withheld = 0
        #: Some known peer lacks one of the features of :data:`FEATURE_OF`: sends are
        #: checked (the node's ``send`` is :meth:`send_checked`, else the bus's own).
        self.partial = False
        self.refused: dict[bytes, int] = {}  # refused peer -> when its reason was logged
        #: Frames read from refused peers (they keep calling while the refusal lasts).
        self.refused_frames = 0
        self._next_probe = 0
        self._next_ask = 0

    # What a peer speaks ------------------------------------------------------------

    def heard(self, peer: ClusterNode, version: int) -> None:
        """A frame from ``peer`` announced ``version`` (called by the membership when
        that differs from what is known, or the link is new)."""
        if not self.versioned:
            return
        peer.dialect_sure = True
        if peer.bus_version != version:
            previous = peer.bus_version
            peer.bus_version = version
            if version == 1:
                peer.oldest, peer.release, peer.features = 1, V1_RELEASE, V1_FEATURES
            else:  # V1_FEATURES until its VERSION: every protocol reads protocol 1's types
                peer.oldest, peer.release, peer.features = 1, b"", V1_FEATURES
            if previous:
                self.node.cluster.on_log(
                    "notice",
                    f"Node {peer.id.decode()} now speaks bus protocol {version} "
                    f"(it spoke {previous}): it was restarted with another release",
                )
            self._judge(peer)
            self.update()
        if version >= 2 and peer.link and not peer.announced:
            self.announce(peer)

    def announce(self, peer: ClusterNode, flags: int = 0) -> None:
        """Send ``peer`` this node's VERSION (it reads protocol 2 or later)."""
        peer.announced = True
        self.node.bus_send(peer.id, self.version_message(flags))
        self.node.cluster.tell_address(peer)

    def version_message(self, flags: int = 0) -> Message:
        s = self.speech
        return (msg.VERSION, s.version, s.oldest, s.release, tuple(sorted(s.features)), flags)

    def on_version(self, node: Node, sender: bytes, message: Message) -> None:
        """A peer's VERSION: its range, release and features."""
        peer = self.node.cluster.nodes.get(sender)
        if peer is None or not self.versioned:
            return
        _, version, oldest, release, features, flags = message
        peer.bus_version = version
        peer.oldest = min(oldest, version)
        peer.release = release
        peer.features = frozenset(features)
        self._judge(peer)
        self.update()
        if flags & msg.ASK and peer.id not in self.refused:
            self.announce(peer)
        elif peer.link:
            self.node.cluster.tell_address(peer)

    def link_up(self, peer: ClusterNode) -> None:
        """A new outgoing link: what it can carry is known again from the peer's next frame."""
        peer.dialect_sure = peer.announced = False

    link_down = link_up

    def _judge(self, peer: ClusterNode) -> None:
        """Refuse a peer whose range does not meet this node's, or take it back."""
        mine = self.speech
        compatible = peer.bus_version >= mine.oldest and peer.oldest <= mine.version
        if compatible:
            if self.refused.pop(peer.id, None) is not None:
                self.node.cluster.on_log(
                    "notice", f"Node {peer.id.decode()} ({self.describe(peer)}) links again"
                )
                self.node.cluster.update_reachable()
            return
        if peer.id not in self.refused:
            self.refused[peer.id] = self.node.clock()
            self._log_refused(peer)
            self.node.cluster.update_reachable()
            if peer.bus_version >= 2 and peer.link:
                self.announce(peer)  # (so that it learns why, and logs it too)

    def _log_refused(self, peer: ClusterNode) -> None:
        self.node.cluster.on_log(
            "warning",
            f"Can't link with node {peer.id.decode()} ({self.describe(peer)}): this node "
            f"({self.speech.describe()}) has no bus protocol in common with it; it is "
            "left out of the cluster until one of the two runs another release",
        )

    def describe(self, peer: ClusterNode) -> str:
        """What ``peer`` speaks, for a log line."""
        if not peer.bus_version:
            return "bus protocol not known yet"
        if not peer.release:  # (a frame's header only: its VERSION has not come yet)
            return f"bus protocol {peer.bus_version}, release not announced yet"
        return Speech(peer.bus_version, peer.oldest, peer.release, peer.features).describe()

    def update(self) -> None:
        """Recompute whether sends need checking, and rebind the node's ``send``."""
        me = self.node.cluster.myself
        partial = bool(self.refused) or any(
            not peer.features >= MESSAGE_FEATURES
            for peer in self.node.cluster.nodes.values()
            if peer is not me
        )
        if partial != self.partial:
            self.partial = partial
            self.node.bind_send()

    def forget(self, node_id: bytes) -> None:
        """A node left the table (FORGET, RESET, a handshake renamed)."""
        if self.refused.pop(node_id, None) is not None or self.partial:
            self.update()

    # Sending --------------------------------------------------------------------------

    def speaks(self, node_id: bytes, feature: bytes) -> bool:
        peer = self.node.cluster.nodes.get(node_id)
        return peer is None or (feature in peer.features and node_id not in self.refused)

    def send_checked(self, node_id: bytes, message: Message) -> None:
        """The node's ``send`` while some peer lacks a feature or is refused."""
        if node_id in self.refused:
            if message[0] != msg.VERSION:
                self.withheld += 1
                return
        else:
            feature = FEATURE_OF.get(message[0])
            if feature is not None and not self.speaks(node_id, feature):
                self.withheld += 1
                return
        self.node.bus_send(node_id, message)

    def lacking(self, feature: bytes) -> list[ClusterNode]:
        """The reachable nodes that do not speak ``feature`` (a feature without messages,
        such as groups, leaves sends unchecked: its peers are looked at here)."""
        if not self.partial and feature in MESSAGE_FEATURES:
            return []
        nodes = self.node.cluster.nodes
        peers = [nodes[node_id] for node_id in self.node.reachable_nodes()]
        return [peer for peer in peers if feature not in peer.features]

    def require(self, feature: bytes, what: str) -> None:
        """Refuse a command that needs ``feature`` on every reachable node while one
        lacks it (DisqueError naming the node)."""
        lacking = self.lacking(feature)
        if lacking:
            peer = lacking[0]
            more = f" and {len(lacking) - 1} more" if len(lacking) > 1 else ""
            raise DisqueError(
                reply.err(
                    f"{what} needs the '{feature.decode()}' feature on every node, and node "
                    f"{peer.id.decode()} ({self.describe(peer)}){more} does not speak it: "
                    "finish the upgrade first"
                )
            )

    # Refused peers ---------------------------------------------------------------------

    def from_refused(
        self, peer: ClusterNode, header: Header, messages: Iterable[Message], link: Link | None,
        peer_ip: bytes,
    ) -> bool:  # fmt: skip
        """A frame from a refused peer: read its VERSION; answer its PING or MEET with
        ours (and, to a peer of protocol 2 or more, with the PONG that ends its
        handshake with this node: it must know this node to read that VERSION and refuse
        it in turn; a protocol 1 peer gets no PONG and counts this node failing). True
        when it now speaks a version in common: read the frame normally."""
        version = header.flags >> VERSION_SHIFT or 1
        if peer.bus_version != version:
            self.heard(peer, version)
        greeted = []
        for message in messages:
            kind = message[0]
            if kind == msg.VERSION:
                self.on_version(self.node, peer.id, message)
                if message[5] & msg.ASK:
                    greeted.append(message)
            elif kind in (msg.PING, msg.MEET):
                greeted.append(message)
        if peer.id not in self.refused:
            return True
        self.refused_frames += 1
        bus = self.node.bus
        if greeted and version >= 2 and bus is not None and link is not None:
            for message in greeted:
                if message[0] != msg.VERSION:
                    self.node.cluster.receive(header, message, link, peer_ip)  # (the PONG)
            bus.reply(link, self.version_message())
        return False

    # The cron ---------------------------------------------------------------------------

    def cron(self, now: int) -> None:
        """Log every refused peer once a minute; ask the linked peers of protocol 2 or
        more whose VERSION has not come for it, once a second; a rehearsal probes its
        peers."""
        nodes = self.node.cluster.nodes
        if self.versioned and now >= self._next_ask:
            self._next_ask = now + ASK_PERIOD
            for peer in list(nodes.values()):
                if (
                    peer.link
                    and peer.dialect_sure
                    and peer.bus_version >= 2
                    and not peer.release
                    and peer.id not in self.refused
                ):
                    self.announce(peer, msg.ASK)
        for node_id, logged in list(self.refused.items()):
            refused = nodes.get(node_id)
            if refused is None:
                del self.refused[node_id]
            elif now - logged >= REFUSED_LOG_PERIOD:
                self.refused[node_id] = now
                self._log_refused(refused)
        if self.speech.probe and now >= self._next_probe:
            self._next_probe = now + PROBE_PERIOD
            for peer in list(nodes.values()):
                if peer.link and peer.dialect_sure and 2 <= peer.bus_version < self.speech.version:
                    self.node.bus_send(peer.id, (PROBE_TYPE, b"rehearsal"))
                    self.node.bus_send(peer.id, (*self.version_message(), b"rehearsal"))

    # What operators see ---------------------------------------------------------------

    def node_fields(self, peer: ClusterNode) -> bytes:
        """CLUSTER NODES' fields after Disque's: ``release=<r> bus=<v>`` (``-`` when not
        known yet; ``bus=<v>:refused`` for a refused peer)."""
        if peer is self.node.cluster.myself:
            return b"release=%s bus=%d" % (self.speech.release, self.speech.version)
        release = peer.release or b"-"
        if not peer.bus_version:
            return b"release=%s bus=-" % release
        refused = b":refused" if peer.id in self.refused else b""
        return b"release=%s bus=%d%s" % (release, peer.bus_version, refused)

    def info_fields(self) -> list[tuple[str, object]]:
        """INFO cluster: what the peers speak, and what the bus left out."""
        releases: dict[str, int] = {}
        me = self.node.cluster.myself
        for peer in self.node.cluster.nodes.values():
            if peer is me:
                name = self.speech.release.decode(errors="replace")
            elif peer.release or peer.bus_version:
                name = (peer.release or b"?").decode(errors="replace")
            else:
                continue
            releases[name] = releases.get(name, 0) + 1
        missing = sorted(
            {f.decode() for peer in self.lacking_any() for f in FEATURES - peer.features}
        )
        return [
            ("cluster_releases", ",".join(f"{k}={v}" for k, v in sorted(releases.items()))),
            ("cluster_bus_features_missing", ",".join(missing)),
            ("cluster_bus_peers_refused", len(self.refused)),
            ("cluster_bus_refused_frames", self.refused_frames),
            ("cluster_bus_messages_withheld", self.withheld),
            ("cluster_bus_messages_skipped", self.codec.skipped),
            ("cluster_bus_fields_trimmed", self.codec.trimmed),
        ]

    def lacking_any(self) -> list[ClusterNode]:
        """The known peers that lack a feature of this node's."""
        me = self.node.cluster.myself
        return [
            peer
            for peer in self.node.cluster.nodes.values()
            if peer is not me and peer.bus_version and not peer.features >= FEATURES
        ]
