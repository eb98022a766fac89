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
  drops the connection itself);
* :class:`Sleep` -> nothing, after a pause (before resending after ``-TRYAGAIN``).

So failover logic exists once and is tested without sockets.

Retry rules. A command that was never written (the connection could not be
made) is always tried on the next node. After ``-LEAVING`` the node did
nothing, so commands are sent elsewhere, except ADDJOB: the leaving node
deleted its copy but replicas may survive, so that is the caller's decision.
After a lost reply only commands that cannot do anything twice are sent again
(:attr:`Retry.ALWAYS`); the others raise :class:`ReplyLostError`.

An ADDJOB with a DEDUP key (a *sticky* command) is one of those: a node holding
a copy of the job answers its ID instead of adding another. So after a lost
reply it is sent again to the same node first (the one sure to hold the copy
if the job was added), then elsewhere (a node holding a replica finds it; one
without a copy adds the job, the documented limit). After ``-TRYAGAIN`` (the
job is still being replicated for the first attempt) it is sent again to the
same node after a pause, for up to its timeout. Single commands and pipelines
(``add_jobs``) follow these rules alike.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import math
from collections import Counter
from collections.abc import Callable, Generator, Iterable
from typing import Any, Generic, TypeVar, cast

from disquette.client.batch import Batch
from disquette.client.errors import (
    ConnectionFailedError,
    DisqueError,
    LeavingError,
    PipelineError,
    ReplyLostError,
    TryAgainError,
)
from disquette.client.topology import Address, Topology, format_address

T = TypeVar("T")

#: Seconds a sticky command is resent after -TRYAGAIN when its timeout does not say.
TRYAGAIN_PATIENCE = 5.0
#: The pauses before those resends: doubling from the first to the last.
TRYAGAIN_PAUSES = (0.01, 0.5)


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


@dataclasses.dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


Op = Acquire | Release | Exchange | Sleep
Plan = Generator[Op, Any, T]


@dataclasses.dataclass(frozen=True, slots=True)
class Context:
    """What a plan runs against: the topology, an address when the client is pinned,
    and the client itself (``owner``: the jobs it fetches remember it, for
    ``Job.result``)."""

    topology: Topology
    pinned: Address | None = None
    owner: Any = None


def _identity(reply: Any) -> Any:
    return reply


# Not frozen: a frozen dataclass sets each of its ten fields through object.__setattr__,
# which made a command cost about 0.9 us to make, a quarter of a bulk send's time per
# job; nothing changes a command once made (``part`` makes a new one).
@dataclasses.dataclass(slots=True)
class Command(Generic[T]):
    """One Disque command: its arguments, how to decode its reply, how to route and retry it.

    ``route``: job IDs the command is about; it goes to the node that created
    them (one command per node when they come from several). ``block``: seconds
    the server may legitimately hold the reply (``inf``: no limit), added to the
    socket timeout. ``fetch``: a GETJOB, subject to consumer affinity.
    ``sticky``: an ADDJOB with a DEDUP key, resent to the same node first after
    a lost reply or ``-TRYAGAIN`` (see the module docstring). ``route_args``:
    when the IDs of ``route`` do not stand alone in the arguments (ACKJOB's
    ``id CLAIM n``), each one's arguments, so that a split keeps them; ``tail``:
    the arguments after the IDs, which every part keeps (NACK's ``DELAY s``).
    ``jobs``: the value is a list of :class:`~disquette.client.models.Job`,
    which remember the context's owner (GETJOB, QPEEK).
    """

    args: tuple[bytes, ...]
    decode: Callable[[Any], T] = _identity
    retry: Retry = Retry.ALWAYS
    route: tuple[str, ...] = ()
    block: float | None = None
    fetch: bool = False
    sticky: bool = False
    route_args: tuple[tuple[bytes, ...], ...] = ()
    tail: tuple[bytes, ...] = ()
    jobs: bool = False

    @property
    def name(self) -> str:
        return self.args[0].decode(errors="replace").upper()

    @property
    def patience(self) -> float:
        """Seconds this command may be resent after -TRYAGAIN (0: it is not)."""
        if not self.sticky:
            return 0.0
        if self.block is None or math.isinf(self.block):
            return TRYAGAIN_PATIENCE
        return max(self.block, TRYAGAIN_PAUSES[1])

    def part(self, ids: Iterable[str]) -> Command[T]:
        """The same command for some of the IDs of its route (each with its arguments)."""
        if not self.route_args:
            groups: Iterable[tuple[bytes, ...]] = ((i.encode(),) for i in ids)
        else:
            pending: dict[str, list[tuple[bytes, ...]]] = {}
            for job_id, group in zip(self.route, self.route_args, strict=True):
                pending.setdefault(job_id, []).append(group)
            groups = [pending[i].pop(0) for i in ids]
        args = (self.args[0], *itertools.chain(*groups), *self.tail)
        return dataclasses.replace(self, args=args)

    def plan(self, ctx: Context) -> Plan[T]:
        if self.route and ctx.pinned is None:
            groups = ctx.topology.group_by_node(self.route)
            if len(groups) > 1:  # IDs of several nodes: a command whose reply is a count
                return cast("Plan[T]", _run_grouped(ctx, cast("Command[int]", self), groups))
            return run_command(ctx, self, prefer=next(iter(groups)))
        return run_command(ctx, self)


