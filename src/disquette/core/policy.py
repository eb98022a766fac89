"""Queue policies: per queue-name pattern defaults and limits, cluster-wide (beyond Disque).

A policy (RabbitMQ's idea) names a glob pattern and options: ADDJOB's defaults
for the queues it matches (``replicate``, ``retry``, ``ttl``, ``delay``,
``maxlen``, ``priority``), their dead-letter rules (``deadletter``,
``max-nacks``, ``max-deliveries``, see :mod:`disquette.core.deadletter`), their
retry backoff (``backoff``, ``backoff-base``, ``backoff-cap``, see
:mod:`disquette.core.backoff`), what a full queue does (``overflow``) and their
cluster-wide delivery limits (``rate``, ``concurrency``, and per fair-share group
``group-rate``, ``group-concurrency``, see :mod:`disquette.core.ratelimit`). One
policy applies to a queue, the most specific that matches: the pattern with the
most literal characters, then the fewest ``*``, then the policy name that sorts
first.

Every node holds the whole table, a :class:`~disquette.core.replicated.ReplicatedTable`:
each policy carries a version (a Lamport counter and the ID of the node that
wrote it) and the greater version wins, deletions are tombstones, a digest
exchange once a second heals partitions and teaches nodes that join later, and
the table is saved in nodes.conf (``vars policy <hex>`` lines), so it survives
restarts with or without the AOF.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgpack

from disquette.config.glob import stringmatch
from disquette.core import messages as msg
from disquette.core.job import MAX_PRIORITY
from disquette.core.messages import Message
from disquette.core.replicated import ReplicatedTable, unpack, valid_version

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
    "group-rate": (1, 1 << 32),  # the same two, for each group of the queue (ADDJOB GROUP)
    "group-concurrency": (1, 1 << 32),
}
#: The options whose value is one of a few names (others with None: a queue name).
CHOICES: Final[dict[str, tuple[bytes, ...]]] = {
    "backoff": (b"fixed", b"exponential"),
    "overflow": (b"refuse", b"drop-oldest"),
}
MAX_CACHED: Final = 65536  # queue names whose policy is remembered
MAX_NAME: Final = 1024  # bytes of a policy name or pattern
POLICY_VAR: Final = b"policy"  # nodes.conf: ``vars policy <hex>``


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
    record = unpack(data, 6)
    if record is None:
        return None
    name, pattern, flat, counter, origin, deleted = record
    if not (
        type(name) is bytes
        and type(pattern) is bytes
        and 0 < len(name) <= MAX_NAME
        and len(pattern) <= MAX_NAME
        and type(flat) is tuple
        and not len(flat) % 2
        and valid_version(counter, origin, deleted)
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


class PolicyTable(ReplicatedTable[Policy]):
    """The policies this node knows, their versions, and the queues they apply to."""

    def __init__(self, node: Node) -> None:
        super().__init__(node, msg.POLICYDIGEST, msg.POLICIES, POLICY_VAR, decode, _tombstone)
        self.active: list[Policy] = []  # live policies, most specific first
        self._cache: dict[bytes, Policy | None] = {}

    def __len__(self) -> int:
        return len(self.active)

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

    def set(self, name: bytes, pattern: bytes, options: dict[str, int | bytes]) -> None:
        """QPOLICY SET: a new version written here, sent to every linked node."""
        self.write(Policy(name, pattern, options, self.next_counter(), self.node.myself))

    def changed(self) -> None:
        self.active = sorted((p for p in self.records.values() if not p.deleted),
                             key=lambda p: p.rank)  # fmt: skip
        self._cache = {}
        super().changed()
        self.node.rates.policies_changed()  # queue limits follow the policies


def _tombstone(name: bytes, counter: int, origin: bytes) -> Policy:
    return Policy(name, b"", {}, counter, origin, deleted=True)


def install(node: Node) -> None:
    node.policies.install()


def on_digest(node: Node, sender: bytes, message: Message) -> None:
    """A peer's digest (see :mod:`disquette.core.replicated`)."""
    node.policies.on_digest(node, sender, message)


def on_policies(node: Node, sender: bytes, message: Message) -> None:
    """Policies from a peer, a write or its whole table (see
    :mod:`disquette.core.replicated`)."""
    node.policies.on_records(node, sender, message)
