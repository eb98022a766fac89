"""Tasks with an in-process worker on a real server: middleware, results, time limits,
metrics and trace context, the asyncio worker; and the task options."""

from __future__ import annotations

import asyncio
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from disquette.client.task_body import decode
from disquette.tasks import App, Middleware, TimeLimitExceeded
from disquette.tasks.metrics import Metrics
from disquette.tasks.tracing import Tracing
from tests.support.servers import wait_for


class Recorder(Middleware):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def before_send(self, task, message):
        message.meta["sent-by"] = "recorder"

    def before(self, task, job, message):
        self.events.append(("before", task.name, message.meta.get("sent-by")))

    def after(self, task, job, message, result):
        self.events.append(("after", task.name, result))

    def on_failure(self, task, job, message, error):
        self.events.append(("failure", task.name, type(error).__name__))


def test_options_go_to_addjob_and_the_body_is_documented_json(seeds, client, request):
    app = App(seeds)
    queue = f"opts-{request.node.name}"

    @app.task(queue=queue, name="mul", retry=7, ttl=600, priority=3, delay=0)
    def mul(a, b):
        return a * b

    job_id = mul.send(6, b=7)
    info = client.show(job_id)
    # SHOW's ttl is what is left of it: a second may have turned since the ADDJOB.
    assert (info.retry, info.queue) == (7, queue) and 590 <= info.ttl <= 600
    (job,) = client.qpeek(queue, 1)
    assert job.body == b'{"v":1,"task":"mul","args":[6],"kwargs":{"b":7}}'
    assert mul(2, 3) == 6  # calling the task runs it here
    with pytest.raises(TypeError):
        app.task(queue=queue, retries=3)(mul.fn)


def test_a_group_per_task_or_per_call(seeds, client, request):
    app = App(seeds)
    queue = f"group-{request.node.name}"

    @app.task(queue=queue, group="tenant-1")
    def bill(account):
        pass

    assert client.show(bill.send(1)).group == "tenant-1"
    assert client.show(bill.send_with_options((2,), group="tenant-2")).group == "tenant-2"
    ids = bill.send_many([(3,), (4,)])
    assert [client.show(i).group for i in ids] == ["tenant-1", "tenant-1"]


def test_dedup_by_key_and_msgpack(seeds, client, request):
    app = App(seeds, encoding="msgpack")
    queue = f"dedup-{request.node.name}"

    @app.task(queue=queue, dedup=lambda user: f"user-{user}")
    def refresh(user):
        pass

    assert refresh.send(1) == refresh.send(1) != refresh.send(2)
    assert client.qlen(queue) == 2
    ids = refresh.send_many((user,) for user in (3, 1, 3))  # a generator, read lazily
    assert ids[0] == ids[2] and ids[1] == refresh.send(1)  # each body with its own key
    assert client.qlen(queue) == 3
    (job, *_) = client.qpeek(queue, 3)
    assert decode(job.body).task.endswith("refresh")


def test_middleware_results_and_failures(seeds, running, request):
    recorder = Recorder()
    app = App(seeds, results=True, middleware=[recorder], max_retries=0)
    queue = f"mw-{request.node.name}"

    @app.task(queue=queue, name="ok")
    def ok(x):
        return {"twice": 2 * x}

    @app.task(queue=queue, name="bad")
    def bad():
        raise ValueError("no")

    job_id = ok.send(21)
    bad.send()
    running(app, threads=2)
    assert app.result(job_id, timeout=30) == {"twice": 42}
    wait_for(lambda: len(recorder.events) == 4, what="the hooks")
    assert ("before", "ok", "recorder") in recorder.events
    assert ("after", "ok", {"twice": 42}) in recorder.events
    assert ("failure", "bad", "ValueError") in recorder.events


def test_a_time_limit_interrupts_a_thread_task(seeds, running, request):
    recorder = Recorder()
    app = App(seeds, middleware=[recorder], max_retries=0)
    queue = f"limit-{request.node.name}"

    @app.task(queue=queue, name="slow", time_limit=0.2)
    def slow():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.01)

    slow.send()
    running(app)
    wait_for(lambda: recorder.events[-1:] == [("failure", "slow", "TimeLimitExceeded")])
    assert issubclass(TimeLimitExceeded, Exception)


def test_async_tasks_on_the_asyncio_worker(seeds, running, request, tmp_path):
    app = App(seeds, results=True)
    queue = f"aio-{request.node.name}"

    @app.task(queue=queue, name="co")
    async def co(x):
        return x + 1

    @app.task(queue=queue, name="plain")
    def plain(x):
        return x * 10

    a, b = co.send(1), plain.send(2)
    running(app, use_asyncio=True)
    assert app.result(a, timeout=30) == 2
    assert app.result(b, timeout=30) == 20


def test_metrics_and_trace_context(seeds, running, request):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    metrics = Metrics()
    app = App(seeds, middleware=[Tracing(provider), metrics])
    queue = f"otel-{request.node.name}"

    @app.task(queue=queue, name="traced")
    def traced():
        pass

    with provider.get_tracer("test").start_as_current_span("producer") as producer:
        traced.send()
    running(app)
    wait_for(lambda: any(s.name == "task traced" for s in exporter.get_finished_spans()))
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "task traced"]
    assert span.context.trace_id == producer.get_span_context().trace_id
    assert span.parent.span_id == producer.get_span_context().span_id
    value = metrics.registry.get_sample_value
    wait_for(lambda: value("disquette_tasks_total", {"task": "traced", "outcome": "done"}) == 1)
    assert value("disquette_task_seconds_count", {"task": "traced"}) == 1


def test_a_task_past_its_own_max_retries_is_dead_lettered_with_its_traceback(
    seeds, client, running, request
):
    queue = f"retries-{request.node.name}"
    dead = f"dead-{request.node.name}"
    app = App(seeds, dead_letter_queue=dead, max_retries=20)
    runs = []

    @app.task(queue=queue, name="flaky", max_retries=2)
    def flaky():
        runs.append(1)
        raise RuntimeError("still broken")

    with pytest.raises(ValueError, match="max_retries"):
        app.task(queue=queue, name="other", max_retries=-1)(lambda: None)
    flaky.send()
    running(app)
    (letter,) = client.get_jobs(dead, timeout=60)
    assert len(runs) == 3  # the first run and two retries
    assert b"failed after 2 retries" in letter.body and b"still broken" in letter.body


def test_asend_from_a_coroutine(seeds, client, request):
    app = App(seeds)
    queue = f"asend-{request.node.name}"

    @app.task(queue=queue, name="later")
    def later(x, *, y):
        pass

    async def produce() -> list[str]:
        return [await later.asend(1, y=2), await later.asend_with_options((3,), {"y": 4})]

    first, second = asyncio.run(produce())
    jobs = client.get_jobs(queue, count=2, timeout=10)
    assert [job.id for job in jobs] == [first, second]
    assert [decode(job.body).kwargs for job in jobs] == [{"y": 2}, {"y": 4}]
