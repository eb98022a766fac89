"""Job commands: ADDJOB, GETJOB, ACKJOB, FASTACK, WORKING, NACK, ENQUEUE,
DEQUEUE, DELJOB, SHOW, JSCAN and LOADJOB (reference section 3), and JOBLOG
(beyond Disque, with ADDJOB's AFTER and IFGONE, GETJOB's WITHCLAIM, the CLAIM of
ACKJOB, NACK and WORKING, and WORKING's text: docs/coordination.md).

Each procedure parses its arguments with Disque's rules and error texts, calls
the node, and shapes the reply. ADDJOB and GETJOB are the hot path: their
common forms (no options) are parsed without loops.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from operator import attrgetter
from typing import TYPE_CHECKING, Final

from disquette.commands.args import int_arg, parse_cursor, timeout_arg
from disquette.commands.table import command
from disquette.core import acl, backoff, claim, dependency, outcome, replies, tags
from disquette.core.errors import DisqueError
from disquette.core.ids import all_valid, is_valid
from disquette.core.job import (
    BACKOFF_FIXED,
    BACKOFF_KINDS,
    MAX_GROUP,
    MAX_PRIORITY,
    STATE_BY_NAME,
    Job,
)
from disquette.core.node import NOJOB_ERROR, check_job_options
from disquette.protocol import reply
from disquette.state.command import NO_RUN

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.state.server import ServerState

REPLICATE_RANGE: Final = reply.err("REPLICATE must be between 1 and 65535")
TTL_POSITIVE: Final = reply.err("TTL must be a number > 0")
RETRY_NEGATIVE: Final = reply.err("RETRY time must be a non negative number")
DELAY_NEGATIVE: Final = reply.err("DELAY time must be a non negative number")
MAXLEN_POSITIVE: Final = reply.err("MAXLEN must be a positive number")
COUNT_POSITIVE: Final = reply.err("COUNT must be a number greater than zero")
BAD_STATE: Final = reply.err("Invalid job state name")
BAD_REPLY_TYPE: Final = reply.err("Invalid REPLY type, try ID or ALL")
BAD_CURSOR: Final = reply.err("invalid cursor or option name")
LOADJOB_FROM_CLIENT: Final = reply.err("LOADJOB is a special command only processed from AOF")
PRIORITY_RANGE: Final = reply.err("PRIORITY must be between 0 and 9")
DEDUP_LENGTH: Final = reply.err("DEDUP key must be 1 to 256 bytes long")
GROUP_LENGTH: Final = reply.err(f"GROUP key must be 1 to {MAX_GROUP} bytes long")
MAX_DEDUP: Final = 256
TOO_MANY_AFTER: Final = reply.err(f"too many AFTER dependencies (at most {dependency.MAX_AFTER})")
IFGONE_VALUE: Final = reply.err("IFGONE must be fail or release")
IFGONE_ALONE: Final = reply.err("IFGONE needs AFTER")
CLAIM_POSITIVE: Final = reply.err("CLAIM must be a number greater than zero")
BACKOFF_SYNTAX: Final = reply.err(
    "BACKOFF must be followed by fixed <seconds> or exponential <base> <cap>"
)
BACKOFF_SECONDS: Final = reply.err(
    "BACKOFF seconds must be positive numbers, and the cap not below the base"
)
#: JSCAN STATE's name for a job waiting for others (an active job, to Disque).
WAITING: Final = 4

_ADDJOB_VALUED: Final = {
    b"replicate", b"delay", b"retry", b"ttl", b"maxlen", b"priority", b"dedup", b"after",
    b"ifgone", b"group",
}  # fmt: skip
_JOB_ID: Final = attrgetter("id")


def _timeout(value: bytes) -> int:
    return int(value) if value.isdigit() and len(value) < 19 else timeout_arg(value)


def _check_size(state: ServerState, body: bytes) -> None:
    """Beyond Disque: a job body larger than job-max-size is refused."""
    limit = state.config.job_max_size
    if len(body) > limit:
        raise DisqueError(
            reply.err(
                f"job too large: its body is {len(body)} bytes, more than job-max-size "
                f"({limit} bytes)"
            )
        )


class AddJobOptions:
    """ADDJOB's timeout and options; not given: 0, or -1 for DELAY, RETRY, PRIORITY."""

    __slots__ = ("after", "async_", "backoff", "dedup", "dedup_at", "delay", "group", "ifgone",
                 "maxlen", "priority", "repl", "retry", "timeout", "ttl")  # fmt: skip

    def __init__(self) -> None:
        self.timeout = 0
        self.repl = self.maxlen = self.ttl = 0
        self.delay = self.retry = self.priority = -1
        self.async_ = False
        self.dedup: bytes | None = None
        self.dedup_at = 0  # the index of the DEDUP key in the request (0: none)
        self.after: list[bytes] = []
        self.ifgone: bytes | None = None
        self.backoff: tuple[int, int, int] | None = None
        self.group: bytes | None = None  # its fair-share group (core/joblist.py)


