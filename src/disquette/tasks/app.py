"""Tasks: an application object, a decorator, ``task.send()``, and the handler that runs them.

::

    app = App(seeds="10.0.0.1:7711")

    @app.task(queue="emails", retry=60, priority=5)
    def send_email(to: str, subject: str, *, html: bool = False) -> None: ...

    send_email.send("ann@example.com", "Hello", html=True)      # -> the job ID

A task is a function registered under a name (``module.function`` unless
given); ``send`` encodes the call as a versioned body (:mod:`.body`) and adds a
job with the task's options (ADDJOB's RETRY, TTL, DELAY, PRIORITY, BACKOFF, GROUP,
DEDUP). The worker side is :meth:`App.handler`: a :class:`disquette.Worker`
handler that decodes the body, finds the task and calls it; a body it cannot
decode or a task it does not know raises :class:`~disquette.worker.Reject`, so
the job goes to the dead-letter queue with an ERROR line instead of failing
forever. A task that raises has its job NACKed, then dead-lettered once its
NACKs pass ``max_retries`` (the worker's limit). ``disquette worker module:app``
runs the processes (:mod:`.process`).

Around every task run, the app's :class:`Middleware` are called (``before``
in order, ``after`` or ``on_failure`` in reverse), and on the producer side
``before_send`` (which may add context to the message's ``meta``: tracing does).
Per-task time limits raise :class:`TimeLimitExceeded` in the task (a thread's
asynchronous exception, as Dramatiq does; ``asyncio.timeout`` for ``async def``
tasks). The hot path does nothing for what is not used: no middleware loop
without middleware, no timer without a time limit.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from disquette.client import aio, commands
from disquette.client.dead_letter import DEFAULT_DEAD_LETTER_QUEUE
from disquette.client.models import Job
from disquette.client.sync import Client
from disquette.client.task_body import ENCODINGS, BodyError, Encoder, Message, decode
from disquette.tasks import workflow
from disquette.tasks.limits import TimeLimitExceeded, TimeLimits
from disquette.tasks.workflow import Signature
from disquette.worker import Worker
from disquette.worker.core import Reject

log = logging.getLogger("disquette.tasks")

DEFAULT_QUEUE = "default"
#: Options of ``@app.task`` that are ADDJOB's (seconds, a level for priority, a name for
#: group).
ADD_OPTIONS = ("retry", "ttl", "delay", "priority", "backoff", "replicate", "async_", "group")


class Middleware:
    """Hooks around tasks; subclass and override what you need (each does nothing here).

    Worker side, in the task's thread (or task, for ``async def``): ``before``
    before the call (raising fails the job), then ``after`` with the return
    value or ``on_failure`` with the exception. Producer side: ``before_send``
    with the message about to be encoded (its ``meta`` travels with the job).
    """

    def before_send(self, task: Task, message: Message) -> None:
        pass

    def before(self, task: Task, job: Job, message: Message) -> None:
        pass

    def after(self, task: Task, job: Job, message: Message, result: Any) -> None:
        pass

    def on_failure(self, task: Task, job: Job, message: Message, error: BaseException) -> None:
        pass


@dataclass(eq=False, repr=False)
class Task:
    """A registered function; call it directly to run it here, ``send`` to queue it."""

    app: App
    fn: Callable[..., Any]
    name: str
    queue: str
    options: dict[str, Any]
    dedup: bool | Callable[..., Any] | None
    time_limit: float | None
    max_retries: int | None = None
    is_async: bool = field(init=False)
    _encoder_of: Encoder | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.is_async = inspect.iscoroutinefunction(self.fn)
        self.__doc__ = self.fn.__doc__
        self.__wrapped__ = self.fn

    def __repr__(self) -> str:
        return f"<Task {self.name} on {self.queue}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """The call with these arguments, not sent: for :meth:`send_many` and the
        workflows (:mod:`.workflow`)."""
        return Signature(self.name, args, kwargs, of=self)

    def send(self, *args: Any, **kwargs: Any) -> str:
        """Queue a call of the task with these arguments; return the job's ID."""
        if self.app.middleware or self.dedup:
            return self.send_with_options(args, kwargs)
        body = self._encoder()(args, kwargs)
        return self.app.client.add_job(self.queue, body, **self.options)  # type: ignore[no-any-return]

    def send_with_options(
        self, args: Iterable[Any] = (), kwargs: dict[str, Any] | None = None, **options: Any
    ) -> str:
        """:meth:`send` with ADDJOB options for this call (``delay=``, ``priority=``,
        ``dedup=`` a key...) over the task's."""
        body, merged = self._job(args, kwargs, options)
        return self.app.client.add_job(self.queue, body, **merged)  # type: ignore[no-any-return]

    async def asend(self, *args: Any, **kwargs: Any) -> str:
        """:meth:`send` from a coroutine, with the app's asyncio client."""
        return await self.asend_with_options(args, kwargs)

    async def asend_with_options(
        self, args: Iterable[Any] = (), kwargs: dict[str, Any] | None = None, **options: Any
    ) -> str:
        """:meth:`send_with_options` from a coroutine, with the app's asyncio client."""
        body, merged = self._job(args, kwargs, options)
        return await self.app.aio_client.add_job(self.queue, body, **merged)  # type: ignore[no-any-return]

    def send_message(self, message: Message, **options: Any) -> str:
        """Queue ``message`` (a call of this task, with its ``meta``) with ADDJOB
        options over the task's (a workflow's ``after=``, ``if_gone=``)."""
        body, merged = self._message_job(message, options)
        return self.app.client.add_job(self.queue, body, **merged)  # type: ignore[no-any-return]

    def _job(
        self, args: Iterable[Any], kwargs: dict[str, Any] | None, options: dict[str, Any]
    ) -> tuple[bytes, dict[str, Any]]:
        """The body of one call and its ADDJOB options (the call's over the task's)."""
        return self._message_job(Message(self.name, tuple(args), kwargs or {}), options)

    def _message_job(
        self, message: Message, options: dict[str, Any]
    ) -> tuple[bytes, dict[str, Any]]:
        body, dedup = self._prepare(message)
        merged = {**self.options, **options}
        merged.setdefault("dedup", dedup)
        return body, merged

    def send_many(self, calls: Iterable[Message | tuple[Any, ...]], window: int = 256) -> list[str]:
        """Queue many calls pipelined: each a tuple of positional arguments or a
        :meth:`s` message; return the job IDs in order (see ``Client.add_jobs`` for
        what an error in the middle leaves). ``calls`` is read as the pipeline goes:
        nothing is built for all of them at once but the IDs."""
        keys: deque[bytes] | None = deque() if self.dedup else None
        return self.app.client.add_jobs(  # type: ignore[no-any-return]
            self.queue,
            self._bodies(calls, keys),
            window=window,
            dedup=None if keys is None else lambda body: keys.popleft(),
            **self.options,
        )

    def _bodies(
        self, calls: Iterable[Message | tuple[Any, ...]], keys: deque[bytes] | None
    ) -> Iterator[bytes]:
        """The bodies of ``calls``, their DEDUP keys appended to ``keys`` (if given)."""
        encode, hooks = self._encoder(), self.app.middleware
        for call in calls:
            if hooks or keys is not None or isinstance(call, Message):
                message = call if isinstance(call, Message) else Message(self.name, tuple(call))
                body, key = self._prepare(message)
                if keys is not None:
                    keys.append(key or b"")
                yield body
            else:
                yield encode(call if type(call) is tuple else tuple(call))

    def _encoder(self) -> Encoder:
        encoder = self._encoder_of
        if encoder is None or encoder.encoding != self.app.encoding:
            encoder = self._encoder_of = Encoder(self.name, self.app.encoding)
        return encoder

    def _prepare(self, message: Message) -> tuple[bytes, bytes | None]:
        """The body of ``message`` (after the middleware) and its DEDUP key."""
        if message.task != self.name:
            raise ValueError(f"a message for {message.task} sent with task {self.name}")
        for middleware in self.app.middleware:
            middleware.before_send(self, message)
        body = self._encoder()(message.args, message.kwargs, message.meta)
        if not self.dedup:
            return body, None
        if self.dedup is True:
            return body, commands.new_dedup_key()
        return body, commands.to_bytes(self.dedup(*message.args, **message.kwargs))


