"""What a worker decides, without threads, tasks or sockets.

A Disque worker does the at-least-once dance: fetch jobs, run the handler, ACK
on success, NACK on failure, keep long jobs alive with WORKING, divert jobs
that keep failing to a dead-letter queue, and stop gracefully. The decisions
are here, shared by the thread runner (sync handlers) and the asyncio runner
(async handlers), which only do the waiting and the I/O:

* :class:`Settings` -- what the user configured, validated once.
* :func:`dead_letter_reason` -- whether a job goes to the dead-letter queue,
  when fetched (its counters already passed a limit) or when its handler fails
  (a NACK would pass the NACK limit).
* Dead letters (their format: client/dead_letter.py): a job whose handler keeps
  failing goes to the dead-letter queue as a :class:`DeadLetter`; a worker
  consuming dead letters (``dead_letters``) hands its handler one, decoded from
  the body, or, for a dead letter made by a disquette queue policy (the
  original body as is), from the origin fields SHOW gives.
* :class:`KeepAlive` -- when to send WORKING for a running job: at 80 % of its
  retry time, the retry being known in advance or read once with SHOW (only
  for jobs still running after ``probe_after`` seconds, so short jobs cost
  nothing). At-most-once jobs (retry 0, even TTL field in the ID) need none.
  A progress report (``job.progress(text)``, a WORKING with a text) counts as
  one: the next keep-alive is due 80 % of the retry time after it.
* :class:`RunningJob`, :class:`AsyncRunningJob` -- the job as the handler gets
  it: a :class:`Job` with ``progress(text)``, which the runner performs
  (:meth:`Engine.progress_call`, then :meth:`Engine.progressed`).
* Claims (``Settings.claims``, disquette only): jobs are fetched WITHCLAIM and
  every ACK, NACK and WORKING about them sends their claim. A stale claim
  (:class:`StaleClaimError`: the job was delivered again, to another worker or
  back to this one) is logged once per delivery, and the worker leaves the job
  to its new holder: it neither ACKs nor NACKs it any more.
* Results, retries, cancellation (disquette only): with ``Settings.results``
  the handler's return value (``bytes`` or ``str``) is sent with the ACK
  (``ACKJOB id RESULT value``), for whoever waits for the job; a handler that
  raises :class:`Retry` has its job NACKed with the delay it asks for (``NACK
  id DELAY s``). A WORKING refused with :class:`JobCancelledError` (a
  keep-alive, or ``job.progress``) means the job was cancelled: the running
  job's ``cancelled`` event is set, for the handler to see, and the worker
  neither ACKs nor NACKs it. ``Settings.heartbeat`` bounds the time between
  keep-alives, hence how late a cancellation is seen.
* :class:`Tracker` -- the deliveries a worker holds and their states
  (pending, running, settling, abandoned), free slots for fetching, and what
  to NACK when shutting down.
* :class:`Stats` -- counters and the throughput summary line.
* :class:`Engine` -- the procedures (process a job, keep it alive, shut down)
  as generators of steps the runners perform.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import threading
import traceback
from collections.abc import Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

from disquette.client import commands
from disquette.client.api import Call
from disquette.client.calls import Command, Pipelined
from disquette.client.dead_letter import DeadLetter
from disquette.client.errors import JobCancelledError, StaleClaimError
from disquette.client.models import Job, JobInfo, at_least_once
from disquette.client.resp import Arg

#: Fraction of the retry time after which WORKING is sent.
KEEPALIVE_FRACTION = 0.8


@dataclass(frozen=True, slots=True)
class Settings:
    """A worker's configuration (see :class:`disquette.Worker` for each field)."""

    queues: tuple[str, ...]
    concurrency: int = 1
    dead_letter_queue: str | None = None
    max_nacks: int | None = None
    max_additional_deliveries: int | None = None
    grace_period: float = 30.0
    poll_timeout: float = 1.0
    retry: int | None = None
    keepalive: bool = True
    probe_after: float = 0.2
    summary_interval: float = 60.0
    #: The queues hold dead letters: the handler gets a :class:`DeadLetter`.
    dead_letters: bool = False
    #: The servers take DEDUP keys: dead letters are added with the original's ID as key.
    dedup: bool = False
    #: Fetch WITHCLAIM and send each job's claim with its ACK, NACK and WORKING (disquette).
    claims: bool = False
    #: The handler's return value is the job's result, sent with its ACK (disquette).
    results: bool = False
    #: Seconds between keep-alives at most (None: 80 % of the retry time).
    heartbeat: float | None = None

    def __post_init__(self) -> None:
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        limits = (self.max_nacks, self.max_additional_deliveries)
        if self.dead_letter_queue is None and any(v is not None for v in limits):
            raise ValueError("max_nacks/max_additional_deliveries need a dead_letter_queue")
        if self.grace_period < 0 or self.poll_timeout <= 0:
            raise ValueError("grace_period must be >= 0 and poll_timeout > 0")
        if self.heartbeat is not None and not self.heartbeat > 0:
            raise ValueError("heartbeat must be > 0 seconds (None: 80 % of the retry time)")
        if self.heartbeat is not None and not self.keepalive:
            raise ValueError("heartbeat needs the keep-alive")


