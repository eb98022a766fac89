"""``disquette worker module:app``: tasks in supervised worker processes, for real.

A server, the supervisor and its worker processes are real processes; the
test sends tasks with the app's own ``send`` and watches files the tasks write
(tests/tasks/taskapp.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from disquette import Client, DeadLetter
from tests.support.servers import SRC, wait_for

REPO = SRC.parent


@pytest.fixture
def qname(request) -> str:
    return "tasks-" + request.node.name


@pytest.fixture
def env(tmp_path, seeds, qname):
    env = dict(
        os.environ,
        PYTHONPATH=str(SRC),
        DISQUETTE_TEST_DIR=str(tmp_path),
        DISQUETTE_TEST_QUEUE=qname,
        DISQUETTE_SEEDS=seeds,
    )
    os.environ.update(DISQUETTE_TEST_QUEUE=qname, DISQUETTE_SEEDS=seeds)
    return env


@pytest.fixture
def taskapp(env):
    """The test app, imported here with this test's queue and server."""
    sys.modules.pop("tests.tasks.taskapp", None)
    import tests.tasks.taskapp as module

    yield module
    module.app.client.close()
    sys.modules.pop("tests.tasks.taskapp", None)


@pytest.fixture
def run_worker(env, tmp_path):
    procs = []

    def start(*options: str) -> subprocess.Popen:
        out = (tmp_path / "worker.log").open("wb")
        argv = [sys.executable, "-m", "disquette.cli.main", "worker", "tests.tasks.taskapp:app"]
        argv += ["--poll-timeout", "0.1", "--log-level", "debug", *options]
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def log(tmp_path: Path) -> str:
    return (tmp_path / "worker.log").read_text()


def starts(tmp_path: Path, name: str) -> list[int]:
    path = tmp_path / f"{name}.started"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def dead_letters(client: Client) -> dict[str, DeadLetter]:
    letters = {}
    for job in client.qpeek("dead-letters", 1000):
        letter = DeadLetter.decode(job.body)
        letters[letter.id] = letter
    return letters


def test_positional_and_keyword_arguments(taskapp, run_worker, client, tmp_path):
    first = taskapp.add.send(2, 3, scale=10, tag="kw")
    ids = taskapp.add.send_many([(1, 1), taskapp.add.s(4, 5, tag="many")])
    run_worker("--processes", "2", "--threads", "2")
    wait_for(lambda: (tmp_path / "kw.result").exists(), what="add(2, 3, scale=10) ran")
    wait_for(lambda: (tmp_path / "many.result").exists(), what="the bulk send ran")
    assert json.loads((tmp_path / "kw.result").read_text()) == 50
    assert json.loads((tmp_path / "many.result").read_text()) == 9
    for job_id in [first, *ids]:
        wait_for(lambda job_id=job_id: client.show(job_id) is None, what="the jobs acked")


def test_a_failing_task_is_nacked_then_dead_lettered(taskapp, run_worker, client, tmp_path):
    job_id = taskapp.fail.send("boom")
    run_worker("--processes", "1")
    letter = wait_for(lambda: dead_letters(client).get(job_id), what="the dead letter")
    assert letter.reason == "nacks 2 > 1"  # one NACK, then the second failure passes max_retries
    assert "RuntimeError: boom fails" in letter.error
    # The dead letter is added before the failed job is acknowledged.
    wait_for(lambda: client.show(job_id) is None, what="the failed job acked")
    assert "task tests.tasks.taskapp.fail failed" in log(tmp_path)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"v": 1, "task": "no.such.task", "args": []}', "unknown task 'no.such.task'"),
        (b"\xc1\xff not a body", "undecodable task body"),
        (b'{"v": 2, "task": "x"}', "unknown body version 2"),
    ],
)
def test_unknown_tasks_and_corrupt_bodies_go_to_the_dead_letters(
    taskapp, run_worker, client, qname, tmp_path, body, why
):
    job_id = client.add_job(qname, body)
    taskapp.add.send(1, 2, tag="after")  # the worker goes on
    run_worker("--processes", "1")
    letter = wait_for(lambda: dead_letters(client).get(job_id), what="the dead letter")
    assert why in letter.reason and letter.body == body
    wait_for(lambda: (tmp_path / "after.result").exists(), what="the next task ran")
    assert f"job {job_id} from {qname} rejected, sent to dead-letters" in log(tmp_path)
    assert why in log(tmp_path)


def test_a_killed_worker_process_is_restarted_and_the_job_runs_again(
    taskapp, run_worker, client, tmp_path
):
    job_id = taskapp.hold.send("k")
    proc = run_worker("--processes", "1")
    (pid,) = wait_for(lambda: starts(tmp_path, "k"), what="the job started")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: "exited with signal SIGKILL" in log(tmp_path), what="the supervisor saw it")
    pids = wait_for(lambda: starts(tmp_path, "k")[1:] and starts(tmp_path, "k"), timeout=60)
    assert pids[1] != pid  # a new process runs it again, after the job's retry time
    (tmp_path / "k.release").touch()
    wait_for(lambda: client.show(job_id) is None, what="the job acked")
    assert proc.poll() is None


def test_sigterm_finishes_the_running_task_then_exits_0(taskapp, run_worker, client, tmp_path):
    # RETRY 60 (the task's is 1 s): on a loaded machine a late keep-alive would let the
    # job be queued again and started by the other process, which is not what is tested.
    job_id = taskapp.hold.send_with_options(("t",), retry=60)
    proc = run_worker("--processes", "2", "--grace", "60")
    wait_for(lambda: starts(tmp_path, "t"), what="the job started")
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "stopping after the running jobs" in log(tmp_path), what="the stop")
    (tmp_path / "t.release").touch()
    assert proc.wait(60) == 0
    assert client.show(job_id) is None  # acked, not nacked
    assert len(starts(tmp_path, "t")) == 1
    assert "all worker processes stopped" in log(tmp_path)
