"""ADDJOB pipelined over several connections, every reply checked.

This is the sink's engine, run once per Spark task. It is plain Python with
sockets, independent of Spark, so the benchmark and the tests can reason about
it alone:

* :class:`AddJobEncoder` turns bodies into ADDJOB requests. Only the queue, the
  body and the DEDUP key vary between the jobs of a task, so the arguments
  before the body (per queue) and after it (timeout, options and the key's
  constant part) are encoded once, and a job costs one ``%`` formatting (plus a
  CRC-32 of its body with DEDUP keys).
* :class:`AddJobPipe` keeps connections to the nodes (opened with the client
  library's :class:`~disquette.client.sync.Link`: AUTH and the rest of the
  handshake are the client's), sends each chunk of requests to a connection
  of the chunk's node with room for it, never lets one owe more than its
  depth, and reads replies from whichever connection has them. Every reply
  must be a job ID: an error reply, a lost connection or a connection that
  gets no reply for the ADDJOB timeout plus :data:`REPLY_GRACE` raises
  :class:`SinkError`, which fails the task so that Spark runs it again. The
  exception is ``-TRYAGAIN`` (a DEDUP key whose job is still being replicated
  for another client): the chunk is sent again a little later, which adds
  nothing twice since every job of it has a DEDUP key.

Each chunk goes to a node chosen by its route (the sink's route: the chunk's
position in the task's input plus the partition), through the nodes as listed
in ``nodes``: with DEDUP keys, a retried task sends each row to the node its
first attempt sent it to, where its key already is, and only a node that
became unreachable has its chunks sent to the next reachable node of the list.
Without keys the route is a preference: a chunk whose node has no connection
with room goes to a node that has one.

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

Jobs of a failed task that were already added stay added. With DEDUP keys
(``dedup=true``, disquette only) the retried task sends them again under the
same keys and the node adds nothing twice; without them (the default) a
retried task duplicates them (docs/spark.md).
"""

from __future__ import annotations

import random
import selectors
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import count, repeat
from zlib import crc32

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

#: Seconds before ADDJOBs answered -TRYAGAIN are sent again.
TRYAGAIN_DELAY = 0.05


class SinkError(RuntimeError):
    """A job could not be added: the Spark task fails and is retried."""


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)


#: Digits of the row number in a DEDUP key: zero-padded, so that every key of a
#: task has the same length and a request is still one ``%`` formatting.
ROW_DIGITS = 10

#: Rows one task may write with DEDUP keys (the row number must fit its digits).
MAX_KEYED_ROWS = 10**ROW_DIGITS

#: One ADDJOB with a DEDUP key: head, body, tail (which ends with the key's
#: constant part), row number, CRC-32 of the body.
_KEYED_JOB = b"%%b$%%d\r\n%%b\r\n%%b%%0%dd:%%08x\r\n" % ROW_DIGITS