class Retry(Exception):
    """Raised by a handler: NACK the job, to be queued again after ``delay`` seconds.

    ``delay`` (whole seconds, a fraction rounded up; disquette only): ``NACK id
    DELAY s``, which wins over the job's backoff; ``None``: a plain NACK (the
    job's backoff, if any, applies). Not counted as a handler failure; the NACK
    counts toward ``max_nacks`` as any other.
    """

    def __init__(self, delay: float | None = None, reason: str | None = None) -> None:
        if delay is not None and not 0 <= delay < float("inf"):
            raise ValueError("Retry's delay must be a number of seconds >= 0")
        when = "" if delay is None else f" in {delay}s"
        super().__init__(f"retry{when}" + ("" if reason is None else f": {reason}"))
        self.delay = delay
        self.reason = reason


class Reject(Exception):
    """Raised by a handler: the job can never succeed (an undecodable body, an unknown
    task, a task past its own retry limit), so it goes to the dead-letter queue at
    once, with an ERROR log line, instead of being NACKed to come back forever.
    Without a dead-letter queue it is acknowledged (dropped), with the same log
    line. Counted as a handler failure. Raised ``from`` an error, the dead letter
    carries that error's traceback.
    """


def dead_letter_reason(job: Job, settings: Settings, failed: bool = False) -> str | None:
    """Why ``job`` goes to the dead-letter queue, or None.

    On fetch (``failed`` false): its nacks or additional deliveries already pass
    the limits. After its handler failed: NACKing it would pass ``max_nacks``.
    """
    if settings.dead_letter_queue is None:
        return None
    nacks = (job.nacks or 0) + (1 if failed else 0)
    if settings.max_nacks is not None and nacks > settings.max_nacks:
        return f"nacks {nacks} > {settings.max_nacks}"
    limit = settings.max_additional_deliveries
    if not failed and limit is not None and (job.additional_deliveries or 0) > limit:
        return f"additional deliveries {job.additional_deliveries} > {limit}"
    return None


#: The warning for a stale claim: job ID, what was refused, the claim, the node's latest.
_STALE = (
    "job %s: %s refused, claim %s is stale (the node's latest is %s): the job was delivered "
    "again since, so this worker leaves it to its new holder without acking or nacking it"
)


class Next(enum.Enum):
    SHOW = "show"  # learn the retry time
    WORKING = "working"


