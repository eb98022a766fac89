"""ADDJOB pipelined over several connections, every reply checked.

This is the sink's engine, run once per Spark task. It is plain Python with
sockets, independent of Spark, so the benchmark and the tests can reason about
it alone:

* :class:`AddJobEncoder` turns bodies into ADDJOB requests. Only the queue and
  the body vary between the jobs of a write, so the arguments before the body
  (per queue) and after it (timeout and options) are encoded once, and a job
  costs one ``%`` formatting instead of a per-argument encoding.
* :class:`AddJobPipe` keeps one or more connections per node (opened with the
  client library's :class:`~disquette.client.sync.Link`: AUTH and the rest of
  the handshake are the client's), sends each chunk of requests to the
  connection with the fewest replies owed, never lets one owe more than the
  window, and reads replies from whichever connection has them. Every reply
  must be a job ID: an error reply, a lost connection or a silent node raises
  :class:`SinkError`, which fails the task so that Spark runs it again.

Jobs of a failed task that were already added stay added; the retried task
adds them again. The sink is therefore at-least-once, with duplicates
possible on task retry (docs/spark.md).
"""

from __future__ import annotations

import random
import selectors
from collections.abc import Iterable, Sequence

from disquette.client.api import ClientConfig
from disquette.client.errors import DisqueError
from disquette.client.sync import RECV_SIZE, Link
from disquette.client.topology import format_address, parse_address
from disquette.spark.options import SinkOptions

#: Seconds a node may stay silent, on top of the ADDJOB timeout, before the task fails.
REPLY_GRACE = 30.0


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


class AddJobPipe:
    """Pipelined ADDJOBs over connections spread across the nodes."""

    def __init__(self, options: SinkOptions) -> None:
        self._window = options.window
        self._reply_timeout = options.timeout_ms / 1000 + REPLY_GRACE
        self._selector = selectors.DefaultSelector()
        self._owed: dict[Link, int] = {}
        #: Jobs added so far (replies that were job IDs).
        self.added = 0
        config = ClientConfig(
            seeds=tuple(parse_address(n) for n in options.connect.nodes),
            password=options.connect.password,
            client_name="disquette-spark-sink",
        )
        # Tasks start at different nodes so that the load spreads; a node that
        # does not answer is skipped (the task retried after a node died must
        # not try it again), one that answers nothing is an error.
        nodes = random.sample(config.seeds, len(config.seeds))
        failures = []
        for address in nodes * options.connections_per_node:
            try:
                link = Link.open(address, config, hello=False)
            except (OSError, DisqueError) as exc:
                failures.append(f"{format_address(address)}: {exc}")
                continue
            link.sock.settimeout(self._reply_timeout)
            self._owed[link] = 0
            self._selector.register(link.sock, selectors.EVENT_READ, link)
        if not self._owed:
            self.close()
            raise SinkError("no node could be reached: " + "; ".join(failures))

    def send(self, data: bytes, count: int) -> None:
        """Send ``count`` encoded ADDJOBs on the connection owing the fewest replies."""
        owed = self._owed
        link = min(owed, key=owed.__getitem__)
        while owed[link] and owed[link] + count > self._window:
            self._read()
        try:
            link.sock.sendall(link.conn.send_encoded(data, count))
        except OSError as exc:
            raise SinkError(f"connection to {format_address(link.address)} lost: {exc}") from exc
        owed[link] += count

    def finish(self) -> int:
        """Wait for every reply; return the number of jobs added."""
        while any(self._owed.values()):
            self._read()
        return self.added

    def _read(self) -> None:
        events = self._selector.select(self._reply_timeout)
        if not events:
            waiting = [format_address(link.address) for link, n in self._owed.items() if n]
            raise SinkError(f"no ADDJOB reply for {self._reply_timeout:.0f}s from {waiting}")
        for key, _ in events:
            link: Link = key.data
            where = format_address(link.address)
            try:
                data = link.sock.recv(RECV_SIZE)
                if not data:
                    raise ConnectionResetError("connection closed by the node")
                replies = link.conn.receive(data)
            except (OSError, DisqueError) as exc:
                raise SinkError(f"connection to {where} lost: {exc}") from exc
            for reply in replies:
                if isinstance(reply, Exception):
                    raise SinkError(f"ADDJOB refused by {where}: {reply}")
            self._owed[link] -= len(replies)
            self.added += len(replies)

    def close(self) -> None:
        for link in self._owed:
            self._selector.unregister(link.sock)
            link.close()
        self._owed.clear()
        self._selector.close()
