"""Values stored by key in a disquette cluster: one job per key, at the key's home node.

What the Celery and Dramatiq result backends need, a small key-value store
with expiry and a blocking read, made of jobs: a value is a job whose body is
the value, in a queue named by the key, added with the value's lifetime as its
TTL and replicated like any job (it outlives the failure of a node and goes
away by itself). Nobody consumes these queues; reading is QPEEK, which leaves
the job where it is.

**Home nodes.** A key's home is the node its CRC-32 picks among the healthy
nodes HELLO lists, sorted by node ID; writers add there, readers peek there, so
a reader blocked on a key (GETJOB TIMEOUT at the home node; the job it takes is
put straight back with NACK) wakes the moment the value is added, with no
polling and no wait for federation. When the home node cannot be reached a value
goes to the client's current node, and a reader that finds nothing at home
looks at the other nodes before it says the key is missing.

**Latest wins.** A value may be added with a priority (a peek sees the highest
first), and the job a process added before for the same key is acknowledged
when it adds the next, so a key's queue usually holds one job.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import OrderedDict

from disquette.client import Client, DisqueError
from disquette.client.topology import format_address

#: A value's RETRY, seconds: how soon a copy on another node is queued (and so seen)
#: when the home node failed, or a reader died between taking the job and putting it
#: back. Each holder of a copy speaks to the others once per period (WILLQUEUE), so
#: it is long: values are many and live long.
VALUE_RETRY = 60
#: Seconds between refreshes of the node table home nodes are chosen from.
NODES_REFRESH = 30.0
#: The keys whose last job this process remembers (to drop superseded values).
STORED_KEPT = 4096


class KeyedStore:
    """Jobs as values by key; see the module docstring."""

    def __init__(self, client: Client, replicate: int | None = None) -> None:
        self.client = client
        self.replicate = replicate
        self._views: dict[str, Client] = {}
        self._addresses: list[str] = []
        self._refreshed = -NODES_REFRESH
        self._lock = threading.Lock()
        self._stored: OrderedDict[bytes, tuple[Client, str]] = OrderedDict()

    # ------------------------------------------------------------------ nodes

    def refresh(self) -> None:
        """Ask HELLO again; the client's topology keeps the nodes at the addresses it uses."""
        try:
            self.client.hello()
        except DisqueError:
            return
        nodes = self.client.topology.nodes
        healthy = sorted((n for n in nodes if n.priority < 10), key=lambda n: n.id)
        with self._lock:
            self._addresses = [format_address(n.address) for n in healthy]
            self._refreshed = time.monotonic()

    def _view(self, address: str) -> Client:
        view = self._views.get(address)
        if view is None:
            view = self._views[address] = self.client.on_node(address)
        return view

    def nodes(self, key: bytes) -> list[Client]:
        """The key's home node first, then the other healthy nodes."""
        if time.monotonic() - self._refreshed > NODES_REFRESH:
            self.refresh()
        addresses = self._addresses
        if not addresses:
            return [self.client]
        home = zlib.crc32(key) % len(addresses)
        return [self._view(a) for a in addresses[home:] + addresses[:home]]

    # ------------------------------------------------------------------ values

    def put(self, key: bytes, value: bytes | str, ttl: int, priority: int | None = None,
            retry: int = VALUE_RETRY, keep_previous: bool = False) -> str:  # fmt: skip
        """Add ``value`` under ``key`` for ``ttl`` seconds; drop the one this process added
        before for the key unless ``keep_previous``. Returns the job's ID."""

        def add(node: Client) -> str:
            job_id: str = node.add_job(
                key, value, ttl=ttl, retry=retry, priority=priority, replicate=self.replicate
            )
            return job_id

        node = self.nodes(key)[0]
        try:
            job_id = add(node)
        except DisqueError:
            node = self.client
            job_id = add(node)
        if keep_previous:
            return job_id
        with self._lock:
            previous = self._stored.pop(key, None)
            self._stored[key] = (node, job_id)
            if len(self._stored) > STORED_KEPT:
                self._stored.popitem(last=False)
        if previous is not None:
            try:
                previous[0].ack(previous[1])
            except DisqueError:
                pass  # it expires with its TTL
        return job_id

    def peek(self, key: bytes) -> bytes | None:
        """The key's value (the highest priority, then the oldest), or None."""
        for node in self.nodes(key):
            try:
                jobs = node.qpeek(key, 1)
            except DisqueError:
                continue
            if jobs:
                return jobs[0].body  # type: ignore[no-any-return]
        return None

    def wait(self, key: bytes, seconds: float) -> None:
        """Block up to ``seconds`` at the key's home node until a value is added there."""
        node = self.nodes(key)[0]
        try:
            jobs = node.get_jobs(key, timeout=max(seconds, 0.001))
        except DisqueError:
            self.refresh()
            time.sleep(min(seconds, 0.1))
            return
        if jobs:
            node.nack(*jobs)

    def take(self, key: bytes) -> tuple[int, bool]:
        """Acknowledge the key's jobs (GETJOB NOHANG + ACKJOB on each node).

        Returns how many were acknowledged and whether the home node answered.
        """
        taken, home_answered = 0, False
        for i, node in enumerate(self.nodes(key)):
            try:
                while jobs := node.get_jobs(key, count=100, nohang=True):
                    taken += node.ack(*jobs)
            except DisqueError:
                continue
            home_answered = home_answered or i == 0
        return taken, home_answered
