"""The asyncio client: the same methods as the sync client, as coroutines.

The plans of :mod:`disquette.client.calls` make every decision; this module
performs their requests with an :class:`asyncio.Protocol` per connection. A
connection is used by one task at a time, taken from a pool per node and per
event loop, so one client object works under several loops (each gets its
own connections) and many tasks can use it concurrently.

A task cancelled in the middle of a command (``asyncio.timeout`` around
``get_jobs``, say) drops that connection: its reply is still owed, so it
cannot be reused.
"""

from __future__ import annotations

import asyncio
import socket
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from disquette.client.api import BaseClient, Call, ClientConfig
from disquette.client.batch import Batch
from disquette.client.calls import Acquire, Exchange, Op, Release, Scan, Sleep
from disquette.client.connection import Connection
from disquette.client.errors import AuthError, DisqueError, ProtocolError, ResponseError
from disquette.client.models import Hello
from disquette.client.pipeline import PipelineBase
from disquette.client.pool import PoolBase
from disquette.client.sync import readable
from disquette.client.topology import Address

T = TypeVar("T")


class Link(asyncio.Protocol):
    """One connection to a node: the transport, its protocol state, the batch in progress."""

    def __init__(self, address: Address, conn: Connection) -> None:
        self.address = address
        self.conn = conn
        self.hello: Hello | None = None
        self.closed = False
        self.generation = 0
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[bool] | None = None
        self._batch: Batch | None = None
        self._socket_timeout: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    async def open(cls, address: Address, config: ClientConfig) -> Link:
        """Connect, wrap in TLS if configured, and complete the handshake."""
        loop = asyncio.get_running_loop()
        conn = Connection(
            password=config.password, client_name=config.client_name, username=config.username
        )
        host, port = address
        link: Link | None = None
        try:
            async with asyncio.timeout(config.connect_timeout):
                _, link = await loop.create_connection(
                    lambda: cls(address, conn),
                    host,
                    port,
                    ssl=config.ssl,
                    server_hostname=host if config.ssl is not None else None,
                )
                link._waiter = loop.create_future()
                link._write(conn.start())
                await link._waiter
        except BaseException:
            if link is not None:
                link.close()
            raise
        link.hello = conn.hello
        return link

    # ------------------------------------------------------------ protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)

    def data_received(self, data: bytes) -> None:
        try:
            replies = self.conn.receive(data)
        except (ProtocolError, ResponseError) as exc:  # a bad stream, or a failed handshake
            self._fail(exc)
            return
        batch = self._batch
        if batch is None:
            if self._waiter is not None and self.conn.ready and not self._waiter.done():
                self._waiter.set_result(True)  # handshake complete
            return
        batch.received(replies)
        self._pump()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.conn.close()
        self._fail(exc or ConnectionResetError("connection closed by the server"))

    # ------------------------------------------------------------ exchanging

    async def exchange(self, batch: Batch, socket_timeout: float | None) -> bool:
        """Run ``batch``; return False if the connection broke (the batch says what was lost)."""
        if self.closed:
            batch.lost(ConnectionResetError("connection closed"))
            return False
        self._batch = batch
        self._socket_timeout = socket_timeout
        self._waiter = self._loop.create_future()
        self._pump()
        return await self._waiter

    def _pump(self) -> None:
        """Send what the window allows, finish when the batch is done, re-arm the timeout."""
        batch = self._batch
        assert batch is not None
        try:
            while commands := batch.outgoing(batch.chunk):  # half a window at a time
                self._write(self.conn.send([c.args for c in commands]))
        except BaseException as exc:  # the caller's iterable failed: the replies owed are lost
            self._batch = None
            self.close()
            self._settle(exc)
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if batch.done:
            self._batch = None
            self._settle(True)
            return
        timeout = batch.read_timeout(self._socket_timeout)
        if timeout is not None:
            self._timer = self._loop.call_later(timeout, self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        self._fail(TimeoutError("timed out waiting for a reply"))

    def _fail(self, exc: BaseException) -> None:
        """The connection is unusable: close it and settle whoever waits on it."""
        batch, self._batch = self._batch, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.close()
        if batch is not None:
            batch.lost(exc)
            self._settle(False)
        else:
            self._settle(exc)

    def _settle(self, outcome: bool | BaseException) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if isinstance(outcome, BaseException):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)

    def _write(self, data: bytes) -> None:
        if data and self._transport is not None:
            self._transport.write(data)

    def idle_and_open(self) -> bool:
        """Not closed, and nothing arrived while idle (the loop may not have seen an EOF yet)."""
        if self.closed or self._transport is None:
            return False
        sock = self._transport.get_extra_info("socket")
        return sock is None or not readable(sock)

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.abort()


