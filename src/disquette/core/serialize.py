"""A job as bytes: the layout of Disque's serialized job (reference section 12.2).

One layout serves both the AOF's LOADJOB records and the jobs carried by
REPLJOB and YOURJOBS messages. The two variants differ only in ``etime``: the
storage variant keeps the absolute unix time, the bus variant sends the
remaining seconds + 1 and clears the DELIVERED flag, so the receiver computes
times with its own clock. Everything is little-endian:

    4   length of what follows        40  job ID
    1   state (low 4 bits) | gc retry (high 4 bits)
    1   flags                         2   repl
    4   etime                         8   ctime
    4   delay                         4   retry
    2   nacks                         2   additional deliveries
    4+n queue name                    4+n body
    4+40k nodes-delivered: count, then k node IDs
    ...     extensions (beyond Disque; only in jobs that have them)

disquette's extensions keep that layout: a job's priority is the high nibble of
its flags byte, and what a job's :class:`~disquette.core.job.Extra` holds
follows the node list, inside the length, as tagged fields (a tag byte, a
4-byte length, the value): 1 the de-duplication key, 2 a dead letter's origin
(40-byte ID, 4-byte nacks, 4-byte additional deliveries, then the queue name),
3 the jobs it waits for (a flags byte, then 40-byte IDs; only the flags byte for a
job failed by a dependency and not deleted yet), 4 its progress log
(entries of an 8-byte unix ms, a 40-byte node ID, a 4-byte length and the
text), 5 its claim number (8 bytes), 6 its retry backoff (a kind byte, a 4-byte
base and a 4-byte cap), 7 its fair-share group (the key, 1 to ``MAX_GROUP`` bytes).
A job without them is encoded exactly as Disque encodes it; unknown tags are
skipped, so a later version's fields do not make a job unreadable.

Input is untrusted (a peer, a file): :func:`decode` checks every length and
raises :class:`BadJob` instead of reading past the end or accepting garbage.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from disquette.core.ids import is_valid
from disquette.core.job import (
    AFTER_FAILED,
    BACKOFF_EXPONENTIAL,
    BACKOFF_FIXED,
    DELIVERED,
    MAX_GROUP,
    MAX_PRIORITY,
    NO_NODES,
    POSTPONED,
    PRIORITY_SHIFT,
    Extra,
    Job,
    LogEntry,
)

# The fixed part, from the length word to the queue name's length.
_HEAD: Final = struct.Struct("<I40sBBHIqIIHHI")
_HEAD_FROM: Final = _HEAD.unpack_from
_HEAD_SIZE: Final = _HEAD.size
_U32: Final = struct.Struct("<I")
_U32_PACK: Final = _U32.pack
_U32_FROM: Final = _U32.unpack_from
#: What the length word counts besides the strings: 68 bytes of fields and the
#: three 4-byte lengths of the queue name, the body and the node list.
FIXED_AFTER_LENGTH: Final = 80
NODE_ID_LEN: Final = 40
MAX_U16: Final = 0xFFFF
MAX_U32: Final = 0xFFFFFFFF
#: Node lists of up to 15 IDs (all real ones) are split by one struct call each.
_NODE_LISTS: Final = [struct.Struct("40s" * count) for count in range(16)]
_FIELD: Final = struct.Struct("<BI")
_ORIGIN: Final = struct.Struct("<40sII")
_LOG_ENTRY: Final = struct.Struct("<q40sI")
_CLAIM: Final = struct.Struct("<q")
_BACKOFF: Final = struct.Struct("<BII")
TAG_DEDUP: Final = 1
TAG_ORIGIN: Final = 2
TAG_AFTER: Final = 3
TAG_LOG: Final = 4
TAG_CLAIM: Final = 5
TAG_BACKOFF: Final = 6
TAG_GROUP: Final = 7


class BadJob(ValueError):
    """The bytes are not a well-formed serialized job."""


def _clamp(value: int, limit: int) -> int:
    return min(max(value, 0), limit)


def encode(job: Job, *, bus: bool, now_s: int = 0) -> bytes:
    """Serialize ``job``; ``bus=True`` makes the relative-TTL variant (needs ``now_s``).

    One ``struct`` call builds the fixed part (this runs for every replicated
    job, and every ADDJOB of a node with the AOF on); out-of-range values are
    clamped, on a second try.
    """
    if bus:
        etime = job.etime - now_s + 1
        flags = job.flags & ~(DELIVERED | POSTPONED)
    else:
        etime = job.etime
        flags = job.flags
    queue = job.queue or b""
    body = job.body or b""
    nodes = job.nodes_delivered
    extensions = b"" if job.extra is None else _encode_extra(job.extra)
    fields = (
        FIXED_AFTER_LENGTH + len(queue) + len(body) + NODE_ID_LEN * len(nodes) + len(extensions),
        job.id, job.state | (job.gc_retry << 4), flags, job.repl, etime, job.ctime,
        job.delay, job.retry, job.nacks, job.additional_deliveries, len(queue),
    )  # fmt: skip
    try:
        head = _HEAD.pack(*fields)
    except struct.error:
        head = _HEAD.pack(*_clamped(fields))
    return b"%s%s%s%s%s%s%s" % (head, queue, _U32_PACK(len(body)), body, _U32_PACK(len(nodes)),
                                b"".join(nodes), extensions)  # fmt: skip


def _encode_extra(extra: Extra) -> bytes:
    parts = []
    if extra.dedup is not None:
        parts.append(_FIELD.pack(TAG_DEDUP, len(extra.dedup)) + extra.dedup)
    if extra.origin_id is not None:
        queue = extra.origin_queue or b""
        origin = _ORIGIN.pack(
            extra.origin_id,
            _clamp(extra.origin_nacks, MAX_U32),
            _clamp(extra.origin_deliveries, MAX_U32),
        )
        parts.append(_FIELD.pack(TAG_ORIGIN, len(origin) + len(queue)) + origin + queue)
    if extra.after or extra.after_flags & AFTER_FAILED:  # (failed: kept until deleted)
        after = b"".join(extra.after)
        parts.append(_FIELD.pack(TAG_AFTER, 1 + len(after)) + bytes((extra.after_flags,)) + after)
    if extra.log:
        log = b"".join(
            [_LOG_ENTRY.pack(ms, node, len(text)) + text for ms, node, text in extra.log]
        )
        parts.append(_FIELD.pack(TAG_LOG, len(log)) + log)
    if extra.claim:
        parts.append(_FIELD.pack(TAG_CLAIM, _CLAIM.size) + _CLAIM.pack(extra.claim))
    if extra.backoff is not None:
        parts.append(_FIELD.pack(TAG_BACKOFF, _BACKOFF.size) + _BACKOFF.pack(*extra.backoff))
    if extra.group is not None:
        parts.append(_FIELD.pack(TAG_GROUP, len(extra.group)) + extra.group)
    return b"".join(parts)


def _decode_after(extra: Extra, value: bytes) -> None:
    if not value or (len(value) - 1) % NODE_ID_LEN or value[0] > 3:
        raise BadJob("bad dependency list")
    after = tuple(value[i : i + NODE_ID_LEN] for i in range(1, len(value), NODE_ID_LEN))
    if not all(map(is_valid, after)):
        raise BadJob("invalid dependency job ID")
    extra.after = after
    extra.after_flags = value[0]


def _decode_log(extra: Extra, value: bytes) -> None:
    log: list[LogEntry] = []
    at, end = 0, len(value)
    while at < end:
        if at + _LOG_ENTRY.size > end:
            raise BadJob("truncated progress log")
        ms, node, size = _LOG_ENTRY.unpack_from(value, at)
        at += _LOG_ENTRY.size
        if at + size > end:
            raise BadJob("truncated progress log")
        log.append((ms, node, value[at : at + size]))
        at += size
    extra.log = log or None


def _decode_extra(data: bytes, at: int, end: int) -> Extra | None:
    """The tagged fields in ``data[at:end]`` (raise BadJob when they do not fill it)."""
    extra = Extra()
    while at < end:
        if at + _FIELD.size > end:
            raise BadJob("truncated extension")
        tag, size = _FIELD.unpack_from(data, at)
        at += _FIELD.size
        if at + size > end:
            raise BadJob("truncated extension")
        if tag == TAG_DEDUP:
            extra.dedup = data[at : at + size]
        elif tag == TAG_ORIGIN:
            if size < _ORIGIN.size:
                raise BadJob("truncated extension")
            origin_id, nacks, deliveries = _ORIGIN.unpack_from(data, at)
            if not is_valid(origin_id):
                raise BadJob("invalid origin job ID")
            extra.origin_id = origin_id
            extra.origin_nacks = nacks
            extra.origin_deliveries = deliveries
            extra.origin_queue = data[at + _ORIGIN.size : at + size]
        elif tag == TAG_AFTER:
            _decode_after(extra, data[at : at + size])
        elif tag == TAG_LOG:
            _decode_log(extra, data[at : at + size])
        elif tag == TAG_CLAIM:
            if size != _CLAIM.size:
                raise BadJob("bad claim")
            (extra.claim,) = _CLAIM.unpack_from(data, at)
            if extra.claim < 0:
                raise BadJob("bad claim")
        elif tag == TAG_BACKOFF:
            if size != _BACKOFF.size:
                raise BadJob("bad backoff")
            backoff = _BACKOFF.unpack_from(data, at)
            if backoff[0] not in (BACKOFF_FIXED, BACKOFF_EXPONENTIAL):
                raise BadJob("bad backoff")
            extra.backoff = backoff
        elif tag == TAG_GROUP:
            if not 0 < size <= MAX_GROUP:
                raise BadJob("bad group")
            extra.group = data[at : at + size]
        at += size
    if (
        extra.dedup is None
        and extra.origin_id is None
        and not extra.after
        and not extra.after_flags & AFTER_FAILED
        and extra.log is None
        and not extra.claim
        and extra.backoff is None
        and extra.group is None
    ):
        return None
    return extra


def _clamped(fields: tuple[Any, ...]) -> tuple[Any, ...]:
    """The fields of :func:`encode` brought into the ranges of the layout."""
    (length, jid, state_gc, flags, repl, etime, ctime, delay, retry, nacks, deliveries,
     queue_len) = fields  # fmt: skip
    state_gc = (state_gc & 0x0F) | (min(state_gc >> 4, 15) << 4)
    return (
        length, jid, state_gc, flags & 0xFF, _clamp(repl, MAX_U16), _clamp(etime, MAX_U32),
        ctime, _clamp(delay, MAX_U32), _clamp(retry, MAX_U32), _clamp(nacks, MAX_U16),
        _clamp(deliveries, MAX_U16), queue_len,
    )  # fmt: skip


def decode(data: bytes, bus: bool, now_s: int = 0, start: int = 0) -> tuple[Job, int]:
    """Parse the job at ``start`` in ``data``; return it and the offset after it.

    With ``bus=True`` the relative TTL is turned into an absolute ``etime``.
    The job's state, flags and counters are as sent; the caller decides what
    they become locally (Disque resets some of them on receipt).

    Every replica is made here, so the well-formed case is read straight
    through (struct reads that fail past the end, then one combined check that
    the parts fill the declared length exactly); what is wrong with a job that
    fails is worked out only then (:func:`_malformed`).
    """
    try:
        (length, jid, state_gc, flags, repl, etime, ctime, delay, retry, nacks, deliveries,
         queue_len) = _HEAD_FROM(data, start)  # fmt: skip
        queue_at = start + _HEAD_SIZE
        body_at = queue_at + queue_len + 4
        (body_len,) = _U32_FROM(data, body_at - 4)
        nodes_at = body_at + body_len
        (count,) = _U32_FROM(data, nodes_at)
    except struct.error:
        raise BadJob(_malformed(data[start:])) from None
    end = start + 4 + length
    # The lengths are unsigned, so the parts are in order; ending exactly at ``end``
    # puts them all inside the job (and its fixed part is then whole). Extensions
    # follow the node list of a job that has some.
    nodes_end = nodes_at + 4 + NODE_ID_LEN * count
    extra = None
    if (
        nodes_end != end
        or end > len(data)
        or state_gc & 0x0F > 3
        or flags >> PRIORITY_SHIFT > MAX_PRIORITY
        or ctime < 0
        or not is_valid(jid)
    ):
        if (
            nodes_end > end
            or end > len(data)
            or state_gc & 0x0F > 3
            or flags >> PRIORITY_SHIFT > MAX_PRIORITY
            or ctime < 0
            or not is_valid(jid)
        ):
            raise BadJob(_malformed(data[start:]))
        extra = _decode_extra(data, nodes_end, end)
    if not count:
        nodes = NO_NODES
    elif count < len(_NODE_LISTS):
        nodes = _NODE_LISTS[count].unpack_from(data, nodes_at + 4)
    else:
        nodes = tuple(
            [data[p : p + NODE_ID_LEN] for p in range(nodes_at + 4, nodes_end, NODE_ID_LEN)]
        )
    # Positional: qtime 0, holders_epoch 0.
    job = Job(jid, data[queue_at : body_at - 4], data[body_at:nodes_at], state_gc & 0x0F, repl,
              ctime, now_s + etime if bus else etime, delay, retry, 0, flags, nodes, 0, nacks,
              deliveries, state_gc >> 4)  # fmt: skip
    if extra is not None:
        job.extra = extra
    return job, end


def _malformed(data: bytes) -> str:
    """Why the job at the start of ``data`` does not decode (checked in layout order)."""
    size = len(data)
    if size < _HEAD_SIZE:
        return "truncated length" if size < 4 else "truncated job"
    (length, jid, state_gc, flags, _, _, ctime, *_, queue_len) = _HEAD_FROM(data)
    end = 4 + length
    if length < FIXED_AFTER_LENGTH or size < end:
        return "truncated job"
    if not is_valid(jid):
        return "invalid job ID"
    if state_gc & 0x0F > 3:
        return "invalid job state"
    if flags >> PRIORITY_SHIFT > MAX_PRIORITY:
        return "invalid priority"
    if ctime < 0:
        return "invalid ctime"
    body_at = _HEAD_SIZE + queue_len + 4
    if body_at > end:
        return "truncated string" if body_at - 4 > end else "truncated string length"
    (body_len,) = _U32_FROM(data, body_at - 4)
    nodes_at = body_at + body_len
    if nodes_at > end:
        return "truncated string"
    if nodes_at + 4 > end:
        return "truncated node list"
    return "bad node list length"


def decode_bus_job(data: bytes, now_s: int) -> Job | None:
    """The job a bus message carries (REPLJOB, an entry of YOURJOBS): ``data`` must be
    exactly one well-formed job of the bus variant, else None."""
    try:
        job, used = decode(data, True, now_s)
    except BadJob:
        return None
    return job if used == len(data) else None
