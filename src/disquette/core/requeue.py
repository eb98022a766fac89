"""Requeue coordination between the holders of a job (reference sections 8.2 and 8.3).

Every holder of an unacknowledged job may queue it again when its requeue
time comes, so several nodes could deliver it at once. The holders keep each
other informed, best effort:

* WILLQUEUE, sent 500 ms before a node queues an ``active`` job (the timer in
  ``Node.process_jobs``), tells the others to speak up: a node that has it
  queued answers by broadcasting QUEUED, a node that has it acknowledged
  answers SETACK, a node that handed it out (to a client, or to another node
  by federation) answers with its holders (HOLDERS), and every receiver
  learns that the sender holds a copy. A node waiting to queue a job asks
  the holders it learns of meanwhile too (``speak_to_new_holders``): a job moved
  by federation is queued where it went, and that node must speak up.
* QUEUED, broadcast when a node queues a job again (and carrying the NACK and
  additional-delivery counters), postpones everybody else's requeue time; a
  node that has the job queued too drops it from its queue when the sender
  wins the node comparison below, so one copy stays queued.
* WORKING (the command) does the same but always dequeues and counts nothing.
* Beyond Disque, a node whose requeue of the job is postponed (NACK DELAY, a
  backoff: core/backoff.py) answers a WILLQUEUE or a QUEUED with POSTPONE and
  the delay left, and keeps its own: a holder that missed the postponement
  does not queue the job before it ends (or dequeues it).
* ENQUEUE asks a holder to queue the job now (or after a delay): external
  replication hands its job to a replica this way. A job waiting for others
  (core/dependency.py) ignores it, and QUEUED releases it.

The comparison mixes each node ID with the job ID's random part before
comparing bytewise, so which node keeps the job queued varies from job to job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.core import acks
from disquette.core import messages as msg
from disquette.core.job import (
    ACKED,
    ACTIVE,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    DELIVERED,
    POSTPONED,
    QUEUED,
)
from disquette.core.messages import Message
from disquette.core.queue import PAUSE_IN

if TYPE_CHECKING:
    from disquette.core.job import Job
    from disquette.core.node import Node

_MIX_OFFSET: Final = 11  # the job ID's random part: bytes 11..34
_MIX_LEN: Final = 24


def install(node: Node) -> None:
    """Register the WILLQUEUE, QUEUED, WORKING and ENQUEUE handlers."""
    handlers = node.message_handlers
    handlers[msg.WILLQUEUE] = on_willqueue
    handlers[msg.QUEUED] = on_queued
    handlers[msg.WORKING] = on_queued
    handlers[msg.ENQUEUE] = on_enqueue


def sender_wins(sender: bytes, receiver: bytes, job_id: bytes) -> bool:
    """Whether ``sender`` keeps the job queued rather than ``receiver``.

    Byte ``i`` of each node ID is XORed with byte ``11 + i % 24`` of the job
    ID, and the mixed IDs are compared bytewise; the greater one wins.
    """
    for i, (a, b) in enumerate(zip(sender, receiver, strict=False)):
        if a != b:
            k = job_id[_MIX_OFFSET + i % _MIX_LEN]
            return a ^ k > b ^ k
    return False


def on_willqueue(node: Node, sender: bytes, message: Message) -> None:
    """The sender is about to queue the job: record it as a holder, then tell it
    the job is queued here already (QUEUED to all holders) or acknowledged (SETACK)."""
    job = node.jobs.get(message[1])
    if job is None:
        return
    state = job.state
    if state in (ACTIVE, QUEUED):
        learn_holder(node, job, sender)
    if state == QUEUED:
        node.tell_holders(job, (msg.QUEUED, job.id, 0))
    elif state == ACKED:
        acks.send_setack(node, sender, job.id, len(job.nodes_delivered))
    elif hold_back(node, job, sender):
        pass
    elif state == ACTIVE and job.flags & DELIVERED:
        # Handed out from here, maybe to a node the sender never heard of (federation
        # moves a job without telling its other holders): the sender asks them too.
        node.send(sender, (msg.HOLDERS, job.id, job.nodes_delivered))


def on_queued(node: Node, sender: bytes, message: Message) -> None:
    """QUEUED or WORKING from another holder: postpone our requeue, maybe dequeue.

    A job queued here leaves the queue on WORKING, or on QUEUED when the sender
    wins the comparison. QUEUED also carries the counter increments. A job
    acknowledged here answers SETACK, to make the sender acknowledge it too.
    """
    job = from_holder(node, sender, message[1])
    if job is None:
        return
    working = message[0] == msg.WORKING
    if not working and hold_back(node, job, sender):
        count(job, message[2])
        return
    if not working and job.waiting:
        node.deps.cancel(job)  # the sender released it (core/dependency.py)
    if not working and node.rates.held:
        node.rates.release(job)  # queued elsewhere: its delivery here is over
    if job.state == QUEUED:
        if working or sender_wins(sender, node.myself, job.id):
            node.dequeue(job)
        else:  # both queued and we win: the sender must hear it to dequeue its copy
            node.send(sender, (msg.QUEUED, job.id, 0))
    postpone_timer(node, job, 0)
    if not working:
        count(job, message[2])


def hold_back(node: Node, job: Job, sender: bytes) -> bool:
    """A holder is about to queue the job, or queued it (WILLQUEUE, QUEUED), while its
    requeue is postponed here (core/backoff.py): it missed the POSTPONE (cut off, or
    a copy made since), so it hears it again with the delay left -- it dequeues its
    copy and waits past the delay -- and the delay here stands. False when no
    requeue is postponed here."""
    left = postponed_left(node, job)
    if not left:
        return False
    node.send(sender, (msg.POSTPONE, job.id, 0, left))
    return True


def postponed_left(node: Node, job: Job) -> int:
    """The ms left before a requeue postponed here (core/backoff.py) is due; 0: none."""
    if not job.flags & POSTPONED:
        return 0
    left = job.qtime - node.clock()
    return left if left > 0 else 0


def from_holder(node: Node, sender: bytes, job_id: bytes) -> Job | None:
    """The job another holder speaks of (QUEUED, WORKING, POSTPONE), the sender now
    known as a holder; None when it is not held here, or acknowledged here (the
    sender then hears SETACK, to acknowledge it too)."""
    job = node.jobs.get(job_id)
    if job is None:
        return None
    if job.state == ACKED:
        acks.send_setack(node, sender, job.id, len(job.nodes_delivered))
        return None
    learn_holder(node, job, sender)
    return job


def postpone_timer(node: Node, job: Job, delay_ms: int) -> None:
    """Another holder queued the job (or will in ``delay_ms``, or works on it): requeue
    it here no sooner than a retry period after that. A requeue postponed here
    (core/backoff.py) stays postponed, to the later of the two ends: this node goes
    on holding back the holders that missed its delay."""
    if not job.retry:
        return
    when = node.clock() + delay_ms + job.retry * 1000 + node.jitter()
    if postponed_left(node, job):
        if when > job.qtime:
            job.qtime = when
            node.reschedule(job)
        return
    job.flags = (job.flags | BCAST_WILLQUEUE) & ~POSTPONED
    job.qtime = when
    node.reschedule(job)


def count(job: Job, flags: int) -> None:
    """The counter increments another holder's requeue carries (QUEUED, POSTPONE)."""
    if flags & msg.INCR_NACKS:
        job.nacks += 1
    if flags & msg.INCR_DELIV:
        job.additional_deliveries += 1


