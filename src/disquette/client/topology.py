"""Which node to talk to: seeds, HELLO, priorities, failures, job-ID routing, affinity.

Disque's README tells clients how to behave in a cluster: try the seed nodes in
random order until one answers, run HELLO to learn every node and its
priority (1 is best; 100 means failing or leaving), prefer the best, and move
away from a node that fails or answers ``-LEAVING``. A job ID carries the
first 8 characters of the ID of the node that created it, so commands about a
job can go straight to that node; and a consumer that receives most of its
jobs from one foreign node may move there (consumer affinity).

:class:`Topology` holds that knowledge and makes those choices. It never does
I/O: it is told what happened (``learn``, ``mark_failed``, ``mark_leaving``,
``observe_jobs``) and asked where to go (``choose``, ``node_for_job``). Time
and randomness are injected, so tests drive it deterministically. Shared
tables are replaced, never mutated, so threads may read them without locks.
"""

from __future__ import annotations

import random
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from disquette.client.models import Hello, node_prefix

Address = tuple[str, int]

DEFAULT_PORT = 7711
#: HELLO priorities: 1 healthy, 5 no link from the answering node, 10 PFAIL, 100 FAIL/leaving.
UNUSABLE_PRIORITY = 100
ROUTABLE_PRIORITY = 10


def parse_address(text: str | Address) -> Address:
    """``"host:port"``, ``"[v6]:port"``, ``"host"`` (port 7711) or a tuple -> ``(host, port)``."""
    if isinstance(text, tuple):
        return (text[0], int(text[1]))
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if not host:
        raise ValueError(f"no host in address {text!r}")
    return (host, int(port) if port else DEFAULT_PORT)


