"""The command methods, declared once for the sync client, the asyncio client and pipelines.

``add_job = command(commands.add_job)`` is all a client class says about
ADDJOB. The :class:`command` descriptor binds the builder to the object it is
read from: the sync client runs the call and returns its value, the asyncio
client returns a coroutine, a pipeline queues the command. The builder's
signature and docstring are the method's (``help(Client.add_job)``), and the
``__get__`` overloads give type checkers the right return type for each kind
of object.

:class:`BaseClient` holds what both clients share: the configuration, the
topology (see :mod:`disquette.client.topology`) and node pinning.
"""

from __future__ import annotations

import functools
import inspect
import random
import re
import ssl as ssl_module
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, Self, TypeVar, overload

from disquette.client import commands
from disquette.client.calls import Context, Plan, Scan
from disquette.client.topology import (
    Address,
    Affinity,
    Topology,
    format_address,
    parse_address,
    parse_seeds,
)

if TYPE_CHECKING:
    from disquette.client.aio import Client as AsyncClient
    from disquette.client.pipeline import PipelineBase
    from disquette.client.sync import Client as SyncClient

P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Call(Protocol[T_co]):
    def plan(self, ctx: Context) -> Plan[T_co]: ...


class command(Generic[P, T]):
    """A client method made from a command builder (see the module docstring)."""

    def __init__(self, builder: Callable[P, Call[T]]) -> None:
        self.builder = builder
        self.name = builder.__name__
        functools.update_wrapper(self, builder)  # type: ignore[arg-type]

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @property
    def __signature__(self) -> inspect.Signature:
        """The builder's signature with ``self`` first and the value it returns, for help()."""
        signature = inspect.signature(self.builder)
        this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
        returns = signature.return_annotation
        match = re.fullmatch(r"(Command|Compound|Pipelined|Scan)\[(.*)\]", str(returns))
        if match:
            kind, value = match.groups()
            returns = {
                "Command": "{}",
                "Compound": "{}",
                "Pipelined": "list[{}]",
                "Scan": "Iterator[{}]",
            }[kind]
            returns = returns.format(value)
        return signature.replace(
            parameters=[this, *signature.parameters.values()], return_annotation=returns
        )

    def __call__(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """``Client.add_job(client, ...)``: the method called through the class."""
        return self.__get__(obj, type(obj))(*args, **kwargs)

    @overload
    def __get__(self, obj: None, owner: type) -> command[P, T]: ...
    @overload
    def __get__(self, obj: SyncClient, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type) -> Callable[P, Awaitable[T]]: ...
    @overload
    def __get__(self, obj: PipelineBase, owner: type) -> Callable[P, PipelineBase]: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        bound = obj._bound.get(self.name)
        if bound is None:  # bind once per object
            bound = functools.update_wrapper(obj._bind(self.with_defaults(obj)), self.builder)
            obj._bound[self.name] = bound
        return bound

    def with_defaults(self, obj: Any) -> Callable[P, Call[T]]:
        """The builder, with the defaults ``obj`` sets for this method's arguments."""
        defaults = obj._defaults.get(self.name)
        return self.builder if not defaults else functools.partial(self.builder, **defaults)


class scan(command[P, list[T]]):
    """An iterator method over a QSCAN/JSCAN cursor."""

    def __init__(self, builder: Callable[P, Scan[T]]) -> None:
        super().__init__(builder)

    @overload  # type: ignore[override]
    def __get__(self, obj: None, owner: type) -> scan[P, T]: ...
    @overload
    def __get__(self, obj: SyncClient, owner: type) -> Callable[P, Iterator[T]]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type) -> Callable[P, AsyncIterator[T]]: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        bound = obj._bound.get(self.name)
        if bound is None:
            bound = functools.update_wrapper(obj._bind_scan(self.with_defaults(obj)), self.builder)
            obj._bound[self.name] = bound
        return bound


