"""Trace context carried in the job: a producer's span continues in the worker.

``App(middleware=[Tracing()])`` (needs the ``otel`` extra: ``opentelemetry-api``):
``task.send()`` injects the current context (W3C ``traceparent``/``tracestate``)
into the message's ``meta``, which travels in the job body; the worker extracts
it and runs the task inside a CONSUMER span ``task <name>`` that is its child,
recording the exception of a failed run. A producer in another language adds
the same two keys to ``meta``. What exports the spans is the application's
choice (an OpenTelemetry SDK tracer provider).
"""

from __future__ import annotations

import contextvars
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from disquette.client.models import Job
from disquette.client.task_body import Message
from disquette.tasks.app import Middleware, Task

#: The span of the current run and its context token (per thread, and per asyncio task).
_CURRENT: contextvars.ContextVar[tuple[trace.Span, Any] | None] = contextvars.ContextVar(
    "span", default=None
)


class Tracing(Middleware):
    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("disquette.tasks", tracer_provider=tracer_provider)

    def before_send(self, task: Task, message: Message) -> None:
        propagate.inject(message.meta)

    def before(self, task: Task, job: Job, message: Message) -> None:
        parent = propagate.extract(message.meta)
        span = self.tracer.start_span(
            f"task {task.name}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "disque",
                "messaging.destination.name": job.queue,
                "messaging.message.id": job.id,
            },
        )
        token = context.attach(trace.set_span_in_context(span, parent))
        _CURRENT.set((span, token))

    def after(self, task: Task, job: Job, message: Message, result: Any) -> None:
        self._end(None)

    def on_failure(self, task: Task, job: Job, message: Message, error: BaseException) -> None:
        self._end(error)

    def _end(self, error: BaseException | None) -> None:
        current = _CURRENT.get()
        if current is None:  # before() did not run (a middleware before it failed)
            return
        _CURRENT.set(None)
        span, token = current
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, str(error)))
        context.detach(token)
        span.end()