class KeepAlive:
    """The WORKING schedule of one running job. ``due`` is None when nothing is needed."""

    __slots__ = ("action", "due", "heartbeat", "job_id")

    def __init__(self, job: Job, started_at: float, settings: Settings) -> None:
        self.job_id = job.id
        self.action = Next.WORKING
        self.due: float | None = None
        self.heartbeat = settings.heartbeat
        if not settings.keepalive or not at_least_once(job.id):
            return
        if settings.retry:
            self.due = self._within(started_at, KEEPALIVE_FRACTION * settings.retry)
        else:
            self.action = Next.SHOW
            self.due = started_at + settings.probe_after

    def _within(self, now: float, seconds: float) -> float:
        """When the next WORKING is due: ``seconds`` from now, or a heartbeat if sooner."""
        return now + (seconds if self.heartbeat is None else min(seconds, self.heartbeat))

    def shown(self, info: JobInfo | None, now: float) -> None:
        """SHOW answered: schedule WORKING before the job's next requeue; at once when
        the job is unknown or acknowledged (its answer says whether it was cancelled,
        or ends the keep-alive)."""
        self.action = Next.WORKING
        if info is None or info.state == "acked":
            self.due = now
        elif info.retry == 0 or info.next_requeue_within is None:
            self.due = None
        else:
            self.due = self._within(now, KEEPALIVE_FRACTION * info.next_requeue_within / 1000)

    def worked(self, retry: int | None, now: float) -> None:
        """WORKING answered with the retry time (None: refused, stop trying)."""
        self.action = Next.WORKING
        self.due = None if not retry else self._within(now, KEEPALIVE_FRACTION * retry)


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))


def _fields(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in _JOB_FIELDS}


@dataclass(frozen=True, slots=True)
class RunningJob(Job):
    """A job as a worker hands it to a synchronous handler: a :class:`Job`,
    :meth:`progress`, and ``cancelled``: a :class:`threading.Event` set once the
    job was cancelled (disquette's CANCEL, seen by a keep-alive or a progress
    report), when the handler should stop (the worker will not ACK or NACK
    the job)."""

    _report: Callable[[Arg], int] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )
    cancelled: threading.Event = dataclasses.field(
        default_factory=threading.Event, repr=False, compare=False
    )

    @classmethod
    def of(cls, job: Job, report: Callable[[Arg], int], cancelled: threading.Event) -> RunningJob:
        return cls(**_fields(job), _report=report, cancelled=cancelled)

    def progress(self, text: Arg) -> int:
        """Report progress (disquette only): WORKING with ``text``; the retry time, seconds.

        The text is appended to the job's progress log (``client.joblog(id)``,
        kept by every holder of the job) and the job's requeue is postponed, as
        a keep-alive does. With ``Worker(claims=True)`` the job's claim is
        sent: :class:`StaleClaimError` means the job was delivered again since
        (stop working on it: the worker will not ACK or NACK it), and
        :class:`JobCancelledError` that it was cancelled (likewise).
        :class:`LogFullError` past 64 entries; other errors as ``working``.
        """
        if self._report is None:
            raise RuntimeError("progress() needs a job handed to a handler by a Worker")
        return self._report(text)


@dataclass(frozen=True, slots=True)
class AsyncRunningJob(Job):
    """A job as a worker hands it to an ``async def`` handler: a :class:`Job`,
    ``await job.progress(text)``, and ``cancelled``, an :class:`asyncio.Event`
    (``await job.cancelled.wait()``): see :class:`RunningJob`."""

    _report: Callable[[Arg], Awaitable[int]] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )
    cancelled: asyncio.Event = dataclasses.field(
        default_factory=asyncio.Event, repr=False, compare=False
    )

    @classmethod
    def of(
        cls, job: Job, report: Callable[[Arg], Awaitable[int]], cancelled: asyncio.Event
    ) -> AsyncRunningJob:
        return cls(**_fields(job), _report=report, cancelled=cancelled)

    async def progress(self, text: Arg) -> int:
        """Report progress: see :meth:`RunningJob.progress`."""
        if self._report is None:
            raise RuntimeError("progress() needs a job handed to a handler by a Worker")
        return await self._report(text)


def handed(argument: Job | DeadLetter, job: Job) -> Job | DeadLetter:
    """What the handler is called with: ``argument`` with ``job`` (the running job) in
    place of the fetched one."""
    if isinstance(argument, DeadLetter):
        return dataclasses.replace(argument, job=job)
    return job