class Commands:
    """Methods that send one command: available on clients and pipelines."""

    #: Default arguments per method name (``Client(dedup_retries=True)`` sets some).
    _defaults: dict[str, dict[str, Any]] = {}

    add_job = command(commands.add_job)
    get_jobs = command(commands.get_jobs)
    ack = command(commands.ack)
    fast_ack = command(commands.fast_ack)
    nack = command(commands.nack)
    cancel = command(commands.cancel)
    working = command(commands.working)
    joblog = command(commands.joblog)
    enqueue = command(commands.enqueue)
    dequeue = command(commands.dequeue)
    del_job = command(commands.del_job)
    show = command(commands.show)
    qlen = command(commands.qlen)
    qstat = command(commands.qstat)
    qpeek = command(commands.qpeek)
    pause = command(commands.pause)
    info = command(commands.info)
    hello = command(commands.hello)
    ping = command(commands.ping)
    cluster_meet = command(commands.cluster_meet)
    cluster_nodes = command(commands.cluster_nodes)
    cluster_myid = command(commands.cluster_myid)
    cluster_info = command(commands.cluster_info)
    cluster_forget = command(commands.cluster_forget)
    cluster_reset = command(commands.cluster_reset)
    cluster_leaving = command(commands.cluster_leaving)
    cluster_saveconfig = command(commands.cluster_saveconfig)
    qpolicy_set = command(commands.qpolicy_set)
    qpolicy_del = command(commands.qpolicy_del)
    qpolicy_list = command(commands.qpolicy_list)
    qpolicy_get = command(commands.qpolicy_get)
    qpolicy_match = command(commands.qpolicy_match)
    cron_set = command(commands.cron_set)
    cron_del = command(commands.cron_del)
    cron_list = command(commands.cron_list)
    cron_get = command(commands.cron_get)
    execute = command(commands.execute)


class ClientCommands(Commands):
    """Methods that need a whole client: pipelined batches, several calls in one
    (chains, fan-ins) and cursor iteration."""

    add_jobs = command(commands.add_jobs)
    add_chain = command(commands.add_chain)
    add_fan_in = command(commands.add_fan_in)
    wait = command(commands.wait)
    wait_many = command(commands.wait_many)
    qscan = scan(commands.qscan)
    jscan = scan(commands.jscan)


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """How a client connects; see :class:`BaseClient` for the meaning of each field."""

    seeds: tuple[Address, ...]
    password: str | None = None
    client_name: str | None = None
    connect_timeout: float = 5.0
    socket_timeout: float | None = 10.0
    ssl: ssl_module.SSLContext | None = None
    max_connections: int | None = None
    failure_backoff: float = 5.0
    dedup_retries: bool = False
    username: str | None = None


def tls_context(
    ca_cert: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    *,
    ca_dir: str | None = None,
    insecure: bool = False,
) -> ssl_module.SSLContext:
    """A client TLS context: it trusts the CA in ``ca_cert`` (a PEM file) or ``ca_dir``
    (the system's CAs when neither is given), checks that the node's certificate names
    the address connected to, and shows the client certificate ``cert`` (with ``key``,
    or a key inside ``cert``) to nodes that ask for one (``tls-auth-clients``).
    ``insecure``: no check of the node's certificate at all (tests, never production).
    """
    context = ssl_module.create_default_context(cafile=ca_cert, capath=ca_dir)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl_module.CERT_NONE
    if cert:
        context.load_cert_chain(cert, key)
    return context