def _backoff_arg(argv: list[bytes], i: int) -> tuple[tuple[int, int, int], int]:
    """ADDJOB's ``BACKOFF fixed seconds`` or ``BACKOFF exponential base cap`` at
    ``argv[i]`` (the keyword): the job's backoff (core/backoff.py) and the next index."""
    kind = BACKOFF_KINDS.get(argv[i + 1].lower()) if i + 1 < len(argv) else None
    if kind is None:
        raise DisqueError(BACKOFF_SYNTAX)
    count = 1 if kind == BACKOFF_FIXED else 2
    values = argv[i + 2 : i + 2 + count]
    if len(values) != count:
        raise DisqueError(BACKOFF_SYNTAX)
    seconds = [int_arg(v, BACKOFF_SECONDS) for v in values]
    if not all(0 < v <= backoff.MAX_SECONDS for v in seconds) or seconds[-1] < seconds[0]:
        raise DisqueError(BACKOFF_SECONDS)
    return (kind, seconds[0], seconds[-1]), i + 2 + count


def _addjob_args(argv: list[bytes]) -> AddJobOptions:
    """ADDJOB's timeout and options, checked in Disque's order (the options, the
    timeout, then the rules that join them)."""
    opts = AddJobOptions()
    i = 4
    n = len(argv)
    while i < n:
        opt = argv[i].lower()
        if opt == b"async":
            opts.async_ = True
            i += 1
            continue
        if opt == b"backoff":
            opts.backoff, i = _backoff_arg(argv, i)
            continue
        if opt not in _ADDJOB_VALUED or i + 1 >= n:
            raise DisqueError(reply.SYNTAX_ERROR)
        value = argv[i + 1]
        if opt == b"replicate":
            opts.repl = int_arg(value, REPLICATE_RANGE)
            if not 1 <= opts.repl <= 65535:
                raise DisqueError(REPLICATE_RANGE)
        elif opt == b"delay":
            opts.delay = int_arg(value, DELAY_NEGATIVE)
            if opts.delay < 0:
                raise DisqueError(DELAY_NEGATIVE)
        elif opt == b"retry":
            opts.retry = int_arg(value, RETRY_NEGATIVE)
            if opts.retry < 0:
                raise DisqueError(RETRY_NEGATIVE)
        elif opt == b"ttl":
            opts.ttl = int_arg(value, TTL_POSITIVE)
            if opts.ttl <= 0:
                raise DisqueError(TTL_POSITIVE)
        elif opt == b"maxlen":
            opts.maxlen = int_arg(value, MAXLEN_POSITIVE)
            if opts.maxlen <= 0:
                raise DisqueError(MAXLEN_POSITIVE)
        elif opt == b"priority":
            opts.priority = int_arg(value, PRIORITY_RANGE)
            if not 0 <= opts.priority <= MAX_PRIORITY:
                raise DisqueError(PRIORITY_RANGE)
        elif opt == b"after":
            if not is_valid(value):
                raise DisqueError(reply.BADID)
            if value not in opts.after:
                if len(opts.after) == dependency.MAX_AFTER:
                    raise DisqueError(TOO_MANY_AFTER)
                opts.after.append(value)
        elif opt == b"ifgone":
            opts.ifgone = value.lower()
            if opts.ifgone not in (b"fail", b"release"):
                raise DisqueError(IFGONE_VALUE)
        elif opt == b"group":
            if not 0 < len(value) <= MAX_GROUP:
                raise DisqueError(GROUP_LENGTH)
            opts.group = value
        else:
            if not 0 < len(value) <= MAX_DEDUP:
                raise DisqueError(DEDUP_LENGTH)
            opts.dedup = value
            opts.dedup_at = i + 1
        i += 2
    opts.timeout = _timeout(argv[3])
    check_job_options(opts.repl, opts.retry, opts.delay, opts.ttl)
    if opts.ifgone is not None and not opts.after:
        raise DisqueError(IFGONE_ALONE)
    return opts


