"""Postponed requeues: NACK DELAY and retry backoff (beyond Disque).

Disque queues a NACKed job again at once, and a job whose retry timer fires is
queued at once too: a job that fails because something it needs is down comes
back at full speed, again and again. Here a requeue can be *postponed*:

* ``NACK id ... DELAY seconds`` puts the jobs back after the delay;
* a backoff, given per job (``ADDJOB ... BACKOFF fixed|exponential base [cap]``)
  or by the queue's policy (``backoff``, ``backoff-base``, ``backoff-cap``),
  postpones every requeue, by a NACK or by the retry timer: ``fixed`` waits
  ``base`` seconds each time, ``exponential`` waits ``base x 2^(n-1)`` seconds up
  to ``cap``, where ``n`` counts the job's NACKs and additional deliveries so far
  (this requeue's included). A NACK's own DELAY wins over the backoff
  (``DELAY 0``: at once), and ENQUEUE queues at once.

A postponed job stays ``active`` on the node that postponed it, with its
requeue time at the end of the delay and the :data:`~disquette.core.job.POSTPONED`
flag; its counters are counted at once (the NACK, or the delivery the timer
ends). Its other holders hear ``POSTPONE job flags delay``: they count the same,
take their copy out of its queue if it was queued there, and move their own
requeue time past the delay plus a retry period, as QUEUED moves it past a
retry period. So the delay travels with the job: a requeue elsewhere respects
it, unless that holder was cut off when the NACK happened (then it requeues
on its own timer, as Disque's holders do). When the delay is over, the node
queues the job, counting nothing more, and tells the holders QUEUED as any
requeue does. A node that postponed the job keeps it postponed whatever the other
holders say (their POSTPONE, QUEUED or WORKING only push the end later), and
answers a WILLQUEUE or a QUEUED from a holder that missed it with the delay left
(core/requeue.py). A job NACKed
again while postponed is counted and postponed again; ENQUEUE queues it at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.core import messages as msg
from disquette.core import requeue
from disquette.core.job import (
    BACKOFF_FIXED,
    BACKOFF_KINDS,
    BCAST_WILLQUEUE,
    POSTPONED,
    QUEUED,
)
from disquette.core.messages import Message

if TYPE_CHECKING:
    from disquette.core.job import Job
    from disquette.core.node import Node

#: A policy's ``backoff-base`` and ``backoff-cap`` when it does not set them (s).
DEFAULT_BASE: Final = 1
DEFAULT_CAP: Final = 3600
MAX_SECONDS: Final = 1 << 32
_MAX_SHIFT: Final = 40  # 2^40 s is past any cap


def install(node: Node) -> None:
    node.message_handlers[msg.POSTPONE] = on_postpone


def delay_of(node: Node, job: Job) -> int:
    """The backoff of a requeue of ``job`` due now, in ms (0: none applies): the
    job's own, else its queue's policy's."""
    extra = job.extra
    spec = None if extra is None else extra.backoff
    if spec is None:
        if not node.policies.active:
            return 0
        rules = node.policies.for_queue(job.queue)  # type: ignore[arg-type]
        kind = None if rules is None else rules.options.get("backoff")
        if rules is None or not isinstance(kind, bytes):
            return 0
        spec = (
            BACKOFF_KINDS[kind],
            rules.get("backoff-base") or DEFAULT_BASE,
            rules.get("backoff-cap") or DEFAULT_CAP,
        )
    kind_id, base, cap = spec
    if kind_id == BACKOFF_FIXED:
        return base * 1000
    attempts = max(job.nacks + job.additional_deliveries, 1)
    return min(cap, base << min(attempts - 1, _MAX_SHIFT)) * 1000


def postpone(node: Node, job: Job, delay_ms: int, flag: int, now: int) -> None:
    """Queue ``job`` (active, its counters counted) only ``delay_ms`` from now; its
    holders hear it with the counter ``flag`` of this requeue."""
    job.flags = (job.flags | POSTPONED) & ~BCAST_WILLQUEUE
    job.qtime = now + delay_ms
    node.postponed += 1
    if job.nodes_delivered is not node.myself_only:
        node.tell_holders(job, (msg.POSTPONE, job.id, flag, delay_ms))
    node.reschedule(job)


def on_postpone(node: Node, sender: bytes, message: Message) -> None:
    """Another holder postponed the job's requeue: count as it did, keep no copy
    queued here (nor count it in flight for a concurrency limit), and requeue here no
    sooner than a retry period after its delay (a requeue postponed here too stays so,
    to the later end: core/requeue.py)."""
    job = requeue.from_holder(node, sender, message[1])
    if job is None:
        return
    if node.rates.held:
        node.rates.release(job)  # requeued elsewhere: its delivery here is over
    if job.state == QUEUED:
        node.dequeue(job)
    requeue.count(job, message[2])
    requeue.postpone_timer(node, job, message[3])
