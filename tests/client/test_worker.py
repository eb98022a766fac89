"""The worker in-process against a real node: ack, nack, dead letters, WORKING, stop.

Handlers coordinate with the test through events and server state, never
sleeps; ``run()`` runs in a thread and every test stops it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from disquette import Client, DeadLetter, Job, JobOutcome, Worker
from disquette.client.dead_letter import SERVER_REASON
from disquette.worker import AsyncRunningJob, Retry, RunningJob
from tests.client.running import working
from tests.support.servers import ServerProcess, wait_for


def calls(client: Client, command: str) -> int:
    return client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)


@pytest.fixture(params=["threads", "asyncio"])
def kind(request) -> str:
    return request.param


def make_handler(kind: str, fn):
    if kind == "threads":
        return fn

    async def handler(job: Job) -> Any:
        return await asyncio.to_thread(fn, job)

    return handler


def seeded_worker(
    handler: Callable[..., Any], queues: str | Iterable[str], server: ServerProcess, **options: Any
) -> Worker:
    """A worker running ``handler`` on ``queues`` with its own clients to ``server``,
    polling every 0.1 s so that it stops promptly."""
    return Worker(handler, queues, seeds=f"127.0.0.1:{server.port}", poll_timeout=0.1, **options)


def test_successful_jobs_are_acked_failed_ones_nacked(client, qname, kind, shared_server):
    seen: list[bytes] = []

    def handle(job: Job) -> None:
        seen.append(job.body)
        if job.body == b"bad":
            raise ValueError("bad job")

    bad = client.add_job(qname, b"bad", retry=60)
    good = client.add_jobs(qname, [b"%d" % n for n in range(20)])
    worker = seeded_worker(make_handler(kind, handle), qname, shared_server, concurrency=4)
    with working(worker):
        wait_for(lambda: all(client.show(i) is None for i in good), what="good jobs acked")
        wait_for(lambda: (client.show(bad) or None) and client.show(bad).nacks >= 1)
    assert worker.stats.acked >= 20 and worker.stats.failed >= 1
    assert seen.count(b"bad") >= 1


def test_jobs_failing_too_often_go_to_the_dead_letter_queue(client, qname, kind, shared_server):
    def handle(job: Job) -> None:
        raise RuntimeError(f"cannot handle {job.body!r}")

    job_id = client.add_job(qname, b"poison", retry=60)
    worker = seeded_worker(
        make_handler(kind, handle),
        [qname],
        shared_server,
        dead_letter_queue=qname + "-dead",
        max_nacks=2,
    )
    with working(worker):
        wait_for(lambda: client.qlen(qname + "-dead") == 1, what="a dead letter")
    (job,) = client.get_jobs(qname + "-dead")
    letter = DeadLetter.decode(job.body)
    assert (letter.id, letter.queue, letter.body, letter.nacks) == (job_id, qname, b"poison", 2)
    assert "RuntimeError: cannot handle b'poison'" in letter.error
    assert client.show(job_id) is None  # the original was acknowledged
    assert worker.stats.dead_lettered == 1 and worker.stats.nacked == 2


def test_counters_already_past_the_limits_skip_the_handler(client, qname, shared_server):
    job_id = client.add_job(qname, b"x", retry=60)
    client.get_jobs(qname)
    client.enqueue(job_id)  # queued again: additional deliveries 1
    handled = []
    worker = Worker(
        handled.append,
        qname,
        client=client,
        dead_letter_queue=qname + "-dead",
        max_additional_deliveries=0,
        poll_timeout=0.1,
    )
    with working(worker):
        wait_for(lambda: client.qlen(qname + "-dead") == 1, what="a dead letter")
    assert handled == []
    letter = DeadLetter.decode(client.get_jobs(qname + "-dead")[0].body)
    assert letter.reason == "additional deliveries 1 > 0" and letter.error is None


@pytest.mark.parametrize("known_retry", [None, 1], ids=["retry-from-show", "retry-known"])
def test_long_jobs_are_kept_alive_with_working(client, qname, kind, shared_server, known_retry):
    client.add_job(qname, b"long", retry=1)
    before = {command: calls(client, command) for command in ("working", "show")}

    def handle(job: Job) -> None:
        # run until WORKING was sent twice: past two retry periods
        wait_for(lambda: calls(client, "working") >= before["working"] + 2, what="two WORKING")

    worker = seeded_worker(make_handler(kind, handle), qname, shared_server, retry=known_retry)
    with working(worker):
        wait_for(lambda: worker.stats and worker.stats.acked == 1, what="the job acked")
    assert worker.stats.fetched == 1  # never delivered a second time
    shows = calls(client, "show") - before["show"]
    assert shows == 0 if known_retry else shows == 1  # the retry read once with SHOW


def test_a_throughput_summary_is_logged_at_info(client, qname, kind, shared_server, caplog):
    caplog.set_level(logging.INFO, logger="disquette.worker")
    client.add_jobs(qname, [b"a", b"b", b"c"])
    worker = seeded_worker(
        make_handler(kind, lambda job: None), qname, shared_server, summary_interval=0.05
    )
    with working(worker):
        wait_for(
            lambda: any(m.startswith("worker: 3 jobs in ") for m in caplog.messages),
            what="a summary with the three jobs",
        )
    summaries = [r for r in caplog.records if "3 acked, 0 nacked" in r.getMessage()]
    assert summaries and all(r.levelno == logging.INFO for r in summaries)
    assert caplog.messages[-1].startswith("worker stopped: 3 jobs in ")


def test_stop_nacks_what_did_not_finish_within_the_grace_period(client, qname, kind, shared_server):
    release = threading.Event()
    started = threading.Event()

    def handle(job: Job) -> None:
        started.set()
        release.wait(60)

    job_id = client.add_job(qname, b"stuck", retry=60)
    worker = seeded_worker(make_handler(kind, handle), qname, shared_server, grace_period=0.2)
    try:
        with working(worker):
            assert started.wait(30)
    finally:
        release.set()
    info = client.show(job_id)
    assert (info.state, info.nacks) == ("queued", 1)
    assert worker.stats.nacked == 1 and worker.stats.acked == 0


def test_an_async_handler_needs_the_asyncio_client(client, qname):
    async def handle(job: Job) -> None:
        pass

    with pytest.raises(TypeError, match="async handler"):
        Worker(handle, qname, client=client)


def test_a_dead_letter_worker_sees_where_each_job_came_from(client, qname, kind, shared_server):
    """Its own dead letters (any Disque) and a queue policy's (disquette) alike."""
    qname = qname.replace("[", "-").rstrip("]")  # a policy's pattern is a glob
    dead = qname + "-dead"
    client.qpolicy_set(qname, qname + "-policy", max_nacks=1, deadletter=dead)
    try:
        by_policy = client.add_job(qname + "-policy", b"from the policy", retry=60)
        for _ in range(2):  # nacks 2 > max-nacks 1: the server dead-letters it
            (job,) = client.get_jobs(qname + "-policy", timeout=10)
            client.nack(job.id)
        by_worker = client.add_job(qname, b"from the worker", retry=60)

        def fail(job: Job) -> None:
            raise RuntimeError("cannot")

        failing = Worker(
            fail, qname, client=client, dead_letter_queue=dead, max_nacks=0, poll_timeout=0.1
        )
        with working(failing):
            wait_for(lambda: client.qlen(dead) == 2, what="two dead letters")

        letters: list[DeadLetter] = []

        def inspect(letter: DeadLetter) -> None:
            letters.append(letter)

        consumer = seeded_worker(
            make_handler(kind, inspect), dead, shared_server, dead_letters=True
        )
        with working(consumer):
            wait_for(lambda: len(letters) == 2 and client.qlen(dead) == 0, what="both consumed")
    finally:
        client.qpolicy_del(qname)
    mine, policy = sorted(letters, key=lambda letter: letter.reason == SERVER_REASON)
    assert (mine.queue, mine.id, mine.body) == (qname, by_worker, b"from the worker")
    assert mine.nacks == 0 and mine.reason == "nacks 1 > 0"
    assert "RuntimeError: cannot" in mine.error and mine.job.queue == dead
    assert (policy.queue, policy.id, policy.body) == (
        qname + "-policy",
        by_policy,
        b"from the policy",
    )
    assert policy.nacks == 2 and policy.error is None and policy.job.queue == dead
    assert consumer.stats.acked == 2