def addjob_run(
    state: ServerState, client: Client, requests: list[list[bytes]], start: int
) -> tuple[int, bytes]:
    """The leading ADDJOBs from ``requests[start]`` that the node makes in one go:
    those with the first one's options (but the DEDUP key, which may differ), as far
    as they make REPLICATE 1 jobs queued at once (:meth:`Node.add_jobs`); how many,
    and their replies."""
    first = requests[start]
    if len(first) < 4:
        return NO_RUN
    try:
        opts = _addjob_args(first)
    except DisqueError:
        return NO_RUN
    if opts.delay > 0 or opts.after or opts.backoff:
        return NO_RUN
    items = _same_addjobs(requests, start, opts.dedup_at, state.config.job_max_size)
    jobs = state.node.add_jobs(
        items, opts.repl, opts.retry, opts.ttl, opts.maxlen, opts.priority, opts.group
    )
    if not jobs:
        return NO_RUN
    return len(jobs), b"+" + b"\r\n+".join(map(_JOB_ID, jobs)) + b"\r\n"


def _same_addjobs(
    requests: list[list[bytes]], start: int, dedup_at: int, max_size: int
) -> Iterator[tuple[bytes, bytes, bytes | None]]:
    """(queue, body, DEDUP key or None) of the ADDJOBs from ``requests[start]`` with the
    same options (``dedup_at``: where the first one's key is, 0 for none; the others'
    keys sit at the same place) and a body of ``max_size`` bytes or less, produced as
    the node takes them, so that a run refused at once costs nothing."""
    first = requests[start]
    arity = len(first)
    command = first[0]
    name = command.lower()
    if dedup_at:
        head, tail = first[3:dedup_at], first[dedup_at + 1 :]
    else:
        head, tail = first[3:], []
    for argv in islice(requests, start, None):
        if (
            argv.__class__ is not list
            or len(argv) != arity
            or (argv[0] != command and argv[0].lower() != name)
            or len(argv[2]) > max_size
        ):
            return
        if dedup_at:
            if argv[3:dedup_at] != head or (tail and argv[dedup_at + 1 :] != tail):
                return
            key = argv[dedup_at]
            if not 0 < len(key) <= MAX_DEDUP:
                return
            yield argv[1], argv[2], key
        else:
            if argv[3:] != head:
                return
            yield argv[1], argv[2], None


@command("addjob", -4, "wmF", run=addjob_run)
def addjob(state: ServerState, client: Client, argv: list[bytes]) -> bytes | None:
    if len(argv) == 4:
        timeout = _timeout(argv[3])
        _check_size(state, argv[2])
        job = state.node.add_job(client, argv[1], argv[2], timeout)
    else:
        o = _addjob_args(argv)
        if o.after:
            state.node.dialect.require(b"dependencies", "ADDJOB AFTER")
        _check_size(state, argv[2])
        job = state.node.add_job(
            client, argv[1], argv[2], o.timeout, repl=o.repl, delay=o.delay, retry=o.retry,
            ttl=o.ttl, maxlen=o.maxlen, async_=o.async_, priority=o.priority, dedup=o.dedup,
            after=o.after, release=o.ifgone == b"release", retry_backoff=o.backoff,
            group=o.group,
        )  # fmt: skip
    return None if job is None else b"+%s\r\n" % job.id


