"""Every Disque command as a typed builder: arguments in, a :class:`Command` out.

The builders are the single definition of the client API: their signatures and
docstrings are what ``Client.add_job`` (sync), ``aio.Client.add_job`` and
``Pipeline.add_job`` show, because those methods are generated from them. A
builder validates and encodes its arguments, says how to decode the reply,
which node the command is about (job IDs) and whether it may be sent twice.

Units: durations are seconds. Where Disque takes milliseconds (ADDJOB's
timeout, GETJOB's TIMEOUT) fractions are allowed and rounded up to the next
millisecond; DELAY, RETRY and TTL are whole seconds as in Disque.

Three builders make more than one command: :func:`add_chain` (ADDJOBs one
after the other, each ``AFTER`` the previous one's ID), :func:`add_fan_in`
(pipelined ADDJOBs, then one ``AFTER`` all of them) and :func:`wait` (WAITJOB,
sent again elsewhere with the time left when its connection breaks); they
return a :class:`~disquette.client.calls.Compound`, so the clients run them as
one call but pipelines cannot hold them.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from disquette.client.calls import (
    TRYAGAIN_PAUSES,
    Command,
    Compound,
    Context,
    Pipelined,
    Plan,
    Retry,
    Scan,
    Sleep,
)
from disquette.client.errors import (
    ConnectionFailedError,
    DisqueError,
    PipelineError,
    ReplyLostError,
)
from disquette.client.models import (
    Backoff,
    ClusterNode,
    CronSchedule,
    FanIn,
    Hello,
    Job,
    JobInfo,
    JobOutcome,
    Policy,
    ProgressEntry,
    QueueStat,
    jobs_from_reply,
    parse_info,
    progress_from_reply,
)
from disquette.client.resp import Arg, from_bytes, to_bytes

T = TypeVar("T")

DEFAULT_ADD_TIMEOUT = 5.0
DEFAULT_WINDOW = 256

PAUSE_OPTIONS = frozenset({"in", "out", "all", "none", "state", "bcast"})
JOB_STATES = frozenset({"wait-repl", "active", "queued", "acked", "waiting"})
#: ADDJOB's AFTER: at most this many distinct dependencies (disquette).
MAX_AFTER = 256
IF_GONE = frozenset({"fail", "release"})
#: ACKJOB's RESULT: at most this many bytes (disquette).
MAX_RESULT = 65536
OVERFLOW = frozenset({"refuse", "drop-oldest"})

# Raw commands (``execute``): which may be resent after a lost reply or a -LEAVING.
_IDEMPOTENT = frozenset(
    b"ACKJOB FASTACK DELJOB WORKING SHOW QLEN QSTAT QPEEK QSCAN JSCAN PAUSE HELLO INFO PING "
    b"TIME COMMAND AUTH QPOLICY JOBLOG WAITJOB CANCEL CRON".split()
)
_NEVER_RESEND = frozenset({b"ADDJOB"})


def _ms(seconds: float, what: str) -> bytes:
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"{what} must be a positive number of seconds (None: no limit)")
    return b"%d" % math.ceil(seconds * 1000)


def _whole_seconds(seconds: float, what: str) -> bytes:
    """A duration Disque takes in whole seconds: a fraction is rounded up."""
    if not 0 <= seconds < math.inf:
        raise ValueError(f"{what} must be a number of seconds >= 0")
    return b"%d" % math.ceil(seconds)


def _ids(job_ids: Iterable[str]) -> tuple[bytes, ...]:
    return tuple(to_bytes(i) for i in job_ids)


#: A job as ACKJOB, NACK and WORKING take it: its ID, or a :class:`Job` (with its claim).
JobRef = str | Job


def _job_id(job: JobRef) -> str:
    return job.id if isinstance(job, Job) else job


def _claimed(
    jobs: Sequence[JobRef], claim: int | None, name: str
) -> tuple[tuple[str, ...], tuple[tuple[bytes, ...], ...]]:
    """The IDs of ``jobs``, and each one's arguments: ``id``, or ``id CLAIM n``.

    A :class:`Job` fetched with a claim carries it; ``claim`` gives the claim
    of a single job (and wins over the job's own).
    """
    if claim is not None and len(jobs) != 1:
        raise ValueError(f"{name}: claim= goes with one job; pass Job objects for several")
    ids: list[str] = []
    groups: list[tuple[bytes, ...]] = []
    for job in jobs:
        job_id = _job_id(job)
        n = claim if claim is not None else (job.claim if isinstance(job, Job) else None)
        ids.append(job_id)
        groups.append((to_bytes(job_id),) if n is None else (to_bytes(job_id), b"CLAIM", b"%d" % n))
    return tuple(ids), tuple(groups)


def _id_command(
    name: bytes,
    jobs: Sequence[JobRef],
    claim: int | None,
    decode: Callable[[Any], Any],
    retry: Retry,
    tail: tuple[bytes, ...] = (),
) -> Command[Any]:
    """ACKJOB, NACK...: routed by ID, with a claim after each ID that has one, and
    ``tail`` after the IDs (NACK's DELAY)."""
    ids, groups = _claimed(jobs, claim, name.decode())
    args = (name, *(a for group in groups for a in group))
    claims = len(args) != len(ids) + 1
    return Command(
        (*args, *tail), decode, retry, route=ids, route_args=groups if claims else (), tail=tail
    )


def _decode_id(reply: bytes) -> str:
    return reply.decode()


def _ok(reply: Any) -> None:
    return None


def _optional(parse: Callable[[Any], T]) -> Callable[[Any], T | None]:
    """A reply decoder: ``parse`` of the reply, ``None`` for a nil reply (SHOW, GETs)."""
    return lambda reply: None if reply is None else parse(reply)


def _each(parse: Callable[[Any], T]) -> Callable[[list[Any]], list[T]]:
    """A reply decoder: ``parse`` of each entry of an array reply (LISTs)."""
    return lambda reply: [parse(entry) for entry in reply]


# ---------------------------------------------------------------------- jobs


def _add_options(
    timeout: float | None,
    replicate: int | None,
    delay: int | None,
    retry: int | None,
    ttl: int | None,
    maxlen: int | None,
    priority: int | None,
    async_: bool,
    backoff: BackoffSpec | None,
    group: Arg | None = None,
) -> tuple[tuple[bytes, ...], float | None]:
    """ADDJOB's arguments after the body, and how long the server may block on it
    (``timeout`` 0 is no limit, as ADDJOB's 0, like ``None``)."""
    if timeout == 0:
        timeout = None
    args = [b"0" if timeout is None else _ms(timeout, "timeout")]
    args += _job_options(replicate, delay, retry, ttl, maxlen, priority, async_)
    if backoff is not None:
        args += Backoff.of(backoff).args
    if group is not None:
        args += [b"GROUP", to_bytes(group)]
    block = None if async_ or replicate == 1 else (math.inf if timeout is None else timeout)
    return tuple(args), block


def _job_options(
    replicate: int | None,
    delay: int | None,
    retry: int | None,
    ttl: int | None,
    maxlen: int | None,
    priority: int | None,
    async_: bool,
) -> list[bytes]:
    """The ADDJOB options a job and a schedule (CRON SET) share, those given only."""
    args: list[bytes] = []
    for keyword, value in (
        (b"REPLICATE", replicate),
        (b"DELAY", delay),
        (b"RETRY", retry),
        (b"TTL", ttl),
        (b"MAXLEN", maxlen),
        (b"PRIORITY", priority),
    ):
        if value is not None:
            args += [keyword, b"%d" % value]
    if async_:
        args.append(b"ASYNC")
    return args


def new_dedup_key() -> bytes:
    """A fresh DEDUP key: 32 random hexadecimal digits (uuid4)."""
    return uuid.uuid4().hex.encode()


def _dedup_key(dedup: Arg | bool | None) -> bytes | None:
    if dedup is None or dedup is False:
        return None
    return new_dedup_key() if dedup is True else to_bytes(dedup)


#: ADDJOB's ``backoff``: a :class:`Backoff`, ``("fixed", s)``, ``("exponential", base,
#: cap)``, or the same as text (``"exponential:1:60"``).
BackoffSpec = Backoff | tuple[Any, ...] | str

#: ADDJOB's ``after``: one job (its ID, or the Job) or several.
After = JobRef | Iterable[JobRef] | None


def _after_ids(after: After) -> tuple[str, ...]:
    """The IDs of ``after``, checked against the server's bound on distinct ones."""
    if after is None:
        return ()
    ids = (_job_id(after),) if isinstance(after, str | Job) else tuple(map(_job_id, after))
    if len(set(ids)) > MAX_AFTER:
        raise ValueError(f"at most {MAX_AFTER} distinct AFTER dependencies")
    return ids


def _check_if_gone(if_gone: str | None) -> None:
    if if_gone is not None and if_gone not in IF_GONE:
        raise ValueError("if_gone must be 'fail' or 'release'")


def _dependency_args(after: Sequence[str], if_gone: str | None) -> tuple[bytes, ...]:
    """``AFTER id ... [IFGONE fail|release]``; nothing without dependencies."""
    if not after:
        return ()
    args: list[bytes] = []
    for job_id in after:
        args += [b"AFTER", to_bytes(job_id)]
    if if_gone is not None:
        args += [b"IFGONE", if_gone.encode()]
    return tuple(args)


def _dependencies(after: After, if_gone: str | None) -> tuple[bytes, ...]:
    """add_job's and add_jobs' ``after`` and ``if_gone``, checked and encoded."""
    _check_if_gone(if_gone)
    ids = _after_ids(after)
    if if_gone is not None and not ids:
        raise ValueError("if_gone needs after (IFGONE needs AFTER)")
    return _dependency_args(ids, if_gone)


def _add_job_command(
    queue: bytes,
    body: Arg,
    options: tuple[bytes, ...],
    block: float | None,
    key: bytes | None,
    dependencies: tuple[bytes, ...] = (),
) -> Command[str]:
    args = (b"ADDJOB", queue, to_bytes(body), *options, *dependencies)
    if key is None:
        return Command(args, _decode_id, Retry.NEVER, block=block)
    return Command((*args, b"DEDUP", key), _decode_id, Retry.ALWAYS, block=block, sticky=True)


def add_job(
    queue: Arg,
    body: Arg,
    *,
    timeout: float | None = DEFAULT_ADD_TIMEOUT,
    replicate: int | None = None,
    delay: int | None = None,
    retry: int | None = None,
    ttl: int | None = None,
    maxlen: int | None = None,
    async_: bool = False,
    priority: int | None = None,
    dedup: Arg | bool | None = None,
    after: After = None,
    if_gone: str | None = None,
    backoff: BackoffSpec | None = None,
    group: Arg | None = None,
) -> Command[str]:
    """ADDJOB: add a job to ``queue``; return its ID.

    ``timeout`` (seconds, ``None`` or 0: no limit, as ADDJOB's 0) bounds the wait for
    synchronous replication to ``replicate`` nodes (default: min(3, cluster size)).
    ``delay`` seconds before the job is queued; ``retry`` seconds without an ACK
    before it is queued again (0: at most once); ``ttl`` seconds before it is
    deleted whatever happened; ``maxlen``: refuse when the queue already has that
    many jobs; ``async_``: reply at once and replicate in the background.

    disquette only (plain Disque refuses them): ``priority`` 0-9, higher served
    first; ``dedup``: a key (1-256 bytes) -- a node holding a job of the queue
    with that key replies its ID instead of adding another -- or ``True`` for a
    random key of the client's own. With a key, an ADDJOB whose reply was lost
    is sent again (to the same node first) instead of raising
    :class:`ReplyLostError`, and one refused with ``-TRYAGAIN`` after a pause.
    ``after``: a job ID (or a :class:`Job`) or several (at most 256 distinct):
    the job is stored and replicated at once but only queued once every one
    of them is acknowledged, anywhere in the cluster (``state`` ``"waiting"``
    until then). ``if_gone``: what a dependency that expires or is deleted
    without an ACK does to it, ``"fail"`` (the server's default: the job is
    acknowledged, or dead-lettered by its queue's policy) or ``"release"``
    (queued anyway). ``backoff``: postpone every requeue of the job (a NACK,
    its retry time passing), see :class:`Backoff`; a :class:`Backoff`,
    ``("fixed", seconds)``, ``("exponential", base, cap)`` or that as text
    (``"exponential:1:60"``). ``group``: the job's fair-share group (1-256 bytes, a
    tenant's name): GETJOB serves the groups of a queue in turn (docs/queues.md).

    Raises :class:`NoReplicationError`, :class:`MaxLenError`,
    :class:`PausedError`, :class:`OutOfMemoryError`... Without a DEDUP key the
    client never sends an ADDJOB twice by itself: a lost reply raises
    :class:`ReplyLostError`.
    """
    dependencies = _dependencies(after, if_gone)
    options, block = _add_options(
        timeout, replicate, delay, retry, ttl, maxlen, priority, async_, backoff, group
    )
    return _add_job_command(to_bytes(queue), body, options, block, _dedup_key(dedup), dependencies)


#: add_jobs' ``dedup``: True, a function of the body, or an iterable of keys.
DedupKeys = bool | Callable[[Any], Arg] | Iterable[Arg] | None


def _key_function(dedup: DedupKeys) -> Callable[[Arg], bytes | None]:
    """The DEDUP key of each body, as :func:`add_jobs` describes."""
    if dedup is None or isinstance(dedup, bool):
        return lambda body: _dedup_key(dedup)
    if isinstance(dedup, str | bytes):
        raise TypeError("add_jobs needs one DEDUP key per body: True, a function or an iterable")
    if callable(dedup):
        key_of = dedup
        return lambda body: to_bytes(key_of(body))
    keys = iter(dedup)

    def next_key(body: Arg) -> bytes:
        try:
            return to_bytes(next(keys))
        except StopIteration:
            raise ValueError("add_jobs: fewer DEDUP keys than bodies") from None

    return next_key


def add_jobs(
    queue: Arg,
    bodies: Iterable[Arg],
    *,
    window: int = DEFAULT_WINDOW,
    timeout: float | None = DEFAULT_ADD_TIMEOUT,
    replicate: int | None = None,
    delay: int | None = None,
    retry: int | None = None,
    ttl: int | None = None,
    maxlen: int | None = None,
    async_: bool = False,
    priority: int | None = None,
    dedup: DedupKeys = None,
    after: After = None,
    if_gone: str | None = None,
    backoff: BackoffSpec | None = None,
    group: Arg | None = None,
) -> Pipelined[str]:
    """ADDJOB for each body (read lazily), pipelined with at most ``window`` in flight.

    Returns the job IDs in order. On the first error nothing more is sent and
    :class:`PipelineError` is raised; its ``results`` line up with the bodies
    that were sent (an ID, or the exception for that body), so the caller knows
    exactly what was added and can resume from ``bodies[len(results):]``.
    Options are those of :func:`add_job`, applied to every job, except
    ``dedup``, one key per body: ``True`` (a random key each), a function of the
    body returning its key, or an iterable of keys in the order of the bodies.
    With keys, the ADDJOBs in flight when a connection breaks (or refused with
    ``-TRYAGAIN``) are sent again, as :func:`add_job` does, before the others.
    ``after`` and ``if_gone``: every job waits for the same jobs; ``group``: every job
    is of that group.
    """
    deps = _dependencies(after, if_gone)
    options, block = _add_options(
        timeout, replicate, delay, retry, ttl, maxlen, priority, async_, backoff, group
    )
    q, key_of = to_bytes(queue), _key_function(dedup)
    commands = (_add_job_command(q, body, options, block, key_of(body), deps) for body in bodies)
    return Pipelined(commands, window, stop_on_error=True)


#: A step of a chain or a parent of a fan-in: a body (for the call's queue) or (queue, body).
Step = Arg | tuple[Arg, Arg]


def _step(queue: Arg, step: Step) -> tuple[bytes, Arg]:
    if isinstance(step, tuple):
        other, body = step
        return to_bytes(other), body
    return to_bytes(queue), step


def _failed_midway(added: list[Any], error: DisqueError) -> DisqueError:
    """What a compound call raises: nothing added yet, the error as is (when nothing
    was sent: no node reachable); else a :class:`PipelineError` of what was added,
    then the error."""
    if not added and isinstance(error, ConnectionFailedError):
        return error
    return PipelineError([*added, error])


def add_chain(
    queue: Arg,
    bodies: Iterable[Step],
    *,
    timeout: float | None = DEFAULT_ADD_TIMEOUT,
    replicate: int | None = None,
    delay: int | None = None,
    retry: int | None = None,
    ttl: int | None = None,
    maxlen: int | None = None,
    async_: bool = False,
    priority: int | None = None,
    dedup: DedupKeys = None,
    after: After = None,
    if_gone: str | None = None,
    backoff: BackoffSpec | None = None,
) -> Compound[list[str]]:
    """A chain of jobs (disquette only): each ADDJOB ``AFTER`` the previous job; the IDs.

    The first job is queued at once (or once ``after`` is acknowledged), each
    next one once the previous one is acknowledged. An item of ``bodies`` is a
    body, added to ``queue``, or a ``(queue, body)`` pair for a step in another
    queue. The ADDJOBs go one at a time (each needs the previous ID), each with
    the failover and retry rules of :func:`add_job`; the options apply to every
    job, ``dedup`` as :func:`add_jobs` takes it (a key per body), ``if_gone``
    to every job that waits. ``bodies`` is read (and the keys made) before
    anything is sent.

    On a failure nothing more is added and :class:`PipelineError` is raised; its
    ``results`` are the IDs added, then the exception (the chain can be resumed
    with ``after=`` the last ID). Only a :class:`ConnectionFailedError` before
    anything was added is raised as is.
    """
    _check_if_gone(if_gone)
    first = _after_ids(after)
    options, block = _add_options(
        timeout, replicate, delay, retry, ttl, maxlen, priority, async_, backoff
    )
    key_of = _key_function(dedup)
    steps = [(q, body, key_of(body)) for q, body in (_step(queue, item) for item in bodies)]

    def plan(ctx: Context) -> Plan[list[str]]:
        added: list[str] = []
        previous = first
        for q, body, key in steps:
            deps = _dependency_args(previous, if_gone)
            command = _add_job_command(q, body, options, block, key, deps)
            try:
                job_id = yield from command.plan(ctx)
            except DisqueError as exc:
                raise _failed_midway(added, exc) from exc
            added.append(job_id)
            previous = (job_id,)
        return added

    return Compound(plan)


def add_fan_in(
    queue: Arg,
    bodies: Iterable[Step],
    then: tuple[Arg, Arg],
    *,
    window: int = DEFAULT_WINDOW,
    timeout: float | None = DEFAULT_ADD_TIMEOUT,
    replicate: int | None = None,
    delay: int | None = None,
    retry: int | None = None,
    ttl: int | None = None,
    maxlen: int | None = None,
    async_: bool = False,
    priority: int | None = None,
    dedup: DedupKeys = None,
    if_gone: str | None = None,
    backoff: BackoffSpec | None = None,
) -> Compound[FanIn]:
    """A fan-in (disquette only): the parents, then one job ``AFTER`` all of them.

    The parents (``bodies``: a body for ``queue``, or a ``(queue, body)`` pair;
    1 to 256 of them) are added pipelined, as :func:`add_jobs` does, and queued
    at once; ``then``, a ``(queue, body)`` pair, is added last, and queued once
    every parent is acknowledged. Returns a :class:`FanIn`: ``parents`` (the
    IDs, in order) and ``then`` (its ID). The options apply to every job;
    ``dedup`` as :func:`add_jobs` takes it, the parents' keys first, then
    ``then``'s; ``if_gone`` to ``then``.

    On a failure nothing more is added and :class:`PipelineError` is raised:
    its ``results`` line up with the jobs sent, the parents then ``then`` (an
    ID, or the exception).
    """
    _check_if_gone(if_gone)
    steps = [_step(queue, item) for item in bodies]
    if not 0 < len(steps) <= MAX_AFTER:
        raise ValueError(f"a fan-in has 1 to {MAX_AFTER} parents")
    options, block = _add_options(
        timeout, replicate, delay, retry, ttl, maxlen, priority, async_, backoff
    )
    key_of = _key_function(dedup)
    parents = [_add_job_command(q, body, options, block, key_of(body)) for q, body in steps]
    then_queue, then_body = then
    then_key = key_of(then_body)

    def plan(ctx: Context) -> Plan[FanIn]:
        ids = yield from Pipelined(parents, window, stop_on_error=True).plan(ctx)
        deps = _dependency_args(ids, if_gone)
        last = _add_job_command(to_bytes(then_queue), then_body, options, block, then_key, deps)
        try:
            then_id = yield from last.plan(ctx)
        except DisqueError as exc:
            raise _failed_midway(ids, exc) from exc
        return FanIn(ids, then_id)

    return Compound(plan)


def get_jobs(
    *queues: Arg,
    count: int = 1,
    timeout: float | None = None,
    nohang: bool = False,
    with_counters: bool = False,
    with_claim: bool = False,
) -> Command[list[Job]]:
    """GETJOB: fetch up to ``count`` jobs from the first non-empty of ``queues``.

    Blocks until a job arrives or ``timeout`` seconds pass (``None``: no limit),
    then returns the jobs (at most one once it had to wait); an empty list on
    timeout. ``nohang`` returns at once. ``with_counters`` fills each job's
    ``nacks`` and ``additional_deliveries``. ``with_claim`` (disquette only,
    WITHCLAIM) fills each job's ``claim``, the number of this delivery, which
    ``ack``, ``nack`` and ``working`` send when given the job. With consumer
    affinity enabled the command may go to the node producing most of the jobs
    received.
    """
    if not queues:
        raise ValueError("get_jobs needs at least one queue")
    args = [b"GETJOB"]
    if nohang:
        args.append(b"NOHANG")
    if timeout is not None:
        args += [b"TIMEOUT", _ms(timeout, "timeout")]
    if count != 1:
        args += [b"COUNT", b"%d" % count]
    if with_counters:
        args.append(b"WITHCOUNTERS")
    if with_claim:
        args.append(b"WITHCLAIM")
    args.append(b"FROM")
    args += [to_bytes(q) for q in queues]
    block = None if nohang else (math.inf if timeout is None else timeout)
    return Command(
        tuple(args), jobs_from_reply, Retry.ON_REFUSAL, block=block, fetch=True, jobs=True
    )


def result_bytes(result: Arg) -> bytes:
    """ACKJOB's RESULT: ``bytes`` or ``str`` (UTF-8) of at most 65,536 bytes."""
    if not isinstance(result, bytes | str):
        raise TypeError(f"a job's result must be bytes or str, not {type(result).__name__}")
    value = to_bytes(result)
    if len(value) > MAX_RESULT:
        raise ValueError(f"a job's result must be at most {MAX_RESULT} bytes, not {len(value)}")
    return value


def ack(*jobs: JobRef, claim: int | None = None, result: Arg | None = None) -> Command[int]:
    """ACKJOB: acknowledge jobs as processed; return how many were known and not yet acked.

    ``jobs``: IDs, or :class:`Job` objects. A job fetched ``with_claim`` sends
    its claim (``id CLAIM n``, disquette only), and ``claim`` gives one for a
    single ID: a node that knows a later delivery of the job refuses the whole
    command with :class:`StaleClaimError`. Each ID goes to the node that
    created the job when it is known and up (one ACKJOB per node).

    ``result`` (disquette only, with one job): ``bytes`` or ``str`` of at most
    65,536 bytes that :func:`wait` returns to whoever waits for the job (the
    cluster keeps it for the server's ``result-ttl``).
    """
    if result is None:
        return _id_command(b"ACKJOB", jobs, claim, int, Retry.ALWAYS)
    if len(jobs) != 1:
        raise ValueError("ack: result= goes with one job")
    value = result_bytes(result)
    ids, (group,) = _claimed(jobs, claim, "ACKJOB")
    return Command((b"ACKJOB", *group, b"RESULT", value), int, Retry.ALWAYS, route=ids)


def fast_ack(*job_ids: str) -> Command[int]:
    """FASTACK: delete jobs cluster-wide on a best-effort basis; return how many were deleted."""
    return Command((b"FASTACK", *_ids(job_ids)), int, Retry.ALWAYS, route=job_ids)


def nack(*jobs: JobRef, claim: int | None = None, delay: float | None = None) -> Command[int]:
    """NACK: put jobs back in their queue at once, counting a negative acknowledge each.

    Returns how many were queued again (or will be, after a delay). Claims as
    :func:`ack` takes them. ``delay`` (disquette only): seconds (whole; a
    fraction is rounded up) before the jobs are queued again; a delay (0: at
    once) wins over the jobs' backoff.
    """
    tail = () if delay is None else (b"DELAY", _whole_seconds(delay, "delay"))
    return _id_command(b"NACK", jobs, claim, int, Retry.ON_REFUSAL, tail)


def cancel(*jobs: JobRef) -> Command[int]:
    """CANCEL (disquette only): cancel jobs; return how many the nodes asked held.

    A cancelled job leaves its queue everywhere and is never delivered again; a
    job being worked on is refused its next WORKING with
    :class:`JobCancelledError` (the worker then stops treating it); whoever
    waits for it (:func:`wait`) gets ``"cancelled"``. A job already
    acknowledged stays so (it counts 0). Each ID goes to the node that created
    the job when it is known and up.
    """
    return _id_command(b"CANCEL", jobs, None, int, Retry.ALWAYS)


def wait(job: JobRef, timeout: float | None = None) -> Compound[JobOutcome | None]:
    """WAITJOB (disquette only): wait until the job is acknowledged, anywhere.

    Returns a :class:`JobOutcome`: ``"acked"`` with the result its ACKJOB gave
    (or ``None``), ``"cancelled"``, ``"gone"`` (expired or deleted without an
    acknowledgement) or ``"unknown"`` (no node knows the job); ``None`` when
    ``timeout`` seconds pass first (``None``: no limit). Any node can answer:
    it goes to the node that created the job when possible, and when the
    connection breaks while waiting, WAITJOB is sent again to another node with
    the time left.
    """
    job_id = to_bytes(_job_id(job))
    route = (_job_id(job),)
    if timeout is not None:
        _ms(timeout, "timeout")

    def plan(ctx: Context) -> Plan[JobOutcome | None]:
        clock = ctx.topology.clock
        deadline = None if timeout is None else clock() + timeout
        pause = TRYAGAIN_PAUSES[0]
        while True:
            args: tuple[bytes, ...] = (b"WAITJOB", job_id)
            left = math.inf
            if deadline is not None:
                left = deadline - clock()
                if left <= 0:
                    return None
                args += (b"TIMEOUT", _ms(left, "timeout"))
            command = Command(
                args, JobOutcome.from_reply, Retry.ON_REFUSAL, route=route, block=left
            )
            try:
                return (yield from command.plan(ctx))
            except ReplyLostError:
                # (the node is marked failed: the next try goes elsewhere, after a
                # pause that keeps a node dropping every connection from a busy loop)
                yield Sleep(pause)
                pause = min(2 * pause, TRYAGAIN_PAUSES[1])

    return Compound(plan)


def waited_by_node(
    ctx: Context, ids: Sequence[str], timeout: float | None, window: int
) -> Plan[dict[str, JobOutcome | None]]:
    """The outcomes of ``ids`` that their nodes gave: WAITJOB (at most ``timeout``
    seconds each) pipelined, ``window`` in flight, to the node that created each job
    (its outcome is there when any node knows it), those of an unknown or failed node
    to any node. A job whose node failed or answered an error is left out."""
    args: tuple[bytes, ...] = ()
    if timeout is not None:
        args = (b"TIMEOUT", _ms(timeout, "timeout"))
    block = math.inf if timeout is None else timeout
    outcomes: dict[str, JobOutcome | None] = {}
    for address, group in ctx.topology.group_by_node(ids).items():
        where = ctx if address is None else dataclasses.replace(ctx, pinned=address)
        waits = [
            Command((b"WAITJOB", to_bytes(i), *args), JobOutcome.from_reply, Retry.ALWAYS,
                    block=block)
            for i in group
        ]  # fmt: skip
        try:
            got = yield from Pipelined(waits, window, raise_on_error=False).plan(where)
        except (DisqueError, OSError):
            continue
        for job_id, outcome in zip(group, got, strict=True):
            if not isinstance(outcome, Exception):
                outcomes[job_id] = outcome
    return outcomes


def wait_many(
    jobs: Sequence[JobRef], timeout: float | None = None, window: int = 256
) -> Compound[list[JobOutcome | None]]:
    """WAITJOB for many jobs (:func:`waited_by_node`); a job whose node did not answer
    is waited for alone (:func:`wait`). The outcomes in the jobs' order, ``None`` for
    one not finished within ``timeout`` seconds: each WAITJOB waits at most that long,
    so a workflow's settled parents come back in one round trip per window (the case
    it is made for).
    """
    ids = [_job_id(job) for job in jobs]
    if timeout is not None:
        _ms(timeout, "timeout")

    def plan(ctx: Context) -> Plan[list[JobOutcome | None]]:
        outcomes = yield from waited_by_node(ctx, ids, timeout, window)
        found: list[JobOutcome | None] = []
        for job_id in ids:
            if job_id not in outcomes:
                outcomes[job_id] = yield from wait(job_id, timeout).plan(ctx)
            found.append(outcomes[job_id])
        return found

    return Compound(plan)


def working(job: JobRef, text: Arg | None = None, *, claim: int | None = None) -> Command[int]:
    """WORKING: postpone the job's next delivery; return its retry time in seconds.

    ``text`` (disquette only): also append it to the job's progress log (1 to
    1024 bytes, 64 entries per job), which every holder of the job keeps
    (:func:`joblog`, ``show(id).progress``). A job fetched ``with_claim`` sends
    its claim, or ``claim`` gives one. A WORKING with a text is not sent again
    after a lost reply (it could log the text twice).

    Raises :class:`NoJobError` if the node does not know the job,
    :class:`TooLateError` once half of its TTL has elapsed,
    :class:`StaleClaimError` for a stale claim (nothing done) and
    :class:`LogFullError` when the log is full.
    """
    ids, (args,) = _claimed((job,), claim, "WORKING")
    if text is None:
        return Command((b"WORKING", *args), int, Retry.ALWAYS, route=ids)
    return Command((b"WORKING", *args, to_bytes(text)), int, Retry.ON_REFUSAL, route=ids)


def joblog(job_id: JobRef) -> Command[list[ProgressEntry]]:
    """JOBLOG (disquette only): the job's progress log, oldest entry first.

    Each :class:`ProgressEntry` has ``time`` (seconds since the epoch), ``node``
    (the ID of the node that recorded it) and ``text``; an empty list when
    nothing was logged. Raises :class:`NoJobError` if the node does not know
    the job. Asked of the node that created the job when possible.
    """
    job_id = _job_id(job_id)
    return Command((b"JOBLOG", to_bytes(job_id)), progress_from_reply, route=(job_id,))


def enqueue(*job_ids: str) -> Command[int]:
    """ENQUEUE: queue active jobs again on the connected node; return how many were queued."""
    return Command((b"ENQUEUE", *_ids(job_ids)), int, Retry.ON_REFUSAL)


def dequeue(*job_ids: str) -> Command[int]:
    """DEQUEUE: take queued jobs out of their queue; return how many were removed."""
    return Command((b"DEQUEUE", *_ids(job_ids)), int, Retry.ON_REFUSAL)


def del_job(*job_ids: str) -> Command[int]:
    """DELJOB: delete jobs from the connected node only; return how many were deleted."""
    return Command((b"DELJOB", *_ids(job_ids)), int, Retry.ALWAYS)


_show_reply = _optional(JobInfo.from_reply)


def show(job_id: str) -> Command[JobInfo | None]:
    """SHOW: describe a job (on the node that created it when possible); ``None`` if unknown."""
    return Command((b"SHOW", to_bytes(job_id)), _show_reply, Retry.ALWAYS, route=(job_id,))


# ---------------------------------------------------------------------- queues


def qlen(queue: Arg) -> Command[int]:
    """QLEN: the number of jobs queued in ``queue`` on the connected node."""
    return Command((b"QLEN", to_bytes(queue)), int)


_qstat_reply = _optional(QueueStat.from_reply)


def qstat(queue: Arg) -> Command[QueueStat | None]:
    """QSTAT: a queue's statistics, ``None`` if the node has no such queue."""
    return Command((b"QSTAT", to_bytes(queue)), _qstat_reply)


def qpeek(queue: Arg, count: int) -> Command[list[Job]]:
    """QPEEK: up to ``count`` queued jobs without taking them (newest first if negative)."""
    return Command((b"QPEEK", to_bytes(queue), b"%d" % count), jobs_from_reply, jobs=True)


def _scan_page_args(
    command: bytes, cursor: int, count: int | None, busyloop: bool, filters: list[bytes]
) -> tuple[bytes, ...]:
    args = [command, b"%d" % cursor]
    if count is not None:
        args += [b"COUNT", b"%d" % count]
    if busyloop:
        args.append(b"BUSYLOOP")
    return (*args, *filters)


def _qscan_reply(reply: list[Any]) -> tuple[int, list[str]]:
    return int(reply[0]), [from_bytes(q) for q in reply[1]]


def qscan(
    *,
    count: int | None = None,
    busyloop: bool = False,
    minlen: int | None = None,
    maxlen: int | None = None,
    import_rate: int | None = None,
) -> Scan[str]:
    """QSCAN: iterate over the queue names of the connected node (the cursor is handled).

    ``minlen``/``maxlen`` filter on length, ``import_rate`` on federation import
    rate; ``count`` is a hint for the page size. A name may come twice.
    """
    filters: list[bytes] = []
    for keyword, value in ((b"MINLEN", minlen), (b"MAXLEN", maxlen), (b"IMPORTRATE", import_rate)):
        if value is not None:
            filters += [keyword, b"%d" % value]

    def page(cursor: int) -> Command[tuple[int, list[str]]]:
        return Command(_scan_page_args(b"QSCAN", cursor, count, busyloop, filters), _qscan_reply)

    return Scan(page)


def _jscan_ids(reply: list[Any]) -> tuple[int, list[str]]:
    return int(reply[0]), [i.decode() for i in reply[1]]


def _jscan_all(reply: list[Any]) -> tuple[int, list[JobInfo]]:
    return int(reply[0]), [JobInfo.from_reply(item) for item in reply[1]]


def jscan(
    *,
    count: int | None = None,
    busyloop: bool = False,
    queue: Arg | None = None,
    states: Iterable[str] = (),
    reply: str = "id",
    priority: int | None = None,
) -> Scan[Any]:
    """JSCAN: iterate over the jobs of the connected node (the cursor is handled).

    Filters: ``queue``, ``states`` (any of wait-repl, active, queued, acked,
    and, disquette only, waiting) and, disquette only, ``priority``. Yields
    job IDs, or :class:`JobInfo` objects with ``reply="all"``.
    """
    filters: list[bytes] = []
    if queue is not None:
        filters += [b"QUEUE", to_bytes(queue)]
    for state in states:
        if state.lower() not in JOB_STATES:
            raise ValueError(f"unknown job state {state!r}")
        filters += [b"STATE", state.encode()]
    if priority is not None:
        filters += [b"PRIORITY", b"%d" % priority]
    if reply not in ("id", "all"):
        raise ValueError("reply must be 'id' or 'all'")
    filters += [b"REPLY", reply.encode()]
    decode = _jscan_all if reply == "all" else _jscan_ids

    def page(cursor: int) -> Command[tuple[int, list[Any]]]:
        return Command(_scan_page_args(b"JSCAN", cursor, count, busyloop, filters), decode)

    return Scan(page)


def pause(queue: Arg, *options: str) -> Command[str]:
    """PAUSE: set or read a queue's pause state; return it (none, in, out or all).

    Options: ``in``, ``out``, ``all``, ``none`` change the state, ``state`` only
    reads it, ``bcast`` also sends the result to every node of the cluster.
    """
    if not options:
        raise ValueError("pause needs at least one option (in, out, all, none, state, bcast)")
    for option in options:
        if option.lower() not in PAUSE_OPTIONS:
            raise ValueError(f"unknown pause option {option!r}")
    args = (b"PAUSE", to_bytes(queue), *(o.encode() for o in options))
    return Command(args, _decode_id)


# ---------------------------------------------------------------------- policies


def qpolicy_set(
    name: str,
    pattern: Arg,
    *,
    replicate: int | None = None,
    retry: int | None = None,
    ttl: int | None = None,
    delay: int | None = None,
    maxlen: int | None = None,
    priority: int | None = None,
    deadletter: Arg | None = None,
    max_nacks: int | None = None,
    max_deliveries: int | None = None,
    backoff: str | None = None,
    backoff_base: int | None = None,
    backoff_cap: int | None = None,
    overflow: str | None = None,
    rate: int | None = None,
    concurrency: int | None = None,
) -> Command[None]:
    """QPOLICY SET (disquette only): define or replace the policy ``name``.

    It applies to the queues matching the glob ``pattern`` (the most specific
    pattern wins), cluster-wide. ``replicate``, ``retry``, ``ttl``, ``delay``,
    ``maxlen`` and ``priority`` are ADDJOB's defaults for those queues. A job
    NACKed more than ``max_nacks`` times, or delivered ``max_deliveries`` times
    (nacks + additional deliveries), is not queued again: it is added to the
    ``deadletter`` queue (or dropped without one) and acknowledged.
    ``backoff`` (``"fixed"`` or ``"exponential"``), ``backoff_base`` and
    ``backoff_cap`` (seconds; the server's defaults 1 and 3600): the jobs'
    retry backoff when their ADDJOB gives none (see :class:`Backoff`).
    ``overflow``: what a full queue (its ``maxlen``) does with one more job,
    ``"refuse"`` it (-MAXLEN, Disque's way) or ``"drop-oldest"``.
    ``rate``: at most that many jobs of each matching queue handed to
    consumers per second, ``concurrency``: at most that many handed out and
    not yet acknowledged (NACKed, requeued, deleted); both count the whole
    cluster, approximately (see docs/queues.md), and a queue at its limit
    looks empty to GETJOB (a blocking one waits for room).
    """
    if backoff is not None and backoff not in ("fixed", "exponential"):
        raise ValueError("backoff must be 'fixed' or 'exponential'")
    if overflow is not None and overflow not in OVERFLOW:
        raise ValueError("overflow must be 'refuse' or 'drop-oldest'")
    options: list[bytes] = []
    for option, value in (
        ("replicate", replicate),
        ("retry", retry),
        ("ttl", ttl),
        ("delay", delay),
        ("maxlen", maxlen),
        ("priority", priority),
        ("deadletter", deadletter),
        ("max-nacks", max_nacks),
        ("max-deliveries", max_deliveries),
        ("backoff", backoff),
        ("backoff-base", backoff_base),
        ("backoff-cap", backoff_cap),
        ("overflow", overflow),
        ("rate", rate),
        ("concurrency", concurrency),
    ):
        if value is not None:
            options += [option.encode(), to_bytes(value)]
    args = (b"QPOLICY", b"SET", to_bytes(name), to_bytes(pattern), *options)
    return Command(args, _ok)


def qpolicy_del(name: str) -> Command[bool]:
    """QPOLICY DEL (disquette only): delete a policy; True if it existed."""
    return Command((b"QPOLICY", b"DEL", to_bytes(name)), bool)


_policies_reply = _each(Policy.from_reply)
_policy_reply = _optional(Policy.from_reply)


def qpolicy_list() -> Command[list[Policy]]:
    """QPOLICY LIST (disquette only): every policy of the cluster."""
    return Command((b"QPOLICY", b"LIST"), _policies_reply)


def qpolicy_get(name: str) -> Command[Policy | None]:
    """QPOLICY GET (disquette only): the policy ``name``, or ``None``."""
    return Command((b"QPOLICY", b"GET", to_bytes(name)), _policy_reply)


def qpolicy_match(queue: Arg) -> Command[Policy | None]:
    """QPOLICY MATCH (disquette only): the policy applied to ``queue``, or ``None``."""
    return Command((b"QPOLICY", b"MATCH", to_bytes(queue)), _policy_reply)


# ---------------------------------------------------------------------- recurring jobs


def cron_set(
    name: Arg,
    queue: Arg,
    body: Arg,
    *,
    every: int | None = None,
    schedule: str | None = None,
    replicate: int | None = None,
    retry: int | None = None,
    ttl: int | None = None,
    delay: int | None = None,
    maxlen: int | None = None,
    priority: int | None = None,
    async_: bool = False,
) -> Command[None]:
    """CRON SET (disquette only): define or replace the schedule ``name``, cluster-wide.

    On every tick, one job with ``body`` is added to ``queue`` (by one node of
    the cluster, whichever is up). Give exactly one of ``every`` (whole
    seconds: the ticks are the multiples of ``every`` since the Unix epoch)
    and ``schedule`` (a cron expression, five fields or six with seconds
    first, in UTC: ``"0 9 * * MON"``). The other options are ADDJOB's, for
    each job (its queue's policy fills in those not given). The first tick
    that fires is the first at or after the write; a name has at most 200
    bytes, a body 4096. Sent again after a lost reply: a schedule set twice
    is one schedule (a tick due between the two writes may be skipped).
    """
    if (every is None) == (schedule is None):
        raise ValueError("cron_set takes one of every= (seconds) and schedule= (an expression)")
    if schedule is not None:
        tick = (b"SCHEDULE", to_bytes(schedule))
    elif type(every) is int and every >= 1:
        tick = (b"EVERY", b"%d" % every)
    else:
        raise ValueError(f"every must be a whole number of seconds >= 1, not {every!r}")
    options = _job_options(replicate, delay, retry, ttl, maxlen, priority, async_)
    args = (b"CRON", b"SET", to_bytes(name), to_bytes(queue), to_bytes(body), *tick, *options)
    return Command(args, _ok)


def cron_del(name: Arg) -> Command[bool]:
    """CRON DEL (disquette only): delete a schedule, cluster-wide; True if it existed."""
    return Command((b"CRON", b"DEL", to_bytes(name)), bool)


_schedules_reply = _each(CronSchedule.from_reply)
_schedule_reply = _optional(CronSchedule.from_reply)


def cron_list() -> Command[list[CronSchedule]]:
    """CRON LIST (disquette only): every schedule of the cluster, sorted by name."""
    return Command((b"CRON", b"LIST"), _schedules_reply)


def cron_get(name: Arg) -> Command[CronSchedule | None]:
    """CRON GET (disquette only): the schedule ``name``, or ``None``."""
    return Command((b"CRON", b"GET", to_bytes(name)), _schedule_reply)


# ---------------------------------------------------------------------- server


def info(section: str | None = None) -> Command[dict[str, Any]]:
    """INFO: the node's information as one flat dict (numbers converted, cmdstat_* as dicts)."""
    args = (b"INFO",) if section is None else (b"INFO", section.encode())
    return Command(args, parse_info)


def hello() -> Command[Hello]:
    """HELLO: the node's ID and every node it knows, with its priority (1 is best)."""
    return Command((b"HELLO",), Hello.from_reply)


def ping(message: Arg | None = None) -> Command[bytes]:
    """PING: ``b"PONG"``, or ``message`` echoed back."""
    args = (b"PING",) if message is None else (b"PING", to_bytes(message))
    return Command(args)


def cluster_meet(host: str, port: int) -> Command[None]:
    """CLUSTER MEET: ask the node to join the node at ``host:port`` (its client port)."""
    return Command((b"CLUSTER", b"MEET", host.encode(), b"%d" % port), _ok)


def _cluster_nodes_reply(reply: bytes) -> list[ClusterNode]:
    return ClusterNode.parse_nodes(reply)


def cluster_nodes() -> Command[list[ClusterNode]]:
    """CLUSTER NODES: the node table as the connected node sees it."""
    return Command((b"CLUSTER", b"NODES"), _cluster_nodes_reply)


def cluster_myid() -> Command[str]:
    """CLUSTER MYID: the connected node's 40-character ID."""
    return Command((b"CLUSTER", b"MYID"), _decode_id)


def cluster_info() -> Command[dict[str, Any]]:
    """CLUSTER INFO: state, known and reachable nodes, size, message counters."""
    return Command((b"CLUSTER", b"INFO"), parse_info)


def cluster_forget(node_id: str) -> Command[None]:
    """CLUSTER FORGET: remove a node from the connected node's table (blacklisted 60 s)."""
    return Command((b"CLUSTER", b"FORGET", node_id.encode()), _ok, Retry.ON_REFUSAL)


def cluster_reset(hard: bool = False) -> Command[None]:
    """CLUSTER RESET: forget every other node (``hard``: also a new ID and no jobs)."""
    return Command((b"CLUSTER", b"RESET", b"HARD" if hard else b"SOFT"), _ok, Retry.ON_REFUSAL)


def _leaving_reply(reply: bytes) -> bool | None:
    return {b"yes": True, b"no": False}.get(reply)


def cluster_leaving(leaving: bool | None = None) -> Command[bool | None]:
    """CLUSTER LEAVING: with no argument, whether the node is leaving; else set it."""
    if leaving is None:
        return Command((b"CLUSTER", b"LEAVING"), _leaving_reply)
    flag = b"yes" if leaving else b"no"
    return Command((b"CLUSTER", b"LEAVING", flag), _leaving_reply)


def cluster_saveconfig() -> Command[None]:
    """CLUSTER SAVECONFIG: write the node table to nodes.conf."""
    return Command((b"CLUSTER", b"SAVECONFIG"), _ok)


def _working_text(args: tuple[bytes, ...]) -> bool:
    """Whether a raw WORKING (``WORKING id [CLAIM n] [text]``) carries a progress text."""
    rest = args[2:]
    if len(rest) >= 2 and rest[0].upper() == b"CLAIM":
        rest = rest[2:]
    return bool(rest)


def execute(*args: Arg) -> Command[Any]:
    """Any command, as raw arguments; the reply as hiredis parses it (errors raise).

    A raw command is sent again after a lost reply only if it is a read or an
    idempotent command (not a WORKING with a progress text), and never when it
    is an ADDJOB, unless it has a DEDUP key (then as :func:`add_job` does).
    """
    if not args:
        raise ValueError("execute needs a command name")
    encoded = tuple(to_bytes(a) for a in args)
    name = encoded[0].upper()
    block = math.inf if name in (b"GETJOB", b"ADDJOB", b"WAITJOB") else None
    if name == b"ADDJOB" and any(a.upper() == b"DEDUP" for a in encoded[4:]):
        # (no other ADDJOB option takes a value that could read DEDUP)
        return Command(encoded, retry=Retry.ALWAYS, block=block, sticky=True)
    if name == b"WORKING" and _working_text(encoded):
        retry = Retry.ON_REFUSAL  # a progress text could be logged twice
    elif name in _IDEMPOTENT:
        retry = Retry.ALWAYS
    elif name in _NEVER_RESEND:
        retry = Retry.NEVER
    else:
        retry = Retry.ON_REFUSAL
    return Command(encoded, retry=retry, block=block)