class Pauses:
    """The pauses before sending again (after -TRYAGAIN), for up to ``patience`` seconds in all."""

    def __init__(self, patience: float) -> None:
        self.left = patience
        self.pause = TRYAGAIN_PAUSES[0]

    def next(self) -> float | None:
        """The next pause, or None when the patience is spent."""
        if self.left <= 0:
            return None
        pause = min(self.pause, self.left)
        self.left -= pause
        self.pause = min(2 * self.pause, TRYAGAIN_PAUSES[1])
        return pause


def _connect(
    ctx: Context, tried: Counter[Address], prefer: Address | None, again: Address | None = None
) -> Plan[Any]:
    """Get a lease on the best untried node; raise when none is left.

    ``again``: an address to try first whatever its state (a sticky resend).
    """
    topology = ctx.topology
    errors: list[str] = []
    last: BaseException | None = None  # the last failure, the error's cause
    address: Address | None
    while True:
        if again is not None:
            address, again = again, None
            sticky = True
        elif ctx.pinned is not None:
            address, sticky = (ctx.pinned if tried[ctx.pinned] < 2 else None), False
        else:
            address, sticky = topology.choose(tried, prefer), False
        if address is None:
            # (a node tried twice that failed twice the same way is named once)
            detail = (
                "; ".join(dict.fromkeys(errors)) or "every node already failed during this call"
            )
            raise ConnectionFailedError(f"no Disque node could be reached: {detail}") from last
        tried[address] += 1
        lease = yield Acquire(address)
        if isinstance(lease, BaseException):
            topology.mark_failed(address)
            errors.append(f"{format_address(address)}: {lease}")
            last = lease
            continue
        if lease.hello is not None:
            topology.learn(address, lease.hello)
        if (
            ctx.pinned is None
            and not sticky
            and address != prefer
            and topology.should_leave(address, tried)
        ):
            yield Release(lease)  # it says it is leaving and a healthy node is available
            continue
        return lease


def _exchange(
    ctx: Context,
    batch: Batch,
    tried: Counter[Address],
    prefer: Address | None,
    again: Address | None = None,
) -> Plan[Address]:
    """Run ``batch`` on the best node (``again`` first); return the address it ran on."""
    lease = yield from _connect(ctx, tried, prefer, again)
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
    again: Address | None = None
    backoff = Pauses(command.patience)
    while True:
        batch = Batch((command,))
        try:
            address = yield from _exchange(ctx, batch, tried, prefer, again)
        except ConnectionFailedError:
            if last_error is not None:
                raise last_error from None
            raise
        result = batch.results[0]
        if isinstance(result, LeavingError):
            ctx.topology.mark_leaving(address)
            if command.retry >= Retry.ON_REFUSAL:
                last_error, again = result, None
                continue
            result = result.not_resent(command.name)
        elif isinstance(result, ReplyLostError) and command.retry is Retry.ALWAYS:
            last_error, again = result, _sticky_address(command, address, tried)
            continue
        elif isinstance(result, TryAgainError) and (pause := backoff.next()) is not None:
            yield Sleep(pause)
            last_error, again = result, address
            continue
        if isinstance(result, BaseException):
            raise result
        if command.fetch:
            ctx.topology.observe_jobs(address, (job.id for job in result))
        if command.jobs and ctx.owner is not None:
            for job in result:  # (frozen: set once, as it is made)
                object.__setattr__(job, "_client", ctx.owner)
        return result, address


