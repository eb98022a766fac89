"""ADDJOB pipelined over several connections, every reply checked.

This is the sink's engine, run once per Spark task. It is plain Python with
sockets, independent of Spark, so the benchmark and the tests can reason about
it alone:

* :class:`AddJobEncoder` turns bodies into ADDJOB requests. Only the queue and
  the body vary between the jobs of a write, so the arguments before the body
  (per queue) and after it (timeout and options) are encoded once, and a job
  costs one ``%`` formatting instead of a per-argument encoding.
* :class:`AddJobPipe` keeps connections to the nodes (opened with the client
  library's :class:`~disquette.client.sync.Link`: AUTH and the rest of the
  handshake are the client's), sends each chunk of requests to a connection
  with room for it, never lets one owe more than its depth, and reads replies
  from whichever connection has them. Every reply must be a job ID: an error
  reply, a lost connection or a connection that gets no reply for the ADDJOB
  timeout plus :data:`REPLY_GRACE` raises :class:`SinkError`, which fails the
  task so that Spark runs it again.

How many connections, and how deep, depends on whether the jobs are replicated
synchronously (:class:`ConnectionPlan`). A node answers an ADDJOB that is not
replicated synchronously (REPLICATE 1, or ASYNC) at once, so one connection per
node with a deep window (``window`` requests in flight) keeps it busy: that is
the pipelined path. A synchronous ADDJOB (REPLICATE > 1 without ASYNC, or no
REPLICATE on a multi-node cluster, whose default is min(3, cluster size))
blocks its connection on the node until the copies are confirmed, and the
requests pipelined behind it wait: one connection then carries one ADDJOB per
replication round trip, however deep its window. The nodes only work in
parallel across connections, so the task then opens many connections, each
with :data:`SYNC_DEPTH` requests in flight (one being replicated, the next
already on the node), up to ``window / SYNC_DEPTH`` per node (the same
``window`` in flight per node as the pipelined path), at most
:data:`SYNC_CONNECTIONS_PER_NODE` per node or ``connectionsPerNode`` if given,
and never more than :data:`MAX_TASK_CONNECTIONS` in all. They are opened as
the write needs them (when no connection has room and no reply is waiting), so
a micro-batch of a few rows opens a few connections, not a hundred.

Jobs of a failed task that were already added stay added; the retried task
adds them again. The sink is therefore at-least-once, with duplicates
possible on task retry (docs/spark.md).
"""

from __future__ import annotations

import random
import selectors
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from disquette.client.api import ClientConfig
from disquette.client.errors import DisqueError
from disquette.client.sync import RECV_SIZE, Link
from disquette.client.topology import format_address, parse_address
from disquette.spark.options import SinkOptions

#: Seconds a node may stay silent, on top of the ADDJOB timeout, before the task fails.
REPLY_GRACE = 30.0

#: ADDJOBs in flight per connection when they are replicated synchronously: one
#: blocked on the node while its copies are made, one queued behind it, so the
#: connection never idles waiting for the task to send the next.
SYNC_DEPTH = 2

#: Connections a task opens to each node by default for synchronous replication.
#: On the 2-core development VM (three nodes, REPLICATE 3, two tasks writing at
#: once) 1 per node gave about 11k jobs/s, 8 about 25k, 16 about 31k, 32 about
#: 39k, and more (up to the task's bound, 42 here) nothing more.
SYNC_CONNECTIONS_PER_NODE = 32

#: Connections one task opens at most, in all, whatever the options.
MAX_TASK_CONNECTIONS = 128

#: Seconds between two checks for connections that wait for a reply too long.
CHECK_INTERVAL = 1.0


class SinkError(RuntimeError):
    """A job could not be added: the Spark task fails and is retried."""


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