@command("getjob", -2, "wF")
def getjob(state: ServerState, client: Client, argv: list[bytes]) -> bytes | None:
    nohang = False
    shape = 0
    timeout = 0
    count = 1
    tag: bytes | None = None
    i = 1
    n = len(argv)
    while True:
        if i >= n:
            raise DisqueError(reply.SYNTAX_ERROR)
        opt = argv[i].lower()
        if opt == b"from":
            break
        if opt == b"nohang":
            nohang = True
        elif opt == b"withcounters":
            shape |= replies.WITH_COUNTERS
        elif opt == b"withclaim":  # beyond Disque
            shape |= replies.WITH_CLAIM
        elif opt == b"timeout" and i + 1 < n:
            i += 1
            timeout = _timeout(argv[i])
        elif opt == b"count" and i + 1 < n:
            i += 1
            count = int_arg(argv[i], COUNT_POSITIVE)
            if count <= 0:
                raise DisqueError(COUNT_POSITIVE)
        elif opt == b"tag" and i + 1 < n:  # beyond Disque (core/tags.py)
            i += 1
            tag = argv[i]
            tags.check_name(tag)
        else:
            raise DisqueError(reply.SYNTAX_ERROR)
        i += 1
    queues = argv[i + 1 :]
    if not queues:
        raise DisqueError(reply.SYNTAX_ERROR)
    node = state.node
    if tag is not None:
        if not nohang:
            raise DisqueError(tags.TAG_NOHANG)
        tagged = node.tags.get_jobs(tag, queues, count, bool(shape & replies.WITH_CLAIM))
        return replies.job_entries(tagged, shape) if tagged else reply.NULL_ARRAY
    jobs = node.get_jobs(queues, count, bool(shape & replies.WITH_CLAIM))
    if jobs:
        return replies.job_entries(jobs, shape)
    if nohang:
        return reply.NULL_ARRAY
    if node.leaving:
        return reply.LEAVING
    node.block_for_jobs(client, queues, timeout, shape)
    return None


def _tag_form(argv: list[bytes]) -> bytes | None:
    """The name of ``<command> TAG name`` (no job ID reads TAG), else None."""
    if len(argv) != 3 or argv[1].lower() != b"tag":
        return None
    tags.check_name(argv[2])
    return argv[2]


def _ids(argv: list[bytes]) -> list[bytes]:
    ids = argv[1:]
    if not all_valid(ids):
        raise DisqueError(reply.BADID)
    return ids


class IdArgs:
    """The job IDs of ACKJOB or NACK and the options beyond Disque among them: each ID
    maybe followed by ``CLAIM n`` and (ACKJOB) ``RESULT value``; NACK's ``DELAY s``."""

    __slots__ = ("delay", "ids", "results")

    def __init__(self, ids: list[bytes]) -> None:
        self.ids = ids
        self.delay = -1  # ms (-1: not given, the job's backoff applies)
        self.results: dict[bytes, bytes] = {}


def _id_args(state: ServerState, argv: list[bytes], options: tuple[bytes, ...]) -> IdArgs:
    """ACKJOB's or NACK's IDs and ``options`` (of claim, result, delay): every claim
    is checked (-STALECLAIM) before anything is done."""
    if all_valid(argv[1:]):
        return IdArgs(argv[1:])
    args = IdArgs([])
    ids = args.ids
    claims: list[tuple[bytes, int]] = []
    i, n = 1, len(argv)
    while i < n:
        arg = argv[i]
        option = arg.lower()
        if option in options:
            if i + 1 >= n or (not ids and option != b"delay"):
                raise DisqueError(reply.SYNTAX_ERROR)
            value = argv[i + 1]
            if option == b"claim":
                number = int_arg(value, CLAIM_POSITIVE)
                if number <= 0:
                    raise DisqueError(CLAIM_POSITIVE)
                claims.append((ids[-1], number))
            elif option == b"result":
                if len(value) > outcome.MAX_RESULT:
                    raise DisqueError(outcome.RESULT_TOO_LONG)
                args.results[ids[-1]] = value
            else:
                seconds = int_arg(value, DELAY_NEGATIVE)
                if not 0 <= seconds <= backoff.MAX_SECONDS:
                    raise DisqueError(DELAY_NEGATIVE)
                args.delay = seconds * 1000
            i += 2
            continue
        if not is_valid(arg):
            raise DisqueError(reply.BADID)
        ids.append(arg)
        i += 1
    for job_id, number in claims:
        claim.check(state.node, job_id, number)
    return args