def learn_holder(node: Node, job: Job, sender: bytes) -> None:
    """A node that speaks of a job it queues holds a copy: if it is news here, every
    holder hears the new list (HOLDERS), so that copies queued apart meet."""
    if node.merge_delivered(job, (sender,)):
        node.tell_holders(job, (msg.HOLDERS, job.id, job.nodes_delivered))


def speak_to_new_holders(node: Node, job: Job, added: tuple[bytes, ...]) -> None:
    """Holders just learned of hear what could leave two copies queued: a copy queued
    here says so (QUEUED: the ID tie-break then leaves one); a copy waiting to be queued
    here (its WILLQUEUE already sent) asks them too, so that a copy queued there stops
    this one."""
    if job.state == QUEUED:
        message: Message = (msg.QUEUED, job.id, 0)
    elif job.state == ACTIVE and job.qtime and not job.flags & BCAST_WILLQUEUE:
        message = (msg.WILLQUEUE, job.id)
    else:
        return
    for node_id in added:
        if node_id != node.myself:
            node.send(node_id, message)


def on_enqueue(node: Node, sender: bytes, message: Message) -> None:
    """Queue a job that is not queued here, now or after the given delay.

    Ignored for unknown, queued or acknowledged jobs and when the queue is
    paused in input; beyond Disque, for a job whose requeue is postponed here (an
    ENQUEUE late or duplicated: the handover it asks for came before the delivery
    that was NACKed). The first queueing after ENQUEUE is not announced.

    An at-most-once job handed over by external replication is its only copy,
    stored here without a requeue time; Disque then never queues it (reference
    section 15). It is given one here, so that it is queued exactly once.
    """
    job = node.jobs.get(message[1])
    if job is None or job.state >= QUEUED or job.waiting or postponed_left(node, job):
        return  # a waiting job is queued by its holders when released (core/dependency.py)
    queue = node.queues.get(job.queue)  # type: ignore[arg-type]
    if queue is not None and queue.paused & PAUSE_IN:
        return
    job.flags &= ~BCAST_QUEUED
    delay = message[2]
    first_and_only = job.retry == 0 and not job.qtime and not job.flags & DELIVERED
    if delay == 0:
        if first_and_only:
            job.qtime = node.clock()
        node.enqueue(job, queue=queue)
    elif first_and_only or (job.retry and job.qtime):
        job.qtime = node.clock() + delay * 1000
        node.reschedule(job)
