"""Running a worker with threads, for synchronous handlers.

One thread, the *dispatcher* (the one that calls :meth:`ThreadRunner.run`),
does all the talking about jobs, in rounds: it settles the jobs whose handler
finished since the last round (one ACKJOB for all of them), then fetches as
many jobs as there are free slots with one GETJOB (COUNT = free slots) and
hands them to ``concurrency`` handler threads through a queue. Handler threads
only run handlers and put the outcome in a second queue. So a process keeps
one connection busy with two commands per batch of jobs instead of two round
trips per job and per thread, and the handler threads never contend for a
connection (bench/tasks.py measures both shapes: batching makes the no-op worker
several times faster; profiled, a thread-per-slot loop spent its time in the
client's connection pool and in GIL hand-offs around two small commands per job).

When jobs are running and the queue is empty the dispatcher polls with GETJOB
NOHANG between outcomes (at most every ``CHECK_EVERY`` seconds) rather than
block in a GETJOB while finished jobs wait for their ACK; when nothing runs it
blocks in GETJOB for ``poll_timeout`` seconds, as before.

A keeper thread sends the keep-alives: every ``probe`` seconds it starts the
keep-alive of the jobs running longer than that (so short jobs cost no timer),
then sends their WORKING when due, earliest first. Every decision is the
:class:`Engine`'s: this module advances its generators under one lock and
performs the steps (handler, network) outside it. The handler gets a
:class:`RunningJob`, whose ``progress(text)`` sends its WORKING from the
handler's thread, and whose ``cancelled`` event the keeper sets when the job
is cancelled.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any

from disquette.client.api import Call
from disquette.client.errors import DisqueError
from disquette.client.models import Job
from disquette.client.resp import Arg
from disquette.client.sync import Client
from disquette.worker.core import (
    CHECK_EVERY,
    FETCH_BACKOFF,
    Ack,
    Acks,
    Delivery,
    Drain,
    Engine,
    Returned,
    RunHandler,
    RunningJob,
    Send,
    Steps,
    Wait,
    acks_call,
    acks_then_fetch,
    handed,
)

#: Jobs whose handler finished, with what the handler did: (steps, outcome).
Outcome = tuple[Steps, Any]


class ThreadRunner:
    def __init__(self, engine: Engine, handler: Callable[[Any], Any], client: Client) -> None:
        self.engine = engine
        self.handler = handler
        self.client = client
        self._lock = threading.Condition()
        self._keepalives: list[tuple[float, int, Steps]] = []
        self._seq = itertools.count()
        self._stop = threading.Event()
        self._hurry = threading.Event()
        self._done = False
        self._inbox: queue.SimpleQueue[tuple[Steps, RunHandler] | None] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()

    def stop(self, hurry: bool = False) -> None:
        """Ask for a graceful stop (``hurry``: skip the grace period). Thread- and signal-safe."""
        if hurry:
            self._hurry.set()
        self._stop.set()
        self._outbox.put(None)  # wakes the dispatcher

    def run(self) -> None:
        concurrency = self.engine.settings.concurrency
        handlers = [
            threading.Thread(target=self._handle, name=f"disquette-worker-{i}", daemon=True)
            for i in range(concurrency)
        ]
        keeper = threading.Thread(target=self._keep_alive, name="disquette-keepalive", daemon=True)
        for thread in (*handlers, keeper):
            thread.start()
        try:
            self._dispatch()
        finally:
            self._stop.set()
            self._advance(self.engine.shutdown(self._hurry.is_set()), None, None)
            with self._lock:
                self._done = True
                self._lock.notify_all()
            for _ in handlers:  # those in a handler abandoned after the grace period stay
                self._inbox.put(None)

    # ---------------------------------------------------------------- threads

    def _dispatch(self) -> None:
        engine = self.engine
        # Without consumer affinity GETJOB goes where the ACKs can: one round trip for
        # both, and the GETJOB may already fill the slots of the jobs it acknowledges.
        together = self.client.topology.affinity is None
        while not self._stop.is_set():
            acks = self._collect(0.0)
            if acks and not together:
                self._ack(acks)
                acks = []
            with self._lock:
                busy = len(engine.tracker.held) > len(acks)  # a handler runs
                call = engine.fetch_call(nohang=busy, acking=len(acks))
            if call is None:  # every slot busy
                self._ack(acks)
                self._settle(CHECK_EVERY)
                continue
            jobs = self._ack_and_fetch(acks, call) if acks else self._call(call)
            if isinstance(jobs, BaseException):
                with self._lock:
                    engine.fetch_failed(jobs)
                self._settle_until(engine.clock() + FETCH_BACKOFF)
                continue
            with self._lock:
                deliveries = engine.fetched(jobs)
            for delivery in deliveries:
                self._advance(engine.process(delivery), None, None)
            if not jobs and busy:  # the queue is empty: wait for a handler, not in a GETJOB
                self._settle(CHECK_EVERY)

    def _ack_and_fetch(self, acks: Acks, fetch: Call[list[Job]]) -> list[Job] | BaseException:
        """Send the ACKJOB of ``acks`` and the GETJOB ``fetch`` pipelined; the jobs."""
        result = self._call(acks_then_fetch((ack for _, ack in acks), fetch))
        acked, jobs = (result, result) if isinstance(result, BaseException) else result
        self._ack(acks, acked)
        return jobs

    def _call(self, call: Call[Any]) -> Any:
        """Run ``call``; its value, or the error it failed with."""
        try:
            return self.client.call(call)
        except (DisqueError, OSError) as exc:
            return exc

    def _handle(self) -> None:
        """A handler thread: run the handlers of the jobs the dispatcher hands over."""
        inbox, outbox, run = self._inbox, self._outbox, self._run
        while (item := inbox.get()) is not None:
            steps, step = item
            outbox.put((steps, run(step)))

    def _run(self, step: RunHandler) -> Any:
        delivery = step.delivery
        cancelled = threading.Event()
        delivery.on_cancel = cancelled.set
        job = RunningJob.of(delivery.job, self._progress(delivery), cancelled)
        try:
            return Returned(self.handler(handed(step.argument, job)))
        except Exception as exc:
            return exc

    def _keep_alive(self) -> None:
        """Start the keep-alives of jobs running longer than the probe time, and advance
        them when their ``Wait`` is due, earliest first."""
        probe = self.engine.probe
        if probe is None:
            return
        heap, clock = self._keepalives, self.engine.clock
        next_scan = clock() + probe
        while True:
            with self._lock:
                while not self._done:
                    now = clock()
                    if heap and heap[0][0] <= now:
                        break
                    if now >= next_scan:
                        next_scan = now + probe / 2
                        self._start_keepalives(now - probe)
                        continue
                    self._lock.wait(min(heap[0][0], next_scan) - now if heap else next_scan - now)
                if self._done:
                    return
                _, _, steps = heapq.heappop(heap)
            self._advance(steps, None, None)

    def _start_keepalives(self, started_before: float) -> None:
        """(Under the lock.) Start the keep-alive of the jobs started before that time."""
        for _, steps in self.engine.keepalives_due(started_before):
            try:
                self._schedule(steps, steps.send(None))
            except StopIteration:
                pass

    def _schedule(self, steps: Steps, step: Any) -> None:
        """(Under the lock.) Keep-alive ``steps`` waits for ``step.until``."""
        assert type(step) is Wait
        entry = (step.until, next(self._seq), steps)
        heapq.heappush(self._keepalives, entry)
        if self._keepalives[0] is entry:
            self._lock.notify_all()  # the keeper sleeps until a later one

    # ---------------------------------------------------------------- steps

    def _settle(self, timeout: float) -> None:
        """Advance the jobs whose handler finished (waiting up to ``timeout`` seconds for
        one), sending their ACKs together."""
        self._ack(self._collect(timeout))

    def _collect(self, timeout: float) -> Acks:
        """Advance the jobs whose handler finished (waiting up to ``timeout`` seconds for
        one); return the ACKs they wait for."""
        acks: Acks = []
        outbox = self._outbox
        try:
            item = outbox.get(timeout=timeout) if timeout > 0 else outbox.get_nowait()
        except queue.Empty:
            return acks
        while True:
            if item is not None:  # None: a stop request's wake-up
                self._advance(item[0], item[1], acks)
            try:
                item = outbox.get_nowait()
            except queue.Empty:
                return acks

    def _ack(self, acks: Acks, value: Any = None) -> None:
        """Send ``acks`` in one ACKJOB (``value``: its outcome, if it was sent already)
        and advance their jobs."""
        while acks:
            if value is None:
                value = self._call(acks_call(ack for _, ack in acks))
            batch, acks = acks, []
            for steps, _ in batch:
                self._advance(steps, value, acks)
            value = None

    def _settle_until(self, deadline: float) -> None:
        """Settle outcomes until ``deadline`` or a stop request."""
        while not self._stop.is_set():
            left = deadline - self.engine.clock()
            if left <= 0:
                return
            self._settle(min(left, CHECK_EVERY))

    def _advance(self, steps: Steps, value: Any, acks: Acks | None) -> None:
        """Advance ``steps`` until it ends, hands its handler to a thread, waits (a
        keep-alive), or ACKs (into ``acks`` if given, to be sent together)."""
        while True:
            with self._lock:
                try:
                    step = steps.send(value)
                except StopIteration:
                    return
                if type(step) is Wait:
                    self._schedule(steps, step)
                    return
            if type(step) is RunHandler:
                self._inbox.put((steps, step))
                return
            if type(step) is Drain:
                self._drain(step.deadline)
                value = None
            elif type(step) is Ack and acks is not None and step.batchable:
                acks.append((steps, step))
                return
            else:
                assert type(step) is Send or type(step) is Ack
                value = self._call(step.call)

    def _drain(self, deadline: float) -> None:
        """(Shutdown.) Settle the running jobs as they finish, until none runs, the
        deadline passes or a second signal hurries."""
        tracker, clock = self.engine.tracker, self.engine.clock
        while not self._hurry.is_set():
            with self._lock:
                if tracker.idle:
                    return
            left = deadline - clock()
            if left <= 0:
                return
            self._settle(min(left, CHECK_EVERY))

    def _progress(self, delivery: Delivery) -> Callable[[Arg], int]:
        """``job.progress`` for one delivery: WORKING with a text, from the handler's thread."""

        def progress(text: Arg) -> int:
            with self._lock:
                call = self.engine.progress_call(delivery, text)
            try:
                retry = self.client.call(call)
            except (DisqueError, OSError) as exc:
                with self._lock:
                    self.engine.progressed(delivery, exc)
                raise
            with self._lock:
                self.engine.progressed(delivery, retry)
            return retry

        return progress
