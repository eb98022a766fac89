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

Input is untrusted (a peer, a file): :func:`decode` checks every length and
raises :class:`BadJob` instead of reading past the end or accepting garbage.
"""

from __future__ import annotations

import struct

from disquette.core.ids import is_valid
from disquette.core.job import DELIVERED, Job

_FIXED = struct.Struct("<40sBBHIqIIHH")  # from the job ID to additional deliveries
_U32 = struct.Struct("<I")
NODE_ID_LEN = 40
MAX_U16 = 0xFFFF
MAX_U32 = 0xFFFFFFFF


class BadJob(ValueError):
    """The bytes are not a well-formed serialized job."""


def _clamp(value: int, limit: int) -> int:
    return min(max(value, 0), limit)


def encode(job: Job, *, bus: bool, now_s: int = 0) -> bytes:
    """Serialize ``job``; ``bus=True`` makes the relative-TTL variant (needs ``now_s``)."""
    if bus:
        etime = _clamp(job.etime - now_s + 1, MAX_U32)
        flags = job.flags & ~DELIVERED
    else:
        etime = _clamp(job.etime, MAX_U32)
        flags = job.flags
    queue = job.queue or b""
    body = job.body or b""
    nodes = job.nodes_delivered
    parts = [
        _FIXED.pack(
            job.id,
            (job.state & 0x0F) | (min(job.gc_retry, 15) << 4),
            flags & 0xFF,
            _clamp(job.repl, MAX_U16),
            etime,
            job.ctime,
            _clamp(job.delay, MAX_U32),
            _clamp(job.retry, MAX_U32),
            _clamp(job.nacks, MAX_U16),
            _clamp(job.additional_deliveries, MAX_U16),
        ),
        _U32.pack(len(queue)),
        queue,
        _U32.pack(len(body)),
        body,
        _U32.pack(len(nodes)),
        *nodes,
    ]
    payload = b"".join(parts)
    return _U32.pack(len(payload)) + payload


def decode(data: bytes | memoryview, *, bus: bool, now_s: int = 0) -> tuple[Job, int]:
    """Parse one job at the start of ``data``; return it and the bytes consumed.

    With ``bus=True`` the relative TTL is turned into an absolute ``etime``.
    The job's state, flags and counters are as sent; the caller decides what
    they become locally (Disque resets some of them on receipt).
    """
    view = memoryview(data)
    if len(view) < 4:
        raise BadJob("truncated length")
    (length,) = _U32.unpack_from(view, 0)
    end = 4 + length
    if length < _FIXED.size + 12 or len(view) < end:
        raise BadJob("truncated job")
    (jid, state_gc, flags, repl, etime, ctime, delay, retry, nacks, deliveries) = (
        _FIXED.unpack_from(view, 4)
    )
    if not is_valid(jid):
        raise BadJob("invalid job ID")
    state = state_gc & 0x0F
    if state > 3:
        raise BadJob("invalid job state")
    pos = 4 + _FIXED.size
    queue, pos = _string(view, pos, end)
    body, pos = _string(view, pos, end)
    if pos + 4 > end:
        raise BadJob("truncated node list")
    (count,) = _U32.unpack_from(view, pos)
    pos += 4
    if pos + count * NODE_ID_LEN != end:
        raise BadJob("bad node list length")
    nodes = tuple(bytes(view[p : p + NODE_ID_LEN]) for p in range(pos, end, NODE_ID_LEN))
    job = Job(jid, queue, body, state, repl, ctime, now_s + etime if bus else etime, delay, retry)
    job.gc_retry = state_gc >> 4
    job.flags = flags
    job.nacks = nacks
    job.additional_deliveries = deliveries
    job.nodes_delivered = nodes
    return job, end


def _string(view: memoryview, pos: int, end: int) -> tuple[bytes, int]:
    if pos + 4 > end:
        raise BadJob("truncated string length")
    (n,) = _U32.unpack_from(view, pos)
    pos += 4
    if pos + n > end:
        raise BadJob("truncated string")
    return bytes(view[pos : pos + n]), pos + n


def decode_all(data: bytes, *, bus: bool, now_s: int = 0) -> list[Job]:
    """Parse a concatenation of serialized jobs (as YOURJOBS carries)."""
    jobs = []
    pos = 0
    view = memoryview(data)
    while pos < len(view):
        job, used = decode(view[pos:], bus=bus, now_s=now_s)
        jobs.append(job)
        pos += used
    return jobs
