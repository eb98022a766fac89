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
was issued (a job added AFTER others: first released) plus its delay plus k
times (retry - 250 ms): a redelivery after that bound is explained by the
timer, and moves the bound on by one period; a WORKING that reaches every copy
moves it to a period from then (at-most-once jobs are never requeued). A
delivery that neither a permit nor the timer explains is a duplicate: the
cluster handed out a job nobody asked to see again.

The features runs (queue policies, dead letters, ADDJOB DEDUP) keep more
evidence: every policy write an administrator saw acknowledged and the version
it made; every ADDJOB with a de-duplication key, with the jobs of that key the
node and the rest of the cluster held when it ran; and every dead letter seen
(delivered from the dead-letter queue, destroyed by a crash or still held at
the end), by the original job it stands for.

The coordination runs (dependencies, claims, progress logs) keep: every job
added with AFTER (a *child*: the IDs it named, IFGONE release or fail, and what
each dependency looked like when its ADDJOB was answered), the parents added to
expire unacknowledged (*doomed*), the first time any holder stopped a child
waiting (released or failed it) with what its dependencies looked like then,
what each dependency looked like when each holder stopped waiting for it, the
claim number of each delivery, every claim a node refused as stale, and every
progress entry a node answered WORKING for (with the moment a crash destroyed
its last copy, if one did).

