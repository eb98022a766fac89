"""Celery on disquette, for real: ``celery -A tests.integrations.celeryapp worker``
processes against real nodes, the app configured with ``disque://`` URLs alone.

What a Celery user relies on: tasks and their results, Celery's retries and
countdowns (the delayed job waits in the cluster, not in the worker), acks_late
through a SIGKILL of the whole worker (nothing lost), revoke, priorities, chain,
group and chord through the disque result backend (the chord's callback once),
a node of three killed mid-run (nothing lost), and exchanges the transport
cannot serve refused at declaration.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from celery import chain, chord, group
from kombu import Connection, Exchange, Queue

from disquette import Client
from tests.integrations.conftest import Workers, app_module, lines, make_env, tags
from tests.support.servers import wait_for

load_app = app_module("tests.integrations.celeryapp")
WORKER = ["celery", "-A", "tests.integrations.celeryapp", "worker", "--without-mingle",
          "--without-gossip", "--without-heartbeat", "-l", "info"]  # fmt: skip


@pytest.fixture
def app(env):
    module = load_app()
    yield module
    module.app.close()


def threads(workers: Workers, queue: str, concurrency: int = 4, **env: str):
    return workers.start([*WORKER, "-P", "threads", "-c", str(concurrency), "-Q", queue], **env)


def test_tasks_results_chain_group_chord(app, workers, queue_name, tmp_path):
    threads(workers, queue_name)
    assert app.add.delay(2, 3).get(timeout=60) == 5
    assert chain(app.add.s(1, 2), app.add.s(10), app.add.s(100))().get(timeout=60) == 113
    assert group(app.add.s(i, i) for i in range(10))().get(timeout=60) == [2 * i for i in range(10)]
    result = chord((app.add.s(i, 1) for i in range(20)), app.total.s())()
    assert result.get(timeout=60) == sum(range(1, 21))
    with pytest.raises(ValueError, match="boom"):
        app.boom.delay().get(timeout=60)
    time.sleep(1)  # a second callback would have run by now
    assert tags(tmp_path / "total.log") == [str(sum(range(1, 21)))]
    assert "celery.chord_unlock" in workers.log()
    assert "Retry in" not in workers.log()  # the unlock task found the group ready


def test_retry_and_countdown(app, workers, queue_name, tmp_path, seeds):
    threads(workers, queue_name)
    assert app.flaky.delay("f", 2).get(timeout=60) == "f after 2 retries"
    assert tags(tmp_path / "flaky.log") == ["f", "f", "f"]
    sent = time.time()
    result = app.mark.apply_async(("later",), countdown=4)
    with Client(seeds) as client:  # the task waits in the cluster, not in the worker
        assert client.qlen(queue_name) == 0
        delayed = list(client.jscan(queue=queue_name, reply="all"))
        assert [j.state for j in delayed] == ["active"] and delayed[0].delay > 0
    assert result.get(timeout=60) == "later"
    (ran,) = lines(tmp_path / "mark.log")
    assert float(ran[2]) >= sent + 4 - 0.01  # not before its countdown


def test_acks_late_survives_worker_sigkill(app, workers, queue_name, tmp_path):
    """A worker SIGKILLed with tasks in hand: another worker runs them all (at-least-once)."""
    results = [app.slow.delay(f"t{i}", 0.5) for i in range(12)]
    first = threads(workers, queue_name, 3, DISQUETTE_TEST_ACKS_LATE="1")
    wait_for(lambda: len(tags(tmp_path / "started.log")) >= 3, 60, what="tasks started")
    workers.kill(first)
    threads(workers, queue_name, 3, DISQUETTE_TEST_ACKS_LATE="1")
    assert sorted(r.get(timeout=90) for r in results) == sorted(f"t{i}" for i in range(12))
    assert set(tags(tmp_path / "done.log")) == {f"t{i}" for i in range(12)}
    interrupted = set(tags(tmp_path / "started.log")) - set(tags(tmp_path / "done.log"))
    assert not interrupted


def test_a_task_longer_than_its_retry_runs_once(app, workers, queue_name, tmp_path):
    """No visibility timeout: the job's RETRY is 2 s here, the task takes 5, and the
    worker's WORKING keeps the job its own meanwhile."""
    result = app.slow.delay("long", 5)
    threads(workers, queue_name, 4, DISQUETTE_TEST_ACKS_LATE="1")
    assert result.get(timeout=60) == "long"
    time.sleep(2)  # a second delivery would have started by now
    assert tags(tmp_path / "started.log") == ["long"]


def test_revoke_cancels_the_job(app, workers, queue_name, tmp_path, seeds):
    kept = app.mark.apply_async(("kept",), countdown=3)
    revoked = app.mark.apply_async(("revoked",), countdown=3)
    revoked.revoke()
    with Client(seeds) as client:
        jobs = [info.id for info in client.jscan(queue=queue_name, reply="all")]
        assert len(jobs) == 1  # the revoked one left the cluster
    threads(workers, queue_name)
    assert kept.get(timeout=60) == "kept"
    time.sleep(1)
    assert tags(tmp_path / "mark.log") == ["kept"]


def test_priorities(app, workers, queue_name, tmp_path):
    for i in range(5):
        app.mark.apply_async((f"low{i}",), priority=1)
    for i in range(5):
        app.mark.apply_async((f"high{i}",), priority=8)
    threads(workers, queue_name, 1)
    wait_for(lambda: len(tags(tmp_path / "mark.log")) == 10, 60, what="ten tasks")
    order = tags(tmp_path / "mark.log")
    assert order[:5] == [f"high{i}" for i in range(5)]


def test_fanout_refused_at_declaration(seeds):
    with Connection(f"disque://{seeds}") as conn:
        channel = conn.channel()
        broadcast = Queue("everyone", Exchange("everyone", type="fanout"))
        with pytest.raises(NotImplementedError, match="no fanout exchanges"):
            broadcast(channel).declare()


def test_node_killed_mid_run_loses_nothing(cluster, tmp_path, queue_name, request):
    seeds = ",".join(cluster.addresses)
    env = make_env(tmp_path, seeds, queue_name)
    module = load_app()
    request.addfinalizer(module.app.close)
    w = Workers(env, tmp_path)
    request.addfinalizer(w.stop)
    for i in range(60):
        module.slow.apply_async((f"n{i}", 0.05), ignore_result=True)
    threads(w, queue_name, 4, DISQUETTE_TEST_ACKS_LATE="1")
    wait_for(lambda: len(tags(tmp_path / "done.log")) >= 10, 60, what="ten tasks done")
    served = [cluster.calls(i, "getjob") for i in range(3)]
    cluster.kill(served.index(max(served)))  # the node the worker fetches from
    everything = {f"n{i}" for i in range(60)}
    wait_for(lambda: set(tags(tmp_path / "done.log")) == everything, 120, what="every task")


if __name__ == "__main__":
    sys.exit(pytest.main([str(Path(__file__)), "-q"]))
