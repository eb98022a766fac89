"""Federation: moving queued jobs to the nodes whose consumers want them (reference 8.5).

Producers and consumers may talk to different nodes. A node whose consumers
find a queue empty asks the cluster for jobs with NEEDJOBS(queue, count); a
node that has jobs queued there pops some, as a consumer would, and sends them
in one YOURJOBS message; the receiver queues them locally. Retry-0 jobs are
deleted by the sender once sent (a single copy moves); other jobs stay
``active`` at the sender and would be queued there again if never
acknowledged. Both nodes then list each other as holders, so the ack's
garbage collection and the WILLQUEUE exchange reach the sender.

Requests go out two ways, each with its own exponential backoff per queue: a
broadcast of NEEDJOBS(queue, 1) to every linked node, to discover sources
(2 s doubling up to 30 s), and an *ad hoc* NEEDJOBS(queue, n) to the nodes that
sent jobs for this queue in the last 5 seconds (25 ms doubling up to 2 s),
sized from the queue's import rate and its waiting consumers. A source that
answers resets the ad hoc backoff; a new source resets the broadcast one.

A stream of jobs keeps flowing without stalls (beyond Disque, which asks again
only once the queue is empty and caps a request at 100 jobs): when a fetch
leaves an importing queue with half of the last batch received (its
``refill_at``) or empty, the ad hoc request goes at once, so the next batch is on its
way while consumers take the rest; and a request may ask for up to 400 jobs.
With the ack batches of :mod:`~disquette.core.acks`, a job consumed on
another node than its producer's costs a few hundredths of a bus message.

The other queue-level message lives here too: PAUSE, which ``PAUSE ... BCAST``
sends to every linked node so that they set the queue's pause flags the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.core import messages as msg
from disquette.core import requeue, serialize
from disquette.core.job import ACKED, ACTIVE, BCAST_QUEUED, BCAST_WILLQUEUE
from disquette.core.messages import Message
from disquette.core.queue import PAUSE_ALL, PAUSE_OUT, Queue

if TYPE_CHECKING:
    from disquette.core.node import Node

MIN_REQUEST: Final = 5
MAX_REQUEST: Final = 400
BCAST_MIN_DELAY: Final = 2000
BCAST_MAX_DELAY: Final = 30_000
ADHOC_MIN_DELAY: Final = 25
ADHOC_MAX_DELAY: Final = 2000
SOURCE_VALIDITY: Final = 5000
_MAX_SHIFT: Final = 16  # backoff attempts beyond this cannot grow the (capped) delay


def install(node: Node) -> None:
    """Register the NEEDJOBS, YOURJOBS and PAUSE handlers."""
    handlers = node.message_handlers
    handlers[msg.NEEDJOBS] = on_needjobs
    handlers[msg.YOURJOBS] = on_yourjobs
    handlers[msg.PAUSE] = on_pause


def _backoff(base: int, attempt: int, cap: int) -> int:
    delay = base << min(attempt, _MAX_SHIFT)
    return delay if delay < cap else cap


def need_jobs(node: Node, queue: Queue, reached_zero: bool) -> None:
    """Ask other nodes for jobs for ``queue`` (Disque's needJobsForQueue).

    ``reached_zero`` says a fetch just brought the queue down to its
    ``refill_at`` mark or to zero (only acted upon while the queue imports jobs);
    otherwise clients are waiting on it.
    """
    if node.leaving:
        return
    now = node.clock()
    rate = queue.import_rate(now)
    if reached_zero and rate == 0:
        return
    sources = queue.sources
    if sources:
        for node_id in [n for n, t in sources.items() if now - t > SOURCE_VALIDITY]:
            del sources[node_id]
    to_fetch = rate // len(sources) if sources else MIN_REQUEST
    to_fetch = min(max(to_fetch, len(queue.blocked), MIN_REQUEST), MAX_REQUEST)
    name = queue.name
    if now - queue.needjobs_bcast_time > _backoff(
        BCAST_MIN_DELAY, queue.needjobs_bcast_attempt, BCAST_MAX_DELAY
    ):
        queue.needjobs_bcast_time = now
        queue.needjobs_bcast_attempt += 1
        request = (msg.NEEDJOBS, name, 1)
        for node_id in node.linked_nodes():
            node.send(node_id, request)
    if sources and (
        reached_zero
        or now - queue.needjobs_adhoc_time
        > _backoff(ADHOC_MIN_DELAY, queue.needjobs_adhoc_attempt, ADHOC_MAX_DELAY)
    ):
        queue.needjobs_adhoc_time = now
        queue.needjobs_adhoc_attempt += 1
        request = (msg.NEEDJOBS, name, to_fetch)
        for node_id in sources:
            node.send(node_id, request)


def on_needjobs(node: Node, sender: bytes, message: Message) -> None:
    """Give some queued jobs to a node that asked for them, in one YOURJOBS.

    Nothing is given to a node this one has no link to (seed 514: the reply
    would be dropped after the jobs left the queue), nor from an empty or missing
    queue, a queue this node is importing into itself, or one paused in output.
    The sender gets ``count``
    jobs if the queue holds at least twice that, else half the queue (at least
    one); they leave the queue as a client fetch would. Retry-0 jobs are then
    deleted here; the others stay ``active`` with their requeue time restarted
    from now, when the receiver queues them (Disque keeps the time of their last
    queueing here, which could requeue a job right after the receiver handed it
    to a consumer).
    """
    if not node.cluster.has_link(sender):
        return  # the YOURJOBS could not be sent: popped jobs would stall or be lost
    queue = node.queues.get(message[1])
    if queue is None:
        return
    qlen = len(queue)
    now = node.clock()
    if not qlen or queue.paused & PAUSE_OUT or queue.import_rate(now) > 0:
        return
    count = message[2]
    if qlen < count * 2:
        count = qlen // 2
    count = min(max(count, 1), MAX_REQUEST)
    now_s = now // 1000
    jobs = []
    payloads = []
    for _ in range(count):
        job = node.fetch(queue, now)
        if job is None:
            break  # (the rest were damaged records on disk)
        node.merge_delivered(job, (sender,))
        jobs.append(job)
        payloads.append(serialize.encode(job, bus=True, now_s=now_s))
    if jobs:
        node.send(sender, (msg.YOURJOBS, payloads))
    for job in jobs:
        if job.retry == 0:
            node.delete_job(job)
        else:  # queued over there now: our requeue timer restarts from now
            job.flags |= BCAST_WILLQUEUE
            job.qtime = now + job.retry * 1000 + node.jitter()
            node.reschedule(job)


def on_yourjobs(node: Node, sender: bytes, message: Message) -> None:
    """Queue the jobs another node sent for our consumers, and record the source.

    A job already known here is queued from the local copy (an acknowledged
    one stays acknowledged); a new one is registered ``active`` first. Jobs
    arriving this way are moved, not requeued: no QUEUED is broadcast. A job this
    node knows was cancelled (beyond Disque) is acknowledged instead of queued, and
    one whose requeue is postponed here stays so (the sender hears the delay left).
    Processing stops at the first malformed job. The next request for the
    queue goes when it is down to half of this batch.
    """
    now = node.clock()
    now_s = now // 1000
    payloads = message[1]
    refill_at = len(payloads) // 2
    for data in payloads:
        received = serialize.decode_bus_job(data, now_s)
        if received is None:
            return
        job = node.jobs.get(received.id)
        if job is None:
            job = received
            job.state = ACTIVE
            nodes = node.known_only(job.nodes_delivered)
            if node.myself not in nodes:
                nodes += node.myself_only
            job.nodes_delivered = nodes
            job.qtime = now  # not carried on the bus; lets the first enqueue happen
            node.register(job, schedule=False)  # the enqueue schedules it
        elif job.state == ACKED:
            continue
        else:
            node.merge_delivered(job, node.known_only(received.nodes_delivered))
            if job.retry == 0:
                job.qtime = now
        if node.outcomes.records and node.outcomes.is_cancelled(job.id):
            node.acknowledge(job)  # cancelled (core/outcome.py): its GC tells the sender
            continue
        if requeue.hold_back(node, job, sender):
            continue  # its requeue is postponed here (core/backoff.py): not before the delay
        job.flags &= ~BCAST_QUEUED
        if not node.enqueue(job):
            node.reschedule(job)
            continue
        # The queue exists now (enqueue made it).
        queue = node.create_queue(job.queue)  # type: ignore[arg-type]
        if sender not in queue.sources:
            queue.needjobs_bcast_attempt = 0
        queue.sources[sender] = now
        queue.count_import(now)
        queue.needjobs_adhoc_attempt = 0
        queue.refill_at = refill_at


def on_pause(node: Node, sender: bytes, message: Message) -> None:
    """Set a queue's pause flags to exactly the ones sent (PAUSE ... BCAST elsewhere)."""
    node.pause(message[1], message[2] & PAUSE_ALL, bcast=False)