The flow-to-disk runs keep: the body each job ID was added with (or first seen
with, when its ADDJOB's reply never came) and every body a client was given that
was not its job's; every GETJOB that did not serve its queue's head and every
QPEEK out of GETJOB's order; how many jobs the inspector's QPEEK, SHOW and JSCAN
looked at; and every corrupted record the disk faults made, with its node and
whether that node held the job's last copy then. A corruption destroys that
node's copy as a crash would (the node drops the job when it reads the record).

The outcomes runs (postponed requeues, results, WAITJOB, CANCEL) keep: each job's
backoff (ADDJOB BACKOFF), every NACK a node answered 1 for with the delay it promised
(its DELAY, or the job's backoff) and how many deliveries of the job came before its
reply; every ACKJOB and FASTACK answered, with its result; every CANCEL answered;
when each node (in each of its lives) was first seen knowing a job was cancelled;
every WORKING answered (or refused with -CANCELLED); and every WAITJOB with its
node, timeout and answer -- for ``unknown``, what the job looked like to the
cluster at that moment. Jobs added to expire (a short TTL in a queue nobody
consumes) are kept apart with their expiry, as the coordination runs' doomed roots.
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
# What a delivered job is to the features runs' consumers.
# Why an ADDJOB with a DEDUP key was sent.
FIRST = "first"  # the first time
RETRY = "retry"  # again, after no job ID came back (error, timeout, connection lost)
RESEND = "resend"  # again after a job ID came back, to any node (a client unsure it did)
POISON = "poison"  # a job every consumer NACKs (until the drain): it must be dead-lettered
DEAD_LETTER = "dead-letter"  # a job of the dead-letter queue


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
    body: bytes = b""  # what it was added with (flow-to-disk runs)


@dataclass
class Delivery:
    job_id: bytes
    node: int
    time: int
    action: str = ""
    duplicate: bool = False
    kind: str = ""  # POISON, DEAD_LETTER or "" (features runs)
    claim: int = 0  # the claim number it got (coordination runs; 0: none)
    workings: int = 0  # WORKINGs the consumer sent for it
    incarnation: int = 0  # the delivering node's life (outcomes runs)


@dataclass
class PolicyWrite:
    """A QPOLICY SET (or a DEL that deleted) acknowledged by a node, and its version."""

    name: bytes
    version: tuple[int, bytes]  # (Lamport counter, the writer's node ID)
    deleted: bool
    pattern: bytes  # b"" for a deletion
    options: dict[str, int | bytes]
    node: int
    time: int


@dataclass
class DedupAttempt:
    """One ADDJOB with a DEDUP key, and the copies of that key when the node ran it."""

    key: bytes
    queue: bytes
    node: int
    time: int
    kind: str  # FIRST, RETRY or RESEND
    held: tuple[bytes, ...]  # jobs of the queue with the key on that node
    pending: bool  # one of them was still being replicated synchronously
    elsewhere: tuple[bytes, ...]  # jobs of the queue with the key on other live nodes
    reply: object = None  # the job ID, or the error (str) the producer got
    short: bool = False  # it returned a held job with fewer live copies than REPLICATE asked


@dataclass
class DeadLetter:
    """A job of the dead-letter queue: the original it stands for, and when it was made
    (its ctime, on the node that made it)."""

    job_id: bytes
    origin: bytes
    created: int  # ms
    body: bytes  # the original's
    deliveries: list[Delivery] = field(default_factory=list)


# What a dependency looked like to the cluster at some moment (coordination runs; the
# snapshot is :func:`disquette.sim.clients.dependency_view`).
HELD = "held"  # a live node holds a copy not acknowledged (or a down node's AOF may)
ACKED_COPY = "acked"  # a node holds it acknowledged
GONE = "gone"  # a node remembers it went without an ack (a tombstone)
LOST = "lost"  # no node knows it, and crashes destroyed its every copy
FORGOTTEN = "forgotten"  # no node knows it otherwise (gone, tombstones never made or lost)


@dataclass
class Child:
    """A job whose ADDJOB named dependencies (AFTER), and acknowledged (coordination
    runs)."""

    job_id: bytes
    after: tuple[bytes, ...]
    release: bool  # IFGONE release (else fail)
    time: int
    views: dict[bytes, str]  # each dependency as the ADDJOB was answered


@dataclass
class Release:
    """The first moment a holder of a child stopped it waiting: released it (or failed
    it, ``failed``), and what each of its dependencies looked like then."""

    node: int
    time: int
    failed: bool
    views: dict[bytes, str]
    incarnation: int = 1  # the node's life (a restart without an AOF lost the job)


@dataclass
class ProgressEntry:
    """A WORKING with a text that a node answered (coordination runs)."""

    job_id: bytes
    text: bytes
    node: int
    time: int
    lost: int = 0  # when a crash destroyed its last copy (0: never)


@dataclass
class StaleClaim:
    """A command refused with -STALECLAIM (coordination runs)."""

    job_id: bytes
    claim: int
    node: int
    time: int
    command: bytes


@dataclass
class Corruption:
    """A record of a job's spilled copy damaged by a disk fault (flow-to-disk runs)."""

    node: int
    time: int
    last: bool  # no other node held a copy then (nor a down node's AOF)
    state: int = 0  # the copy's state and retry then (a spilled job never changes)
    retry: int = 0


@dataclass
class Nack:
    """A NACK a node answered 1 for (outcomes runs): the requeue it postponed, by its
    DELAY or the job's backoff (``delay`` ms; 0: none)."""

    job_id: bytes
    node: int
    time: int
    delay: int
    seen: int  # deliveries of the job recorded before the reply
    incarnation: int = 0  # the node's life (a crash without an AOF loses the delay)


@dataclass
class Cancel:
    """A CANCEL a node answered (outcomes runs): how many jobs it held of those named."""

    job_id: bytes
    node: int
    time: int
    held: int
    incarnation: int
    seen: int  # deliveries of the job recorded before the reply


@dataclass
class WorkingCall:
    """A WORKING answered (outcomes runs): a retry time, or -CANCELLED."""

    job_id: bytes
    node: int
    incarnation: int
    time: int
    cancelled: bool


# WAITJOB's answers as the outcomes runs record them (beside the outcome kinds).
NIL = "nil"  # its TIMEOUT passed
DROPPED = "dropped"  # its node crashed: the connection dropped


@dataclass
class WaitCall:
    """A WAITJOB (outcomes runs) and its answer: ``kind`` is the outcome (acked,
    cancelled, gone, unknown), NIL, DROPPED, an error's text, or "" while pending."""

    job_id: bytes
    node: int
    incarnation: int
    sent: int
    timeout: int  # ms (0: none)
    answered: int = 0
    kind: str = ""
    result: bytes | None = None
    view: str = ""  # what the job looked like to the cluster when answered ``unknown``


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
    # Features runs.
    jobs_by_body: dict[bytes, set[bytes]] = field(default_factory=dict)  # body -> job IDs
    policy_writes: list[PolicyWrite] = field(default_factory=list)
    dedup_attempts: list[DedupAttempt] = field(default_factory=list)
    dead_letters: dict[bytes, DeadLetter] = field(default_factory=dict)
    # NACKs that took a job past its node's policy bounds and left it queued: (job, node, ms).
    nack_overruns: list[tuple[bytes, int, int]] = field(default_factory=list)
    # Coordination runs.
    children: dict[bytes, Child] = field(default_factory=dict)
    doomed: dict[bytes, int] = field(default_factory=dict)  # parent -> its expiry (ms)
    releases: dict[bytes, Release] = field(default_factory=dict)  # child -> first one
    failures: dict[bytes, Release] = field(default_factory=dict)  # child -> first one
    # (child, node, incarnation) -> {dependency: (ms, view)} when that node (in that
    # life) stopped waiting for it.
    settled: dict[tuple[bytes, int, int], dict[bytes, tuple[int, str]]] = field(
        default_factory=dict
    )
    progress: list[ProgressEntry] = field(default_factory=list)
    stale_claims: list[StaleClaim] = field(default_factory=list)
    # Flow-to-disk runs.
    bodies: dict[bytes, bytes] = field(default_factory=dict)  # job -> its body
    body_ids: dict[bytes, bytes] = field(default_factory=dict)  # body -> its job
    wrong_bodies: list[str] = field(default_factory=list)
    misordered: list[str] = field(default_factory=list)  # GETJOBs and QPEEKs out of order
    inspected: Counter[str] = field(default_factory=Counter)  # jobs looked at, by command
    corrupted: dict[bytes, list[Corruption]] = field(default_factory=dict)
    # Outcomes runs.
    backoffs: dict[bytes, tuple[bytes, ...]] = field(default_factory=dict)  # BACKOFF's words
    nacks: list[Nack] = field(default_factory=list)
    ack_results: dict[bytes, list[tuple[int, bytes | None]]] = field(default_factory=dict)
    cancels: dict[bytes, list[Cancel]] = field(default_factory=dict)
    # (job, node, incarnation) -> when that node was first seen knowing it cancelled.
    cancel_known: dict[tuple[bytes, int, int], int] = field(default_factory=dict)
    workings: list[WorkingCall] = field(default_factory=list)
    waits: list[WaitCall] = field(default_factory=list)
    in_work: dict[bytes, int] = field(default_factory=dict)  # job -> the node working on it

    def add_acknowledged(self, job: AddedJob) -> None:
        """An ADDJOB returned an ID (the first time counts: DEDUP may return it again)."""
        self.added.setdefault(job.job_id, job)

    def add_failed(self, error: str) -> None:
        self.add_errors[error] += 1

    def add_issued(self, body: bytes, time: int, retry: int, delay: int) -> None:
        """An ADDJOB is sent (bodies are unique, so deliveries can be traced back to it)."""
        self.issued[body] = (time, retry, delay)

    def delivered(
        self, job_id: bytes, body: bytes, node: int, time: int, kind: str = ""
    ) -> Delivery:
        delivery = Delivery(job_id, node, time, kind=kind)
        self.jobs_by_body.setdefault(body, set()).add(job_id)
        seen = self.deliveries.setdefault(job_id, [])
        # (A body never sent is a violation of its own, see note_body.)
        issued, retry, delay = self.issued.get(body, (time, 0, 0))
        # A child (AFTER) is queued at its release, not at its ADDJOB: the timers
        # start there (a requeue explained by the ADDJOB's would hide a callback
        # queued twice).
        release = self.releases.get(job_id)
        start = issued if release is None else max(issued, release.time)
        period = retry * 1000 - REQUEUE_JITTER
        first = start + delay * 1000 + period if retry else NEVER
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

    def dependencies_settled(
        self, job_id: bytes, node: int, time: int, views: dict[bytes, str], incarnation: int = 1
    ) -> None:
        """A node stopped a child waiting for these dependencies (settled them, or
        released or failed the child): what each looked like then (the first time in
        each of the node's lives counts)."""
        settled = self.settled.setdefault((job_id, node, incarnation), {})
        for dep_id, view in views.items():
            settled.setdefault(dep_id, (time, view))

    def settled_view(self, job_id: bytes, dep_id: bytes, release: Release) -> tuple[int, str]:
        """When the node of a child's ``release`` (or failure) stopped waiting for a
        dependency, and what it looked like then: as that node settled it, or as the
        release (or the ADDJOB's reply, for one settled as the child was added) saw it."""
        settled = self.settled.get((job_id, release.node, release.incarnation), {}).get(dep_id)
        if settled is not None:
            return settled
        view = release.views.get(dep_id)
        if view is not None:
            return release.time, view
        child = self.children[job_id]
        return child.time, child.views.get(dep_id, HELD)

    def released(
        self,
        job_id: bytes,
        node: int,
        time: int,
        failed: bool,
        views: dict[bytes, str],
        incarnation: int = 1,
    ) -> None:
        """A holder stopped a child waiting: released it, or failed it (the first time of
        each counts)."""
        first = self.failures if failed else self.releases
        first.setdefault(job_id, Release(node, time, failed, views, incarnation))

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

    def ack_result(self, job_id: bytes, time: int, result: bytes | None) -> None:
        """An ACKJOB (with ``result``, or without: None) or FASTACK answered (outcomes
        runs)."""
        self.ack_results.setdefault(job_id, []).append((time, result))

    def cancelled(self, cancel: Cancel) -> None:
        """A CANCEL answered: its node knows the job cancelled from then on."""
        self.cancels.setdefault(cancel.job_id, []).append(cancel)
        self.cancel_known.setdefault((cancel.job_id, cancel.node, cancel.incarnation), cancel.time)

    def copy_destroyed(self, job_id: bytes, node: int, last: bool, time: int) -> None:
        self.crashed_holders.setdefault(job_id, set()).add(node)
        if last:
            self.last_copy_lost.setdefault(job_id, time)

    def copy_corrupted(
        self, job_id: bytes, node: int, last: bool, time: int, state: int, retry: int
    ) -> None:
        """A disk fault damaged the record of a node's spilled copy of a job."""
        corruption = Corruption(node, time, last, state, retry)
        self.corrupted.setdefault(job_id, []).append(corruption)

    def corrupted_holders(self, job_id: bytes) -> set[int]:
        return {c.node for c in self.corrupted.get(job_id, ())}

    def note_body(self, job_id: bytes, body: bytes, where: str, time: int) -> bool:
        """A client was given ``body`` for ``job_id`` (an ADDJOB's reply names the body
        it sent): False, and a violation kept, when it is not that job's body -- not
        the one it was added with or first seen with, or a body never sent, or one
        that belongs to another job (each body is sent in one ADDJOB)."""
        known = self.bodies.get(job_id)
        if known is not None:
            if body == known:
                return True
            problem = f"its body is {known!r}"
        elif body not in self.issued:
            problem = "no ADDJOB sent that body"
        elif (owner := self.body_ids.get(body)) is not None and owner != job_id:
            problem = f"that body is {owner.decode()}'s"
        else:
            self.bodies[job_id] = body
            self.body_ids[body] = job_id
            return True
        self.wrong_bodies.append(
            f"{where} at {time} gave {job_id.decode()} the body {body!r}: {problem}"
        )
        return False

    def dead_letter(self, job_id: bytes, origin: bytes, created: int, body: bytes) -> DeadLetter:
        """A dead letter seen (delivered, destroyed or held): recorded once by its ID."""
        found = self.dead_letters.get(job_id)
        if found is None:
            found = self.dead_letters[job_id] = DeadLetter(job_id, origin, created, body)
        return found

    def dead_letter_delivered(
        self, job_id: bytes, origin: bytes, created: int, body: bytes, node: int, time: int
    ) -> Delivery:
        """A dead letter in a GETJOB reply (kept apart from the workload's deliveries: its
        body is the original's, and nothing but consumers' acks bounds its redeliveries)."""
        delivery = Delivery(job_id, node, time, kind=DEAD_LETTER)
        self.dead_letter(job_id, origin, created, body).deliveries.append(delivery)
        return delivery
