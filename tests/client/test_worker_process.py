"""``disquette worker`` as a real process: signals, grace period, exit code, logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from disquette import JobOutcome
from tests.support.servers import SRC, wait_for

REPO = SRC.parent


@pytest.fixture
def run_worker(shared_server, tmp_path):
    procs = []

    def start(handler: str, queue: str, *options: str) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=str(SRC), DISQUETTE_TEST_DIR=str(tmp_path))
        log = (tmp_path / "worker.log").open("wb")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "disquette.cli.main",
                "worker",
                handler,
                queue,
                "--seeds",
                f"127.0.0.1:{shared_server.port}",
                "--poll-timeout",
                "0.1",
                "--log-level",
                "debug",
                *options,
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def log(tmp_path: Path) -> str:
    return (tmp_path / "worker.log").read_text()


def started(tmp_path: Path, name: str) -> bool:
    return (tmp_path / f"{name}.started").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_lets_the_running_job_finish_then_exits_0(
    run_worker, client, qname, tmp_path, sig
):
    job_id = client.add_job(qname, b"a", retry=60)
    proc = run_worker("tests.client.handlers:hold", qname, "--grace", "60")
    wait_for(lambda: started(tmp_path, "a"), what="the job started")
    proc.send_signal(sig)
    wait_for(lambda: "stopping after the running jobs" in log(tmp_path), what="the signal seen")
    client.add_job(qname, b"late")  # not fetched any more
    (tmp_path / "a.release").touch()
    assert proc.wait(60) == 0
    assert client.show(job_id) is None  # acked
    assert client.qlen(qname) == 1
    text = log(tmp_path)
    assert f"job {job_id} started" in text and f"job {job_id} acked" in text
    assert "worker stopped: 1 jobs" in text


@pytest.mark.parametrize("handler", ["hold", "hold_async"])
def test_jobs_unfinished_after_the_grace_period_are_nacked(
    run_worker, client, qname, tmp_path, handler
):
    job_id = client.add_job(qname, b"b", retry=60)
    proc = run_worker(f"tests.client.handlers:{handler}", qname, "--grace", "0.3")
    wait_for(lambda: started(tmp_path, "b"), what="the job started")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    info = client.show(job_id)
    assert (info.state, info.nacks) == ("queued", 1)
    assert f"job {job_id} nacked: unfinished at shutdown" in log(tmp_path)


def test_a_second_signal_skips_the_grace_period(run_worker, client, qname, tmp_path):
    job_id = client.add_job(qname, b"c", retry=60)
    proc = run_worker("tests.client.handlers:hold", qname, "--grace", "3600")
    wait_for(lambda: started(tmp_path, "c"), what="the job started")
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: "stopping after the running jobs" in log(tmp_path), what="the first signal")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0
    assert client.show(job_id).nacks == 1
    assert "stopping now" in log(tmp_path)


def test_failing_jobs_are_nacked_and_logged(run_worker, client, qname, tmp_path):
    job_id = client.add_job(qname, b"d", retry=60)
    proc = run_worker(
        "tests.client.handlers:fail", qname, "--dead-letter-queue", qname + "-dead",
        "--max-nacks", "1",
    )  # fmt: skip
    wait_for(lambda: client.qlen(qname + "-dead") == 1, what="a dead letter")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    text = log(tmp_path)
    assert f"job {job_id} nacked: handler raised" in text
    assert f"job {job_id} dead-lettered to {qname}-dead: nacks 2 > 1" in text
    assert "1 nacked, 1 dead-lettered, 2 handler failures" in text


def test_a_handler_that_cannot_be_loaded(run_worker, qname, tmp_path):
    proc = run_worker("tests.client.handlers:missing", qname)
    assert proc.wait(60) == 2
    assert "cannot load tests.client.handlers:missing" in log(tmp_path)


def test_an_unreachable_cluster_is_retried_until_stopped(shared_server, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(SRC))
    output = tmp_path / "out.log"
    with output.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "disquette.cli.main", "worker", "tests.client.handlers:hold",
             "q", "--seeds", "127.0.0.1:1", "--poll-timeout", "0.1"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for(
                lambda: "GETJOB failed, retrying" in output.read_text(), what="a logged failure"
            )
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_claims_and_progress_from_the_shell(run_worker, client, qname, tmp_path):
    job_id = client.add_job(qname, b"e", retry=60)
    proc = run_worker("tests.client.handlers:report", qname, "--claims")
    wait_for(lambda: f"job {job_id} acked" in log(tmp_path), what="the job acked")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    text = log(tmp_path)
    assert f"job {job_id} fetched from {qname} (nacks 0, additional deliveries 0, claim " in text
    assert text.count(f"job {job_id}: progress reported") == 2
    assert client.show(job_id) is None


def test_results_from_the_shell(run_worker, client, qname, tmp_path):
    job_id = client.add_job(qname, b"hello", retry=60)
    proc = run_worker("tests.client.handlers:shout", qname, "--results", "--heartbeat", "0.5")
    assert client.wait(job_id, timeout=60) == JobOutcome("acked", b"HELLO")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert f"job {job_id} acked with a result" in log(tmp_path)


def test_settings_that_clash_are_refused_with_a_message(run_worker, qname, tmp_path):
    proc = run_worker("tests.client.handlers:shout", qname, "--no-keepalive", "--heartbeat", "1")
    assert proc.wait(60) == 2
    assert "disquette worker: heartbeat needs the keep-alive" in log(tmp_path)
