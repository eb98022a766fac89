"""The values the client returns: jobs, job descriptions, queue stats, nodes.

Each type knows how to build itself from the reply that carries it
(``from_reply``), so the shape of Disque's replies is written down once, here.
Names and bytes: job IDs and node IDs are ASCII and become ``str``; queue
names become ``str`` (binary names survive through ``surrogateescape``); job
bodies stay ``bytes``.

Two values go the other way, into commands: :class:`Backoff`, a job's retry
backoff (ADDJOB's BACKOFF), and the outcome WAITJOB answers,
:class:`JobOutcome`. :class:`Policy` and :class:`CronSchedule` (a recurring
job) read back as the keyword arguments that set them again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from disquette.client.resp import from_bytes

#: The longest backoff a server takes, in seconds.
MAX_BACKOFF = 1 << 32


def node_prefix(job_id: str) -> str:
    """The first 8 characters of the ID of the node that created ``job_id``."""
    return job_id[2:10]


def at_least_once(job_id: str) -> bool:
    """True if the job has a non-zero retry: its ID ends with an odd TTL field."""
    return int(job_id[-1], 16) & 1 == 1


@dataclass(frozen=True, slots=True)
class Job:
    """A job as GETJOB or QPEEK returns it.

    ``nacks`` and ``additional_deliveries`` are the server's best-effort counters;
    they are ``None`` unless the job was fetched with ``with_counters=True``.
    ``claim`` (disquette only) is the number of this delivery, ``None`` unless
    the job was fetched with ``with_claim=True``: passing the job to ``ack``,
    ``nack`` or ``working`` sends it, and the server refuses it with
    :class:`~disquette.client.errors.StaleClaimError` once the job was
    delivered again.
    """

    queue: str
    id: str
    body: bytes
    nacks: int | None = None
    additional_deliveries: int | None = None
    claim: int | None = None
    #: The client that fetched the job (GETJOB, QPEEK), for :meth:`result`.
    _client: Any = field(default=None, repr=False, compare=False)

    @property
    def node_prefix(self) -> str:
        """The first 8 characters of the ID of the node that created the job."""
        return node_prefix(self.id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job's outcome through the client that fetched it (disquette
        only): ``client.wait(job, timeout=timeout)``, a :class:`JobOutcome` or ``None``
        (an awaitable of it when that client is the asyncio one)."""
        if self._client is None:
            raise RuntimeError("result() needs a job fetched through a client (get_jobs, qpeek)")
        return self._client.wait(self, timeout=timeout)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled or copied, a job leaves its client behind (sockets and locks)."""
        values = (None if f.name == "_client" else getattr(self, f.name) for f in fields(self))
        return type(self), tuple(values)

    @classmethod
    def from_reply(cls, item: list[Any]) -> Job:
        queue, job_id, body = item[0], item[1], item[2]
        if len(item) == 3:
            return cls(from_bytes(queue), job_id.decode(), body)
        # WITHCOUNTERS' pairs, then WITHCLAIM's (disquette): name, value...
        f = dict(zip(item[3::2], item[4::2], strict=True))
        return cls(
            from_bytes(queue),
            job_id.decode(),
            body,
            f.get(b"nacks"),
            f.get(b"additional-deliveries"),
            f.get(b"claim"),
        )


def jobs_from_reply(reply: list[Any] | None) -> list[Job]:
    return [] if reply is None else [Job.from_reply(item) for item in reply]


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What became of a job, as WAITJOB answers (disquette only).

    ``outcome``: ``"acked"`` (``result``: the bytes its ACKJOB gave with
    ``result=``, or ``None``), ``"cancelled"``, ``"gone"`` (expired or deleted
    without an acknowledgement) or ``"unknown"`` (no node knows the job: it was
    acknowledged and forgotten without a result kept, or never existed).
    """

    outcome: str
    result: bytes | None = None

    @property
    def acked(self) -> bool:
        return self.outcome == "acked"

    @property
    def cancelled(self) -> bool:
        return self.outcome == "cancelled"

    @classmethod
    def from_reply(cls, reply: list[Any] | None) -> JobOutcome | None:
        if reply is None:
            return None
        outcome, result = reply
        return cls(outcome.decode(), result)


BACKOFF_KINDS = ("fixed", "exponential")


def _whole(seconds: object, spec: object) -> int:
    """A backoff's seconds: an ``int``, or the text of one."""
    if type(seconds) is int:
        return seconds
    if isinstance(seconds, str):
        try:
            return int(seconds)
        except ValueError:
            pass
    raise ValueError(f"backoff seconds must be whole numbers, not {spec!r}")


