"""The replies the core decides itself, and the one module of the core that knows RESP.

The core answers clients in RESP2 bytes built here: the jobs handed to GETJOB and
QPEEK, ADDJOB's ID and the errors of a pending ADDJOB, WAITJOB's outcomes, a job's
SHOW array and its progress log. They are built once, where the core decides them,
because that is what the request path's profile asks for: a reply that wakes a
blocked client later is the same bytes as the direct answer, and the hot replies
(GETJOB's entries, ADDJOB's ID) are formatted straight from the job's fields, with
no intermediate value for the command layer to walk and encode again. RESP3
connections get the same bytes with RESP3's nulls (the pipeline's
:func:`disquette.protocol.reply.resp3`), and SHOW's map, which :func:`show` builds.

So that the core is tied to the wire format in one place only, the other core
modules build their error replies and reply constants with the names below
(:func:`error`, :func:`err`, :data:`OOM`...) and never import
:mod:`disquette.protocol` themselves (tests/unit/test_layers.py checks it). The AOF
(core/aof.py) is a file format that happens to be RESP: Disque's, written there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.core.job import AFTER_RELEASE, BACKOFF_FIXED, STATE_NAMES, Job, LogEntry
from disquette.protocol import reply
from disquette.protocol.reply import LEAVING as LEAVING
from disquette.protocol.reply import NULL_ARRAY as NULL_ARRAY
from disquette.protocol.reply import OOM as OOM
from disquette.protocol.reply import err as err
from disquette.protocol.reply import error as error

if TYPE_CHECKING:
    from disquette.core.node import Node

NOREPL_TIMEOUT: Final = reply.error(
    "NOREPL Timeout reached before replicating to the requested number of nodes"
)
NOREPL_REMOVED: Final = reply.error(
    "NOREPL job removed (expired?) before the requested replication level was achieved"
)


#: How GETJOB shows a job (flags): WITHCOUNTERS, and beyond Disque WITHCLAIM.
WITH_COUNTERS: Final = 1
WITH_CLAIM: Final = 2


def job_entry(job: Job, shape: int) -> bytes:
    """One job as GETJOB and QPEEK show it: ``[queue, id, body]`` (+ counters, + claim)."""
    queue = job.queue or b""
    body = job.body or b""
    if shape & WITH_COUNTERS:
        entry = b"*%d\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$%d\r\n%s\r\n$5\r\nnacks\r\n:%d\r\n" \
            b"$21\r\nadditional-deliveries\r\n:%d\r\n" % (
                9 if shape & WITH_CLAIM else 7, len(queue), queue, job.id, len(body), body,
                job.nacks, job.additional_deliveries,
            )  # fmt: skip
    else:
        entry = b"*%d\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$%d\r\n%s\r\n" % (
            5 if shape & WITH_CLAIM else 3, len(queue), queue, job.id, len(body), body,
        )  # fmt: skip
    if shape & WITH_CLAIM:
        claim = 0 if job.extra is None else job.extra.claim
        entry += b"$5\r\nclaim\r\n:%d\r\n" % claim
    return entry


def job_entries(jobs: list[Job], shape: int) -> bytes:
    return b"*%d\r\n%s" % (len(jobs), b"".join([job_entry(j, shape) for j in jobs]))


def job_id(job: Job) -> bytes:
    """ADDJOB's reply: the ID as a status reply."""
    return b"+%s\r\n" % job.id


def outcome(kind: bytes, result: bytes | None = None) -> bytes:
    """WAITJOB's answer: ``[kind, result]`` (kind: acked, cancelled, gone, unknown;
    no result: a null)."""
    return b"*2\r\n" + reply.bulk(kind) + reply.bulk_or_null(result)


def progress_log(log: list[LogEntry] | None) -> bytes:
    """JOBLOG's reply (and SHOW's ``progress``): ``[[ms, node ID, text], ...]``."""
    log = log or []
    return b"*%d\r\n%s" % (
        len(log),
        b"".join(
            [
                b"*3\r\n" + reply.integer(ms) + reply.bulk(node) + reply.bulk(text)
                for ms, node, text in log
            ]
        ),
    )


