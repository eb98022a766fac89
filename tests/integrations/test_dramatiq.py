"""Dramatiq on disquette, for real: ``dramatiq tests.integrations.dramatiqapp``
worker processes against a real node.

Actors and their results (the results middleware on the disque backend),
delays (the job waits in the cluster), retries with backoff (the same job
NACKed with a DELAY: one job ID, its NACK count the retry count) ending in
disquette's dead-letter queue, priorities, a worker SIGKILLed mid-run, and the
node a worker fetches from SIGKILLed in a cluster of three (nothing lost either way).
"""

from __future__ import annotations

import time

import pytest

from disquette import Client, DeadLetter
from tests.integrations.conftest import Workers, app_module, lines, make_env, tags
from tests.support.servers import wait_for

load_app = app_module("tests.integrations.dramatiqapp")


@pytest.fixture
def seeds(shared_server) -> str:
    return f"127.0.0.1:{shared_server.port}"


@pytest.fixture
def env(tmp_path, seeds, queue_name):
    return make_env(tmp_path, seeds, queue_name)


@pytest.fixture
def app(env):
    module = load_app()
    yield module
    module.broker.close()


@pytest.fixture
def workers(env, tmp_path):
    w = Workers(env, tmp_path)
    yield w
    w.stop()


def worker(workers: Workers, threads: int = 4):
    return workers.start(
        ["dramatiq", "tests.integrations.dramatiqapp", "-p", "1", "-t", str(threads)]
    )


def test_actors_results_and_delays(app, workers, tmp_path, seeds, queue_name):
    worker(workers)
    message = app.add.send(2, 3)
    assert message.get_result(block=True, timeout=60_000) == 5
    sent = time.time()
    app.mark.send_with_options(args=("later",), delay=3000)
    with Client(seeds) as client:  # waiting in the cluster, not in a delay queue
        assert client.qlen(queue_name) == 0
        delayed = [j for j in client.jscan(queue=queue_name, reply="all") if j.delay]
        assert [j.state for j in delayed] == ["active"]
    wait_for(lambda: tags(tmp_path / "mark.log"), 60, what="the delayed message")
    (ran,) = lines(tmp_path / "mark.log")
    assert float(ran[2]) >= sent + 3 - 0.01


def test_retries_then_dead_letter(app, workers, tmp_path, seeds):
    worker(workers)
    app.flaky.send("f")
    with Client(seeds) as client:
        letters = wait_for(
            lambda: client.get_jobs("dead-letters", nohang=True), 60, what="a dead letter"
        )
        letter = DeadLetter.decode(letters[0].body)
        client.ack(*letters)
    assert tags(tmp_path / "flaky.log") == ["f", "f", "f"]  # a run and two retries
    assert letter.nacks == 2  # the same job, NACKed with a delay for each retry
    assert letter.reason == "dramatiq: failed for good after 3 runs"
    assert "RuntimeError: f failed" in letter.error
    assert b'"actor_name":"flaky"' in letter.body.replace(b" ", b"")


def test_a_message_longer_than_its_retry_runs_once(app, workers, tmp_path):
    """The job's RETRY is 2 s, the actor takes 5: WORKING keeps it from coming back."""
    app.slow.send("long", 5)
    worker(workers)
    wait_for(lambda: tags(tmp_path / "done.log"), 60, what="the long message")
    time.sleep(2)  # a second delivery would have started by now
    assert tags(tmp_path / "started.log") == ["long"]


def test_priorities(app, workers, tmp_path):
    for i in range(5):
        app.mark_low.send(f"low{i}")
    for i in range(5):
        app.mark.send(f"high{i}")
    worker(workers, threads=1)
    wait_for(lambda: len(tags(tmp_path / "mark.log")) == 10, 60, what="ten messages")
    assert tags(tmp_path / "mark.log")[:5] == [f"high{i}" for i in range(5)]


def test_worker_sigkill_loses_nothing(app, workers, tmp_path):
    for i in range(12):
        app.slow.send(f"s{i}", 0.5)
    first = worker(workers, threads=3)
    wait_for(lambda: len(tags(tmp_path / "started.log")) >= 3, 60, what="messages started")
    workers.kill(first)
    worker(workers, threads=3)
    everything = {f"s{i}" for i in range(12)}
    wait_for(lambda: set(tags(tmp_path / "done.log")) == everything, 90, what="every message")


def test_node_killed_mid_run_loses_nothing(cluster, tmp_path, queue_name, request):
    env = make_env(tmp_path, ",".join(cluster.addresses), queue_name)
    module = load_app()
    request.addfinalizer(module.broker.close)
    w = Workers(env, tmp_path)
    request.addfinalizer(w.stop)
    for i in range(60):
        module.slow.send(f"n{i}", 0.2)
    worker(w)
    wait_for(lambda: len(tags(tmp_path / "done.log")) >= 10, 60, what="ten messages done")
    served = [cluster.calls(i, "getjob") for i in range(3)]
    cluster.kill(served.index(max(served)))  # the node the worker fetches from
    everything = {f"n{i}" for i in range(60)}
    wait_for(lambda: set(tags(tmp_path / "done.log")) == everything, 120, what="every message")