@dataclass(frozen=True, slots=True)
class Backoff:
    """A job's retry backoff (disquette only: ADDJOB's BACKOFF).

    Every requeue of the job -- a NACK, or its retry time passing -- is
    postponed: ``Backoff.fixed(s)`` by ``s`` seconds each time,
    ``Backoff.exponential(base, cap)`` by ``base x 2^(n-1)`` seconds up to
    ``cap``, ``n`` counting the job's NACKs and additional deliveries. Whole
    seconds, from 1 to 2^32; the cap not below the base. :meth:`of` also takes
    ``("fixed", s)``, ``("exponential", base, cap)`` or the text
    ``"exponential:1:60"``.
    """

    kind: str
    base: int
    cap: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in BACKOFF_KINDS:
            raise ValueError(f"backoff kind must be fixed or exponential, not {self.kind!r}")
        if (self.cap is None) != (self.kind == "fixed"):
            raise ValueError("a fixed backoff has seconds only; an exponential one, base and cap")
        seconds = (self.base,) if self.cap is None else (self.base, self.cap)
        if not all(type(s) is int and 0 < s <= MAX_BACKOFF for s in seconds):
            raise ValueError(f"backoff seconds must be whole numbers from 1 to {MAX_BACKOFF}")
        if self.cap is not None and self.cap < self.base:
            raise ValueError("the backoff's cap must not be below its base")

    @classmethod
    def fixed(cls, seconds: int) -> Backoff:
        return cls("fixed", seconds)

    @classmethod
    def exponential(cls, base: int, cap: int) -> Backoff:
        return cls("exponential", base, cap)

    @classmethod
    def of(cls, value: Backoff | tuple[Any, ...] | str) -> Backoff:
        """A Backoff from itself, a tuple (``("fixed", 30)``) or a text
        (``"fixed:30"``, ``"exponential:1:60"``)."""
        if isinstance(value, Backoff):
            return value
        parts: tuple[Any, ...] = tuple(value.split(":")) if isinstance(value, str) else value
        if not 2 <= len(parts) <= 3:
            raise ValueError(f"a backoff is fixed:seconds or exponential:base:cap, not {value!r}")
        kind, *seconds = parts
        numbers = [_whole(s, value) for s in seconds]
        return cls(str(kind).strip().lower(), *numbers)

    @property
    def args(self) -> tuple[bytes, ...]:
        """ADDJOB's ``BACKOFF fixed s`` or ``BACKOFF exponential base cap``."""
        values = (self.base,) if self.cap is None else (self.base, self.cap)
        return (b"BACKOFF", self.kind.encode(), *(b"%d" % v for v in values))


@dataclass(frozen=True, slots=True)
class ProgressEntry:
    """One entry of a job's progress log (disquette: WORKING with a text; JOBLOG, SHOW).

    ``time``: when the node recorded it, seconds since the epoch (milliseconds
    precision, as :func:`time.time` counts); ``node``: the 40-character ID of
    that node; ``text``: what the worker said.
    """

    time: float
    node: str
    text: str

    @classmethod
    def from_reply(cls, entry: list[Any]) -> ProgressEntry:
        ms, node, text = entry
        return cls(int(ms) / 1000, node.decode(), from_bytes(text))


def progress_from_reply(reply: list[Any] | None) -> list[ProgressEntry]:
    return [] if reply is None else [ProgressEntry.from_reply(entry) for entry in reply]


class FanIn(NamedTuple):
    """What ``add_fan_in`` added: the parents' IDs in order, and the job after them all."""

    parents: list[str]
    then: str


