"""Claim numbers: a fencing token for each delivery of a job (GETJOB WITHCLAIM,
CLAIM n on ACKJOB, NACK and WORKING; beyond Disque).

A job's claim number (in its :class:`~disquette.core.job.Extra`) starts at 0. A
GETJOB WITHCLAIM that delivers it adds one and returns the new number; once a job
has a claim, every later delivery adds one too (with WITHCLAIM or not), and the
node tells the job's other holders (CLAIM), which keep the larger of theirs and
the one they hear -- a Lamport clock per job. A worker passes its number back
with ``CLAIM n``; a node that knows a larger one refuses the command: the job
was handed to another worker since, whose work wins (a worker that must not act
after its lease passed on checks its claim, as with any fencing token).

What the number guarantees. On one node it never goes backwards (it only grows,
and the job's AOF record is written again when it does). Across the cluster,
while the holders of a job talk, each delivery gets a number larger than every
earlier one it could have heard of (two deliveries on two nodes closer together
than the bus's latency may get the same number), so a stale holder is refused
everywhere once the news has spread. Under a partition, two nodes that each
deliver the job may hand out the same number, and a node that has not heard of
a newer claim accepts the older one; when they talk again both keep the larger.
A node that holds no copy accepts any claim (ACKJOB of an unknown job is a dummy
ack in Disque). So the claim is a fencing token as good as the bus between the
holders, and best effort under partitions, like every delivery guarantee of
Disque.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.core import messages as msg
from disquette.core import replies
from disquette.core.errors import DisqueError
from disquette.core.job import ACKED, Job
from disquette.core.messages import Message

if TYPE_CHECKING:
    from disquette.core.node import Node

#: A claim heard from a peer at or past this is ignored (the AOF stores 63 bits).
MAX_CLAIM: Final = 1 << 62


def install(node: Node) -> None:
    node.message_handlers[msg.CLAIM] = on_claim


def deliver(node: Node, job: Job) -> int:
    """A delivery of a job that has (or asks for) a claim: the next number."""
    extra = node.extra_of(job)
    before = node.extra_size(job)
    extra.claim += 1
    node.extra_changed(job, before)
    node.persist(job)
    if job.nodes_delivered is not node.myself_only:
        node.tell_holders(job, (msg.CLAIM, job.id, extra.claim))
    return extra.claim


def check(node: Node, job_id: bytes, claim: int) -> None:
    """Refuse (-STALECLAIM) a claim older than the latest this node knows for the job."""
    job = node.jobs.get(job_id)
    if job is None or job.extra is None or job.extra.claim <= claim:
        return
    raise DisqueError(
        replies.error(
            f"STALECLAIM Job {job_id.decode()} was delivered again since claim {claim} "
            f"(now {job.extra.claim})"
        )
    )


def on_claim(node: Node, sender: bytes, message: Message) -> None:
    """Another holder delivered the job with this claim: keep the larger number."""
    job = node.jobs.get(message[1])
    if job is None or job.state == ACKED:
        return
    claim = message[2]
    if not 0 < claim < MAX_CLAIM:
        return
    extra = node.extra_of(job)
    if claim > extra.claim:
        before = node.extra_size(job)
        extra.claim = claim
        node.extra_changed(job, before)
        node.persist(job)
