"""Job replication: how a new job gets its copies (reference sections 3.1 and 8.1).

ADDJOB with REPLICATE R keeps one copy here and asks R - 1 other nodes to keep
one each (external replication asks R other nodes and keeps none: the node is
leaving, or above 75 % of its memory). The nodes are picked at random among the
reachable ones (not flagged PFAIL or FAIL, as Disque counts them: a node whose
link is down for a moment, or that was killed a moment ago, is one), recorded in
the job's *nodes-delivered* set, and sent REPLJOB with the serialized job, which
carries that set (a REPLJOB to a node without a link is dropped by the bus).

Synchronous ADDJOB (the default) leaves the job in ``wait-repl`` and blocks the
client; every GOTJOB adds its sender to *nodes-confirmed*, and when R nodes
confirmed, replication is achieved: the client gets the ID and the job is
queued here (or, with external replication, ENQUEUE goes to one of the
confirming nodes and the local copy is dropped). While the client waits, the
client cron adds one more node every 50 ms or more and sends REPLJOB again to
every node that has not confirmed, which is how a node that was slow or down at
first still confirms once its link is back ("Sync REPLJOB messages are retried
against old nodes", Disque's cluster test). Timeout, expiry, leaving and
disconnection are handled by the node (``Node._fail_addjob``): DELJOB to the
holders, local copy dropped.

ASYNC ADDJOB replies at once and sends REPLJOB with NOREPLY (fire and forget).

A replica (REPLJOB received) starts ``active`` with BCAST_QUEUED set (its first
queueing is a requeue, announced with QUEUED) and a requeue time of delay +
retry from now, so it only queues the job if the node that queued it first
never confirms delivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from disquette.core import messages as msg
from disquette.core import replies, serialize
from disquette.core.job import (
    ACTIVE,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    HALF_JITTER,
    REQUEUE_JITTER,
    WAIT_REPL,
    WILLQUEUE_ADVANCE,
    Job,
)
from disquette.core.memory import bytes_cost, delivered_cost, extra_cost, held_here_cost
from disquette.core.messages import Message
from disquette.core.queue import PAUSE_IN

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.core.node import Node

ADD_NODE_PERIOD: Final = 50  # ms between extra replicas for a blocked ADDJOB


def install(node: Node) -> None:
    """Register the REPLJOB and GOTJOB handlers."""
    node.run_handlers[msg.REPLJOB] = on_repljobs
    node.message_handlers[msg.GOTJOB] = on_gotjob


def replicate(node: Node, job: Job, count: int, noreply: bool) -> int:
    """Add up to ``count`` new holders and (re)send REPLJOB (Disque's clusterReplicateJob).

    New holders are drawn at random among the reachable nodes (links up or not, as
    Disque's nodes with a link object, connected or connecting) that do not hold the
    job yet (all of them, with no random draw, when there
    are no more than ``count``). REPLJOB then goes to every holder but this
    node: with NOREPLY when ``noreply`` or when the holder already confirmed,
    and not at all to confirmed holders when nobody new was added. Returns the
    number of holders added.
    """
    delivered = job.nodes_delivered
    added = [n for n in node.cluster.reachable_nodes() if n not in delivered]
    if len(added) > count:
        added = node.rng.sample(added, count)
    if added:
        node.set_delivered(job, delivered + tuple(added))
    confirmed = job.nodes_confirmed or ()
    payload = serialize.encode(job, bus=True, now_s=node.clock() // 1000)
    me = node.myself
    for node_id in job.nodes_delivered:
        if node_id == me:
            continue
        if node_id in confirmed:
            if not added:
                continue
            flags = msg.NOREPLY
        else:
            flags = msg.NOREPLY if noreply else 0
        node.send(node_id, (msg.REPLJOB, payload, flags))
    return len(added)


def replicate_now(node: Node, job: Job, additional: int, extrepl: bool) -> None:
    """ASYNC ADDJOB: REPLJOB with NOREPLY to ``additional`` new holders, fire and forget.

    With external replication the job is not registered here: one of the new
    holders is told to queue it (ENQUEUE with the job's delay) instead.
    """
    replicate(node, job, additional, noreply=True)
    if extrepl and job.nodes_delivered:
        target = node.rng.choice(job.nodes_delivered)
        node.send(target, (msg.ENQUEUE, job.id, job.delay))


def start_sync(node: Node, client: Client, job: Job, additional: int) -> None:
    """Synchronous ADDJOB: the client is already blocked; ask the first replicas."""
    node.replication_time[client] = node.clock()
    replicate(node, job, additional, noreply=False)


def cron(node: Node, client: Client, now_ms: int) -> None:
    """Client cron for a blocked ADDJOB: one more replica at most every 50 ms.

    Even when no new node can be added, REPLJOB goes again to every holder that
    has not confirmed yet; the clock restarts only when a node was added.
    """
    job = client.block_job
    if job is None or job.state != WAIT_REPL:
        return
    if now_ms - node.replication_time.get(client, 0) >= ADD_NODE_PERIOD and replicate(
        node, job, 1, noreply=False
    ):
        node.replication_time[client] = now_ms


def achieved(node: Node, job: Job) -> None:
    """Enough nodes confirmed a ``wait-repl`` job (Disque's jobReplicationAchieved).

    The blocked client gets the ID. A job with a local copy is queued here
    (or waits for its delay) and logged to the AOF; an externally replicated
    job is handed to one confirming node with ENQUEUE and forgotten here.
    """
    client = job.waiter
    if client is not None:
        node.wake(client, replies.job_id(job))
    if node.myself not in job.nodes_delivered:
        confirmed = job.nodes_confirmed
        if confirmed:
            node.send(node.rng.choice(confirmed), (msg.ENQUEUE, job.id, job.delay))
        node.delete_job(job)  # still wait-repl: nothing for the AOF
        return
    job.nodes_confirmed = None
    node.job_is_ready(job)


def on_repljobs(node: Node, sender: bytes, messages: Sequence[Message]) -> None:
    """Store the replicas of a run of REPLJOBs from one frame and confirm them (even
    duplicates, but not those sent NOREPLY) with one GOTJOB listing their IDs.

    A REPLJOB is ignored when this node is leaving or above 75 % of its memory,
    its payload is not exactly one well-formed job, the job would take usage past
    95 % of maxmemory (beyond Disque), or the job's queue is paused in input. The
    run is one pass: one clock read, the known-node filter applied once to jobs
    that list the same holders in the same order (every job of an origin, in a
    stable cluster), the paused check once per queue name, and what
    ``Node.register`` does for a new job written out (the registry, the repair
    epoch, the memory; the awake time is the earlier of expiry and WILLQUEUE), the
    run's jobs scheduled together.
    """
    maxmemory = node.settings.maxmemory
    if node.leaving or not maxmemory:  # no maxmemory counts as always above 75 %
        return
    memory_limit = maxmemory // 100 * 75 - node.client_memory
    oom_limit = maxmemory // 100 * 95  # (Node.check_fits: the dataset's room)
    now = node.clock()
    now_s = now // 1000
    requeue = now - HALF_JITTER
    random = node.rng.random
    queues = node.queues
    register = node.jobs.add
    epoch = node.repair.epoch
    aof = node.aof
    known_only = node.cluster.known_only
    decode = serialize.decode_bus_job
    holders: tuple[bytes, ...] | None = None
    known: tuple[bytes, ...] = ()
    queue_name: bytes | None = None
    paused = False
    cost = 0  # job_cost() of the run's jobs but their bodies (0: to work out)
    stored: list[Job] = []
    confirmed = []
    for message in messages:
        if node.used_memory > memory_limit:
            break
        job = decode(message[1], now_s)
        if job is None or node.used_memory + bytes_cost(len(job.body)) > oom_limit:  # type: ignore[arg-type]
            continue  # (beyond Disque: a job that cannot fit here is not stored)
        if job.queue != queue_name:
            queue_name = job.queue
            queue = queues.get(queue_name)  # type: ignore[arg-type]
            paused = queue is not None and bool(queue.paused & PAUSE_IN)
            cost = 0
        if paused:
            continue
        if job.nodes_delivered != holders:
            holders = job.nodes_delivered
            known = known_only(holders)
            cost = 0
        job.nodes_delivered = known
        job.state = ACTIVE
        if register(job.id, job):
            expire = job.etime * 1000 + 1000
            if job.retry:
                job.flags |= BCAST_QUEUED | BCAST_WILLQUEUE
                job.qtime = qtime = (
                    requeue + (job.delay + job.retry) * 1000 + int(random() * REQUEUE_JITTER)
                )
                awake = qtime - WILLQUEUE_ADVANCE
                job.awake = awake if awake < expire else expire
            else:  # never requeued (decode leaves qtime 0)
                job.flags |= BCAST_QUEUED
                job.awake = expire
            job.holders_epoch = epoch
            if not cost:
                cost = held_here_cost(queue_name) + delivered_cost(len(known))  # type: ignore[arg-type]
            node.used_memory += cost + bytes_cost(len(job.body))  # type: ignore[arg-type]
            if job.extra is not None:
                node.used_memory += extra_cost(job.extra)
                node.index_extra(job)
                if job.extra.after:
                    job.awake = expire  # waiting: no requeue timer (core/dependency.py)
            stored.append(job)
            if aof is not None:
                aof.loadjob(job)
        else:  # a copy is already here
            node.merge_delivered(node.jobs.get(job.id), known)  # type: ignore[arg-type]
        if not message[2] & msg.NOREPLY:
            confirmed.append(job.id)
    if stored:
        node.schedule.add_all(stored)
    if confirmed:
        node.send(sender, (msg.GOTJOB, tuple(confirmed)))


def on_gotjob(node: Node, sender: bytes, message: Message) -> None:
    """Replicas confirmed by ``sender``; a ``wait-repl`` job with REPLICATE
    confirmations has achieved replication. A GOTJOB for a job past replication
    confirms a repair's copy (core/repair.py)."""
    jobs = node.jobs
    for job_id in message[1]:
        job = jobs.get(job_id)
        if job is None:
            continue
        if job.state != WAIT_REPL:
            node.repair.on_gotjob(job, sender)
            continue
        confirmed = job.nodes_confirmed or ()
        if sender not in confirmed:
            confirmed += (sender,)
            job.nodes_confirmed = confirmed
        if len(confirmed) == job.repl:
            achieved(node, job)