@dataclass(frozen=True, slots=True)
class JobInfo:
    """Everything SHOW tells about a job on the node that answered.

    Times: ``ttl``, ``delay`` and ``retry`` are seconds; ``next_requeue_within``
    and ``next_awake_within`` are milliseconds (``None`` when not scheduled);
    ``ctime`` is the creation time in milliseconds x 1,000,000. ``queue`` and
    ``body`` are ``None`` for a dummy ACK.

    disquette adds ``priority``; ``dedup``, the job's DEDUP key; and for a dead
    letter made by a queue policy, where the job came from: ``origin_id``,
    ``origin_queue``, ``origin_nacks`` and ``origin_additional_deliveries``;
    ``backoff``, the :class:`Backoff` its ADDJOB gave (not its policy's);
    ``group``, its fair-share group (ADDJOB GROUP). Each is ``None`` when the
    reply does not have it: from plain Disque, or when disquette leaves it out (a
    job of priority 0, without a key, not a dead letter).
    """

    id: str
    queue: str | None
    state: str
    repl: int
    ttl: int
    ctime: int
    delay: int
    retry: int
    nacks: int
    additional_deliveries: int
    nodes_delivered: tuple[str, ...]
    nodes_confirmed: tuple[str, ...]
    next_requeue_within: int | None
    next_awake_within: int | None
    body: bytes | None
    priority: int | None = None
    dedup: str | None = None
    origin_id: str | None = None
    origin_queue: str | None = None
    origin_nacks: int | None = None
    origin_additional_deliveries: int | None = None
    waiting_for: tuple[str, ...] | None = None
    if_gone: str | None = None
    progress: tuple[ProgressEntry, ...] | None = None
    claim: int | None = None
    backoff: Backoff | None = None
    group: str | None = None

    @classmethod
    def from_reply(cls, reply: list[Any]) -> JobInfo:
        f = dict(zip(reply[::2], reply[1::2], strict=True))
        queue = f[b"queue"]
        origin_id = f.get(b"origin-id")
        waiting_for = f.get(b"waiting-for")
        if_gone = f.get(b"if-gone")
        progress = f.get(b"progress")
        backoff = f.get(b"backoff")  # "fixed 30", "exponential 2 600"
        return cls(
            id=f[b"id"].decode(),
            queue=None if queue is None else from_bytes(queue),
            state=f[b"state"].decode(),
            repl=f[b"repl"] or 0,
            ttl=f[b"ttl"] or 0,
            ctime=f[b"ctime"] or 0,
            delay=f[b"delay"] or 0,
            retry=f[b"retry"] or 0,
            nacks=f[b"nacks"],
            additional_deliveries=f[b"additional-deliveries"],
            nodes_delivered=tuple(n.decode() for n in f[b"nodes-delivered"] or ()),
            nodes_confirmed=tuple(n.decode() for n in f[b"nodes-confirmed"] or ()),
            next_requeue_within=f[b"next-requeue-within"],
            next_awake_within=f[b"next-awake-within"],
            body=f[b"body"],
            priority=f.get(b"priority"),
            dedup=_optional_name(f.get(b"dedup")),
            origin_id=None if origin_id is None else origin_id.decode(),
            origin_queue=_optional_name(f.get(b"origin-queue")),
            origin_nacks=f.get(b"origin-nacks"),
            origin_additional_deliveries=f.get(b"origin-additional-deliveries"),
            waiting_for=None if waiting_for is None else tuple(i.decode() for i in waiting_for),
            if_gone=None if if_gone is None else if_gone.decode(),
            progress=None if progress is None else tuple(progress_from_reply(progress)),
            claim=f.get(b"claim"),
            backoff=None if backoff is None else Backoff.of(tuple(backoff.decode().split())),
            group=_optional_name(f.get(b"group")),
        )


@dataclass(frozen=True, slots=True)
class QueueStat:
    """QSTAT: a queue's length, age and idle time (seconds), traffic and pause state.

    disquette adds, each ``None`` when the reply does not have it (and from
    plain Disque): ``policy``, the name of the QPOLICY applied to the queue;
    ``jobs_on_disk``, how many of its jobs are on disk (flow to disk);
    ``dropped_oldest``, how many jobs its policy's ``overflow drop-oldest``
    dropped; and for a queue whose policy has a ``rate`` or a ``concurrency``,
    this node's part of the limits: ``rate_share`` (jobs per second) and
    ``rate_tokens`` (what its bucket holds now), ``concurrency_share`` (jobs
    it may have out) and ``in_flight`` (jobs it has out).
    """

    name: str
    len: int
    age: int
    idle: int
    blocked: int
    import_from: tuple[str, ...]
    import_rate: int
    jobs_in: int
    jobs_out: int
    pause: str
    policy: str | None = None
    jobs_on_disk: int | None = None
    dropped_oldest: int | None = None
    rate_share: int | None = None
    rate_tokens: int | None = None
    concurrency_share: int | None = None
    in_flight: int | None = None

    @classmethod
    def from_reply(cls, reply: list[Any]) -> QueueStat:
        f = dict(zip(reply[::2], reply[1::2], strict=True))
        return cls(
            name=from_bytes(f[b"name"]),
            len=f[b"len"],
            age=f[b"age"],
            idle=f[b"idle"],
            blocked=f[b"blocked"],
            import_from=tuple(n.decode() for n in f[b"import-from"]),
            import_rate=f[b"import-rate"],
            jobs_in=f[b"jobs-in"],
            jobs_out=f[b"jobs-out"],
            pause=f[b"pause"].decode(),
            policy=_optional_name(f.get(b"policy")),
            jobs_on_disk=f.get(b"jobs-on-disk"),
            dropped_oldest=f.get(b"dropped-oldest"),
            rate_share=f.get(b"rate-share"),
            rate_tokens=f.get(b"rate-tokens"),
            concurrency_share=f.get(b"concurrency-share"),
            in_flight=f.get(b"in-flight"),
        )


#: QPOLICY options whose value is a name (a queue, a choice); the others are integers.
_NAME_OPTIONS = frozenset({"deadletter", "backoff", "overflow"})