# ---------------------------------------------------------------------- issue 24


def test_with_results_the_handlers_value_is_what_waiting_clients_get(
    client, qname, kind, shared_server
):
    ids = client.add_jobs(qname, [b"cat.png", b"dog.png", b"none"], retry=60)

    def handle(job: Job) -> str | None:
        return None if job.body == b"none" else "small-" + job.body.decode()

    worker = seeded_worker(make_handler(kind, handle), qname, shared_server, results=True)
    with working(worker):
        outcomes = [client.wait(job_id, timeout=60) for job_id in ids[:2]]
        wait_for(lambda: worker.stats and worker.stats.acked == 3, what="every job acked")
    assert outcomes == [
        JobOutcome("acked", b"small-cat.png"),
        JobOutcome("acked", b"small-dog.png"),
    ]


def test_retry_postpones_the_job_by_its_delay(client, qname, kind, shared_server):
    job_id = client.add_job(qname, b"flaky", retry=60)
    seen: list[int | None] = []

    def handle(job: Job) -> None:
        seen.append(job.nacks)
        if job.nacks == 0:
            raise Retry(delay=3600, reason="the mail server is down")

    worker = seeded_worker(make_handler(kind, handle), qname, shared_server)
    with working(worker):
        wait_for(lambda: worker.stats and worker.stats.nacked == 1, what="the job nacked")
        info = client.show(job_id)
        assert (info.state, info.nacks) == ("active", 1)  # postponed, not queued
        assert info.next_requeue_within > 3_000_000  # ms: the hour asked for
        assert client.enqueue(job_id) == 1  # (ENQUEUE brings it back at once)
        wait_for(
            lambda: worker.stats and worker.stats.acked == 1, what="the job acked the second time"
        )
    assert seen == [0, 1] and worker.stats.failed == 0