class AddJobEncoder:
    """ADDJOB requests for one set of options; only the queue, the body and the key vary.

    With ``dedup_prefix`` (the task's identity, see docs/spark.md), each job also
    gets ``DEDUP <prefix>:<row>:<crc>``: ``row`` its position in the task's input
    (zero-padded to :data:`ROW_DIGITS` digits) and ``crc`` the CRC-32 of its body
    (8 hex digits), so that a row met at another position by a retry that sees
    its input in another order gets another key: a duplicate, never a row lost.
    """

    def __init__(self, options: SinkOptions, dedup_prefix: str | None = None) -> None:
        self._options = options
        self._dedup_prefix = dedup_prefix
        tail = [b"%d" % options.timeout_ms]
        for keyword, value in (
            (b"REPLICATE", options.replicate),
            (b"DELAY", options.delay),
            (b"RETRY", options.retry),
            (b"TTL", options.ttl),
            (b"MAXLEN", options.maxlen),
            (b"PRIORITY", options.priority),
        ):
            if value is not None:
                tail += [keyword, b"%d" % value]
        if options.async_:
            tail.append(b"ASYNC")
        if options.backoff is not None:
            tail += options.backoff.args
        self._tail = b"".join(_bulk(arg) for arg in tail)
        self._keyed = dedup_prefix is not None
        if dedup_prefix is not None:
            prefix = dedup_prefix.encode() + b":"
            key_length = len(prefix) + ROW_DIGITS + 1 + 8
            # The key's bulk header and its constant part end the tail; the row
            # number and the CRC follow, formatted per job.
            self._tail += b"$5\r\nDEDUP\r\n$%d\r\n%b" % (key_length, prefix)
            tail += [b"DEDUP", b"key"]
        self._arity = 3 + len(tail)
        self._heads: dict[str, bytes] = {}

    def _head(self, queue: str) -> bytes:
        head = self._heads.get(queue)
        if head is None:
            name = queue.encode("utf-8", "surrogateescape")
            head = b"*%d\r\n$6\r\nADDJOB\r\n%s" % (self._arity, _bulk(name))
            self._heads[queue] = head
        return head

    def encode(self, queue: str, bodies: Sequence[bytes], first_row: int = 0) -> bytes:
        """ADDJOB requests for ``bodies``, all into ``queue``; the first is row ``first_row``."""
        return self._encode(repeat(self._head(queue)), bodies, first_row)

    def encode_rows(
        self, queues: Sequence[str], bodies: Sequence[bytes], first_row: int = 0
    ) -> bytes:
        """ADDJOB requests with a queue per job."""
        if len(queues) != len(bodies):
            raise ValueError(f"{len(queues)} queues for {len(bodies)} bodies")
        heads = self._heads
        return self._encode([heads.get(q) or self._head(q) for q in queues], bodies, first_row)

    def encode_with(
        self,
        queues: Sequence[str],
        bodies: Sequence[bytes],
        columns: dict[str, Sequence[int | str | None]],
        first_row: int = 0,
    ) -> bytes:
        """ADDJOB requests whose options may come from per-row ``columns``
        (:data:`ROW_OPTIONS`: a row's non-null value replaces the option's)."""
        o = self._options
        base: dict[bytes, int | None] = {
            b"REPLICATE": o.replicate, b"MAXLEN": o.maxlen, b"DELAY": o.delay,
            b"RETRY": o.retry, b"TTL": o.ttl, b"PRIORITY": o.priority,
        }  # fmt: skip
        extra = [b"ASYNC"] if o.async_ else []
        if o.backoff is not None:
            extra += o.backoff.args
        names = [(name.upper().encode(), values) for name, values in columns.items()]
        out = []
        for i, (queue, body) in enumerate(zip(queues, bodies, strict=True)):
            args = [b"ADDJOB", queue.encode("utf-8", "surrogateescape"), body, b"%d" % o.timeout_ms]
            row = dict(base)
            key: bytes | None = None
            for name, values in names:
                value = values[i]
                if value is None:
                    continue
                if name == b"DEDUP":
                    key = str(value).encode()
                elif name == b"GROUP":
                    args += [name, str(value).encode()]
                else:
                    row[name] = int(value)
            for name, number in row.items():
                if number is not None:
                    args += [name, b"%d" % number]
            if key is None and self._dedup_prefix is not None:
                row_number = first_row + i
                key = b"%s:%0*d:%08x" % (
                    self._dedup_prefix.encode(),
                    ROW_DIGITS,
                    row_number,
                    crc32(body),
                )
            if key is not None:
                args += [b"DEDUP", key]
            args += extra
            out.append(b"*%d\r\n%b" % (len(args), b"".join(_bulk(a) for a in args)))
        return b"".join(out)

    def _encode(self, heads: Iterable[bytes], bodies: Sequence[bytes], first_row: int) -> bytes:
        # ``heads`` may be endless (repeat): ``bodies`` sets the count.
        tail = self._tail
        if not self._keyed:
            jobs = zip(heads, bodies, strict=False)
            return b"".join([b"%b$%d\r\n%b\r\n%b" % (h, len(b), b, tail) for h, b in jobs])
        if first_row + len(bodies) > MAX_KEYED_ROWS:
            raise SinkError(f"a task writes at most {MAX_KEYED_ROWS} rows with dedup on")
        job, rows = _KEYED_JOB, zip(heads, bodies, count(first_row), strict=False)
        return b"".join([job % (h, len(b), b, tail, i, crc32(b)) for h, b, i in rows])


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


