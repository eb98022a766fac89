"""Dependencies: jobs that wait for other jobs to be acknowledged (ADDJOB AFTER;
beyond Disque).

A job added with ``AFTER id`` is stored and replicated at once, like any job, but
its holders do not queue it (its requeue time is 0) while
:attr:`Extra.after <disquette.core.job.Extra>` lists a dependency. Each holder
of the waiting job (a *watcher*) learns the fate of each dependency by itself,
over two messages:

* ``DEPQUERY round ids``, sent by a watcher to every other known node: "what
  became of these jobs?". A node that holds one live answers ``LIVE`` and
  remembers the asker as a watcher of it; one holding it acknowledged (or a
  dummy ack) answers ``ACKED``; one that saw it expire or deleted by DELJOB while
  watched answers ``GONE`` (a tombstone kept for :data:`GONE_MEMORY`); others
  answer ``UNKNOWN``.
* ``DEPSTATE round (id, state, ...)``: the answers, and (round 0) the news a
  holder pushes to the watchers it remembers the moment a dependency is
  acknowledged (ACKJOB, SETACK, FASTACK) or goes (expiry, DELJOB).

Why that is enough. The push makes the common case fast (a chain moves on as
soon as the ack reaches any holder of the dependency: every holder hears of an
ack through Disque's own SETACK or DELJOB). The queries make it safe against
lost messages and crashed holders: a watcher asks again, at growing intervals
up to :data:`QUERY_MAX`, until the dependency is settled. A dependency settles
on the first ``ACKED`` or ``GONE``, or when every other known node answered
``UNKNOWN`` to the same round and this node does not hold it either: no node
holds it any longer, and as acknowledged jobs are forgotten once their ack is
collected, a job no node knows counts as acknowledged. A node that does not
answer (down, partitioned) keeps the job waiting: it may hold the dependency.
So a waiting job is never released while a node that may hold its dependency
live is out of reach -- unless the dependency really was acknowledged.

When a holder settles the last dependency it *releases* the job: if it is the
job's designated holder (the node that created it, or, when that node is not a
reachable holder, the reachable holder with the smallest ID) it queues the job
now (after its DELAY, counted from the release); every other holder sets its
requeue timer, as a replica does after ADDJOB, so that the job is queued once
and still queued when the designated holder is gone. A dependency gone without
an ack (``GONE``) fails the job unless it was added with ``IFGONE release``:
failing is what the designated holder does instead of queueing it -- a dead
letter when the queue's policy names a dead-letter queue, else the job is
acknowledged (core/deadletter.py). The default is ``fail`` because a job that
runs after another usually needs what that one did; running it anyway must be
asked for. A QUEUED message from another holder settles the wait here too (the
sender released it), and ENQUEUE (the command) releases a waiting job at once.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Final

from disquette.core import acks, deadletter, outcome
from disquette.core import messages as msg
from disquette.core.job import (
    ACKED,
    AFTER_FAILED,
    AFTER_RELEASE,
    BCAST_WILLQUEUE,
    WAIT_REPL,
    Extra,
    Job,
)
from disquette.core.messages import Message

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.core.node import Node

# The answers of DEPSTATE.
LIVE: Final = 0
SETTLED_ACKED: Final = 1
GONE: Final = 2
UNKNOWN: Final = 3

#: The first query goes at the next tick; the interval then doubles up to this (ms).
QUERY_FIRST: Final = 1000
QUERY_MAX: Final = 16000
#: How long a node remembers that a watched dependency went without an ack (ms).
GONE_MEMORY: Final = 3_600_000
#: ADDJOB takes at most this many distinct AFTER IDs.
MAX_AFTER: Final = 256
#: WAITJOB's answer by settled state when no outcome is recorded (core/outcome.py).
_ANSWERS: Final = {
    SETTLED_ACKED: outcome.ACKED_REPLY,
    GONE: outcome.GONE_REPLY,
    UNKNOWN: outcome.UNKNOWN_REPLY,
}


class Wait:
    """A dependency pending on this node: the local jobs and the WAITJOB clients
    waiting for it (core/outcome.py), and where its queries stand."""

    __slots__ = ("clients", "interval", "jobs", "next_query", "round", "unknown")

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.clients: list[Client] = []
        self.next_query = 0
        self.interval = QUERY_FIRST
        self.round = 0
        self.unknown: set[bytes] = set()  # the nodes that answered UNKNOWN to ``round``


def install(node: Node) -> None:
    handlers = node.message_handlers
    handlers[msg.DEPQUERY] = on_depquery
    handlers[msg.DEPSTATE] = on_depstate


class Dependencies:
    """A node's side of dependencies: the waits of its waiting jobs, the watchers of
    the jobs it holds, and the tombstones of watched jobs gone without an ack."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.waits: dict[bytes, Wait] = {}
        self._due: list[tuple[int, bytes]] = []  # (next query ms, dependency ID), a heap
        self.watchers: dict[bytes, set[bytes]] = {}
        self.gone: dict[bytes, int] = {}  # dependency ID -> ms it is forgotten at
        self.round = 0
        self.released = 0
        self.failed = 0

    # The waiting side -------------------------------------------------------

    def settled_here(self, dep_id: bytes) -> int:
        """What this node alone knows of a dependency: SETTLED_ACKED, GONE, LIVE (it
        holds it: this node watches it too) or UNKNOWN."""
        node = self.node
        job = node.jobs.get(dep_id)
        if job is not None:
            if job.state == ACKED:
                return GONE if node.outcomes.is_cancelled(dep_id) else SETTLED_ACKED
            self.watchers.setdefault(dep_id, set()).add(node.myself)
            return LIVE
        record = node.outcomes.get(dep_id)
        if record is not None:
            return GONE if record[0] == outcome.CANCELLED else SETTLED_ACKED
        return GONE if dep_id in self.gone else UNKNOWN

    def prefilter(self, after: list[bytes]) -> tuple[tuple[bytes, ...], bool]:
        """ADDJOB AFTER: the dependencies still pending as far as this node knows at
        once, and whether one of them is gone (the others are acknowledged; alone, a
        node that does not know a job knows that it was acknowledged)."""
        pending = []
        gone = False
        alone = len(self.node.known_nodes()) <= 1
        for dep_id in after:
            state = self.settled_here(dep_id)
            if state == GONE:
                gone = True
            elif state == LIVE or (state == UNKNOWN and not alone):
                pending.append(dep_id)
        return tuple(pending), gone

    def track(self, job: Job) -> None:
        """A waiting job was registered here: wait for each of its dependencies (its
        first query goes at the next tick)."""
        for dep_id in job.extra.after:  # type: ignore[union-attr]
            wait = self.waits.get(dep_id)
            if wait is None:
                wait = self.waits[dep_id] = Wait()
                heapq.heappush(self._due, (0, dep_id))
            wait.jobs.append(job)

    def settle(self, dep_id: bytes, state: int) -> None:
        """A dependency is acknowledged (SETTLED_ACKED), gone (GONE), or known by no
        node (UNKNOWN, which counts as acknowledged): the jobs waiting here for it move
        on, and the clients waiting for it get its outcome."""
        wait = self.waits.pop(dep_id, None)
        if wait is None:
            return
        node = self.node
        if wait.clients:
            record = node.outcomes.get(dep_id)
            answer = outcome.reply_of(record) if record is not None else _ANSWERS[state]
            for client in wait.clients:
                node.wake(client, answer)
        for job in wait.jobs:
            extra = job.extra
            if (
                node.jobs.get(job.id) is not job
                or job.state == ACKED
                or extra is None
                or dep_id not in extra.after
            ):
                continue
            before = node.extra_size(job)
            if state == GONE and not extra.after_flags & AFTER_RELEASE:
                extra.after_flags |= AFTER_FAILED
                self.untrack(job, extra.after)
                extra.after = ()  # failed: the other dependencies no longer matter
            else:
                extra.after = tuple(d for d in extra.after if d != dep_id)
            node.extra_changed(job, before)
            if not extra.after:
                self.release(job)
            else:
                node.persist(job)

    def untrack(self, job: Job, dep_ids: tuple[bytes, ...]) -> None:
        """A job waits for ``dep_ids`` no longer (failed, released by another holder,
        or deleted): out of their waits, so that no wait keeps a job alive; a wait left
        without jobs goes (its queries stop)."""
        waits = self.waits
        for dep_id in dep_ids:
            wait = waits.get(dep_id)
            if wait is not None and job in wait.jobs:
                wait.jobs.remove(job)
                if not wait.jobs and not wait.clients:
                    del waits[dep_id]

    # WAITJOB's clients (core/outcome.py) --------------------------------------

    def answer_now(self, job_id: bytes) -> bytes | None:
        """WAITJOB's answer from what this node alone knows, or None: wait (a job held
        here live is watched from now on)."""
        state = self.settled_here(job_id)
        if state == UNKNOWN and len(self.node.known_nodes()) <= 1:
            return outcome.UNKNOWN_REPLY  # alone, and not here: no node holds it
        return None if state in (LIVE, UNKNOWN) else _ANSWERS[state]

    def wait_client(self, job_id: bytes, client: Client) -> None:
        """A WAITJOB client waits for the job (asked about at the next tick)."""
        wait = self.waits.get(job_id)
        if wait is None:
            wait = self.waits[job_id] = Wait()
            heapq.heappush(self._due, (0, job_id))
        wait.clients.append(client)

    def forget_client(self, client: Client) -> None:
        """A WAITJOB client is answered, timed out or gone."""
        job_id = client.block_job
        wait = self.waits.get(job_id)
        if wait is not None and client in wait.clients:
            wait.clients.remove(client)
            if not wait.jobs and not wait.clients:
                del self.waits[job_id]

    def settle_outcome(self, job_id: bytes) -> None:
        """An outcome arrived for a job waited for here (OUTCOME): settle its wait."""
        self.settle(job_id, GONE if self.node.outcomes.is_cancelled(job_id) else SETTLED_ACKED)

    def release(self, job: Job, now_here: bool = False) -> None:
        """The last dependency of a waiting job settled here: queue it (or fail it) if
        this node is its designated holder (or ``now_here``: ENQUEUE), else start the
        requeue timer of a replica."""
        node = self.node
        now = node.clock()
        if job.state == WAIT_REPL:  # its copies are still being made: queued once they are
            job.qtime = now + job.delay * 1000
            return
        node.persist(job)
        self.released += 1
        if now_here or self.designated(job):
            if job.delay:
                job.qtime = now + job.delay * 1000
                node.reschedule(job)
            else:
                job.qtime = now
                node.enqueue(job, now=now)
        elif job.retry:
            job.flags |= BCAST_WILLQUEUE
            job.qtime = now + (job.delay + job.retry) * 1000 + node.jitter()
            node.reschedule(job)

    def fail(self, job: Job) -> bool:
        """A released job whose dependency went without an ack, due to be queued:
        its dead letter instead (if its policy names a dead-letter queue), and it is
        gone, for those that wait for it too (pushed, and remembered); its copies are
        deleted. False when the dead letter cannot be added now (tried again at the
        next requeue time)."""
        node = self.node
        target = deadletter.target_of(node, job)
        if target is not None and not deadletter.dead_letter(
            node, job, target, "failed again later"
        ):
            job.qtime = node.clock() + max(job.retry, 1) * 1000 + node.jitter()
            node.reschedule(job)
            return False
        self.failed += 1
        self.gone[job.id] = node.clock() + GONE_MEMORY
        self._tell(job.id, GONE)
        acks.deljob_holders(node, job)
        node.delete_job(job)
        return True

    def designated(self, job: Job) -> bool:
        """Whether this node queues a released job at once: it created the job, or
        the creator is not a reachable holder and this node has the smallest ID of the
        reachable holders."""
        node = self.node
        creator = job.id[2:10]
        if node.myself.startswith(creator):
            return True
        reachable = set(node.reachable_nodes())
        holders = [n for n in job.nodes_delivered if n in reachable]
        if any(n.startswith(creator) for n in holders):
            return False
        return all(node.myself < n for n in holders)

    def cancel(self, job: Job) -> None:
        """A waiting job is released by another holder (QUEUED): it waits no more
        here, and is not queued here now either (that holder did it)."""
        node = self.node
        before = node.extra_size(job)
        self.untrack(job, job.extra.after)  # type: ignore[union-attr]
        job.extra.after = ()  # type: ignore[union-attr]
        node.extra_changed(job, before)
        node.persist(job)

    def cron(self, now: int) -> None:
        """Ask about the dependencies whose query is due; forget old tombstones."""
        due = self._due
        if due and due[0][0] <= now:
            asked: list[bytes] = []
            self.round += 1
            while due and due[0][0] <= now:
                when, dep_id = heapq.heappop(due)
                wait = self.waits.get(dep_id)
                if wait is None or wait.next_query != when:
                    continue
                if self._check(dep_id, wait, now):
                    asked.append(dep_id)
            if asked:
                self._query(asked)
        gone = self.gone
        while gone:
            dep_id, until = next(iter(gone.items()))
            if until > now:
                break
            del gone[dep_id]

    def _check(self, dep_id: bytes, wait: Wait, now: int) -> bool:
        """A due wait: settle it from what this node knows, or schedule its next
        query; True when it is to be asked of the others now."""
        node = self.node
        wait.jobs = [j for j in wait.jobs if node.jobs.get(j.id) is j and j.waiting]
        if not wait.jobs and not wait.clients:
            del self.waits[dep_id]
            return False
        state = self.settled_here(dep_id)
        if state in (SETTLED_ACKED, GONE):
            self.settle(dep_id, state)
            return False
        wait.round = self.round
        wait.unknown = set()
        wait.next_query = now + wait.interval
        wait.interval = min(wait.interval * 2, QUERY_MAX)
        heapq.heappush(self._due, (wait.next_query, dep_id))
        if state == UNKNOWN and len(node.known_nodes()) <= 1:
            self.settle(dep_id, UNKNOWN)  # alone, and not here: no node holds it
            return False
        return True

    def _query(self, dep_ids: list[bytes]) -> None:
        node = self.node
        message = (msg.DEPQUERY, self.round, tuple(dep_ids))
        me = node.myself
        for node_id in node.known_nodes():
            if node_id != me:
                node.send(node_id, message)

    def answered_unknown(self, dep_id: bytes, wait: Wait, sender: bytes) -> None:
        """``sender`` does not know a dependency asked in the wait's current round:
        once every other known node said so, and it is not here, it is settled."""
        wait.unknown.add(sender)
        node = self.node
        me = node.myself
        everyone = all(n == me or n in wait.unknown for n in node.known_nodes())
        if everyone and self.settled_here(dep_id) == UNKNOWN:
            self.settle(dep_id, UNKNOWN)

    # The depended-on side -------------------------------------------------

    def acked(self, job_id: bytes) -> None:
        """A job held here is acknowledged (or cancelled: gone, for those that wait for
        it): tell those that wait for it; a watched job's acknowledgement is kept as an
        outcome (core/outcome.py), for those that ask again after it is collected."""
        if job_id not in self.watchers:
            return
        outcomes = self.node.outcomes
        if outcomes.get(job_id) is None:
            outcomes.record(job_id, outcome.ACKED_OUTCOME, None)
        self._tell(job_id, GONE if outcomes.is_cancelled(job_id) else SETTLED_ACKED)

    def vanished(self, job_id: bytes) -> None:
        """A live job held here expired or was deleted by DELJOB: tell those that wait
        for it, and remember it for those that ask later."""
        if job_id in self.watchers:
            self.gone[job_id] = self.node.clock() + GONE_MEMORY
            self._tell(job_id, GONE)

    def _tell(self, job_id: bytes, state: int) -> None:
        watchers = self.watchers.pop(job_id, None)
        if not watchers:
            return
        node = self.node
        me = node.myself
        record = node.outcomes.get(job_id)
        for node_id in watchers:
            if node_id == me:
                self.settle(job_id, state)
            else:
                if record is not None:
                    node.send(node_id, outcome.message_of(job_id, record))
                node.send(node_id, (msg.DEPSTATE, 0, (job_id, state)))