class JobState(enum.Enum):
    PENDING = "pending"  # fetched, not started
    RUNNING = "running"
    SETTLING = "settling"  # handler done, ACK/NACK being sent
    ABANDONED = "abandoned"  # NACKed by the shutdown; its handler's outcome is ignored


class Delivery:
    """One delivery of a job to this worker (a NACKed job may come back while still settling).

    ``worked``: when a progress report last postponed the requeue, and the
    retry time it answered (the keep-alive reschedules from it). ``stale``: the
    error that said this delivery's claim is stale, if one did. ``cancelled``:
    a WORKING said the job was cancelled; ``on_cancel`` (the runner's) then
    tells the handler. ``running_since``: when its handler was started, for a
    runner that starts keep-alives only for the jobs still running a while
    later (it sets it back to None once it did).
    """

    __slots__ = ("cancelled", "job", "on_cancel", "running_since", "stale", "state", "worked")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.state = JobState.PENDING
        self.worked: tuple[float, int] | None = None
        self.stale: StaleClaimError | None = None
        self.cancelled = False
        self.on_cancel: Callable[[], object] | None = None
        self.running_since: float | None = None

    @property
    def settled_elsewhere(self) -> bool:
        """Its claim went stale or it was cancelled: this worker must not ACK or NACK it."""
        return self.stale is not None or self.cancelled


