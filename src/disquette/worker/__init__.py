"""``disquette.Worker``: consume jobs with a handler, doing the at-least-once dance.

::

    def handle(job: disquette.Job) -> None:
        send_email(job.body)           # raise to NACK; return to ACK

    disquette.Worker(handle, "emails", concurrency=8, seeds="10.0.0.1:7711").run()

A synchronous handler runs in threads, an ``async def`` handler in asyncio
tasks (with the asyncio client). The worker ACKs a job when the handler
returns and NACKs it when it raises; it sends WORKING at 80 % of the retry time
of jobs that run long. The handler's job is a :class:`RunningJob` (an
:class:`AsyncRunningJob` for an async handler) whose ``progress(text)`` sends
a WORKING with a text, for the job's progress log (disquette); with
``claims=True`` every ACK, NACK and WORKING carries the job's claim, and a
stale one makes the worker leave the job to its new holder. With
``results=True`` the handler's return value (bytes or str) is sent with the
ACK, for whoever waits for the job (``client.wait``); a handler raising
:class:`Retry` gets its job NACKed with a delay (one raising :class:`Reject`,
dead-lettered at once: it can never succeed); a job cancelled while its
handler runs sets ``job.cancelled`` and is neither ACKed nor NACKed
(disquette). With a dead-letter queue it diverts jobs whose counters pass the limits (see
:mod:`disquette.worker.core`); with ``dead_letters=True`` it consumes
dead-letter queues, its handler getting a :class:`DeadLetter` (where the job
came from, why, its body) for each. On SIGTERM or SIGINT it stops fetching,
lets running jobs finish within ``grace_period`` seconds, NACKs the rest and
returns (a second signal skips the grace period).

Logging (logger ``disquette.worker``): one DEBUG line per job state change, an
INFO throughput summary every ``summary_interval`` seconds and at the end.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from disquette.client import aio
from disquette.client.sync import Client
from disquette.worker.aio import AsyncRunner
from disquette.worker.core import (
    AsyncRunningJob,
    DeadLetter,
    Engine,
    Reject,
    Retry,
    RunningJob,
    Settings,
    Stats,
)
from disquette.worker.threads import ThreadRunner

__all__ = ["AsyncRunningJob", "DeadLetter", "Reject", "Retry", "RunningJob", "Stats", "Worker"]

log = logging.getLogger("disquette.worker")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop when it is installed (as for the server), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Worker:
    """Consume ``queues`` with ``handler``; see the module docstring.

    ``client``: a :class:`disquette.Client` (sync handler) or
    :class:`disquette.aio.Client` (async handler); when omitted one is made from
    ``seeds`` and ``client_options``. ``concurrency``: jobs handled at once.
    ``dead_letter_queue``: where jobs go whose nacks pass ``max_nacks`` or whose
    additional deliveries pass ``max_additional_deliveries`` (``None``: no
    limit); without it failing jobs are NACKed forever (until their TTL), unless
    a disquette queue policy limits them. With a client made with
    ``dedup_retries=True`` the dead letter is added with the original job's ID
    as DEDUP key. ``dead_letters``: ``queues`` are dead-letter queues (the
    worker's own, or a queue policy's ``deadletter``); the handler is called
    with a :class:`DeadLetter` instead of a :class:`Job`.
    ``grace_period``: seconds running jobs get to finish on shutdown.
    ``poll_timeout``: GETJOB's timeout, hence how fast a stop is noticed.
    ``retry``: the RETRY of the jobs, if known (saves a SHOW per long job).
    ``keepalive``: send WORKING for long jobs. ``summary_interval``: seconds
    between INFO summaries. ``claims`` (disquette only): fetch with WITHCLAIM
    and send each job's claim with its ACK, NACK and WORKING (keep-alives and
    ``job.progress``); a job whose claim went stale (it was delivered again
    since, its lease passed to another worker) is logged once and left alone,
    and ``job.progress`` raises :class:`~disquette.StaleClaimError` to its
    handler. ``results`` (disquette only): the handler's return value, ``bytes``
    or ``str`` (at most 65,536 bytes; ``None``: none), is sent with the ACK as the
    job's result; another value fails the job. ``heartbeat``: seconds between
    keep-alives at most (default: 80 % of the retry time), hence how late a
    cancellation (disquette's CANCEL) is seen by ``job.cancelled``.
    """

    def __init__(
        self,
        handler: (
            Callable[[RunningJob], Any]
            | Callable[[AsyncRunningJob], Awaitable[Any]]
            | Callable[[DeadLetter], Any]
        ),
        queues: str | Iterable[str],
        *,
        client: Client | aio.Client | None = None,
        concurrency: int = 1,
        dead_letter_queue: str | None = None,
        max_nacks: int | None = None,
        max_additional_deliveries: int | None = None,
        grace_period: float = 30.0,
        poll_timeout: float = 1.0,
        retry: int | None = None,
        keepalive: bool = True,
        summary_interval: float = 60.0,
        dead_letters: bool = False,
        claims: bool = False,
        results: bool = False,
        heartbeat: float | None = None,
        seeds: str | Iterable[str] = "127.0.0.1:7711",
        **client_options: Any,
    ) -> None:
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        kind = aio.Client if self.is_async else Client
        if client is None:
            client = kind(seeds, **client_options)
        elif not isinstance(client, kind):
            raise TypeError(
                f"an {'async' if self.is_async else 'synchronous'} handler needs a "
                f"{kind.__module__}.{kind.__name__}"
            )
        self.settings = Settings(
            (queues,) if isinstance(queues, str) else tuple(queues),
            concurrency,
            dead_letter_queue,
            max_nacks,
            max_additional_deliveries,
            grace_period,
            poll_timeout,
            retry,
            keepalive,
            summary_interval=summary_interval,
            dead_letters=dead_letters,
            dedup=client.config.dedup_retries,
            claims=claims,
            results=results,
            heartbeat=heartbeat,
        )
        self.client = client
        self.engine: Engine | None = None
        self._runner: ThreadRunner | AsyncRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = False

    @property
    def stats(self) -> Stats | None:
        """Counters of the current or last run."""
        return None if self.engine is None else self.engine.stats

    def run(self, install_signal_handlers: bool = True) -> None:
        """Work until :meth:`stop` or SIGTERM/SIGINT, then shut down gracefully."""
        if self.is_async:
            # Not asyncio.run(): it would wait for executor threads (a handler's
            # to_thread call abandoned after the grace period) before returning.
            loop = new_event_loop()
            try:
                loop.run_until_complete(self.run_async(install_signal_handlers))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
            return
        assert isinstance(self.client, Client)
        runner = ThreadRunner(self._engine(), self.handler, self.client)
        self._start(runner)
        handlers = install_signal_handlers and threading.current_thread() is threading.main_thread()
        previous = {s: signal.signal(s, self._on_signal) for s in _SIGNALS} if handlers else {}
        try:
            runner.run()
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    async def run_async(self, install_signal_handlers: bool = True) -> None:
        """:meth:`run` for an async handler, inside a running event loop."""
        if not self.is_async:
            raise TypeError("run_async needs an async handler; use run()")
        assert isinstance(self.client, aio.Client)
        self._loop = asyncio.get_running_loop()
        runner = AsyncRunner(self._engine(), self.handler, self.client)
        self._start(runner)
        handlers = install_signal_handlers and threading.current_thread() is threading.main_thread()
        if handlers:
            for sig in _SIGNALS:
                self._loop.add_signal_handler(sig, self._on_signal, sig, None)
        try:
            await runner.run()
        finally:
            if handlers:
                for sig in _SIGNALS:
                    self._loop.remove_signal_handler(sig)

    def stop(self, hurry: bool = False) -> None:
        """Stop gracefully (``hurry``: without the grace period); callable from any thread."""
        self._stop_requested = True
        runner = self._runner
        if runner is None:
            return
        if isinstance(runner, AsyncRunner) and self._loop is not None:
            self._loop.call_soon_threadsafe(runner.stop, hurry)
        else:
            runner.stop(hurry)

    def _engine(self) -> Engine:
        self.engine = Engine(self.settings, time.monotonic, log)
        log.info(
            "worker consuming %s with concurrency %d",
            ", ".join(self.settings.queues),
            self.settings.concurrency,
        )
        return self.engine

    def _start(self, runner: ThreadRunner | AsyncRunner) -> None:
        self._runner = runner
        if self._stop_requested:
            runner.stop()

    def _on_signal(self, signum: int, frame: Any) -> None:
        hurry = self._stop_requested
        log.info(
            "%s: %s",
            signal.Signals(signum).name,
            "stopping now" if hurry else "stopping after the running jobs (again to hurry)",
        )
        self.stop(hurry)