class AddJobEncoder:
    """ADDJOB requests for one set of options; only the queue and the body vary."""

    def __init__(self, options: SinkOptions) -> None:
        tail = [b"%d" % options.timeout_ms]
        for keyword, value in (
            (b"REPLICATE", options.replicate),
            (b"DELAY", options.delay),
            (b"RETRY", options.retry),
            (b"TTL", options.ttl),
            (b"MAXLEN", options.maxlen),
        ):
            if value is not None:
                tail += [keyword, b"%d" % value]
        if options.async_:
            tail.append(b"ASYNC")
        self._arity = 3 + len(tail)
        self._tail = b"".join(_bulk(arg) for arg in tail)
        self._heads: dict[str, bytes] = {}

    def _head(self, queue: str) -> bytes:
        head = self._heads.get(queue)
        if head is None:
            name = queue.encode("utf-8", "surrogateescape")
            head = b"*%d\r\n$6\r\nADDJOB\r\n%s" % (self._arity, _bulk(name))
            self._heads[queue] = head
        return head

    def encode(self, queue: str, bodies: Iterable[bytes]) -> bytes:
        """ADDJOB requests for ``bodies``, all into ``queue``."""
        head, tail = self._head(queue), self._tail
        return b"".join([b"%b$%d\r\n%b\r\n%b" % (head, len(b), b, tail) for b in bodies])

    def encode_rows(self, queues: Sequence[str], bodies: Sequence[bytes]) -> bytes:
        """ADDJOB requests with a queue per job."""
        heads, tail = self._heads, self._tail
        out = []
        for queue, body in zip(queues, bodies, strict=True):
            head = heads.get(queue) or self._head(queue)
            out.append(b"%b$%d\r\n%b\r\n%b" % (head, len(body), body, tail))
        return b"".join(out)


