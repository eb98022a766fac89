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


def job_entry(job: Job, withcounters: bool) -> bytes:
    """One job as GETJOB and QPEEK show it: ``[queue, id, body]`` (+ counters)."""
    queue = job.queue or b""
    body = job.body or b""
    if withcounters:
        return b"*7\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$%d\r\n%s\r\n$5\r\nnacks\r\n:%d\r\n" \
            b"$21\r\nadditional-deliveries\r\n:%d\r\n" % (
                len(queue), queue, job.id, len(body), body, job.nacks,
                job.additional_deliveries,
            )  # fmt: skip
    return b"*3\r\n$%d\r\n%s\r\n$40\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(queue), queue, job.id, len(body), body,
    )  # fmt: skip


def job_entries(jobs: list[Job], withcounters: bool) -> bytes:
    return b"*%d\r\n%s" % (len(jobs), b"".join([job_entry(j, withcounters) for j in jobs]))


def job_id(job: Job) -> bytes:
    """ADDJOB's reply: the ID as a status reply."""
    return b"+%s\r\n" % job.id