def on_depquery(node: Node, sender: bytes, message: Message) -> None:
    """Answer what this node knows of each job asked about; watch the live ones."""
    deps = node.deps
    jobs = node.jobs
    answers: list[bytes | int] = []
    outcomes = node.outcomes
    for dep_id in message[2]:
        job = jobs.get(dep_id)
        record = outcomes.get(dep_id)
        if record is not None:  # sent first: the answer that follows finds it there
            node.send(sender, outcome.message_of(dep_id, record))
        if job is not None and job.state != ACKED:
            state = LIVE
            deps.watchers.setdefault(dep_id, set()).add(sender)
        elif record is not None:
            state = GONE if record[0] == outcome.CANCELLED else SETTLED_ACKED
        elif job is not None:
            state = SETTLED_ACKED
        else:
            state = GONE if dep_id in deps.gone else UNKNOWN
        answers += (dep_id, state)
    node.send(sender, (msg.DEPSTATE, message[1], tuple(answers)))


def on_depstate(node: Node, sender: bytes, message: Message) -> None:
    """Answers to a query (or news): settle, or count an UNKNOWN of the round."""
    deps = node.deps
    round_ = message[1]
    pairs = message[2]
    for i in range(0, len(pairs), 2):
        dep_id = pairs[i]
        state = pairs[i + 1]
        wait = deps.waits.get(dep_id)
        if wait is None:
            continue
        if state in (SETTLED_ACKED, GONE):
            deps.settle(dep_id, state)
        elif state == UNKNOWN and round_ and round_ == wait.round:
            deps.answered_unknown(dep_id, wait, sender)


def waiting_extra(after: tuple[bytes, ...], release: bool, extra: Extra | None) -> Extra:
    """The Extra of a job created waiting for ``after``."""
    if extra is None:
        extra = Extra()
    extra.after = after
    extra.after_flags = AFTER_RELEASE if release else 0
    return extra
