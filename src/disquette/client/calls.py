"""What a client call does, as a plan that asks for I/O instead of doing it.

Every public method of the sync and the asyncio client builds a *call*
(a :class:`Command`, a :class:`Pipelined` batch, a :class:`Scan` page) and runs
its ``plan``: a generator that yields small I/O requests and receives their
results. The plan holds all the decisions (which node, failover, retry or not,
job-ID routing, affinity); the two clients only know how to perform three
requests, with blocking sockets or with asyncio:

* :class:`Acquire` -> a connection (lease) to an address, or the exception
  that prevented it (a new connection has done its AUTH/HELLO handshake);
* :class:`Release` -> give a lease back unused;
* :class:`Exchange` -> run a :class:`Batch` on a lease (the shell then keeps or
  drops the connection itself).

So failover logic exists once and is tested without sockets.

Retry rules. A command that was never written (the connection could not be
made) is always tried on the next node. After ``-LEAVING`` the node did
nothing, so commands are sent elsewhere, except ADDJOB: the leaving node
deleted its copy but replicas may survive, so that is the caller's decision.
After a lost reply only commands that cannot do anything twice are sent again
(:attr:`Retry.ALWAYS`); the others raise :class:`ReplyLostError`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from collections.abc import Callable, Generator, Iterable
from typing import Any, Generic, TypeVar

from disquette.client.batch import Batch
from disquette.client.errors import (
    ConnectionFailedError,
    DisqueError,
    LeavingError,
    PipelineError,
    ReplyLostError,
)
from disquette.client.topology import Address, Topology, format_address

T = TypeVar("T")


class Retry(enum.IntEnum):
    """When a command may be sent again to another node."""

    NEVER = 0  # only if it was never written (ADDJOB)
    ON_REFUSAL = 1  # also after -LEAVING (GETJOB, NACK, ENQUEUE, DEQUEUE...)
    ALWAYS = 2  # also after a lost reply: repeating it cannot do anything twice


@dataclasses.dataclass(frozen=True, slots=True)
class Acquire:
    address: Address


@dataclasses.dataclass(frozen=True, slots=True)
class Release:
    lease: Any


@dataclasses.dataclass(frozen=True, slots=True)
class Exchange:
    lease: Any
    batch: Batch


Op = Acquire | Release | Exchange
Plan = Generator[Op, Any, T]


@dataclasses.dataclass(frozen=True, slots=True)
class Context:
    """What a plan runs against: the topology, and an address when the client is pinned."""

    topology: Topology
    pinned: Address | None = None


def _identity(reply: Any) -> Any:
    return reply


@dataclasses.dataclass(frozen=True, slots=True)
class Command(Generic[T]):
    """One Disque command: its arguments, how to decode its reply, how to route and retry it.

    ``route``: job IDs the command is about; it goes to the node that created
    them (one command per node when they come from several). ``block``: seconds
    the server may legitimately hold the reply (``inf``: no limit), added to the
    socket timeout. ``fetch``: a GETJOB, subject to consumer affinity.
    """

    args: tuple[bytes, ...]
    decode: Callable[[Any], T] = _identity
    retry: Retry = Retry.ALWAYS
    route: tuple[str, ...] = ()
    block: float | None = None
    fetch: bool = False

    @property
    def name(self) -> str:
        return self.args[0].decode(errors="replace").upper()

    def plan(self, ctx: Context) -> Plan[T]:
        if self.route and ctx.pinned is None:
            groups = ctx.topology.group_by_node(self.route)
            if len(groups) > 1:
                return _run_grouped(ctx, self, groups)  # type: ignore[return-value]
            return run_command(ctx, self, prefer=next(iter(groups)))
        return run_command(ctx, self)


def _connect(ctx: Context, tried: Counter[Address], prefer: Address | None) -> Plan[Any]:
    """Get a lease on the best untried node; raise when none is left."""
    topology, errors = ctx.topology, []
    while True:
        if ctx.pinned is not None:
            address = ctx.pinned if tried[ctx.pinned] < 2 else None
        else:
            address = topology.choose(tried, prefer)
        if address is None:
            # (a node tried twice that failed twice the same way is named once)
            detail = (
                "; ".join(dict.fromkeys(errors)) or "every node already failed during this call"
            )
            raise ConnectionFailedError(f"no Disque node could be reached: {detail}")
        tried[address] += 1
        lease = yield Acquire(address)
        if isinstance(lease, BaseException):
            topology.mark_failed(address)
            errors.append(f"{format_address(address)}: {lease}")
            continue
        if lease.hello is not None:
            topology.learn(address, lease.hello)
        if ctx.pinned is None and address != prefer and topology.should_leave(address, tried):
            yield Release(lease)  # it says it is leaving and a healthy node is available
            continue
        return lease


def _exchange(
    ctx: Context, batch: Batch, tried: Counter[Address], prefer: Address | None
) -> Plan[Address]:
    """Run ``batch`` on the best node; return the address it ran on."""
    lease = yield from _connect(ctx, tried, prefer)
    address = lease.address
    batch.node = format_address(address)
    yield Exchange(lease, batch)
    if batch.lost_cause is not None:
        ctx.topology.mark_failed(address)
    elif address != prefer and ctx.pinned is None:
        ctx.topology.use(address)
    return address


def run_command(ctx: Context, command: Command[T], prefer: Address | None = None) -> Plan[T]:
    """One command, with failover and the retry rules of the module docstring."""
    value, _ = yield from _run_command(ctx, command, prefer)
    return value


def _run_command(
    ctx: Context, command: Command[T], prefer: Address | None
) -> Plan[tuple[T, Address]]:
    tried: Counter[Address] = Counter()
    if command.fetch and prefer is None:
        prefer = ctx.topology.consumer_target()
    last_error: BaseException | None = None
    while True:
        batch = Batch((command,))
        try:
            address = yield from _exchange(ctx, batch, tried, prefer)
        except ConnectionFailedError:
            if last_error is not None:
                raise last_error from None
            raise
        result = batch.results[0]
        if isinstance(result, LeavingError):
            ctx.topology.mark_leaving(address)
            if command.retry >= Retry.ON_REFUSAL:
                last_error = result
                continue
            result = result.not_resent(command.name)
        elif isinstance(result, ReplyLostError) and command.retry is Retry.ALWAYS:
            last_error = result
            continue
        if isinstance(result, BaseException):
            raise result
        if command.fetch:
            ctx.topology.observe_jobs(address, (job.id for job in result))
        return result, address


def _run_grouped(
    ctx: Context, command: Command[int], groups: dict[Address | None, list[str]]
) -> Plan[int]:
    """A multi-ID command split by creating node; the integer replies are summed."""
    total = 0
    for address, ids in groups.items():
        part = dataclasses.replace(command, args=(command.args[0], *(i.encode() for i in ids)))
        total += yield from run_command(ctx, part, prefer=address)
    return total


@dataclasses.dataclass(slots=True)
class Pipelined(Generic[T]):
    """Commands pipelined on one node, at most ``window`` in flight, never retried.

    Returns the results in order. ``stop_on_error``: send nothing more after the
    first failed command. ``raise_on_error``: raise :class:`PipelineError` (with
    every result) if any command failed, instead of returning exceptions in the list.
    """

    commands: Iterable[Command[T]]
    window: int
    stop_on_error: bool = False
    raise_on_error: bool = True

    def plan(self, ctx: Context) -> Plan[list[T]]:
        batch = Batch(self.commands, self.window, stop_on_error=self.stop_on_error)
        yield from _exchange(ctx, batch, Counter(), None)
        if self.raise_on_error and (
            batch.lost_cause is not None or any(isinstance(r, DisqueError) for r in batch.results)
        ):
            raise PipelineError(batch.results)
        return batch.results


class Scan(Generic[T]):
    """A QSCAN/JSCAN iteration: one page per call, every page on the node of the first."""

    def __init__(self, page: Callable[[int], Command[tuple[int, list[T]]]]) -> None:
        self._page = page
        self._cursor = 0
        self._node: Address | None = None
        self.done = False

    def plan(self, ctx: Context) -> Plan[list[T]]:
        if self._node is not None:
            ctx = dataclasses.replace(ctx, pinned=self._node)
        try:
            (self._cursor, items), self._node = yield from _run_command(
                ctx, self._page(self._cursor), None
            )
        except BaseException:
            self.done = True
            raise
        self.done = self._cursor == 0
        return items