@dataclass(frozen=True, slots=True)
class ConnectionPlan:
    """How many connections a task opens to each node, and how many ADDJOBs each carries."""

    #: Whether the jobs are replicated synchronously (each ADDJOB blocks its connection).
    synchronous: bool
    #: Connections per node at most.
    per_node: int
    #: ADDJOBs in flight per connection at most.
    depth: int
    #: Opened as the write needs them (synchronous), rather than all at the start.
    grow: bool

    @property
    def chunk(self) -> int:
        """ADDJOBs sent at a time: half the depth, so a connection has the next chunk
        on its way while the node works on the previous one."""
        return max(1, self.depth // 2)

    @classmethod
    def choose(cls, options: SinkOptions, nodes: int, cluster_size: int) -> ConnectionPlan:
        """The plan for a write to ``nodes`` nodes of a cluster of ``cluster_size`` nodes
        (which matters only without ``replicate``: the nodes' default is min(3, size))."""
        replicate = options.replicate or min(3, cluster_size)
        synchronous = replicate > 1 and not options.async_
        cap = max(1, MAX_TASK_CONNECTIONS // max(1, nodes))
        explicit = options.connections_per_node
        if not synchronous:
            return cls(False, min(explicit or 1, cap), options.window, grow=False)
        depth = min(options.window, SYNC_DEPTH)
        wanted = -(-options.window // depth)  # the window's worth of ADDJOBs in flight per node
        per_node = explicit or min(SYNC_CONNECTIONS_PER_NODE, wanted)
        return cls(True, min(per_node, cap), depth, grow=True)


class AddJobPipe:
    """Pipelined ADDJOBs over connections spread across the nodes (see the module doc)."""

    def __init__(self, options: SinkOptions) -> None:
        self._reply_timeout = options.timeout_ms / 1000 + REPLY_GRACE
        self._selector = selectors.DefaultSelector()
        self._config = ClientConfig(
            seeds=tuple(parse_address(n) for n in options.connect.nodes),
            password=options.connect.password,
            client_name="disquette-spark-sink",
        )
        #: Replies each open connection owes.
        self._owed: dict[Link, int] = {}
        #: When each connection last received a reply (or started owing one).
        self._since: dict[Link, float] = {}
        #: Connections with room for another chunk, in the order they are used.
        self._ready: deque[Link] = deque()
        #: Connections open to each node.
        self._opened: dict[tuple[str, int], int] = {}
        #: Nodes that may take another connection (synchronous replication).
        self._growable: deque[tuple[str, int]] = deque()
        self._pending = 0
        self._next_check = 0.0
        #: Jobs added so far (replies that were job IDs).
        self.added = 0
        try:
            self.plan = self._connect(options)
        except BaseException:
            self.close()
            raise
        self.chunk = self.plan.chunk
        self._limit = self.plan.depth - self.chunk

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._owed)

    def _open(self, address: tuple[str, int], hello: bool = False) -> Link:
        link = Link.open(address, self._config, hello=hello)
        link.sock.settimeout(self._reply_timeout)
        self._owed[link] = 0
        self._selector.register(link.sock, selectors.EVENT_READ, link)
        self._ready.append(link)
        self._opened[address] = self._opened.get(address, 0) + 1
        return link

    def _connect(self, options: SinkOptions) -> ConnectionPlan:
        """Open a first connection to every node that answers, then choose the plan."""
        # Tasks start at different nodes so that the load spreads; a node that
        # does not answer is skipped (the task retried after a node died must
        # not try it again), one that answers nothing is an error. Without
        # REPLICATE, the first HELLO tells the cluster's size, hence the default.
        hello = options.replicate is None and not options.async_
        seeds = self._config.seeds
        cluster_size = 1
        failures = []
        for address in random.sample(seeds, len(seeds)):
            try:
                link = self._open(address, hello=hello)
            except (OSError, DisqueError) as exc:
                failures.append(f"{format_address(address)}: {exc}")
                continue
            if hello and link.hello is not None:
                cluster_size, hello = len(link.hello.nodes), False
        if not self._owed:
            raise SinkError("no node could be reached: " + "; ".join(failures))
        plan = ConnectionPlan.choose(options, len(seeds), cluster_size)
        reachable = list(self._opened)
        if plan.grow:
            self._growable.extend(a for a in reachable if plan.per_node > 1)
        else:
            for _ in range(plan.per_node - 1):
                for address in reachable:
                    try:
                        self._open(address)
                    except (OSError, DisqueError):
                        continue
        return plan

    def send(self, data: bytes, count: int) -> None:
        """Send ``count`` (at most :attr:`chunk`) encoded ADDJOBs on a connection with room."""
        ready = self._ready
        while not ready:
            self._make_room()
        link = ready.popleft()
        owed = self._owed[link]
        try:
            link.sock.sendall(link.conn.send_encoded(data, count))
        except OSError as exc:
            raise SinkError(f"connection to {format_address(link.address)} lost: {exc}") from exc
        if not owed:
            self._since[link] = time.monotonic()
        owed += count
        self._owed[link] = owed
        self._pending += count
        if owed <= self._limit:
            ready.append(link)

    def finish(self) -> int:
        """Wait for every reply; return the number of jobs added."""
        while self._pending:
            self._read(CHECK_INTERVAL)
        return self.added

    def _make_room(self) -> None:
        """Wait until a connection has room; open one more first if the plan allows."""
        if self._growable:
            self._read(0.0)
            if self._ready or self._grow():
                return
        self._read(CHECK_INTERVAL)

    def _grow(self) -> bool:
        growable = self._growable
        while growable:
            address = growable.popleft()
            try:
                self._open(address)
            except (OSError, DisqueError):
                # That node takes no more connections (maxclients...): the task
                # goes on with those it has, which report a node that is gone.
                continue
            if self._opened[address] < self.plan.per_node:
                growable.append(address)
            return True
        return False

    def _read(self, timeout: float) -> None:
        events = self._selector.select(timeout)
        now = time.monotonic()
        owed, since, ready, limit = self._owed, self._since, self._ready, self._limit
        for key, _ in events:
            link: Link = key.data
            try:
                data = link.sock.recv(RECV_SIZE)
                if not data:
                    raise ConnectionResetError("connection closed by the node")
                replies = link.conn.receive(data)
            except (OSError, DisqueError) as exc:
                where = format_address(link.address)
                raise SinkError(f"connection to {where} lost: {exc}") from exc
            for reply in replies:
                if isinstance(reply, Exception):
                    where = format_address(link.address)
                    raise SinkError(f"ADDJOB refused by {where}: {reply}")
            n = len(replies)
            if n:
                before = owed[link]
                owed[link] = before - n
                self._pending -= n
                self.added += n
                since[link] = now
                if before > limit >= before - n:
                    ready.append(link)
        if now >= self._next_check:
            self._next_check = now + CHECK_INTERVAL
            silent = {
                format_address(link.address)
                for link, n in owed.items()
                if n and now - since[link] > self._reply_timeout
            }
            if silent:
                raise SinkError(
                    f"no ADDJOB reply for {self._reply_timeout:.0f}s from {sorted(silent)}"
                )

    def close(self) -> None:
        """Close every connection (idempotent; replies still owed are abandoned)."""
        for link in self._owed:
            self._selector.unregister(link.sock)
            link.close()
        self._owed.clear()
        self._since.clear()
        self._ready.clear()
        self._growable.clear()
        self._selector.close()