class BaseClient(ClientCommands):
    """What the sync and asyncio clients share: configuration, topology, pinning.

    ``seeds``: ``"host:port"`` strings (or one comma-separated string, or
    ``(host, port)`` tuples); tried in random order until one answers.
    ``password``: sent with AUTH on every new connection (as ``username``'s, an ACL
    user of disquette, when given; else the default user's). ``client_name``: set
    with CLIENT SETNAME. ``connect_timeout``: seconds to connect and handshake.
    ``socket_timeout``: seconds a reply may take (``None``: no limit), on top of
    the time a blocking command (GETJOB, synchronous ADDJOB) may legitimately
    wait. ``tls=True``: connect with TLS (to the nodes' ``tls-port``), trusting the CA
    in ``tls_ca_cert`` (the system's by default) and showing the client certificate
    ``tls_cert`` with its key ``tls_key``, if given (see :func:`tls_context`); or
    ``ssl``: an :class:`ssl.SSLContext` of your own for TLS connections.
    ``max_connections``: per node, ``None`` for no limit (calls wait for a free
    connection otherwise). ``consumer_affinity``: ``True`` (or an
    :class:`Affinity`) to move GETJOB to the node producing most received jobs.
    ``failure_backoff``: seconds a failed node is avoided. ``rng``: the random
    source for seed order and tie-breaks (tests pass a seeded one).
    ``dedup_retries`` (disquette only: plain Disque refuses DEDUP): every
    ``add_job``/``add_jobs``/``add_chain``/``add_fan_in`` gets a random DEDUP
    key unless given one
    (``dedup=True``), so an ADDJOB whose reply was lost is sent again instead of
    raising :class:`ReplyLostError`.
    """

    def __init__(
        self,
        seeds: str | Address | Iterable[str | Address] = "127.0.0.1:7711",
        *,
        password: str | None = None,
        client_name: str | None = None,
        connect_timeout: float = 5.0,
        socket_timeout: float | None = 10.0,
        ssl: ssl_module.SSLContext | None = None,
        tls: bool = False,
        tls_ca_cert: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        max_connections: int | None = None,
        consumer_affinity: bool | Affinity = False,
        failure_backoff: float = 5.0,
        rng: random.Random | None = None,
        dedup_retries: bool = False,
        username: str | None = None,
    ) -> None:
        if ssl is None and (tls or tls_ca_cert or tls_cert):
            ssl = tls_context(tls_ca_cert, tls_cert, tls_key)
        self.config = ClientConfig(
            parse_seeds(seeds),
            password,
            client_name,
            connect_timeout,
            socket_timeout,
            ssl,
            max_connections,
            failure_backoff,
            dedup_retries,
            username,
        )
        if dedup_retries:
            self._defaults = {
                name: {"dedup": True} for name in ("add_job", "add_jobs", "add_chain", "add_fan_in")
            }
        affinity = consumer_affinity if isinstance(consumer_affinity, Affinity) else None
        if consumer_affinity is True:
            affinity = Affinity()
        self.topology = Topology(
            self.config.seeds, rng=rng, failure_backoff=failure_backoff, affinity=affinity
        )
        self._ctx = Context(self.topology, owner=self)
        self._bound: dict[str, Callable[..., Any]] = {}
        self._init_io()

    @property
    def pinned(self) -> str | None:
        """``host:port`` if this client only talks to one node (see :meth:`on_node`)."""
        return None if self._ctx.pinned is None else format_address(self._ctx.pinned)

    def on_node(self, address: str | Address) -> Self:
        """A view of this client that sends everything to ``address`` and nowhere else.

        It shares the connections and the topology of this client (closing one
        closes both). Useful for per-node commands: INFO, CLUSTER, QSCAN...
        """
        view = self.__class__.__new__(self.__class__)
        view.__dict__.update(self.__dict__)
        view._bound = {}
        view._ctx = Context(self.topology, parse_address(address), view)
        return view

    def _init_io(self) -> None:
        """Set up the connection pools (the sync and asyncio clients differ here)."""
        raise NotImplementedError

    def _bind(self, builder: Callable[..., Call[Any]]) -> Callable[..., Any]:
        raise NotImplementedError

    def _bind_scan(self, builder: Callable[..., Scan[Any]]) -> Callable[..., Any]:
        raise NotImplementedError