@dataclass(frozen=True, slots=True)
class Policy:
    """A queue policy (QPOLICY, disquette only): its name, glob pattern and options.

    ``options`` maps the option names as Python spells them (``max_nacks``,
    ``max_deliveries``, ``deadletter``, ``backoff_base``, ``rate``...) to their
    values (the dead-letter queue's name, ``backoff``'s and ``overflow``'s
    choice, integers otherwise), so
    ``client.qpolicy_set(p.name, p.pattern, **p.options)`` sets it again.
    """

    name: str
    pattern: str
    options: dict[str, int | str]

    @classmethod
    def from_reply(cls, entry: list[Any]) -> Policy:
        name, pattern, pairs = entry
        options: dict[str, int | str] = {}
        for option, value in zip(pairs[::2], pairs[1::2], strict=True):
            key = option.decode().lower().replace("-", "_")
            options[key] = from_bytes(value) if key in _NAME_OPTIONS else int(value)
        return cls(from_bytes(name), from_bytes(pattern), options)


def _optional_name(value: bytes | None) -> str | None:
    return None if value is None else from_bytes(value)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A recurring job (CRON, disquette only): a job with ``body`` added to ``queue``
    on every tick.

    ``every``: the period in seconds (ticks at its multiples since the Unix
    epoch), or ``schedule``: the cron expression (UTC); the other is ``None``.
    ``options`` maps ADDJOB's options as ``cron_set`` spells them
    (``replicate``, ``retry``, ``ttl``, ``delay``, ``maxlen``, ``priority``,
    ``async_``) to their values, so ``client.cron_set(s.name, s.queue, s.body,
    every=s.every, schedule=s.schedule, **s.options)`` sets it again.
    ``next_tick``: the next tick that may fire and ``last_fired``: the latest
    tick the answering node knows fired, both in Unix seconds, ``None`` for
    none.
    """

    name: str
    queue: str
    body: bytes
    every: int | None
    schedule: str | None
    options: dict[str, int | bool]
    next_tick: int | None
    last_fired: int | None

    @classmethod
    def from_reply(cls, entry: list[Any]) -> CronSchedule:
        name, queue, body, kind, spec, pairs, next_tick, last_fired = entry
        options: dict[str, int | bool] = {}
        for option, value in zip(pairs[::2], pairs[1::2], strict=True):
            key = option.decode().lower()
            if key == "async":
                options["async_"] = bool(value)
            else:
                options[key] = int(value)
        every = kind == b"every"
        return cls(
            from_bytes(name),
            from_bytes(queue),
            body,
            int(spec) if every else None,
            None if every else spec.decode(),
            options,
            next_tick or None,
            last_fired or None,
        )


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node of a HELLO reply. ``priority``: 1 is best; 100 means failing or leaving."""

    id: str
    host: str
    port: int
    priority: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Hello:
    """HELLO: the format version, the answering node's ID and every node it knows."""

    version: int
    node_id: str
    nodes: tuple[NodeInfo, ...]

    @property
    def myself(self) -> NodeInfo | None:
        return next((n for n in self.nodes if n.id == self.node_id), None)

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Hello:
        nodes = tuple(
            NodeInfo(node_id.decode(), host.decode(), int(port), int(priority))
            for node_id, host, port, priority in reply[2:]
        )
        return cls(reply[0], reply[1].decode(), nodes)


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One line of CLUSTER NODES: flags such as ``myself``, ``fail?``, ``leaving``; from
    a disquette node (0.2.0 on), also the node's release and bus protocol version
    (``release=0.2.0 bus=2`` after Disque's fields; None where not known or not given).
    """

    id: str
    host: str
    port: int
    flags: tuple[str, ...]
    ping_sent: int
    pong_received: int
    link_state: str
    release: str | None = None
    bus_protocol: int | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse_nodes(cls, text: bytes) -> list[ClusterNode]:
        nodes = []
        for line in text.decode().splitlines():
            if not line.strip():
                continue
            node_id, addr, flags, ping, pong, link, *more = line.split(" ")
            host, _, port = addr.rpartition(":")
            extra = dict(field.partition("=")[::2] for field in more)
            release = extra.get("release", "-")
            bus = extra.get("bus", "-").partition(":")[0]
            nodes.append(
                cls(node_id, host, int(port), tuple(flags.split(",")), int(ping), int(pong), link,
                    None if release == "-" else release, int(bus) if bus.isdigit() else None)
            )  # fmt: skip
        return nodes


def parse_info(text: bytes) -> dict[str, Any]:
    """INFO (or CLUSTER INFO) as one flat dict.

    Numbers become ``int``/``float``; ``cmdstat_*`` lines become dicts.
    """
    info: dict[str, Any] = {}
    for line in text.decode(errors="replace").splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        key, _, value = line.partition(":")
        if key.startswith("cmdstat_"):
            info[key] = {k: _number(v) for k, _, v in (p.partition("=") for p in value.split(","))}
        else:
            info[key] = _number(value)
    return info


def _number(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value