@command("ackjob", -1, "wF")
def ackjob(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    """``ACKJOB id [CLAIM n] [RESULT value] ...`` (CLAIM and RESULT beyond Disque);
    ``ACKJOB TAG name``: the jobs delivered under a tag (beyond Disque, core/tags.py)."""
    name = _tag_form(argv)
    if name is not None:
        return reply.integer(state.node.tags.ack(name))
    args = _id_args(state, argv, (b"claim", b"result"))
    if args.results:
        state.node.dialect.require(b"outcomes", "ACKJOB RESULT")
        outcome.acknowledged_with(state.node, args.results)
    return reply.integer(state.node.ack_jobs(args.ids))


@command("fastack", -1, "wF")
def fastack(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    return reply.integer(state.node.fast_ack(_ids(argv)))


@command("working", -2, "wF", disque_arity=2)
def working(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    """``WORKING id [CLAIM n] [text]`` (the claim and the text beyond Disque);
    ``WORKING TAG name``: every job of a tag (beyond Disque, core/tags.py)."""
    node = state.node
    name = _tag_form(argv)
    if name is not None:
        return reply.integer(node.tags.working(name))
    if len(argv) == 2:
        job_id = _ids(argv)[0]
        outcome.check_working(node, job_id)
        return reply.integer(node.working(job_id))
    job_id = argv[1]
    if not is_valid(job_id):
        raise DisqueError(reply.BADID)
    outcome.check_working(node, job_id)
    rest = argv[2:]
    if len(rest) >= 2 and rest[0].lower() == b"claim":
        number = int_arg(rest[1], CLAIM_POSITIVE)
        if number <= 0:
            raise DisqueError(CLAIM_POSITIVE)
        claim.check(state.node, job_id, number)
        rest = rest[2:]
    if len(rest) > 1:
        raise DisqueError(reply.SYNTAX_ERROR)
    return reply.integer(state.node.working(job_id, rest[0] if rest else None))


@command("nack", -1, "mwF")
def nack(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    """``NACK id [CLAIM n] ... [DELAY seconds]`` (CLAIM and DELAY beyond Disque)."""
    args = _id_args(state, argv, (b"claim", b"delay"))
    return reply.integer(state.node.requeue_jobs(args.ids, nack=True, delay=args.delay))


@command("cancel", -2, "wF")
def cancel(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    """``CANCEL id ...`` (beyond Disque, core/outcome.py): how many jobs held here
    were cancelled."""
    state.node.dialect.require(b"outcomes", "CANCEL")
    return reply.integer(outcome.cancel(state.node, _ids(argv)))


@command("waitjob", -2, "r")
def waitjob(state: ServerState, client: Client, argv: list[bytes]) -> bytes | None:
    """``WAITJOB id [TIMEOUT ms]`` (beyond Disque, core/outcome.py): ``[outcome,
    result]`` once the job is acknowledged (or cancelled, or gone), nil on timeout."""
    job_id = argv[1]
    if not is_valid(job_id):
        raise DisqueError(reply.BADID)
    timeout = 0
    if len(argv) > 2:
        if len(argv) != 4 or argv[2].lower() != b"timeout":
            raise DisqueError(reply.SYNTAX_ERROR)
        timeout = _timeout(argv[3])
    state.node.dialect.require(b"outcomes", "WAITJOB")
    return outcome.waitjob(state.node, client, job_id, timeout)


@command("joblog", 2, "rF")
def joblog(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    """``JOBLOG id``: the job's progress log (beyond Disque, core/progress.py)."""
    job = state.node.jobs.get(_ids(argv)[0])
    if job is None:
        raise DisqueError(NOJOB_ERROR)
    return replies.progress_log(None if job.extra is None else job.extra.log)


@command("enqueue", -1, "mwF")
def enqueue(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    return reply.integer(state.node.requeue_jobs(_ids(argv), nack=False))


@command("dequeue", -1, "wF")
def dequeue(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    return reply.integer(state.node.dequeue_jobs(_ids(argv)))


@command("deljob", -1, "wF")
def deljob(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    return reply.integer(state.node.delete_jobs(_ids(argv)))


@command("show", 2, "rF")
def show(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    if not is_valid(argv[1]):
        return reply.BADID
    job = state.node.jobs.get(argv[1])
    if job is None or (client.acl is not None and not acl.visible(client.acl, job.queue)):
        return reply.NULL_BULK  # (a job of a queue the user may not read: as if unknown)
    return replies.show(state.node, job, client.resp3)


class ScanArgs:
    """The cursor/COUNT/BUSYLOOP part shared by JSCAN and QSCAN."""

    __slots__ = ("busyloop", "count", "cursor")

    def __init__(self) -> None:
        self.cursor: int | None = None
        self.count = 100
        self.busyloop = False

    def take_cursor(self, value: bytes) -> None:
        if self.cursor is not None:
            raise DisqueError(reply.SYNTAX_ERROR)
        cursor = parse_cursor(value)
        if cursor is None:
            raise DisqueError(BAD_CURSOR)
        self.cursor = cursor


def scan_reply(cursor: int, items: list[bytes]) -> bytes:
    return b"*2\r\n" + reply.bulk(b"%d" % cursor) + b"*%d\r\n%s" % (len(items), b"".join(items))


@command("jscan", -1, "r")
def jscan(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    scan = ScanArgs()
    queue: bytes | None = None
    states: set[int] = set()
    priority = -1
    reply_all = False
    i, n = 1, len(argv)
    while i < n:
        opt = argv[i].lower()
        has_value = i + 1 < n
        if opt == b"count" and has_value:
            scan.count = int_arg(argv[i + 1])
            i += 2
        elif opt == b"busyloop":
            scan.busyloop = True
            i += 1
        elif opt == b"queue" and has_value:
            queue = argv[i + 1]
            i += 2
        elif opt == b"state" and has_value:
            name = argv[i + 1].lower()
            st = WAITING if name == b"waiting" else STATE_BY_NAME.get(name)
            if st is None:
                raise DisqueError(BAD_STATE)
            states.add(st)
            i += 2
        elif opt == b"priority" and has_value:  # beyond Disque
            priority = int_arg(argv[i + 1], PRIORITY_RANGE)
            if not 0 <= priority <= MAX_PRIORITY:
                raise DisqueError(PRIORITY_RANGE)
            i += 2
        elif opt == b"reply" and has_value:
            kind = argv[i + 1].lower()
            if kind not in (b"id", b"all"):
                raise DisqueError(BAD_REPLY_TYPE)
            reply_all = kind == b"all"
            i += 2
        else:
            scan.take_cursor(argv[i])
            i += 1

    restricted = client.acl is not None

    def match(job: Job) -> bool:
        return bool(job.nodes_delivered) and (
            (queue is None or job.queue == queue)
            and (not restricted or acl.visible(client.acl, job.queue))
            and (not states or (WAITING if job.waiting else job.state) in states)
            and (priority < 0 or job.priority == priority)
        )

    cursor, jobs = state.node.scan_jobs(scan.cursor or 0, max(scan.count, 1), scan.busyloop, match)
    if reply_all:
        items = [replies.show(state.node, job, client.resp3) for job in jobs]
    else:
        items = [b"+%s\r\n" % job.id for job in jobs]
    return scan_reply(cursor, items)


@command("loadjob", 2, "w")
def loadjob(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    return LOADJOB_FROM_CLIENT
