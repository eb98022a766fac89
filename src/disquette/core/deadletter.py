"""Dead letters: a job that failed too often leaves its queue (beyond Disque).

A queue's policy may bound how often a job is handed out again: ``max-nacks``
(NACKs), ``max-deliveries`` (NACKs and requeues by the retry timer together).
The node about to queue a job again checks, after counting that requeue: when
the job has gone past a bound, it is not queued. A new job is added to the
policy's ``deadletter`` queue instead (same body; the original's ID, queue and
counters in its :class:`~disquette.core.job.Extra`, shown by SHOW; added as
an asynchronous ADDJOB with the dead-letter queue's policy, as many copies as
its ``replicate`` or else the original's, as far as nodes are reachable), and the original
is acknowledged, which removes it from every node as ACKJOB would. Without a
``deadletter`` queue the job is only acknowledged (dropped, and counted).

Exactly one dead letter per job while the cluster is healthy: the dead letter's
de-duplication key is the original's ID, so a node that already holds a copy of
it (a second holder that requeued the same job, a repeated NACK) finds it
instead of adding another. Failures can make two, as they can make Disque
deliver a job twice (docs/queues.md): holders that requeue the job on both sides
of a partition, a holder that was down when the original was acknowledged and
requeues its copy on its return, a dead letter lost with a node that had no AOF
before the original's acknowledgement reached every holder. A dead letter is
never dead-lettered again: it stays in its queue until acknowledged or expired.
When the dead letter cannot be added (this node out of memory or leaving, the
dead-letter queue paused or full), the job is queued again as if no bound
applied, and tried again at its next requeue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from disquette.core import acks
from disquette.core.errors import DisqueError
from disquette.core.job import Extra, Job

if TYPE_CHECKING:
    from disquette.core.node import Node


def exceeded(job: Job, max_nacks: int, max_deliveries: int) -> bool:
    """Whether a job about to be queued again has gone past its policy's bounds."""
    if max_nacks and job.nacks > max_nacks:
        return True
    return bool(max_deliveries) and job.nacks + job.additional_deliveries >= max_deliveries


def divert(node: Node, job: Job) -> bool:
    """Called by ``Node.enqueue`` for a job about to be queued again, its requeue
    counted: dead-letter it if its policy says so. True when the job was taken out of
    its queue's life (acknowledged)."""
    if job.extra is not None and job.extra.origin_id is not None:
        return False  # a dead letter is not dead-lettered again
    rules = node.policies.for_queue(job.queue)  # type: ignore[arg-type]
    if rules is None or not exceeded(job, rules.get("max-nacks"), rules.get("max-deliveries")):
        return False
    target = rules.deadletter
    if target is None:
        node.dropped_by_limits += 1
    elif not dead_letter(node, job, target, "queued again"):
        return False
    node.acknowledge(job, schedule=False)
    acks.gc_attempt(node, job)
    return True


def target_of(node: Node, job: Job) -> bytes | None:
    """The dead-letter queue of a job's queue, if its policy names one."""
    if not node.policies.active:
        return None
    rules = node.policies.for_queue(job.queue)  # type: ignore[arg-type]
    return None if rules is None else rules.deadletter


def dead_letter(node: Node, job: Job, target: bytes, otherwise: str) -> bool:
    """Add the dead letter of ``job`` to ``target``; False (and a log line saying what
    happens ``otherwise``) when it cannot be added now."""
    extra = Extra(job.id, job.id, job.queue, job.nacks, job.additional_deliveries)
    target_rules = node.policies.for_queue(target)
    repl = (target_rules.get("replicate") if target_rules else 0) or job.repl
    repl = min(repl, len(node.reachable_nodes()) + 1)
    try:
        node.add_job(None, target, job.body or b"", 0, repl=repl, async_=True, extra=extra)
    except DisqueError as error:
        node.cluster.on_log(
            "warning",
            f"Dead letter of {job.id.decode()} not added to "
            f"{target.decode(errors='replace')}: "
            f"{error.reply.strip().decode(errors='replace')}; {otherwise}",
        )
        return False
    node.dead_lettered += 1
    return True