def format_address(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_seeds(seeds: str | Address | Iterable[str | Address]) -> tuple[Address, ...]:
    """Seeds as a comma-separated string, one address, or a sequence of them."""
    if isinstance(seeds, str):
        items: Iterable[str | Address] = [s for s in seeds.split(",") if s.strip()]
    elif isinstance(seeds, tuple) and len(seeds) == 2 and isinstance(seeds[1], int):
        items = [seeds]  # type: ignore[list-item]
    else:
        items = seeds  # type: ignore[assignment]
    parsed = tuple(dict.fromkeys(parse_address(s) for s in items))
    if not parsed:
        raise ValueError("at least one seed address is needed")
    return parsed


@dataclass(frozen=True, slots=True)
class KnownNode:
    id: str
    address: Address
    priority: int
    order: float  # random tie-break among equal priorities, fixed per HELLO


class Affinity:
    """Counts where received jobs were created, and says when most come from one node.

    ``window`` is how many recent jobs are counted; the consumer should move when
    at least ``threshold`` of them come from one node other than its own, once at
    least ``min_jobs`` jobs were seen.
    """

    def __init__(self, window: int = 200, threshold: float = 0.5, min_jobs: int = 50) -> None:
        self.window = window
        self.threshold = threshold
        self.min_jobs = min(min_jobs, window)
        self._recent: deque[str] = deque(maxlen=window)

    def observe(self, prefixes: Iterable[str]) -> None:
        self._recent.extend(prefixes)

    def reset(self) -> None:
        self._recent.clear()

    def dominant(self, local_prefix: str | None) -> str | None:
        """The foreign node prefix producing most received jobs, if it passes the threshold."""
        if len(self._recent) < self.min_jobs:
            return None
        prefix, count = Counter(self._recent).most_common(1)[0]
        if prefix != local_prefix and count >= self.threshold * len(self._recent):
            return prefix
        return None


class Topology:
    """The client's view of the cluster and its routing decisions."""

    def __init__(
        self,
        seeds: Sequence[Address],
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        failure_backoff: float = 5.0,
        affinity: Affinity | None = None,
    ) -> None:
        self._rng = rng or random.Random()
        #: Seconds, monotonic: failures' age, and a wait's deadline (``wait``).
        self.clock = clock
        self._seeds = list(seeds)
        self._rng.shuffle(self._seeds)
        self.failure_backoff = failure_backoff
        self.affinity = affinity
        self._nodes: dict[str, KnownNode] = {}
        self._by_prefix: dict[str, KnownNode] = {}
        self._by_address: dict[Address, KnownNode] = {}
        self._failed: dict[Address, float] = {}
        #: The node commands go to when nothing else decides.
        self.current: Address | None = None
        #: The node GETJOB goes to when consumer affinity moved it.
        self.consumer: Address | None = None

    # ------------------------------------------------------------------ learning

    def learn(self, address: Address, hello: Hello) -> None:
        """Replace the node table with what ``address`` answered to HELLO."""
        nodes: dict[str, KnownNode] = {}
        for info in hello.nodes:
            if info.id == hello.node_id:
                node_address = address  # the address we reached it at, whatever it calls itself
            elif info.host and info.port:
                node_address = (info.host, info.port)
            else:
                continue
            nodes[info.id] = KnownNode(info.id, node_address, info.priority, self._rng.random())
        self._nodes = nodes
        self._by_prefix = {n.id[:8]: n for n in nodes.values()}
        self._by_address = {n.address: n for n in nodes.values()}
        self._failed = {a: t for a, t in self._failed.items() if a != address}

    def mark_failed(self, address: Address) -> None:
        """A connection to ``address`` failed or broke: avoid it for a while."""
        self._failed = {**self._failed, address: self.clock()}
        if self.current == address:
            self.current = None
        if self.consumer == address:
            self.consumer = None

    def mark_leaving(self, address: Address) -> None:
        """``address`` answered -LEAVING: treat it as priority 100 until a HELLO says otherwise."""
        node = self._by_address.get(address)
        if node is not None:
            leaving = KnownNode(node.id, address, UNUSABLE_PRIORITY, node.order)
            self._nodes = {**self._nodes, node.id: leaving}
            self._by_prefix = {**self._by_prefix, node.id[:8]: leaving}
            self._by_address = {**self._by_address, address: leaving}
        else:
            self.mark_failed(address)
        if self.current == address:
            self.current = None
        if self.consumer == address:
            self.consumer = None

    def use(self, address: Address) -> None:
        """Commands without a better target go to ``address`` from now on."""
        self.current = address

    # ------------------------------------------------------------------ choosing

    @property
    def nodes(self) -> list[KnownNode]:
        return list(self._nodes.values())

    def healthy(self, address: Address) -> bool:
        """Not failed recently and not advertised as failing or leaving."""
        failed_at = self._failed.get(address)
        if failed_at is not None and self.clock() - failed_at < self.failure_backoff:
            return False
        node = self._by_address.get(address)
        return node is None or node.priority < UNUSABLE_PRIORITY

    def choose(self, tried: Mapping[Address, int], prefer: Address | None = None) -> Address | None:
        """The next address to try, or ``None`` when every candidate was tried twice.

        Order: ``prefer``, the current node, known nodes by priority (random among
        equals), then the seeds. Healthy candidates come before unhealthy ones and
        untried before tried-once; an address tried twice is out.
        """
        known = sorted(self._nodes.values(), key=lambda n: (n.priority, n.order))
        ordered: list[Address] = []
        for address in (prefer, self.current, *(n.address for n in known), *self._seeds):
            if address is not None and address not in ordered:
                ordered.append(address)
        best: tuple[int, bool, int] | None = None
        choice = None
        for rank, address in enumerate(ordered):
            attempts = tried.get(address, 0)
            if attempts >= 2:
                continue
            key = (attempts, not self.healthy(address), rank)
            if best is None or key < best:
                best, choice = key, address
        return choice

    def should_leave(self, address: Address, tried: Mapping[Address, int]) -> bool:
        """True if ``address`` is unhealthy and a healthy untried alternative exists."""
        if self.healthy(address):
            return False
        alternative = self.choose({**tried, address: 2})
        return alternative is not None and alternative not in tried and self.healthy(alternative)

    def node_for_job(self, job_id: str) -> Address | None:
        """The node that created ``job_id``, if it is known and up."""
        node = self._by_prefix.get(node_prefix(job_id))
        if node is None or node.priority >= ROUTABLE_PRIORITY or not self.healthy(node.address):
            return None
        return node.address

    def group_by_node(self, job_ids: Iterable[str]) -> dict[Address | None, list[str]]:
        """Job IDs grouped by the node that created them (``None``: unknown or down)."""
        groups: dict[Address | None, list[str]] = {}
        for job_id in job_ids:
            groups.setdefault(self.node_for_job(job_id), []).append(job_id)
        return groups

    # ------------------------------------------------------------------ affinity

    def consumer_target(self) -> Address | None:
        """Where GETJOB should go: the affinity node if one was chosen and is up."""
        if self.consumer is not None and self.healthy(self.consumer):
            return self.consumer
        return None

    def observe_jobs(self, address: Address, job_ids: Iterable[str]) -> None:
        """GETJOB on ``address`` returned ``job_ids``; maybe move the consumer (affinity)."""
        if self.affinity is None:
            return
        self.affinity.observe(node_prefix(j) for j in job_ids)
        local = self._by_address.get(address)
        prefix = self.affinity.dominant(None if local is None else local.id[:8])
        if prefix is None:
            return
        node = self._by_prefix.get(prefix)
        if node is not None and node.priority < ROUTABLE_PRIORITY and self.healthy(node.address):
            self.consumer = node.address
            self.affinity.reset()
