"""Running a worker with threads, for synchronous handlers.

Each of the ``concurrency`` slots is a daemon thread that loops: GETJOB (one
job, a short TIMEOUT so a stop is seen within ``poll_timeout``), run the
handler, ACK or NACK. No job is handed from thread to thread: a hand-off
(queue, condition, two context switches) costs more than the GETJOB it saves
(bench/client.py: about twice the throughput at concurrency 1, the same at
8). One more thread sends the keep-alives of every running job, earliest
first; the calling thread waits for a stop request, then runs the shutdown.
Every decision is the :class:`Engine`'s: this module advances its generators
under one lock and performs the steps (handler, network) outside it. The
handler gets a :class:`RunningJob`, whose ``progress(text)`` sends its WORKING
from the handler's thread, and whose ``cancelled`` event the keep-alive
thread sets when the job is cancelled.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from disquette.client.errors import DisqueError
from disquette.client.resp import Arg
from disquette.client.sync import Client
from disquette.worker.core import (
    Delivery,
    Drain,
    Engine,
    Returned,
    RunHandler,
    RunningJob,
    Send,
    Steps,
    Wait,
    handed,
)

FETCH_BACKOFF = 1.0
#: How often a waiting main thread looks at the stop flags (signals run between looks).
CHECK_EVERY = 0.1
#: After the shutdown, how long slots get to return from their last GETJOB (beyond its timeout).
SLOT_EXIT_MARGIN = 5.0


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
        self._fetching: set[threading.Thread] = set()  # slots inside a GETJOB

    def stop(self, hurry: bool = False) -> None:
        """Ask for a graceful stop (``hurry``: skip the grace period). Thread- and signal-safe."""
        if hurry:
            self._hurry.set()
        self._stop.set()

    def run(self) -> None:
        slots = [
            threading.Thread(target=self._slot, name=f"disquette-worker-{i}", daemon=True)
            for i in range(self.engine.settings.concurrency)
        ]
        keeper = threading.Thread(target=self._keep_alive, name="disquette-keepalive", daemon=True)
        for thread in (*slots, keeper):
            thread.start()
        try:
            while not self._stop.wait(CHECK_EVERY):
                pass
        finally:
            self._stop.set()
            self._drive(self.engine.shutdown(self._hurry.is_set()))
            with self._lock:
                self._done = True
                self._lock.notify_all()
                fetching = list(self._fetching)
            # Wait for the slots still in a GETJOB (their late jobs are NACKed); those
            # in a handler abandoned after the grace period are left behind.
            deadline = time.monotonic() + self.engine.settings.poll_timeout + SLOT_EXIT_MARGIN
            for thread in fetching:
                thread.join(max(0.0, deadline - time.monotonic()))

    # ---------------------------------------------------------------- threads

    def _slot(self) -> None:
        engine = self.engine
        me = threading.current_thread()
        while not self._stop.is_set():
            with self._lock:
                call = engine.fetch_call(1)
                if call is None:
                    return
                self._fetching.add(me)
            try:
                jobs = self.client.call(call)
            except (DisqueError, OSError) as exc:
                with self._lock:
                    self._fetching.discard(me)
                    engine.fetch_failed(exc)
                self._stop.wait(FETCH_BACKOFF)
                continue
            with self._lock:
                self._fetching.discard(me)
                deliveries = engine.fetched(jobs)
            for delivery in deliveries:
                self._drive(engine.process(delivery))

    def _keep_alive(self) -> None:
        """Advance keep-alive generators when their ``Wait`` is due, earliest first."""
        heap = self._keepalives
        while True:
            with self._lock:
                while not self._done and (not heap or heap[0][0] > self.engine.clock()):
                    self._lock.wait(heap[0][0] - self.engine.clock() if heap else None)
                if self._done:
                    return
                _, _, steps = heapq.heappop(heap)
            self._drive(steps)

    # ---------------------------------------------------------------- steps

    def _drive(self, steps: Steps) -> None:
        """Advance ``steps`` to its end, or (keep-alives) until it waits again."""
        value: Any = None
        while True:
            with self._lock:
                try:
                    step = steps.send(value)
                except StopIteration:
                    if self.engine.tracker.stopping:
                        self._lock.notify_all()  # the shutdown waits for idle
                    return
                if type(step) is Wait:
                    entry = (step.until, next(self._seq), steps)
                    heapq.heappush(self._keepalives, entry)
                    if self._keepalives[0] is entry:
                        self._lock.notify_all()  # the keeper sleeps until a later one
                    return
                if type(step) is Drain:
                    while not self.engine.tracker.idle and not self._hurry.is_set():
                        left = step.deadline - self.engine.clock()
                        if left <= 0:
                            break
                        self._lock.wait(min(left, CHECK_EVERY))
                    continue
            value = self._perform(step)

    def _perform(self, step: RunHandler | Send) -> Any:
        if type(step) is Send:
            try:
                return self.client.call(step.call)
            except (DisqueError, OSError) as exc:
                return exc
        assert isinstance(step, RunHandler)
        delivery = step.delivery
        cancelled = threading.Event()
        with self._lock:
            delivery.on_cancel = cancelled.set
        self._drive(self.engine.keepalive(delivery, self.engine.clock()))
        job = RunningJob.of(delivery.job, self._progress(delivery), cancelled)
        try:
            return Returned(self.handler(handed(step.argument, job)))
        except Exception as exc:
            return exc

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