class Tracker:
    """The deliveries a worker holds. Not thread-safe: the thread runner wraps it in a lock."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.held: dict[Delivery, None] = {}
        self.stopping = False

    @property
    def free(self) -> int:
        """How many more jobs may be fetched now."""
        return 0 if self.stopping else self.concurrency - len(self.held)

    @property
    def idle(self) -> bool:
        return not self.held

    def add(self, job: Job) -> Delivery:
        delivery = Delivery(job)
        self.held[delivery] = None
        return delivery

    def start(self, delivery: Delivery) -> bool:
        """May the handler start? (Not once the worker is stopping.)"""
        if self.stopping or delivery.state is not JobState.PENDING:
            return False
        delivery.state = JobState.RUNNING
        return True

    def finish(self, delivery: Delivery) -> bool:
        """The handler returned or raised; False if the job was abandoned meanwhile."""
        if delivery.state is not JobState.RUNNING:
            return False
        delivery.state = JobState.SETTLING
        return True

    def settled(self, delivery: Delivery) -> None:
        self.held.pop(delivery, None)

    def stop(self) -> list[Job]:
        """Stop starting jobs; return the pending ones (to NACK), now abandoned."""
        self.stopping = True
        return self._abandon(JobState.PENDING)

    def abandon_running(self) -> list[Job]:
        """The grace period is over: the running jobs (to NACK, unless cancelled), now
        abandoned."""
        return self._abandon(JobState.RUNNING)

    def _abandon(self, state: JobState) -> list[Job]:
        abandoned = [d for d in self.held if d.state is state]
        for delivery in abandoned:
            delivery.state = JobState.ABANDONED
            self.settled(delivery)
        return [d.job for d in abandoned if not d.cancelled]


@dataclass(slots=True)
class Stats:
    """What a worker did, for the summary line."""

    started_at: float
    fetched: int = 0
    acked: int = 0
    nacked: int = 0
    dead_lettered: int = 0
    failed: int = 0
    #: Deliveries left to a later holder: their claim was stale.
    stale: int = 0
    #: Jobs cancelled while their handler ran (neither acked nor nacked).
    cancelled: int = 0

    def summary(self, now: float) -> str:
        elapsed = max(now - self.started_at, 1e-9)
        done = self.acked + self.nacked + self.dead_lettered + self.cancelled
        stale = f", {self.stale} stale claims" if self.stale else ""
        cancelled = f", {self.cancelled} cancelled" if self.cancelled else ""
        return (
            f"{done} jobs in {elapsed:.1f}s ({done / elapsed:.1f}/s): {self.acked} acked, "
            f"{self.nacked} nacked, {self.dead_lettered} dead-lettered, "
            f"{self.failed} handler failures{stale}{cancelled}"
        )


# ---------------------------------------------------------------------- steps
#
# The engine's procedures are generators that yield what the runner must do
# and receive its outcome, like the client's plans:
#   RunHandler(d, a)  -> Returned(the handler's value), or the exception it raised
#   Send(call)        -> the call's value, or the exception it raised
#   Ack(job, result)  -> as Send(ack's call); a runner may send several in one ACKJOB
#   Wait(until)       -> (keep-alive) None; the job is checked again afterwards
#   Drain(deadline)   -> (shutdown) None once no job is running or the deadline passed


@dataclass(frozen=True, slots=True)
class RunHandler:
    delivery: Delivery
    argument: Job | DeadLetter  # what the handler is called with


@dataclass(frozen=True, slots=True)
class Returned:
    value: Any


@dataclass(frozen=True, slots=True)
class Send:
    call: Call[Any]


@dataclass(frozen=True, slots=True)
class Ack:
    """ACK ``job`` (with its ``result``): a :class:`Send` that a runner may batch."""

    job: Job
    result: bytes | None

    @property
    def call(self) -> Call[int]:
        return commands.ack(self.job, result=self.result)

    @property
    def batchable(self) -> bool:
        """Whether it can go in one ACKJOB with others (no result, no claim)."""
        return self.result is None and self.job.claim is None


def acks_call(acks: Iterable[Ack]) -> Command[int]:
    """One ACKJOB for the jobs of batchable ``acks`` (see :attr:`Ack.batchable`)."""
    return commands.ack(*(ack.job for ack in acks))


def acks_then_fetch(acks: Iterable[Ack], fetch: Call[list[Job]]) -> Call[list[Any]]:
    """The ACKJOB of ``acks`` then the GETJOB ``fetch``, pipelined in one round trip
    on one node: [the ACKJOB's result, the jobs], each an exception if it failed."""
    assert isinstance(fetch, Command)
    return Pipelined([acks_call(acks), fetch], 2, raise_on_error=False)


@dataclass(frozen=True, slots=True)
class Wait:
    until: float


@dataclass(frozen=True, slots=True)
class Drain:
    deadline: float


Step = RunHandler | Send | Ack | Wait | Drain
Steps = Generator[Step, Any, None]
#: ACKs waiting to go out together: (the job's steps, the Ack step).
Acks = list[tuple[Steps, Ack]]

#: Seconds a runner waits before fetching again after a fetch failed.
FETCH_BACKOFF = 1.0
#: Seconds a runner's dispatcher waits for an outcome before it looks at the queue and
#: the stop flags again.
CHECK_EVERY = 0.1


class Engine:
    """A worker's decisions and bookkeeping; the runners drive its step generators.

    The thread runner calls every method and advances every generator under one
    lock; the steps themselves (handler, network) run outside it.
    """

    def __init__(self, settings: Settings, clock: Callable[[], float], log: logging.Logger) -> None:
        self.settings = settings
        self.clock = clock
        self.log = log
        self.tracker = Tracker(settings.concurrency)
        self.stats = Stats(clock())
        self._next_summary = self.stats.started_at + settings.summary_interval
        self._fetch_failing = False

    @property
    def probe(self) -> float | None:
        """How long a handler runs before a runner that starts keep-alives late (see
        :meth:`keepalives_due`) starts its keep-alive; None without keep-alives."""
        s = self.settings
        if not s.keepalive:
            return None
        return min(s.probe_after, s.heartbeat or s.probe_after)

    def keepalives_due(self, started_before: float) -> list[tuple[Delivery, Steps]]:
        """The keep-alives to start now, once each: those of the jobs whose handler still
        runs and started before ``started_before`` (short jobs never get one)."""
        due = []
        for delivery in self.tracker.held:
            since = delivery.running_since
            if since is not None and since <= started_before:
                delivery.running_since = None
                if delivery.state is JobState.RUNNING:
                    due.append((delivery, self.keepalive(delivery, since)))
        return due

    def fetch_call(
        self, count: int | None = None, nohang: bool = False, acking: int = 0
    ) -> Call[list[Job]] | None:
        """The GETJOB for up to ``count`` jobs (default: every free slot), with a short
        timeout (``nohang``: none, it returns at once); None when no slot is free or the
        worker is stopping. ``acking``: jobs whose ACK goes out just before this GETJOB
        (pipelined on the same connection), whose slots it may fill already."""
        free = self.tracker.free
        if not self.tracker.stopping:
            free += acking
        count = free if count is None else min(count, free)
        if count <= 0:
            return None
        s = self.settings
        return commands.get_jobs(
            *s.queues,
            count=count,
            timeout=None if nohang else s.poll_timeout,
            nohang=nohang,
            with_counters=True,
            with_claim=s.claims,
        )

    def fetch_failed(self, error: BaseException) -> None:
        """GETJOB failed: say so once (not once per slot and per second) until it works."""
        if not self._fetch_failing:
            self._fetch_failing = True
            self.log.warning("GETJOB failed, retrying every second: %s", error)
        else:
            self.log.debug("GETJOB failed again: %s", error)

    def fetched(self, jobs: list[Job]) -> list[Delivery]:
        if self._fetch_failing:
            self._fetch_failing = False
            self.log.info("GETJOB works again")
        deliveries = [self.tracker.add(job) for job in jobs]
        for job in jobs:
            self.log.debug(
                "job %s fetched from %s (nacks %s, additional deliveries %s%s)",
                job.id,
                job.queue,
                job.nacks,
                job.additional_deliveries,
                "" if job.claim is None else f", claim {job.claim}",
            )
        self.stats.fetched += len(jobs)
        now = self.clock()
        if now >= self._next_summary and not self.tracker.stopping:  # stopping: the final one
            self._next_summary = now + self.settings.summary_interval
            self.log.info("worker: %s", self.stats.summary(now))
        return deliveries

    def process(self, delivery: Delivery) -> Steps:
        """Run one fetched job to its end: dead letter, or handler then ACK or NACK."""
        job = delivery.job
        if not self.tracker.start(delivery):
            if delivery.state is JobState.PENDING:  # fetched after the stop: give it back
                delivery.state = JobState.ABANDONED
                yield from self._nack_all([job], "fetched while stopping")
                self.tracker.settled(delivery)
            return
        reason = dead_letter_reason(job, self.settings)
        if reason is not None:
            self.tracker.finish(delivery)
            yield from self._dead_letter(delivery, reason, None)
            return
        argument: Job | DeadLetter = job
        if self.settings.dead_letters:
            letter = yield from self._letter(job)
            if isinstance(letter, BaseException):
                self.tracker.finish(delivery)
                yield from self._nack_all([job], f"its SHOW failed: {letter}")
                self.tracker.settled(delivery)
                return
            if delivery.state is not JobState.RUNNING:  # NACKed by a shutdown meanwhile
                return
            argument = letter
        self.log.debug("job %s started", job.id)
        delivery.running_since = self.clock()
        outcome = yield RunHandler(delivery, argument)
        if not self.tracker.finish(delivery):
            self.log.debug("job %s finished after the shutdown had NACKed it", job.id)
            return
        error, result = self._outcome(outcome)
        if delivery.stale is not None:  # (said once, when it was found out)
            self.log.debug("job %s finished with a stale claim: neither acked nor nacked", job.id)
        elif delivery.cancelled:
            self.stats.cancelled += 1
            self.log.debug("job %s finished, cancelled: neither acked nor nacked", job.id)
        elif error is None:
            if (yield from self._send(Ack(job, result), delivery, "ACK")):
                self.stats.acked += 1
                self.log.debug("job %s acked%s", job.id, "" if result is None else " with a result")
        elif isinstance(error, Reject):
            self.stats.failed += 1
            yield from self._reject(delivery, str(error), error.__cause__)
            return
        else:
            retry = error if isinstance(error, Retry) else None
            if retry is None:
                self.stats.failed += 1
                text = "".join(traceback.format_exception(error)).rstrip()
                why = f"handler raised {text}"
            else:
                text = why = f"handler asked for a {retry}"
            reason = dead_letter_reason(job, self.settings, failed=True)
            if reason is not None:
                yield from self._dead_letter(delivery, reason, text)
                return
            delay = None if retry is None else retry.delay
            if (yield from self._send(Send(commands.nack(job, delay=delay)), delivery, "NACK")):
                self.stats.nacked += 1
                self.log.debug("job %s nacked: %s", job.id, why)
        self.tracker.settled(delivery)

    def _outcome(self, outcome: Returned | BaseException) -> tuple[BaseException | None, Any]:
        """What the handler's run means: the error (None: success) and the result to
        send with the ACK (None: none; with ``Settings.results`` only)."""
        if isinstance(outcome, BaseException):
            return outcome, None
        if not self.settings.results or outcome.value is None:
            return None, None
        try:
            return None, commands.result_bytes(outcome.value)
        except (TypeError, ValueError) as exc:  # a bad result fails the job
            return exc, None

    def progress_call(self, delivery: Delivery, text: Arg) -> Call[int]:
        """The WORKING that ``job.progress(text)`` sends (with the job's claim, if any)."""
        return commands.working(delivery.job, text)

    def progressed(self, delivery: Delivery, outcome: int | BaseException) -> None:
        """A progress report's WORKING answered: the retry time, or the error (which the
        handler gets too)."""
        job = delivery.job
        if isinstance(outcome, StaleClaimError):
            self._stale(delivery, outcome, "progress report (WORKING)")
        elif isinstance(outcome, JobCancelledError):
            self._cancelled(delivery, "progress report (WORKING)")
        elif isinstance(outcome, BaseException):
            self.log.debug("job %s: progress report failed: %s", job.id, outcome)
        else:
            delivery.worked = (self.clock(), outcome)
            self.log.debug("job %s: progress reported (retry %ss)", job.id, outcome)

    def keepalive(self, delivery: Delivery, started_at: float) -> Steps:
        """Send WORKING for a job at 80 % of its retry time while its handler runs."""
        job = delivery.job
        keep = KeepAlive(job, started_at, self.settings)
        while keep.due is not None:
            yield Wait(keep.due)
            if delivery.state is not JobState.RUNNING or delivery.settled_elsewhere:
                return
            if delivery.worked is not None:  # a progress report postponed the requeue
                at, postponed = delivery.worked
                delivery.worked = None
                keep.worked(postponed, at)
                continue
            if keep.action is Next.SHOW:
                info = yield Send(commands.show(job.id))
                keep.shown(None if isinstance(info, BaseException) else info, self.clock())
                continue
            retry = yield Send(commands.working(job))
            if isinstance(retry, StaleClaimError):
                self._stale(delivery, retry, "keep-alive (WORKING)")
                return
            if isinstance(retry, JobCancelledError):
                self._cancelled(delivery, "keep-alive (WORKING)")
                return
            if isinstance(retry, BaseException):
                self.log.debug("job %s: WORKING refused (%s), no more keep-alive", job.id, retry)
                retry = None
            else:
                self.log.debug("job %s: WORKING sent (retry %ss)", job.id, retry)
            keep.worked(retry, self.clock())

    def shutdown(self, hurry: bool = False) -> Steps:
        """Stop fetching, NACK pending jobs, wait up to the grace period, NACK the rest."""
        yield from self._nack_all(self.tracker.stop(), "not started")
        if not hurry:
            yield Drain(self.clock() + self.settings.grace_period)
        yield from self._nack_all(self.tracker.abandon_running(), "unfinished at shutdown")
        self.log.info("worker stopped: %s", self.stats.summary(self.clock()))

    def _nack_all(self, jobs: list[Job], why: str) -> Steps:
        if not jobs:
            return
        if self.settings.claims and len(jobs) > 1:  # one stale claim would refuse them all
            for job in jobs:
                yield from self._nack_all([job], why)
            return
        result = yield Send(commands.nack(*jobs))
        if isinstance(result, StaleClaimError):
            self.stats.stale += 1
            self.log.warning(_STALE, jobs[0].id, "NACK", jobs[0].claim, result.current)
            return
        if isinstance(result, BaseException):
            self.log.warning("could not NACK %d jobs (%s): %s", len(jobs), why, result)
            return
        self.stats.nacked += len(jobs)
        for job in jobs:
            self.log.debug("job %s nacked: %s", job.id, why)

    def _letter(self, job: Job) -> Generator[Step, Any, DeadLetter | BaseException]:
        """What a dead-letter job says of its origin: its body, or else its SHOW."""
        try:
            return dataclasses.replace(DeadLetter.decode(job.body), job=job)
        except ValueError:
            pass
        info = yield Send(commands.show(job.id))
        if isinstance(info, BaseException):
            return info
        return DeadLetter.from_show(job, info)

    def _dead_letter(self, delivery: Delivery, reason: str, error: str | None) -> Steps:
        job = delivery.job
        queue = self.settings.dead_letter_queue
        assert queue is not None
        body = DeadLetter.of(job, reason, error).encode()
        add = commands.add_job(queue, body, dedup=job.id if self.settings.dedup else None)
        if (yield from self._send(Send(add), delivery, "dead-letter")) and (
            yield from self._send(Ack(job, None), delivery, "ACK after dead-lettering")
        ):
            self.stats.dead_lettered += 1
            self.log.debug("job %s dead-lettered to %s: %s", job.id, queue, reason)
        self.tracker.settled(delivery)

    def _reject(self, delivery: Delivery, why: str, cause: BaseException | None) -> Steps:
        """A handler rejected the job (because of ``cause``, if given): dead-letter it
        (or without a dead-letter queue, acknowledge it away), saying so at ERROR level."""
        job, queue = delivery.job, self.settings.dead_letter_queue
        fate = (
            "dropped (acknowledged: no dead-letter queue)" if queue is None else f"sent to {queue}"
        )
        self.log.error("job %s from %s rejected, %s: %s", job.id, job.queue, fate, why)
        if queue is not None:
            text = None if cause is None else "".join(traceback.format_exception(cause)).rstrip()
            yield from self._dead_letter(delivery, f"rejected: {why}", text)
            return
        yield from self._send(Ack(job, None), delivery, "ACK of a rejected job")
        self.tracker.settled(delivery)

    def _stale(self, delivery: Delivery, error: StaleClaimError, what: str) -> None:
        """A command about the job was refused for a stale claim: say it once, let go."""
        if delivery.stale is not None:
            return
        delivery.stale = error
        self.stats.stale += 1
        job = delivery.job
        self.log.warning(_STALE, job.id, what, job.claim, error.current)

    def _cancelled(self, delivery: Delivery, what: str) -> None:
        """A WORKING about the job said it was cancelled: tell the handler, let go."""
        if delivery.cancelled:
            return
        delivery.cancelled = True
        self.log.info(
            "job %s: %s refused, the job was cancelled: its handler is told, and this worker "
            "neither acks nor nacks it",
            delivery.job.id,
            what,
        )
        if delivery.on_cancel is not None:
            delivery.on_cancel()

    def _send(self, step: Send | Ack, delivery: Delivery, what: str) -> Generator[Step, Any, bool]:
        job = delivery.job
        result = yield step
        if isinstance(result, StaleClaimError):
            self._stale(delivery, result, what)
            return False
        if isinstance(result, BaseException):
            self.log.warning(
                "job %s: %s failed (%s); it will be delivered again after its retry time",
                job.id,
                what,
                result,
            )
            return False
        return True
