"""What the clients of a run saw, and what crashes destroyed: the evidence properties use.

Producers record every ADDJOB that was acknowledged (the ID they got back),
with the nodes that held a copy at that moment. Consumers record every
delivery (a job in a GETJOB reply) and what they did with it. Crashes record
which job copies they destroyed (without persistence), and whether a crash
destroyed the last live copy of a job.

Duplicates are counted per job with the redeliveries Disque itself promises.
The first delivery is expected. A NACK, or a consumer that drops the job
without acknowledging it, grants a *permit* for one more. And the retry timer
may legitimately deliver a job again: a holder requeues a job ``retry``
seconds (minus up to 250 ms of jitter) after *queueing* it, not after it was
delivered, so a job that waited in its queue can come back right after a
fetch. Without faults every holder postpones its timer when another one
requeues (QUEUED), so the k-th timer requeue cannot come before the ADDJOB
was issued plus its delay plus k times (retry - 250 ms): a redelivery after
that bound is explained by the timer, and moves the bound on by one period; a
WORKING that reaches every copy moves it to a period from then (at-most-once
jobs are never requeued). A delivery that neither a permit nor the timer
explains is a duplicate: the cluster handed out a job nobody asked to see again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# What a consumer does with a delivered job.
ACK = "ack"  # ACKJOB on the node that delivered it
ACK_ELSEWHERE = "ack-elsewhere"  # ACKJOB on another node (a dummy ack there, usually)
FASTACK = "fastack"
NACK = "nack"
FORGET = "forget"  # never acknowledged: the retry timer must deliver it again
WORKING = "working"  # WORKING halfway through a long piece of work, then ACKJOB
REQUEUE_JITTER = 250  # ms a holder may requeue a job before its retry time
NEVER = 1 << 62  # the requeue bound of an at-most-once job


@dataclass
class AddedJob:
    job_id: bytes
    queue: bytes
    repl: int
    async_: bool
    node: int  # the node that acknowledged the ADDJOB
    time: int  # when the ADDJOB was acknowledged
    holders: tuple[int, ...]  # nodes with a copy when the ADDJOB was acknowledged
    external: bool  # replicated externally: the node that acknowledged it kept no copy


@dataclass
class Delivery:
    job_id: bytes
    node: int
    time: int
    action: str = ""
    duplicate: bool = False


@dataclass
class History:
    added: dict[bytes, AddedJob] = field(default_factory=dict)
    add_errors: Counter[str] = field(default_factory=Counter)
    deliveries: dict[bytes, list[Delivery]] = field(default_factory=dict)
    acked: dict[bytes, int] = field(default_factory=dict)  # job -> time a client's ack returned
    crashed_holders: dict[bytes, set[int]] = field(default_factory=dict)
    last_copy_lost: dict[bytes, int] = field(default_factory=dict)  # job -> time
    # Every ADDJOB sent, by body: (ms, retry, delay).
    issued: dict[bytes, tuple[int, int, int]] = field(default_factory=dict)
    permits: dict[bytes, int] = field(default_factory=dict)
    requeue_bound: dict[bytes, int] = field(default_factory=dict)  # job -> earliest timer requeue
    duplicates: int = 0

    def add_acknowledged(self, job: AddedJob) -> None:
        self.added[job.job_id] = job

    def add_failed(self, error: str) -> None:
        self.add_errors[error] += 1

    def add_issued(self, body: bytes, time: int, retry: int, delay: int) -> None:
        """An ADDJOB is sent (bodies are unique, so deliveries can be traced back to it)."""
        self.issued[body] = (time, retry, delay)

    def delivered(self, job_id: bytes, body: bytes, node: int, time: int) -> Delivery:
        delivery = Delivery(job_id, node, time)
        seen = self.deliveries.setdefault(job_id, [])
        issued, retry, delay = self.issued[body]
        period = retry * 1000 - REQUEUE_JITTER
        first = issued + delay * 1000 + period if retry else NEVER
        bound = self.requeue_bound.setdefault(job_id, first)
        if seen:
            if self.permits.get(job_id):
                self.permits[job_id] = 0
            elif time >= bound:
                self.requeue_bound[job_id] = bound + period
            else:
                delivery.duplicate = True
                self.duplicates += 1
        seen.append(delivery)
        return delivery

    def decided(self, delivery: Delivery, action: str) -> None:
        """What a consumer does with a job; a NACK or a forgotten job may come back
        (the permit is granted before the NACK runs: it can wake another consumer
        before its own reply)."""
        delivery.action = action
        if action in (FORGET, NACK):
            self.permits[delivery.job_id] = 1

    def working(self, job_id: bytes, time: int, retry: int) -> None:
        """WORKING succeeded and reached every holder: each postpones its requeue by
        ``retry`` from now."""
        bound = self.requeue_bound[job_id]
        self.requeue_bound[job_id] = max(bound, time + retry * 1000 - REQUEUE_JITTER)

    def ack_confirmed(self, job_id: bytes, time: int) -> None:
        self.acked.setdefault(job_id, time)

    def copy_destroyed(self, job_id: bytes, node: int, last: bool, time: int) -> None:
        self.crashed_holders.setdefault(job_id, set()).add(node)
        if last:
            self.last_copy_lost.setdefault(job_id, time)
