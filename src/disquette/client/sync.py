"""The synchronous client: blocking sockets and a thread-safe connection pool per node.

All decisions are made by the plans of :mod:`disquette.client.calls`; this
module only performs their three requests (acquire a connection, release it,
exchange a batch on it) with ordinary sockets. A call holds one connection
for its duration, so threads never share one; a blocking GETJOB in one thread
does not delay another thread's commands.

:class:`Link` (a socket plus its :class:`~disquette.client.connection.Connection`)
is also what ``disquette-cli`` uses to talk to one node.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from disquette.client.api import BaseClient, Call, ClientConfig
from disquette.client.batch import Batch
from disquette.client.calls import Acquire, Exchange, Op, Release, Scan, Sleep
from disquette.client.connection import Connection
from disquette.client.errors import AuthError, DisqueError, ProtocolError
from disquette.client.pipeline import PipelineBase
from disquette.client.pool import PoolBase
from disquette.client.resp import Parser
from disquette.client.topology import Address

T = TypeVar("T")
RECV_SIZE = 1 << 16


def readable(sock: Any) -> bool:
    """Whether ``sock`` has data or EOF waiting, without blocking.

    An idle pooled connection should have nothing to read: if it does, the
    server closed it (idle timeout, restart) and it must not carry a command
    whose reply could then be lost.
    """
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class Link:
    """One open connection to a node: a socket and its protocol state."""

    __slots__ = ("_timeout", "address", "conn", "generation", "hello", "sock")

    def __init__(self, address: Address, sock: socket.socket, conn: Connection) -> None:
        self.address = address
        self.sock = sock
        self.conn = conn
        #: The handshake's HELLO, until the connection is first reused.
        self.hello = conn.hello
        #: The pool generation it was opened in (a pool closed since then drops it).
        self.generation = 0
        self._timeout: float | None = sock.gettimeout()

    @classmethod
    def open(
        cls,
        address: Address,
        config: ClientConfig,
        *,
        hello: bool = True,
        parser: Parser | None = None,
    ) -> Link:
        """Connect, wrap in TLS if configured, and complete the handshake."""
        host = address[0]
        sock = socket.create_connection(address, timeout=config.connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if config.ssl is not None:
                sock = config.ssl.wrap_socket(sock, server_hostname=host)
            conn = Connection(
                password=config.password,
                client_name=config.client_name,
                hello=hello,
                parser=parser,
                username=config.username,
            )
            data = conn.start()
            if data:
                sock.sendall(data)
            while not conn.ready:
                chunk = sock.recv(RECV_SIZE)
                if not chunk:
                    raise ConnectionResetError("connection closed during the handshake")
                conn.receive(chunk)
        except BaseException:
            sock.close()
            raise
        return cls(address, sock, conn)

    def exchange(self, batch: Batch, socket_timeout: float | None) -> bool:
        """Run ``batch``; return False if the connection broke (the batch says what was lost)."""
        sock, conn = self.sock, self.conn
        try:
            while not batch.done:
                while commands := batch.outgoing(batch.chunk):  # half a window at a time
                    sock.sendall(conn.send([c.args for c in commands]))
                if batch.waiting:
                    timeout = batch.read_timeout(socket_timeout)
                    if timeout != self._timeout:
                        sock.settimeout(timeout)
                        self._timeout = timeout
                    data = sock.recv(RECV_SIZE)
                    if not data:
                        raise ConnectionResetError("connection closed by the server")
                    batch.received(conn.receive(data))
        except (OSError, ProtocolError) as exc:
            self.close()
            batch.lost(exc)
            return False
        return True

    def stream(self) -> Iterator[Any]:
        """Every reply the server sends from now on (MONITOR's stream), until it closes."""
        self.conn.streaming = True
        self.sock.settimeout(None)
        self._timeout = None
        while True:
            data = self.sock.recv(RECV_SIZE)
            if not data:
                raise ConnectionResetError("connection closed by the server")
            yield from self.conn.receive(data)

    def idle_and_open(self) -> bool:
        """True if nothing arrived while idle (data or EOF would mean it is unusable)."""
        return not readable(self.sock)

    def close(self) -> None:
        self.conn.close()
        self.sock.close()


class Pool(PoolBase[Link, threading.BoundedSemaphore]):
    """Idle connections to one node, shared by threads."""

    def __init__(self, address: Address, config: ClientConfig) -> None:
        super().__init__(address, config, threading.BoundedSemaphore)
        self._lock = threading.Lock()

    def acquire(self) -> Link:
        if self._slots is not None:
            self._slots.acquire()
        try:
            while True:
                with self._lock:
                    link = self._idle.pop() if self._idle else None
                if link is None:
                    link = Link.open(self.address, self.config)
                    link.generation = self._generation
                    return link
                if link.idle_and_open():
                    return link
                link.close()
        except BaseException:
            self._free_slot()
            raise

    def release(self, link: Link) -> None:
        link.hello = None
        with self._lock:
            current = link.generation == self._generation
            if current:
                self._idle.append(link)
        if not current:  # in use while the pool was closed
            link.close()
        self._free_slot()

    def close(self) -> None:
        """Close the idle connections now, those in use when they are released."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
        for link in idle:
            link.close()


class Client(BaseClient):
    """A synchronous Disque client for a whole cluster; safe to share between threads.

    ``Client("10.0.0.1:7711,10.0.0.2:7711")`` or ``Client(["host:port", ...])``;
    see :class:`~disquette.client.api.BaseClient` for the options. Use it as a
    context manager, or call :meth:`close`.
    """

    def _init_io(self) -> None:
        self._pools: dict[Address, Pool] = {}
        self._pools_lock = threading.Lock()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection (those in use when they are released); it can be used again."""
        with self._pools_lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.close()

    def pipeline(self, window: int = 256) -> Pipeline:
        """A pipeline on this client's current node; see :class:`Pipeline`."""
        return Pipeline(self, window)

    # ---------------------------------------------------------------- plumbing

    def _bind(self, builder: Callable[..., Call[Any]]) -> Callable[..., Any]:
        run = self.call

        def method(*args: Any, **kwargs: Any) -> Any:
            return run(builder(*args, **kwargs))

        return method

    def _bind_scan(self, builder: Callable[..., Scan[Any]]) -> Callable[..., Iterator[Any]]:
        run = self.call

        def method(*args: Any, **kwargs: Any) -> Iterator[Any]:
            cursor = builder(*args, **kwargs)
            while not cursor.done:
                yield from run(cursor)

        return method

    def call(self, call: Call[T]) -> T:
        """Run a call built by :mod:`disquette.client.commands` (what every method does).

        ``client.call(commands.ack(job_id))`` is ``client.ack(job_id)``; useful to
        pass commands around (the worker does) or to run one built elsewhere.
        """
        plan = call.plan(self._ctx)
        value: Any = None
        try:
            while True:
                value = self._perform(plan.send(value))
        except StopIteration as stop:
            return stop.value

    def _perform(self, op: Op) -> Any:
        if type(op) is Exchange:
            link = op.lease
            pool = self._pool(link.address)
            with pool.exchanging(link):
                healthy = link.exchange(op.batch, self.config.socket_timeout)
            pool.give_back(link, healthy)
            return None
        if type(op) is Acquire:
            try:
                return self._pool(op.address).acquire()
            except AuthError:
                raise
            except (OSError, DisqueError) as exc:
                return exc
        if type(op) is Sleep:
            time.sleep(op.seconds)
            return None
        assert type(op) is Release
        self._pool(op.lease.address).release(op.lease)
        return None

    def _pool(self, address: Address) -> Pool:
        pool = self._pools.get(address)
        if pool is None:
            with self._pools_lock:
                pool = self._pools.setdefault(address, Pool(address, self.config))
        return pool


class Pipeline(PipelineBase[Client]):
    """Queue commands with the client's methods, then send them together.

    ::

        with client.pipeline() as p:
            p.add_job("q", b"a").add_job("q", b"b").qlen("q")
        p.results   # ['D-...', 'D-...', 2]

    Leaving the block executes what is queued (unless an exception is
    propagating). :meth:`execute` does it explicitly and returns the results.
    """

    # Sends the queue, as redis-py's Pipeline.execute does (so it stands in for the raw
    # command of the same name, which a pipeline does not queue: hence the override).
    def execute(self, raise_on_error: bool = True) -> list[Any]:  # type: ignore[override]
        """Send the queued commands; return their results in order.

        If a command fails, :class:`PipelineError` is raised (after every reply
        was read) unless ``raise_on_error`` is false: then the exception takes
        the command's place in the list.
        """
        self.results = self._client.call(self._take(raise_on_error))
        return self.results

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None and self._queued:
            self.execute()
