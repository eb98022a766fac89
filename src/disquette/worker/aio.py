"""Running a worker with asyncio tasks, for ``async def`` handlers.

One task fetches: GETJOB with COUNT = free slots and a short TIMEOUT (so a
stop is seen within ``poll_timeout``), which keeps the number of GETJOBs the
server handles low; a task per job runs the handler and ACKs or NACKs; a
running job has one more task for its keep-alives. In asyncio a hand-off is a
cheap task switch, unlike a thread hand-off (compare the thread runner).
Every decision is the :class:`Engine`'s; this module performs its steps. At
the end of the grace period the handlers still running are cancelled. The
handler gets an :class:`AsyncRunningJob` (``await job.progress(text)``, and
``job.cancelled``, an event its keep-alive task sets when the job is
cancelled).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from disquette.client.aio import Client
from disquette.client.errors import DisqueError
from disquette.client.resp import Arg
from disquette.worker.core import (
    Ack,
    AsyncRunningJob,
    Delivery,
    Drain,
    Engine,
    Returned,
    RunHandler,
    Send,
    Steps,
    Wait,
    handed,
)

FETCH_BACKOFF = 1.0


class AsyncRunner:
    def __init__(
        self, engine: Engine, handler: Callable[[Any], Awaitable[Any]], client: Client
    ) -> None:
        self.engine = engine
        self.handler = handler
        self.client = client
        self._stop = asyncio.Event()
        self._hurry = False
        self._settled = asyncio.Event()  # a job was settled: a slot is free, maybe idle
        self._tasks: set[asyncio.Task[None]] = set()

    def stop(self, hurry: bool = False) -> None:
        """Ask for a graceful stop (``hurry``: skip the grace period); call from the loop."""
        self._hurry = self._hurry or hurry
        self._stop.set()
        self._settled.set()

    async def run(self) -> None:
        try:
            await self._fetch_loop()
        finally:
            await self._drive(self.engine.shutdown(self._hurry))
            for task in self._tasks:  # handlers abandoned after the grace period
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _fetch_loop(self) -> None:
        engine = self.engine
        while not self._stop.is_set():
            call = engine.fetch_call()
            if call is None:
                self._settled.clear()
                await self._settled.wait()
                continue
            try:
                jobs = await self.client.call(call)
            except (DisqueError, OSError) as exc:
                engine.fetch_failed(exc)
                try:
                    await asyncio.wait_for(self._stop.wait(), FETCH_BACKOFF)
                except TimeoutError:
                    pass
                continue
            for delivery in engine.fetched(jobs):
                task = asyncio.get_running_loop().create_task(self._drive(engine.process(delivery)))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _drive(self, steps: Steps) -> None:
        value: Any = None
        try:
            while True:
                try:
                    step = steps.send(value)
                except StopIteration:
                    return
                value = await self._perform(step)
        finally:
            self._settled.set()

    async def _perform(self, step: Any) -> Any:
        if type(step) is Send or type(step) is Ack:
            try:
                return await self.client.call(step.call)
            except (DisqueError, OSError) as exc:
                return exc
        if type(step) is Wait:
            await asyncio.sleep(max(0.0, step.until - self.engine.clock()))
            return None
        if type(step) is Drain:
            while not self.engine.tracker.idle and not self._hurry:
                left = step.deadline - self.engine.clock()
                if left <= 0:
                    break
                self._settled.clear()
                try:
                    await asyncio.wait_for(self._settled.wait(), left)
                except TimeoutError:
                    break
            return None
        assert type(step) is RunHandler
        delivery = step.delivery
        cancelled = asyncio.Event()
        delivery.on_cancel = cancelled.set
        keepalive = asyncio.get_running_loop().create_task(
            self._drive(self.engine.keepalive(delivery, self.engine.clock()))
        )
        job = AsyncRunningJob.of(delivery.job, self._progress(delivery), cancelled)
        try:
            return Returned(await self.handler(handed(step.argument, job)))
        except Exception as exc:
            return exc
        finally:
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
