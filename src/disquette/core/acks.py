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

**Batches** (beyond Disque, whose messages name one job each): the three
messages carry many jobs, so that a stream of acks costs a few messages per
batch rather than three per job. The SETACKs and DELJOBs a node starts (ACKJOB,
FASTACK, GC retries, a failed ADDJOB, answers to WILLQUEUE and QUEUED) wait in
an :class:`AckBatch` per destination, which goes out as one message per kind
when it holds ``ACK_BATCH_MAX`` jobs or ``ACK_BATCH_DELAY`` ms after the first
entry of the oldest batch (the job timer runs then: ``Node.next_wakeup``). A
received batch is answered at once, in one batch: the GOTACKs of a SETACK, the
DELJOBs a GOTACK completes. Job by job, the rules above are unchanged; the
delay only lets the copies of an acknowledged job live a few milliseconds
longer, well inside the first GC retry (1 s), so no retry is spent on it.

The two bounds are a trade: a node killed (SIGKILL) loses the acks it had not
sent yet, and their jobs are delivered again by their other holders (at least
once still holds). The size bound caps that at 100 jobs per peer at any load; at
a low load the 10 ms caps it further. At 100 jobs a batch, a busy stream costs
0.03 messages per acknowledged job and peer. A graceful shutdown sends what
waits (``Node.flush_acks``).