class _Chunk:
    """ADDJOBs sent together, and how many of their replies are still to come."""

    __slots__ = ("count", "data", "left", "retry", "route", "tryagain_since")

    def __init__(self, data: bytes, count: int, route: int) -> None:
        self.data = data
        self.count = count
        self.route = route
        self.left = count
        #: Some of its ADDJOBs were answered -TRYAGAIN: send it all again.
        self.retry = False
        #: When it was first answered -TRYAGAIN (the wait is bounded).
        self.tryagain_since: float | None = None


Address = tuple[str, int]


class AddJobPipe:
    """Pipelined ADDJOBs over connections spread across the nodes (see the module doc)."""

    def __init__(self, options: SinkOptions) -> None:
        self._reply_timeout = options.timeout_ms / 1000 + REPLY_GRACE
        self._selector = selectors.DefaultSelector()
        self._config = ClientConfig(
            seeds=tuple(parse_address(n) for n in options.connect.nodes),
            password=options.connect.password,
            client_name="disquette-spark-sink",
            ssl=options.connect.ssl_context(),
            username=options.connect.user,
        )
        #: Replies each open connection owes.
        self._owed: dict[Link, int] = {}
        #: The chunks each connection owes replies for, oldest first.
        self._sent: dict[Link, deque[_Chunk]] = {}
        #: When each connection last received a reply (or started owing one).
        self._since: dict[Link, float] = {}
        #: Connections of each node with room for another chunk, in the order they are used.
        self._ready: dict[Address, deque[Link]] = {}
        #: Connections open to each node.
        self._opened: dict[Address, int] = {}
        #: Nodes that may take another connection (synchronous replication).
        self._growable: set[Address] = set()
        #: The node of each route (``route % len``): the nodes as listed, each
        #: unreachable one replaced by the next reachable one in the list.
        self._routes: list[Address] = []
        #: Chunks answered -TRYAGAIN, to send again once due.
        self._again: deque[tuple[float, _Chunk]] = deque()
        self._pending = 0
        self._next_check = 0.0
        #: Jobs added so far (every reply a job ID; with DEDUP, an existing job's ID counts).
        self.added = 0
        #: ADDJOBs answered -TRYAGAIN so far (each sent again).
        self.tryagain = 0
        try:
            self.plan = self._connect(options)
        except BaseException:
            self.close()
            raise
        self.chunk = self.plan.chunk
        self._limit = self.plan.depth - self.chunk
        #: DEDUP keys: a chunk must go to the node of its route (where the first
        #: attempt sent it), and is tracked until answered (-TRYAGAIN sends it again).
        #: Otherwise a node with room serves when the route's has none, and replies
        #: are only counted.
        self._sticky = options.dedup

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._owed)

    def _open(self, address: Address, hello: bool = False) -> Link:
        link = Link.open(address, self._config, hello=hello)
        link.sock.settimeout(self._reply_timeout)
        self._owed[link] = 0
        self._sent[link] = deque()
        self._selector.register(link.sock, selectors.EVENT_READ, link)
        self._ready.setdefault(address, deque()).append(link)
        self._opened[address] = self._opened.get(address, 0) + 1
        return link

    def _connect(self, options: SinkOptions) -> ConnectionPlan:
        """Open a first connection to every node that answers, then choose the plan."""
        # A node that does not answer is skipped (the task retried after a node
        # died must not try it again), one that answers nothing is an error.
        # Without REPLICATE, the first HELLO tells the cluster's size, hence the default.
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
        self._check_extensions(options, next(iter(self._owed)))
        # Routes follow the listed order, not the order tried: a retried task
        # sends each row to the node the first attempt sent it to (where its
        # DEDUP key is), as long as that node is reachable.
        reachable = [a for a in seeds if a in self._opened]
        for i in range(len(seeds)):
            ring = seeds[i:] + seeds[:i]
            self._routes.append(next(a for a in ring if a in self._opened))
        plan = ConnectionPlan.choose(options, len(seeds), cluster_size)
        if plan.grow:
            self._growable.update(a for a in reachable if plan.per_node > 1)
        else:
            for _ in range(plan.per_node - 1):
                for address in reachable:
                    try:
                        self._open(address)
                    except (OSError, DisqueError):
                        continue
        return plan

    def _check_extensions(self, options: SinkOptions, link: Link) -> None:
        """Fail at once, with a clear message, when the options need disquette's
        PRIORITY, DEDUP or BACKOFF and the nodes do not know them: INFO
        extensions lists ``dedup_hits`` (and, since BACKOFF, ``jobs_postponed``)
        on disquette and is empty on Disque, which would refuse every ADDJOB as a
        syntax error."""
        asked = []
        fields = set()
        if options.dedup:
            asked.append("DEDUP (dedup=true)")
            fields.add(b"dedup_hits:")
        if options.priority is not None:
            asked.append("PRIORITY (priority)")
            fields.add(b"dedup_hits:")
        if options.backoff is not None:
            asked.append("BACKOFF (backoff)")
            fields.add(b"jobs_postponed:")
        if not asked:
            return
        info = self._ask(link, b"INFO", b"extensions")
        if not (isinstance(info, bytes) and all(field in info for field in fields)):
            raise SinkError(
                f"{format_address(link.address)} does not know ADDJOB's "
                f"{' and '.join(asked)} (a plain Disque server?): they are disquette's "
                "extensions; write without these options"
            )

    def _ask(self, link: Link, *args: bytes) -> object:
        """One command on a connection that owes nothing yet; its reply."""
        try:
            link.sock.sendall(link.conn.send([args]))
            while True:
                data = link.sock.recv(RECV_SIZE)
                if not data:
                    raise ConnectionResetError("connection closed by the node")
                replies = link.conn.receive(data)
                if replies:
                    return replies[0]
        except (OSError, DisqueError) as exc:
            raise SinkError(f"connection to {format_address(link.address)} lost: {exc}") from exc

    def send(self, data: bytes, count: int, route: int = 0) -> None:
        """Send ``count`` (at most :attr:`chunk`) encoded ADDJOBs to the node of ``route``
        (the same route reaches the same node, see :attr:`_routes`)."""
        if self._again:
            self._send_again()
        self._pending += count
        self._transmit(_Chunk(data, count, route))

    def _transmit(self, chunk: _Chunk) -> None:
        node = self._routes[chunk.route % len(self._routes)]
        ready = self._ready[node]
        if not ready and not self._sticky:
            for other, links in self._ready.items():
                if links:
                    node, ready = other, links
                    break
        while not ready:
            self._make_room(node)
        link = ready.popleft()
        owed = self._owed[link]
        try:
            link.sock.sendall(link.conn.send_encoded(chunk.data, chunk.count))
        except OSError as exc:
            raise SinkError(f"connection to {format_address(link.address)} lost: {exc}") from exc
        if not owed:
            self._since[link] = time.monotonic()
        owed += chunk.count
        self._owed[link] = owed
        if self._sticky:  # (only keyed ADDJOBs are sent again: -TRYAGAIN)
            self._sent[link].append(chunk)
        if owed <= self._limit:
            ready.append(link)

    def _send_again(self) -> None:
        """Send again the chunks answered -TRYAGAIN whose delay is over."""
        again, now = self._again, time.monotonic()
        while again and again[0][0] <= now:
            self._transmit(again.popleft()[1])

    def finish(self) -> int:
        """Wait for every reply; return the number of jobs added."""
        while self._pending:
            timeout = CHECK_INTERVAL
            if self._again:
                self._send_again()
                if self._again:
                    timeout = min(timeout, max(0.0, self._again[0][0] - time.monotonic()))
            self._read(timeout)
        return self.added

    def _make_room(self, node: Address) -> None:
        """Wait until a connection to ``node`` has room; open one more first if the plan allows."""
        if node in self._growable:
            self._read(0.0)
            if self._ready[node] or self._grow(node):
                return
        self._read(CHECK_INTERVAL)

    def _grow(self, node: Address) -> bool:
        try:
            self._open(node)
        except (OSError, DisqueError):
            # That node takes no more connections (maxclients...): the task
            # goes on with those it has, which report a node that is gone.
            self._growable.discard(node)
            return False
        if self._opened[node] >= self.plan.per_node:
            self._growable.discard(node)
        return True

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
            n = len(replies)
            if not n:
                continue
            for reply in replies:
                if isinstance(reply, Exception):
                    self._settle_each(link, replies, now)
                    break
            else:
                if self._sticky:
                    self._settle(link, n)
                else:  # chunks are not tracked: every reply is a job
                    self._pending -= n
                    self.added += n
            before = owed[link]
            owed[link] = before - n
            since[link] = now
            if before > limit >= before - n:
                ready[link.address].append(link)
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

    def _settle(self, link: Link, n: int) -> None:
        """``n`` replies, all job IDs, for the oldest chunks ``link`` owes."""
        sent = self._sent[link]
        while n:
            chunk = sent[0]
            if n < chunk.left:
                chunk.left -= n
                return
            n -= chunk.left
            sent.popleft()
            self._answered(chunk)

    def _settle_each(self, link: Link, replies: list, now: float) -> None:
        """Replies with errors: -TRYAGAIN (a DEDUP key whose job is still being
        replicated for another client) sends the chunk again later, any other fails."""
        sent = self._sent[link]
        if not self._sticky:  # no keys, no -TRYAGAIN: the first error fails the task
            error = next(r for r in replies if isinstance(r, Exception))
            where = format_address(link.address)
            raise SinkError(f"ADDJOB refused by {where}: {error}")
        for reply in replies:
            chunk = sent[0]
            if isinstance(reply, Exception):
                if not str(reply).startswith("TRYAGAIN"):
                    where = format_address(link.address)
                    raise SinkError(f"ADDJOB refused by {where}: {reply}")
                if chunk.tryagain_since is None:
                    chunk.tryagain_since = now
                elif now - chunk.tryagain_since > self._reply_timeout:
                    raise SinkError(
                        f"ADDJOB still refused after {self._reply_timeout:.0f}s: {reply}"
                    )
                chunk.retry = True
                self.tryagain += 1
            chunk.left -= 1
            if not chunk.left:
                sent.popleft()
                self._answered(chunk)

    def _answered(self, chunk: _Chunk) -> None:
        if chunk.retry:
            # Every job of the chunk has a DEDUP key (only those get -TRYAGAIN):
            # sending it all again adds none twice.
            chunk.retry, chunk.left = False, chunk.count
            self._again.append((time.monotonic() + TRYAGAIN_DELAY, chunk))
        else:
            self._pending -= chunk.count
            self.added += chunk.count

    def close(self) -> None:
        """Close every connection (idempotent; replies still owed are abandoned)."""
        for link in self._owed:
            self._selector.unregister(link.sock)
            link.close()
        self._owed.clear()
        self._sent.clear()
        self._since.clear()
        self._ready.clear()
        self._growable.clear()
        self._again.clear()
        self._selector.close()