class Pool(PoolBase[Link, asyncio.Semaphore]):
    """Idle connections to one node, for one event loop."""

    def __init__(self, address: Address, config: ClientConfig) -> None:
        super().__init__(address, config, asyncio.Semaphore)

    async def acquire(self) -> Link:
        if self._slots is not None:
            await self._slots.acquire()
        try:
            while self._idle:
                link = self._idle.pop()
                if link.idle_and_open():
                    return link
                link.close()
            link = await Link.open(self.address, self.config)
            link.generation = self._generation
            return link
        except BaseException:
            self._free_slot()
            raise

    def release(self, link: Link) -> None:
        link.hello = None
        if link.generation == self._generation:
            self._idle.append(link)
        else:  # in use while the pool was closed
            link.close()
        self._free_slot()

    def close(self) -> None:
        """Close the idle connections now, those in use when they are released."""
        idle, self._idle = self._idle, []
        self._generation += 1
        for link in idle:
            link.close()


class Client(BaseClient):
    """An asyncio Disque client for a whole cluster: ``await client.add_job(...)``.

    Same options and methods as :class:`disquette.Client`; ``qscan``/``jscan``
    are async iterators. Use ``async with``, or ``await client.close()``.
    """

    def _init_io(self) -> None:
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Address, Pool]] = (
            weakref.WeakKeyDictionary()
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the running loop's connections (those in use when they are released)."""
        for pool in self._pools.pop(asyncio.get_running_loop(), {}).values():
            pool.close()

    def pipeline(self, window: int = 256) -> Pipeline:
        """A pipeline on this client's current node; see :class:`Pipeline`."""
        return Pipeline(self, window)

    # ---------------------------------------------------------------- plumbing

    def _bind(self, builder: Callable[..., Call[Any]]) -> Callable[..., Any]:
        run = self.call

        async def method(*args: Any, **kwargs: Any) -> Any:
            return await run(builder(*args, **kwargs))

        return method

    def _bind_scan(self, builder: Callable[..., Scan[Any]]) -> Callable[..., AsyncIterator[Any]]:
        run = self.call

        async def method(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            cursor = builder(*args, **kwargs)
            while not cursor.done:
                for item in await run(cursor):
                    yield item

        return method

    async def call(self, call: Call[T]) -> T:
        """Run a call built by :mod:`disquette.client.commands` (see the sync ``Client.call``)."""
        plan = call.plan(self._ctx)
        value: Any = None
        try:
            while True:
                value = await self._perform(plan.send(value))
        except StopIteration as stop:
            return stop.value

    async def _perform(self, op: Op) -> Any:
        if type(op) is Exchange:
            link = op.lease
            pool = self._pool(link.address)
            with pool.exchanging(link):
                healthy = await link.exchange(op.batch, self.config.socket_timeout)
            pool.give_back(link, healthy)
            return None
        if type(op) is Acquire:
            try:
                return await self._pool(op.address).acquire()
            except AuthError:
                raise
            except (OSError, DisqueError) as exc:
                return exc
        if type(op) is Sleep:
            await asyncio.sleep(op.seconds)
            return None
        assert type(op) is Release
        self._pool(op.lease.address).release(op.lease)
        return None

    def _pool(self, address: Address) -> Pool:
        loop = asyncio.get_running_loop()
        pools = self._pools.get(loop)
        if pools is None:
            pools = self._pools[loop] = {}
        pool = pools.get(address)
        if pool is None:
            pool = pools[address] = Pool(address, self.config)
        return pool


class Pipeline(PipelineBase[Client]):
    """Queue commands with the client's methods, then send them together.

    ::

        async with client.pipeline() as p:
            p.add_job("q", b"a").qlen("q")
        p.results
    """

    # (replaces the raw command of the same name, as the sync Pipeline.execute does)
    async def execute(self, raise_on_error: bool = True) -> list[Any]:  # type: ignore[override]
        """Send the queued commands; return their results (see the sync ``Pipeline.execute``)."""
        self.results = await self._client.call(self._take(raise_on_error))
        return self.results

    async def __aenter__(self) -> Pipeline:
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None and self._queued:
            await self.execute()