Beyond Disque, a SETACK of a job whose outcome this node keeps (a result, a
cancellation: :mod:`disquette.core.outcome`) goes right behind that outcome, each
time: a holder that acknowledges its copy then knows what the acknowledgement was,
even when the OUTCOME sent at the time was lost with its connection (TCP delivers
in order, so a SETACK that arrives found its OUTCOME there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from disquette.core import messages as msg
from disquette.core import outcome, replication
from disquette.core.ids import ttl_minutes
from disquette.core.job import ACKED, WAIT_REPL, Job
from disquette.core.messages import Message

if TYPE_CHECKING:
    from disquette.core.node import Node

GC_MAX_RETRY: Final = 10
GC_MIN_PERIOD: Final = 1000
GC_MAX_PERIOD: Final = 180_000
ACK_BATCH_DELAY: Final = 10  # ms the first entry of a batch waits for more
ACK_BATCH_MAX: Final = 100  # jobs per batch: a full one goes at once


_KINDS: Final = (msg.SETACK, msg.GOTACK, msg.DELJOB)  # the order a batch goes out in


class AckBatch:
    """The SETACK, GOTACK and DELJOB entries waiting to go to one node, by kind, flat
    as they travel (``job_id, number`` pairs; job IDs alone for DELJOB)."""

    __slots__ = ("entries", "size")

    def __init__(self) -> None:
        self.entries: dict[int, list[Any]] = {kind: [] for kind in _KINDS}
        self.size = 0  # jobs


def install(node: Node) -> None:
    """Register the SETACK, GOTACK and DELJOB handlers."""
    handlers = node.message_handlers
    handlers[msg.SETACK] = on_setack
    handlers[msg.GOTACK] = on_gotack
    handlers[msg.DELJOB] = on_deljob


# ---------------------------------------------------------------------------- batches


def _add(node: Node, node_id: bytes, kind: int, entry: tuple[Any, ...]) -> None:
    """Queue one job's entry for ``node_id``; a new batch starts the delay if it is the
    only one, a full one goes at once."""
    outbox = node.ack_outbox
    batch = outbox.get(node_id)
    if batch is None:
        if not outbox:
            node.ack_deadline = deadline = node.clock() + ACK_BATCH_DELAY
            node.wake_by(deadline)
        batch = outbox[node_id] = AckBatch()
    batch.entries[kind] += entry
    batch.size += 1
    if batch.size >= ACK_BATCH_MAX:
        flush(node, node_id)


def send_setack(node: Node, node_id: bytes, job_id: bytes, may_have: int) -> None:
    """SETACK ``job_id`` to ``node_id``, telling it how many nodes may have the job."""
    _add(node, node_id, msg.SETACK, (job_id, may_have))


def send_gotack(node: Node, node_id: bytes, job_id: bytes, known: int) -> None:
    """GOTACK ``job_id`` to ``node_id`` (known: 1 if this node has the job)."""
    _add(node, node_id, msg.GOTACK, (job_id, known))


def send_deljob(node: Node, node_id: bytes, job_id: bytes) -> None:
    """DELJOB ``job_id`` to ``node_id``."""
    _add(node, node_id, msg.DELJOB, (job_id,))


def deljob_holders(node: Node, job: Job) -> None:
    """DELJOB to every other node that may hold a copy of ``job``."""
    me = node.myself
    job_id = job.id
    for node_id in job.nodes_delivered:
        if node_id != me:
            send_deljob(node, node_id, job_id)


def flush(node: Node, node_id: bytes) -> None:
    """Send what waits for ``node_id`` now: one message per kind."""
    outbox = node.ack_outbox
    batch = outbox.pop(node_id, None)
    if batch is None:
        return
    if not outbox:
        node.ack_deadline = 0
    for kind, entries in batch.entries.items():
        if entries:
            if kind == msg.SETACK and node.outcomes.records:
                outcome.tell_before_ack(node, node_id, entries[::2])
            node.send(node_id, (kind, tuple(entries)))


def flush_all(node: Node) -> None:
    """Send every waiting batch (their delay is over)."""
    for node_id in list(node.ack_outbox):
        flush(node, node_id)


# ----------------------------------------------------------------------- GC attempts


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
        targets: Sequence[bytes] = delivered
    else:  # a dummy ack: ask everybody
        if node.cluster_size() == 1:
            node.delete_job(job)
            return
        targets = node.known_nodes()
    job_id = job.id
    may_have = len(delivered)
    for node_id in targets:
        if node_id not in confirmed:
            send_setack(node, node_id, job_id, may_have)
    job.qtime = next_gc_time(node, job)
    node.reschedule(job)


# -------------------------------------------------------------------------- messages


def on_setack(node: Node, sender: bytes, message: Message) -> None:
    """A batch of SETACKs: each acknowledged here, answered in one GOTACK batch."""
    pairs = iter(message[1])
    for job_id, may_have in zip(pairs, pairs, strict=False):
        _setack(node, sender, job_id, may_have)
    flush(node, sender)


def _setack(node: Node, sender: bytes, job_id: bytes, may_have: int) -> None:
    """Acknowledge our copy; answer GOTACK unless we know more holders than the
    sender (then collect it ourselves, still answering GOTACK to a dummy ack)."""
    job = node.jobs.get(job_id)
    if job is not None:
        if job.state == WAIT_REPL:
            replication.achieved(node, job)
            if node.jobs.get(job_id) is not job:
                return  # externally replicated: handed over and gone
        if job.state != ACKED:
            node.acknowledge(job)
    if job is None or len(job.nodes_delivered) <= may_have:
        send_gotack(node, sender, job_id, 0 if job is None else 1)
        return
    if may_have == 0:
        send_gotack(node, sender, job_id, 1)
    gc_attempt(node, job)


def on_gotack(node: Node, sender: bytes, message: Message) -> None:
    """A batch of GOTACKs; the DELJOBs they complete for ``sender`` go at once."""
    pairs = iter(message[1])
    for job_id, known in zip(pairs, pairs, strict=False):
        _gotack(node, sender, job_id, known)
    flush(node, sender)


def _gotack(node: Node, sender: bytes, job_id: bytes, known: int) -> None:
    """A holder confirmed the ack (known=1) or does not have the job (known=0).

    Only acknowledged jobs care. A dummy ack is dropped as soon as a node knows
    the job, or when every known node said it does not; a real job is dropped
    everywhere (DELJOB) when every holder confirmed.
    """
    job = node.jobs.get(job_id)
    if job is None or job.state != ACKED:
        return
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
        deljob_holders(node, job)
        node.delete_job(job)


def on_deljob(node: Node, sender: bytes, message: Message) -> None:
    """Forget our copies (a pending ADDJOB for one fails with -NOREPL)."""
    jobs = node.jobs
    for job_id in message[1]:
        job = jobs.get(job_id)
        if job is not None:
            node.delete_answering_waiter(job)
