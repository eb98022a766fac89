"""Acknowledgements and their garbage collection across the cluster (reference 8.4).

An acknowledged job must not come back, so its copies cannot simply vanish: a
holder that forgot the ack might requeue the job. The node where the ack
happened keeps the job ``acked`` and runs a GC attempt (Disque's START_GC):
SETACK to every holder that has not confirmed, each holder acknowledges its
copy and answers GOTACK, and once every holder in *nodes-delivered* confirmed,
DELJOB goes to all of them and the job is forgotten everywhere. Attempts repeat
with an exponential backoff (1 s doubling, capped at 3 minutes, with jitter)
until they succeed or the job expires.

A *dummy ack* is an ACKJOB for a job this node never saw (it may live on other
nodes): an ``acked`` record with no body and no holders, whose SETACK goes to
every known node. A node that knows the job takes over the collection (it
answers GOTACK known=1 and the dummy is dropped); when every node answered that
it does not know the job, the dummy is dropped too.

A SETACK receiver that knows more holders than the sender does (its
*nodes-delivered* is larger than the sender's count) runs a GC attempt itself,
so the node with the widest view ends up collecting the job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from disquette.core import messages as msg
from disquette.core import replication
from disquette.core.ids import ttl_minutes
from disquette.core.job import ACKED, WAIT_REPL, Job
from disquette.core.messages import Message

if TYPE_CHECKING:
    from disquette.core.node import Node

GC_MAX_RETRY = 10
GC_MIN_PERIOD = 1000
GC_MAX_PERIOD = 180_000


def install(node: Node) -> None:
    """Register the SETACK, GOTACK and DELJOB handlers."""
    handlers = node.message_handlers
    handlers[msg.SETACK] = on_setack
    handlers[msg.GOTACK] = on_gotack
    handlers[msg.DELJOB] = on_deljob


def next_gc_time(node: Node, job: Job) -> int:
    """When the next GC attempt of an acknowledged job is due (absolute ms)."""
    period = GC_MIN_PERIOD << job.gc_retry
    if period > GC_MAX_PERIOD:
        period = GC_MAX_PERIOD
    return node.clock() + period + node.jitter()


def dummy_ack(node: Node, job_id: bytes) -> Job:
    """Register an ack for a job unknown here, kept as long as the ID's TTL says."""
    job = Job(job_id, None, None, state=ACKED)
    job.etime = node.clock() // 1000 + ttl_minutes(job_id) * 60
    node.register(job, schedule=False)
    return job


def gc_attempt(node: Node, job: Job) -> None:
    """One GC attempt (Disque's tryJobGC): forget the job if every holder knows,
    else SETACK to the holders that have not confirmed, and schedule the next."""
    if job.gc_retry < GC_MAX_RETRY:
        job.gc_retry += 1
    confirmed = job.nodes_confirmed
    if confirmed is None:
        confirmed = job.nodes_confirmed = node.myself_only
    delivered = job.nodes_delivered
    if delivered:
        if len(delivered) == len(confirmed):
            node.delete_job(job)
            return
        targets = delivered
    else:  # a dummy ack: ask everybody
        if node.cluster_size() == 1:
            node.delete_job(job)
            return
        targets = node.known_nodes()
    setack = (msg.SETACK, job.id, len(delivered))
    for node_id in targets:
        if node_id not in confirmed:
            node.send(node_id, setack)
    job.qtime = next_gc_time(node, job)
    node.reschedule(job)


def on_setack(node: Node, sender: bytes, message: Message) -> None:
    """Acknowledge our copy; answer GOTACK unless we know more holders than the
    sender (then collect it ourselves, still answering GOTACK to a dummy ack)."""
    job_id, may_have = message[1], message[2]
    job = node.jobs.get(job_id)
    if job is not None:
        if job.state == WAIT_REPL:
            replication.achieved(node, job)
            if node.jobs.get(job_id) is not job:
                return  # externally replicated: handed over and gone
        if job.state != ACKED:
            node.acknowledge(job)
    if job is None or len(job.nodes_delivered) <= may_have:
        node.send(sender, (msg.GOTACK, job_id, 0 if job is None else 1))
        return
    if may_have == 0:
        node.send(sender, (msg.GOTACK, job_id, 1))
    gc_attempt(node, job)


def on_gotack(node: Node, sender: bytes, message: Message) -> None:
    """A holder confirmed the ack (known=1) or does not have the job (known=0).

    Only acknowledged jobs care. A dummy ack is dropped as soon as a node knows
    the job, or when every known node said it does not; a real job is dropped
    everywhere (DELJOB) when every holder confirmed.
    """
    job = node.jobs.get(message[1])
    if job is None or job.state != ACKED:
        return
    known = message[2]
    dummy = not job.nodes_delivered
    if dummy and known:
        node.delete_job(job)
        return
    if known or sender in job.nodes_delivered:
        node.merge_delivered(job, (sender,))
        confirmed = job.nodes_confirmed
        if confirmed is not None and sender not in confirmed:
            job.nodes_confirmed = (*confirmed, sender)
    if dummy:
        confirmed = job.nodes_confirmed or node.myself_only
        if sender not in confirmed:
            confirmed += (sender,)
        job.nodes_confirmed = confirmed
        if len(confirmed) >= node.cluster_size():
            node.delete_job(job)
        return
    confirmed = job.nodes_confirmed
    if confirmed is not None and len(confirmed) >= len(job.nodes_delivered):
        node.tell_holders(job, (msg.DELJOB, job.id))
        node.delete_job(job)


def on_deljob(node: Node, sender: bytes, message: Message) -> None:
    """Forget our copy (a pending ADDJOB for it fails with -NOREPL)."""
    job = node.jobs.get(message[1])
    if job is not None:
        node.delete_answering_waiter(job)
