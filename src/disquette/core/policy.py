"""Queue policies: per queue-name pattern defaults and limits, cluster-wide (beyond Disque).

A policy (RabbitMQ's idea) names a glob pattern and options: ADDJOB's defaults
for the queues it matches (``replicate``, ``retry``, ``ttl``, ``delay``,
``maxlen``, ``priority``), their dead-letter rules (``deadletter``,
``max-nacks``, ``max-deliveries``, see :mod:`disquette.core.deadletter`), their
retry backoff (``backoff``, ``backoff-base``, ``backoff-cap``, see
:mod:`disquette.core.backoff`), what a full queue does (``overflow``) and their
cluster-wide delivery limits (``rate``, ``concurrency``, see
:mod:`disquette.core.ratelimit`). One policy applies to a queue, the most
specific that matches: the pattern with the most literal characters, then the
fewest ``*``, then the policy name that sorts first.

Every node holds the whole table. Each policy carries a version, a Lamport
counter and the ID of the node that wrote it: the greater version wins, so any
two nodes that saw the same writes hold the same table, whatever the order
they arrived in (last writer wins; equal counters are broken by node ID). A
deletion is a version too (a tombstone, kept so that an old copy of the policy
cannot come back). A write is sent to every linked node at once; besides, each
node sends a digest of its table to one linked node per second, and a node
whose digest differs answers with its table (the receiver merges it and, when
it held newer versions, answers with its own): partitions heal, and a node
that joins later or restarts without its file learns the table. The table is
saved in nodes.conf (``vars policy <hex>`` lines), so it survives restarts
with or without the AOF.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

import msgpack

from disquette.config.glob import stringmatch
from disquette.core import messages as msg
from disquette.core.job import MAX_PRIORITY
from disquette.core.messages import Message

if TYPE_CHECKING:
    from disquette.core.node import Node

#: Options and the range of their integer values (None: a name, see CHOICES).
OPTIONS: Final[dict[str, tuple[int, int] | None]] = {
    "replicate": (1, 65535),
    "retry": (0, 1 << 32),
    "ttl": (1, 1 << 32),
    "delay": (0, 1 << 32),
    "maxlen": (1, 1 << 62),
    "priority": (0, MAX_PRIORITY),
    "deadletter": None,
    "max-nacks": (1, 1 << 32),
    "max-deliveries": (1, 1 << 32),
    "backoff": None,
    "backoff-base": (1, 1 << 32),
    "backoff-cap": (1, 1 << 32),
    "overflow": None,
    "rate": (1, 1 << 32),  # jobs delivered per second, cluster-wide (core/ratelimit.py)
    "concurrency": (1, 1 << 32),  # jobs delivered and not acknowledged, cluster-wide
}
#: The options whose value is one of a few names (others with None: a queue name).
CHOICES: Final[dict[str, tuple[bytes, ...]]] = {
    "backoff": (b"fixed", b"exponential"),
    "overflow": (b"refuse", b"drop-oldest"),
}
SYNC_PERIOD: Final = 1000  # ms between digests sent to a random linked node
MAX_CACHED: Final = 65536  # queue names whose policy is remembered
MAX_NAME: Final = 1024  # bytes of a policy name or pattern
NODE_ID_LEN: Final = 40
MAX_COUNTER: Final = 1 << 62  # a version counter from a peer beyond it is refused


class Policy:
    """One version of a named policy (``deleted``: the version that deleted it)."""

    __slots__ = ("counter", "deleted", "name", "options", "origin", "pattern", "rank")

    def __init__(
        self,
        name: bytes,
        pattern: bytes,
        options: dict[str, int | bytes],
        counter: int,
        origin: bytes,
        deleted: bool = False,
    ) -> None:
        self.name = name
        self.pattern = pattern
        self.options = options
        self.counter = counter
        self.origin = origin
        self.deleted = deleted
        literal = len(pattern) - sum(pattern.count(c) for c in (b"*", b"?", b"[", b"]", b"\\"))
        # Sorts first when more specific (see the module docstring).
        self.rank = (-literal, pattern.count(b"*"), name)

    @property
    def version(self) -> tuple[int, bytes]:
        return (self.counter, self.origin)

    def get(self, option: str) -> int:
        """An integer option, 0 when the policy does not set it."""
        value = self.options.get(option, 0)
        return value if isinstance(value, int) else 0

    @property
    def deadletter(self) -> bytes | None:
        value = self.options.get("deadletter")
        return value if isinstance(value, bytes) else None

    def encode(self) -> bytes:
        """The record as the bus and nodes.conf carry it."""
        flat: list[object] = []
        for option in OPTIONS:
            if option in self.options:
                flat += [option, self.options[option]]
        return msgpack.packb(
            (self.name, self.pattern, flat, self.counter, self.origin, self.deleted),
            use_bin_type=True,
        )

    def __repr__(self) -> str:
        return f"Policy({self.name!r}, {self.pattern!r}, {self.options}, v{self.counter})"


def decode(data: bytes) -> Policy | None:
    """A record from a peer or a file, or None when it is not a valid one."""
    try:
        record = msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=True)
    except Exception:  # msgpack raises several unrelated types on bad input
        return None
    if type(record) is not tuple or len(record) != 6:
        return None
    name, pattern, flat, counter, origin, deleted = record
    if not (
        type(name) is bytes
        and type(pattern) is bytes
        and 0 < len(name) <= MAX_NAME
        and len(pattern) <= MAX_NAME
        and type(flat) is tuple
        and not len(flat) % 2
        and type(counter) is int
        and 0 < counter < MAX_COUNTER
        and type(origin) is bytes
        and len(origin) == NODE_ID_LEN
        and type(deleted) is bool
    ):
        return None
    options: dict[str, int | bytes] = {}
    for option, value in zip(flat[::2], flat[1::2], strict=True):
        if option_error(option, value) is not None:
            return None
        options[option] = value
    return Policy(name, pattern, options, counter, origin, deleted)


def option_error(option: object, value: object) -> str | None:
    """Why (option, value) is not a valid policy option, or None."""
    if type(option) is not str or option not in OPTIONS:
        return f"Unknown policy option '{option}'"
    choices = CHOICES.get(option)
    if choices is not None:
        return None if value in choices else f"bad {option}"
    bounds = OPTIONS[option]
    if bounds is None:
        return None if type(value) is bytes and 0 < len(value) <= MAX_NAME else "bad queue name"
    if type(value) is not int or not bounds[0] <= value <= bounds[1]:
        return f"bad {option}"
    return None


class PolicyTable:
    """The policies this node knows, their versions, and the queues they apply to."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.records: dict[bytes, Policy] = {}  # by name, tombstones included
        self.active: list[Policy] = []  # live policies, most specific first
        self.counter = 0  # the greatest counter seen (Lamport clock)
        self._cache: dict[bytes, Policy | None] = {}
        self._digest = 0
        self._next_sync = 0

    def __len__(self) -> int:
        return len(self.active)

    # What the node asks ------------------------------------------------------

    def for_queue(self, queue: bytes) -> Policy | None:
        """The policy that applies to ``queue`` (None: none, the common case)."""
        if not self.active:
            return None
        cache = self._cache
        try:
            return cache[queue]
        except KeyError:
            pass
        found = None
        for policy in self.active:
            if stringmatch(policy.pattern, queue):
                found = policy
                break
        if len(cache) >= MAX_CACHED:
            cache.clear()
        cache[queue] = found
        return found

    def get(self, name: bytes) -> Policy | None:
        policy = self.records.get(name)
        return None if policy is None or policy.deleted else policy

    # Writes ------------------------------------------------------------------

    def set(self, name: bytes, pattern: bytes, options: dict[str, int | bytes]) -> None:
        """QPOLICY SET: a new version written here, sent to every linked node."""
        self._write(Policy(name, pattern, options, self.counter + 1, self.node.myself))

    def delete(self, name: bytes) -> bool:
        """QPOLICY DEL: a tombstone written here; False when no such policy lives."""
        if self.get(name) is None:
            return False
        self._write(Policy(name, b"", {}, self.counter + 1, self.node.myself, deleted=True))
        return True

    def _write(self, policy: Policy) -> None:
        self.merge([policy])
        update = (msg.POLICIES, (policy.encode(),), 0)
        for node_id in self.node.linked_nodes():
            self.node.send(node_id, update)

    def merge(self, policies: Iterable[Policy]) -> bool:
        """Keep the newer version of each policy; True when the table changed."""
        changed = False
        for policy in policies:
            self.counter = max(self.counter, policy.counter)
            current = self.records.get(policy.name)
            if current is None or policy.version > current.version:
                self.records[policy.name] = policy
                changed = True
        if changed:
            self._changed()
        return changed

    def load(self, records: Iterable[bytes]) -> None:
        """The records nodes.conf held (invalid ones are skipped)."""
        self.merge(p for p in map(decode, records) if p is not None)

    def _changed(self) -> None:
        self.active = sorted((p for p in self.records.values() if not p.deleted),
                             key=lambda p: p.rank)  # fmt: skip
        self._cache = {}
        digest = hashlib.blake2b(digest_size=8)
        for name in sorted(self.records):
            policy = self.records[name]
            digest.update(b"%d:%s:%d:%s:%d;" % (len(name), name, policy.counter, policy.origin,
                                                 policy.deleted))  # fmt: skip
        self._digest = int.from_bytes(digest.digest(), "big")
        self.node.policies_changed()

    # Anti-entropy ------------------------------------------------------------

    @property
    def digest(self) -> int:
        """A hash of every name and version (0 for an empty table)."""
        return self._digest

    def cron(self, now: int) -> None:
        """Every second, send the digest to one random linked node."""
        if now < self._next_sync:
            return
        self._next_sync = now + SYNC_PERIOD
        linked = self.node.linked_nodes()
        if linked:
            self.node.send(self.node.rng.choice(linked), (msg.POLICYDIGEST, self._digest))

    def table_message(self) -> Message:
        """The whole table (``full`` set: the receiver answers with its own if it knows
        more)."""
        return (msg.POLICIES, tuple(p.encode() for p in self.records.values()), msg.FULL_TABLE)

    def config_lines(self) -> bytes:
        """nodes.conf's ``vars policy`` lines."""
        return b"".join(b"vars policy %s\n" % p.encode().hex().encode()
                        for p in self.records.values())  # fmt: skip


def install(node: Node) -> None:
    node.message_handlers[msg.POLICYDIGEST] = on_digest
    node.message_handlers[msg.POLICIES] = on_policies


def on_digest(node: Node, sender: bytes, message: Message) -> None:
    """A peer's digest: when it differs from ours, the peer gets our table."""
    if message[1] != node.policies.digest:
        node.send(sender, node.policies.table_message())


def on_policies(node: Node, sender: bytes, message: Message) -> None:
    """Policies from a peer (a write, or its whole table): merge them. A peer whose
    whole table lacks a version this node holds gets this node's table back."""
    table = node.policies
    received = [p for p in map(decode, message[1]) if p is not None]
    table.merge(received)
    if message[2] & msg.FULL_TABLE:
        theirs = {p.name: p.version for p in received}
        if any(theirs.get(p.name) != p.version for p in table.records.values()):
            node.send(sender, table.table_message())
