"""The replies the core decides itself: jobs handed to GETJOB and the errors of
a pending ADDJOB. They are encoded here because the core sends them both as the
direct answer of a command and later, when it wakes a blocked client.
"""

from __future__ import annotations

from typing import Final

from disquette.core.job import Job
from disquette.protocol import reply

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