class App:
    """A set of tasks and how to reach the cluster; see the module docstring.

    ``seeds`` and ``client_options``: the clients' (``password=``, ``ssl=``...),
    made on first use; or give a ``client``. ``encoding``: of the bodies sent,
    ``"json"`` or ``"msgpack"`` (workers read both). ``dead_letter_queue``: where
    rejected jobs and jobs failing more than ``max_retries`` times go (``None``
    for no limit: a failing job is NACKed until its TTL). ``results``: a task's
    return value is sent with the ACK, JSON-encoded, for :meth:`result`
    (disquette only). ``middleware``: :class:`Middleware` instances.
    """

    def __init__(
        self,
        seeds: str | Iterable[str] = "127.0.0.1:7711",
        *,
        client: Client | None = None,
        encoding: str = "json",
        dead_letter_queue: str | None = DEFAULT_DEAD_LETTER_QUEUE,
        max_retries: int | None = 20,
        results: bool = False,
        middleware: Iterable[Middleware] = (),
        **client_options: Any,
    ) -> None:
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, not {encoding!r}")
        if max_retries is not None and dead_letter_queue is None:
            raise ValueError("max_retries needs a dead_letter_queue (or max_retries=None)")
        self.seeds = seeds
        self.client_options = client_options
        self.encoding = encoding
        self.dead_letter_queue = dead_letter_queue
        self.max_retries = max_retries
        self.results = results
        self.middleware: list[Middleware] = list(middleware)
        self.tasks: dict[str, Task] = {}
        self._client = client
        self._aio_client: aio.Client | None = None
        self._limits: TimeLimits | None = None
        self._join: Task | None = None

    # ---------------------------------------------------------------- producers

    @property
    def client(self) -> Client:
        """The synchronous client tasks are sent with (made on first use)."""
        if self._client is None:
            self._client = Client(self.seeds, **self.client_options)
        return self._client

    @property
    def aio_client(self) -> aio.Client:
        """The asyncio client :meth:`Task.asend` uses (made on first use; one client
        serves every event loop, each with its own connections)."""
        if self._aio_client is None:
            self._aio_client = aio.Client(self.seeds, **self.client_options)
        return self._aio_client

    def forget_clients(self) -> None:
        """Drop the clients without closing them (a forked worker process must not
        share its parent's connections)."""
        self._client = None
        self._aio_client = None

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        dedup: bool | Callable[..., Any] | None = None,
        time_limit: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Any:
        """Register ``fn`` as a task: ``@app.task`` or ``@app.task(queue=..., ...)``.

        ``options``: ADDJOB's for every job of the task -- ``retry`` (seconds
        without an ACK before it is delivered again), ``ttl``, ``delay``,
        ``priority`` (0-9, disquette), ``backoff`` (disquette), ``replicate``,
        ``async_``, ``group`` (disquette: the jobs' fair-share group; per call,
        ``send_with_options(args, group="tenant-1")``). ``dedup`` (disquette):
        ``True`` for a random key per send (a lost reply is resent safely), or a
        function of the task's arguments returning the key (one job per key while
        it is queued). ``time_limit``:
        seconds a run may take before :class:`TimeLimitExceeded` is raised in it.
        ``max_retries``: this task's own limit, below the app's: a run failing
        after that many NACKs sends the job to the dead-letter queue (the worker
        counts the job's NACKs, as the app's limit and a queue policy's
        ``max-nacks`` do; the smallest of the three wins).
        """
        unknown = set(options) - set(ADD_OPTIONS)
        if unknown:
            raise TypeError(f"unknown task options: {', '.join(sorted(unknown))}")
        if time_limit is not None and not time_limit > 0:
            raise ValueError("time_limit must be > 0 seconds")
        if max_retries is not None and (type(max_retries) is not int or max_retries < 0):
            raise ValueError("max_retries must be an integer >= 0")
        if max_retries is not None and self.dead_letter_queue is None:
            raise ValueError("max_retries needs the app's dead_letter_queue")

        def register(fn: Callable[..., Any]) -> Task:
            task_name = name or f"{fn.__module__}.{fn.__qualname__}"
            if task_name in self.tasks:
                raise ValueError(f"a task named {task_name} is already registered")
            task = Task(self, fn, task_name, queue, options, dedup, time_limit, max_retries)
            self.tasks[task_name] = task
            return task

        return register if fn is None else register(fn)

    def result(self, job_id: str, timeout: float | None = None) -> Any:
        """Wait for a task's return value (with ``results=True``; disquette only):
        ``LookupError`` if the job was not acknowledged with one within ``timeout``."""
        outcome = self.client.wait(job_id, timeout=timeout)
        if outcome is None or outcome.result is None:
            raise LookupError(f"job {job_id} has no result (yet)")
        return json.loads(outcome.result)

    # ---------------------------------------------------------------- workers

    @property
    def queues(self) -> list[str]:
        """The queues of the registered tasks, in registration order."""
        return list(dict.fromkeys(task.queue for task in self.tasks.values()))

    def worker(
        self,
        queues: Iterable[str] | None = None,
        *,
        use_asyncio: bool = False,
        threads: int = 8,
        **worker_options: Any,
    ) -> Worker:
        """A :class:`disquette.Worker` running this app's tasks from ``queues``
        (default: every task's): ``threads`` at once on threads, or ``threads``
        asyncio tasks with ``use_asyncio``."""
        chosen = list(queues) if queues is not None else self.queues
        if not chosen:
            raise ValueError("no queue to consume: register a task first")
        options: dict[str, Any] = {
            "concurrency": threads,
            "dead_letter_queue": self.dead_letter_queue,
            "max_nacks": self.max_retries,
            "results": True,  # what a task returns is sent when _succeeded says so
            "seeds": self.seeds,
            **self.client_options,
            **worker_options,
        }
        return Worker(self.async_handler if use_asyncio else self.handler, chosen, **options)

    def _resolve(self, job: Job) -> tuple[Task, Message]:
        """The task and message of a job; :class:`Reject` if it cannot be run."""
        try:
            message = decode(job.body)
        except BodyError as exc:
            raise Reject(f"undecodable task body: {exc}") from None
        task = self.tasks.get(message.task) or self._builtin(message.task)
        if task is None:
            raise Reject(f"unknown task {message.task!r} (not registered in this worker)")
        return task, message

    def _builtin(self, name: str) -> Task | None:
        """The tasks every app runs: a workflow's joins (:mod:`.workflow`)."""
        if name != workflow.JOIN:
            return None
        if self._join is None:
            self._join = Task(self, _join, workflow.JOIN, "", {}, None, None)
        return self._join

    def handler(self, job: Job) -> Any:
        """Run the task a job names (a synchronous Worker handler)."""
        task, message = self._resolve(job)
        if workflow.PARENTS in message.meta:
            step = workflow.inputs(self.client, message)
            if step is None:  # a batch's on_success after a failure: left out, its
                return encode_result(None)  # outcome kept for whoever asks (null)
            message = step
        try:
            for m in self.middleware:
                m.before(task, job, message)
            if task.time_limit is not None:
                value = self._time_limits().run(task.time_limit, self._call, task, message)
            else:
                value = self._call(task, message)
        except Exception as exc:
            self._failed(task, job, message, exc)
            raise
        return self._succeeded(task, job, message, value)

    async def async_handler(self, job: Job) -> Any:
        """Run the task a job names (an asyncio Worker handler): ``async def`` tasks
        on the loop, others in a thread."""
        task, message = self._resolve(job)
        if workflow.PARENTS in message.meta:
            step = await asyncio.to_thread(workflow.inputs, self.client, message)
            if step is None:
                return encode_result(None)
            message = step
        try:
            for m in self.middleware:
                m.before(task, job, message)
            async with asyncio.timeout(task.time_limit):
                if task.is_async:
                    value = await task.fn(*message.args, **message.kwargs)
                else:
                    value = await asyncio.to_thread(task.fn, *message.args, **message.kwargs)
        except TimeoutError:
            exc = TimeLimitExceeded(f"task {task.name} ran past its {task.time_limit}s limit")
            self._failed(task, job, message, exc)
            raise exc from None
        except Exception as exc:
            self._failed(task, job, message, exc)
            raise
        return self._succeeded(task, job, message, value)

    @staticmethod
    def _call(task: Task, message: Message) -> Any:
        if task.is_async:
            return asyncio.run(task.fn(*message.args, **message.kwargs))
        return task.fn(*message.args, **message.kwargs)

    def _time_limits(self) -> TimeLimits:
        if self._limits is None:
            self._limits = TimeLimits()
        return self._limits

    def _failed(self, task: Task, job: Job, message: Message, error: BaseException) -> None:
        """Tell the middleware of a failed run; past the task's ``max_retries``,
        :class:`Reject` it (raised from ``error``, so the dead letter carries its
        traceback) rather than have it NACKed again."""
        log.warning(
            "task %s failed (job %s, nacks %s): %r",
            task.name,
            job.id,
            job.nacks,
            error,
            extra={"task": task.name, "job_id": job.id, "queue": job.queue},
        )
        for m in reversed(self.middleware):
            m.on_failure(task, job, message, error)
        limit = task.max_retries
        if limit is not None and (job.nacks or 0) >= limit and not isinstance(error, Reject):
            raise Reject(
                f"task {task.name} failed after {job.nacks or 0} retries "
                f"(its max_retries is {limit})"
            ) from error

    def _succeeded(self, task: Task, job: Job, message: Message, value: Any) -> bytes | None:
        """Tell the middleware of a run that returned ``value``; the job's result, if kept."""
        for m in reversed(self.middleware):
            m.after(task, job, message, value)
        if workflow.KEEP in message.meta:  # a workflow's member: None is a result too
            return encode_result(value)
        if not self.results or value is None:
            return None
        return encode_result(value)


def _join() -> None:
    """A join job's task: nothing to do, its acknowledgement releases what waits on it."""


def encode_result(value: Any) -> bytes:
    """A task's return value as the job's result: JSON."""
    return json.dumps(value, separators=(",", ":")).encode()


__all__ = ["App", "Message", "Middleware", "Task", "TimeLimitExceeded"]
