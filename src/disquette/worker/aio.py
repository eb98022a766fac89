"""Running a worker with asyncio tasks, for ``async def`` handlers.

The same shape as the thread runner: one coroutine, the *dispatcher*, does the
talking about jobs, in rounds. It takes the ACKs of the jobs whose handler
finished since its last round and sends them in one ACKJOB pipelined with one
GETJOB for the free slots (theirs included: COUNT = free slots + ACKs), so a
batch of jobs costs one round trip on one connection; a task per job runs its
handler (in asyncio a hand-off is a cheap task switch) and queues its ACK for
the dispatcher. Without consumer affinity only: with it, GETJOB may go to
another node, so the ACKJOB goes first on its own. NACKs, dead letters and ACKs
with a result or a claim are sent by the job's task as before.

When jobs are running and the queue is empty the dispatcher polls with GETJOB
NOHANG as handlers finish (at least every ``CHECK_EVERY`` seconds) rather than
block in a GETJOB while finished jobs wait for their ACK; when nothing runs it
blocks in GETJOB for ``poll_timeout`` seconds (so a stop is seen that soon).

A keeper task starts the keep-alive of the jobs still running after the probe
time (one task each; short jobs cost none). Every decision is the
:class:`Engine`'s; this module performs its steps. At the end of the grace
period the handlers still running are cancelled. The handler gets an
:class:`AsyncRunningJob` (``await job.progress(text)``, and ``job.cancelled``,
an event its keep-alive task sets when the job is cancelled).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from disquette.client.aio import Client
from disquette.client.api import Call
from disquette.client.errors import DisqueError
from disquette.client.models import Job
from disquette.client.resp import Arg
from disquette.worker.core import (
    CHECK_EVERY,
    FETCH_BACKOFF,
    Ack,
    Acks,
    AsyncRunningJob,
    Delivery,
    Drain,
    Engine,
    Returned,
    RunHandler,
    Send,
    Steps,
    Wait,
    acks_call,
    acks_then_fetch,
    handed,
)


class AsyncRunner:
    def __init__(
        self, engine: Engine, handler: Callable[[Any], Awaitable[Any]], client: Client
    ) -> None:
        self.engine = engine
        self.handler = handler
        self.client = client
        self._stop = asyncio.Event()
        self._hurry = False
        self._wake = asyncio.Event()  # a job settled or queued its ACK: look again
        self._tasks: set[asyncio.Task[None]] = set()
        #: ACKs for the dispatcher to send; None once it has stopped (each job ACKs alone).
        self._acks: Acks | None = []
        self._keepalives: dict[Delivery, asyncio.Task[None]] = {}

    def stop(self, hurry: bool = False) -> None:
        """Ask for a graceful stop (``hurry``: skip the grace period); call from the loop."""
        self._hurry = self._hurry or hurry
        self._stop.set()
        self._wake.set()

    async def run(self) -> None:
        keeper = asyncio.get_running_loop().create_task(self._keep_alive())
        try:
            await self._dispatch()
        finally:
            acks, self._acks = self._acks, None
            if acks:
                await self._ack(acks)
            await self._drive(self.engine.shutdown(self._hurry))
            keeper.cancel()
            for task in self._tasks:  # handlers abandoned after the grace period
                task.cancel()
            await asyncio.gather(keeper, *self._tasks, return_exceptions=True)

    async def _dispatch(self) -> None:
        engine, wake = self.engine, self._wake
        together = self.client.topology.affinity is None  # see the module docstring
        while not self._stop.is_set():
            wake.clear()
            acks = self._take_acks()
            if acks and not together:
                await self._ack(acks)
                acks = []
            busy = len(engine.tracker.held) > len(acks)  # a handler runs
            call = engine.fetch_call(nohang=busy, acking=len(acks))
            if call is None:  # every slot busy
                await wake.wait()
                continue
            jobs = await (self._ack_and_fetch(acks, call) if acks else self._call(call))
            if isinstance(jobs, BaseException):
                engine.fetch_failed(jobs)
                await self._settle_until(engine.clock() + FETCH_BACKOFF)
                continue
            for delivery in engine.fetched(jobs):
                self._spawn(self._drive(engine.process(delivery)))
            if not jobs and busy:  # the queue is empty: wait for a handler, not in a GETJOB
                await self._wait(wake, CHECK_EVERY)

    def _take_acks(self) -> Acks:
        acks = self._acks
        if not acks:
            return []
        self._acks = []
        return acks

    async def _ack_and_fetch(self, acks: Acks, fetch: Call[list[Job]]) -> Any:
        """Send the ACKJOB of ``acks`` and the GETJOB ``fetch`` pipelined; the jobs."""
        result = await self._call(acks_then_fetch((ack for _, ack in acks), fetch))
        acked, jobs = (result, result) if isinstance(result, BaseException) else result
        self._acked(acks, acked)
        return jobs

    async def _ack(self, acks: Acks) -> None:
        """Send ``acks`` in one ACKJOB and advance their jobs."""
        self._acked(acks, await self._call(acks_call(ack for _, ack in acks)))

    def _acked(self, acks: Acks, value: Any) -> None:
        """The ACKJOB of ``acks`` returned ``value``: advance their jobs (to their end,
        normally; a job with more to do continues in a task of its own)."""
        for steps, _ in acks:
            try:
                step = steps.send(value)
            except StopIteration:
                continue
            self._spawn(self._drive(steps, step))
        self._wake.set()

    async def _settle_until(self, deadline: float) -> None:
        """(After a failed GETJOB.) Send the ACKs that come until ``deadline`` or a stop."""
        while not self._stop.is_set():
            left = deadline - self.engine.clock()
            if left <= 0:
                return
            self._wake.clear()
            acks = self._take_acks()
            if acks:
                await self._ack(acks)
            else:
                await self._wait(self._wake, left)

    @staticmethod
    async def _wait(event: asyncio.Event, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            pass

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _keep_alive(self) -> None:
        """Every half probe time, start the keep-alives of the jobs running longer."""
        engine = self.engine
        probe = engine.probe
        if probe is None:
            return
        while True:
            await asyncio.sleep(probe / 2)
            for delivery, steps in engine.keepalives_due(engine.clock() - probe):
                self._keepalives[delivery] = self._spawn(self._drive(steps))

    async def _call(self, call: Call[Any]) -> Any:
        """Run ``call``; its value, or the error it failed with."""
        try:
            return await self.client.call(call)
        except (DisqueError, OSError) as exc:
            return exc

    async def _drive(self, steps: Steps, step: Any = None) -> None:
        """Advance ``steps`` (from ``step`` if given) to its end, or until it queues its
        ACK for the dispatcher."""
        try:
            if step is None:
                step = next(steps)
            while True:
                if type(step) is Ack and self._acks is not None and step.batchable:
                    self._acks.append((steps, step))
                    return
                step = steps.send(await self._perform(step))
        except StopIteration:
            return
        finally:
            self._wake.set()

    async def _perform(self, step: Any) -> Any:
        if type(step) is RunHandler:
            return await self._run(step)
        if type(step) is Send or type(step) is Ack:
            return await self._call(step.call)
        if type(step) is Wait:
            await asyncio.sleep(max(0.0, step.until - self.engine.clock()))
            return None
        assert type(step) is Drain
        while not self.engine.tracker.idle and not self._hurry:
            left = step.deadline - self.engine.clock()
            if left <= 0:
                break
            self._wake.clear()
            await self._wait(self._wake, left)
        return None

    async def _run(self, step: RunHandler) -> Any:
        delivery = step.delivery
        cancelled = asyncio.Event()
        delivery.on_cancel = cancelled.set
        job = AsyncRunningJob.of(delivery.job, self._progress(delivery), cancelled)
        try:
            return Returned(await self.handler(handed(step.argument, job)))
        except Exception as exc:
            return exc
        finally:
            keepalive = self._keepalives.pop(delivery, None)
            if keepalive is not None:
                keepalive.cancel()

    def _progress(self, delivery: Delivery) -> Callable[[Arg], Awaitable[int]]:
        """``await job.progress(text)`` for one delivery: WORKING with a text."""

        async def progress(text: Arg) -> int:
            call = self.engine.progress_call(delivery, text)
            try:
                retry: int = await self.client.call(call)
            except (DisqueError, OSError) as exc:
                self.engine.progressed(delivery, exc)
                raise
            self.engine.progressed(delivery, retry)
            return retry

        return progress
