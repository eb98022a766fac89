"""Worker metrics in Prometheus form: a :class:`Middleware` counting and timing tasks.

``disquette worker module:app --metrics-port P`` serves them (process ``i`` of
the supervisor on ``P + i``, each its own registry: no shared files between
processes); in code, ``App(middleware=[Metrics.serve(port)])``.

* ``disquette_tasks_total{task, outcome}`` -- runs finished, ``outcome`` being
  ``done`` or ``failed``;
* ``disquette_task_seconds{task}`` -- a histogram of run durations;
* ``disquette_tasks_running{task}`` -- runs in progress.
"""

from __future__ import annotations

import contextvars
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from disquette.client.models import Job
from disquette.client.task_body import Message
from disquette.tasks.app import Middleware, Task

#: When the current run started (per thread, and per asyncio task).
_STARTED: contextvars.ContextVar[float | None] = contextvars.ContextVar("started", default=None)


class Metrics(Middleware):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.total = Counter(
            "disquette_tasks", "Task runs finished", ("task", "outcome"), registry=self.registry
        )
        self.seconds = Histogram(
            "disquette_task_seconds", "Task run durations", ("task",), registry=self.registry
        )
        self.running = Gauge(
            "disquette_tasks_running", "Task runs in progress", ("task",), registry=self.registry
        )

    @classmethod
    def serve(cls, port: int, addr: str = "0.0.0.0") -> Metrics:
        """Metrics served over HTTP on ``port`` (a thread of this process)."""
        metrics = cls()
        start_http_server(port, addr, registry=metrics.registry)
        return metrics

    def before(self, task: Task, job: Job, message: Message) -> None:
        self.running.labels(task.name).inc()
        _STARTED.set(time.perf_counter())

    def after(self, task: Task, job: Job, message: Message, result: Any) -> None:
        self._finished(task, "done")

    def on_failure(self, task: Task, job: Job, message: Message, error: BaseException) -> None:
        self._finished(task, "failed")

    def _finished(self, task: Task, outcome: str) -> None:
        self.running.labels(task.name).dec()
        self.total.labels(task.name, outcome).inc()
        started = _STARTED.get()
        if started is not None:
            self.seconds.labels(task.name).observe(time.perf_counter() - started)