def cancellable(kind: str, started: threading.Event, saw: list[bool]):
    """A handler that runs until its job is cancelled (or a minute passes)."""
    if kind == "threads":

        def handle(job: RunningJob) -> None:
            started.set()
            saw.append(job.cancelled.wait(60))

        return handle

    async def handle_async(job: AsyncRunningJob) -> None:
        started.set()
        try:
            await asyncio.wait_for(job.cancelled.wait(), 60)
        except TimeoutError:
            saw.append(False)
        else:
            saw.append(True)

    return handle_async


def test_a_cancelled_job_tells_its_handler_and_is_neither_acked_nor_nacked(
    client, qname, kind, shared_server
):
    job_id = client.add_job(qname, b"long", retry=60)
    started, saw = threading.Event(), []
    worker = seeded_worker(cancellable(kind, started, saw), qname, shared_server, heartbeat=0.1)
    with working(worker):
        assert started.wait(60)
        before = {command: calls(client, command) for command in ("ackjob", "nack")}
        assert client.cancel(job_id) == 1
        wait_for(
            lambda: worker.stats and worker.stats.cancelled == 1,
            what="the handler returned, cancelled",
        )
        after = {command: calls(client, command) for command in ("ackjob", "nack")}
    assert saw == [True] and after == before
    assert worker.stats.acked == worker.stats.nacked == 0
    assert client.wait(job_id) == JobOutcome("cancelled", None)