def _sticky_address(
    command: Command[Any], address: Address, tried: Counter[Address]
) -> Address | None:
    """Where a lost command goes first: the same node for a sticky one tried there once."""
    return address if command.sticky and tried[address] < 2 else None


def _resendable(result: Any, command: Command[Any]) -> bool:
    """A sticky command whose reply was lost, or that was refused with -TRYAGAIN."""
    return command.sticky and isinstance(result, ReplyLostError | TryAgainError)


def _run_grouped(
    ctx: Context, command: Command[int], groups: dict[Address | None, list[str]]
) -> Plan[int]:
    """A multi-ID command split by creating node; the integer replies are summed."""
    total = 0
    for address, ids in groups.items():
        total += yield from run_command(ctx, command.part(ids), prefer=address)
    return total


@dataclasses.dataclass(slots=True)
class Pipelined(Generic[T]):
    """Commands pipelined on one node, at most ``window`` in flight.

    Returns the results in order. ``stop_on_error``: send nothing more after the
    first failed command. ``raise_on_error``: raise :class:`PipelineError` (with
    every result) if any command failed, instead of returning exceptions in the list.

    Nothing is sent again, except sticky commands (ADDJOB with a DEDUP key) when
    they are the only failures: the lost ones or those refused with -TRYAGAIN
    are sent again as the module docstring says, then the rest of the commands;
    their results take their places.
    """

    commands: Iterable[Command[T]]
    window: int
    stop_on_error: bool = False
    raise_on_error: bool = True

    def plan(self, ctx: Context) -> Plan[list[T]]:
        results: list[Any] = []
        source = iter(self.commands)
        tried: Counter[Address] = Counter()
        resend: list[tuple[int, Command[T]]] = []  # (place among the results, command)
        again: Address | None = None
        backoff: Pauses | None = None
        while True:
            commands = itertools.chain((c for _, c in resend), source)
            batch = Batch(commands, self.window, stop_on_error=self.stop_on_error)
            try:
                address = yield from _exchange(ctx, batch, tried, None, again)
            except ConnectionFailedError:
                if not resend:
                    raise
                break  # their places keep the failures that made them resent
            fresh = max(0, len(batch.results) - len(resend))
            places = [p for p, _ in resend] + list(range(len(results), len(results) + fresh))
            results += [None] * fresh
            for place, result in zip(places, batch.results, strict=False):
                results[place] = result
            unsent = resend[len(batch.results) :]  # after a stop
            resend = sorted(unsent + [(places[i], c) for i, c in batch.failed])
            if not resend or not all(_resendable(results[p], c) for p, c in resend):
                break
            if batch.lost_cause is not None:
                again = _sticky_address(resend[0][1], address, tried)
                continue
            backoff = backoff or Pauses(resend[0][1].patience)
            pause = backoff.next()
            if pause is None:
                break
            yield Sleep(pause)
            again = address
        if self.raise_on_error and any(isinstance(r, DisqueError) for r in results):
            raise PipelineError(results)
        return results


@dataclasses.dataclass(frozen=True, slots=True)
class Compound(Generic[T]):
    """Several calls run one after the other as one call (``add_chain``, ``add_fan_in``).

    ``run`` makes the plan: it chains the plans of the calls it needs, each
    with its own failover and retry rules, and decides what a failure midway
    means. Not for pipelines.
    """

    run: Callable[[Context], Plan[T]]

    def plan(self, ctx: Context) -> Plan[T]:
        return self.run(ctx)


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
