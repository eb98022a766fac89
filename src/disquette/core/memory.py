"""Memory accounting and Disque's maxmemory warning levels.

Disque measures memory with its allocator; an interpreter's heap says nothing
useful at the scale of a small ``maxmemory``. disquette instead accounts the
dataset itself: every job, queue and dummy ACK adds an estimate of what it
costs, on top of the fixed cost of the empty registries, and the server adds
its clients' buffers. ``used_memory`` therefore starts at about half a
megabyte, as Disque's does, and small limits mean what they mean in Disque.
"""

from __future__ import annotations

from disquette.core.job import Job
from disquette.core.scan import BUCKETS

# What an empty node holds: the bucket tables of the job and queue registries.
NODE_OVERHEAD = 2 * BUCKETS * 64

JOB_OVERHEAD = 160  # the record, its ID, its slots in the registry, queue and schedule
QUEUE_OVERHEAD = 256
NODE_ID_COST = 48


def job_cost(job: Job) -> int:
    cost = JOB_OVERHEAD + NODE_ID_COST * len(job.nodes_delivered)
    if job.body is not None:
        cost += len(job.body)
    if job.queue is not None:
        cost += len(job.queue)
    return cost


def held_here_cost(queue: bytes) -> int:
    """:func:`job_cost` of a job of ``queue`` that only this node holds, but its body."""
    return JOB_OVERHEAD + NODE_ID_COST + len(queue)


def queue_cost(name: bytes) -> int:
    return QUEUE_OVERHEAD + len(name)


def warning_level(used: int, maxmemory: int) -> int:
    """0 normal, 1 above 75 %, 2 above 95 % (0 maxmemory counts as always above)."""
    if maxmemory == 0:
        return 2
    if used > maxmemory // 100 * 95:
        return 2
    if used > maxmemory // 100 * 75:
        return 1
    return 0


def human_bytes(n: int) -> str:
    """Disque's human-readable size: ``123B``, then two decimals with K, M, G, T, P."""
    if n < 1024:
        return f"{n}B"
    value = float(n)
    for suffix in "KMGTP":
        value /= 1024
        if value < 1024 or suffix == "P":
            return f"{value:.2f}{suffix}"
    raise AssertionError("unreachable")