def show(node: Node, job: Job, resp3: bool = False) -> bytes:
    """The SHOW array (also JSCAN REPLY ALL's items): Disque's 30 elements, then,
    beyond Disque and appended so that Disque clients are unaffected:
    ``live-copies`` (how many holders have a copy as far as this node knows,
    core/repair.py), then only when the job has them, ``priority`` (above 0),
    ``dedup``, for a dead letter the original's ``origin-id``, ``origin-queue``,
    ``origin-nacks`` and ``origin-additional-deliveries``, for a job waiting for
    others ``waiting-for`` and ``if-gone`` (its ``state`` then reads ``waiting``),
    ``progress`` (its log), ``claim``, ``backoff`` (as ADDJOB's BACKOFF gave it) and
    ``group`` (ADDJOB GROUP).
    For a RESP3 connection (``resp3``), the same pairs as a map, nulls as ``_``."""
    now = node.clock()
    dummy = job.is_dummy_ack
    null = reply.NULL if resp3 else reply.NULL_BULK
    if job.qtime and not dummy and job.state != 3:
        requeue = reply.integer(max(0, job.qtime - now))
    else:
        requeue = null
    awake = reply.integer(max(0, job.awake - now)) if job.awake else null
    extensions = _extension_fields(job)
    state_name = b"waiting" if job.waiting else STATE_NAMES[job.state]
    size = 32 + len(extensions)
    return b"".join(
        [
            b"%%%d\r\n" % (size // 2) if resp3 else b"*%d\r\n" % size,
            reply.bulk(b"id"), reply.bulk(job.id),
            reply.bulk(b"queue"), null if job.queue is None else reply.bulk(job.queue),
            reply.bulk(b"state"), reply.bulk(state_name),
            reply.bulk(b"repl"), reply.integer(0 if dummy else job.repl),
            reply.bulk(b"ttl"), reply.integer(max(0, job.etime - now // 1000)),
            reply.bulk(b"ctime"), reply.integer(job.ctime),
            reply.bulk(b"delay"), reply.integer(job.delay),
            reply.bulk(b"retry"), reply.integer(job.retry),
            reply.bulk(b"nacks"), reply.integer(job.nacks),
            reply.bulk(b"additional-deliveries"), reply.integer(job.additional_deliveries),
            reply.bulk(b"nodes-delivered"), reply.bulk_array(job.nodes_delivered),
            reply.bulk(b"nodes-confirmed"), reply.bulk_array(job.nodes_confirmed or ()),
            reply.bulk(b"next-requeue-within"), requeue,
            reply.bulk(b"next-awake-within"), awake,
            reply.bulk(b"body"), null if job.body is None else reply.bulk(job.body),
            reply.bulk(b"live-copies"),
            reply.integer(0 if dummy else len(node.repair.live_holders(job))),
            *extensions,
        ]
    )  # fmt: skip


def _extension_fields(job: Job) -> list[bytes]:
    """SHOW's pairs for what a job has beyond Disque (none for a plain job)."""
    fields = []
    if job.priority:
        fields += [reply.bulk(b"priority"), reply.integer(job.priority)]
    extra = job.extra
    if extra is not None:
        if extra.dedup is not None:
            fields += [reply.bulk(b"dedup"), reply.bulk(extra.dedup)]
        if extra.origin_id is not None:
            fields += [
                reply.bulk(b"origin-id"), reply.bulk(extra.origin_id),
                reply.bulk(b"origin-queue"), reply.bulk_or_null(extra.origin_queue),
                reply.bulk(b"origin-nacks"), reply.integer(extra.origin_nacks),
                reply.bulk(b"origin-additional-deliveries"),
                reply.integer(extra.origin_deliveries),
            ]  # fmt: skip
        if extra.after:
            release = extra.after_flags & AFTER_RELEASE
            fields += [
                reply.bulk(b"waiting-for"), reply.bulk_array(extra.after),
                reply.bulk(b"if-gone"), reply.bulk(b"release" if release else b"fail"),
            ]  # fmt: skip
        if extra.log:
            fields += [reply.bulk(b"progress"), progress_log(extra.log)]
        if extra.claim:
            fields += [reply.bulk(b"claim"), reply.integer(extra.claim)]
        if extra.backoff is not None:
            kind, base, cap = extra.backoff
            text = b"fixed %d" % base
            if kind != BACKOFF_FIXED:
                text = b"exponential %d %d" % (base, cap)
            fields += [reply.bulk(b"backoff"), reply.bulk(text)]
        if extra.group is not None:
            fields += [reply.bulk(b"group"), reply.bulk(extra.group)]
    return fields
