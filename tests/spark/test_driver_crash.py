"""The stream source's crash recovery: the query's driver killed mid-batch.

The query runs in a driver subprocess (tests/spark/crash_driver.py), with a Spark JVM of
its own, and against a node of each test's own. The test kills the driver's whole process group
(Python driver, JVM, Python workers) with SIGKILL while a micro-batch is in flight (its
offset is in the checkpoint, its commit is not) and part of it is already written,
starts it again from the checkpoint, and then checks with the queues' own view that
every job reached the output queue exactly once (the replayed micro-batch has the same
rows in the same partitions, and the disque sink's DEDUP keys, the same as in the first
run, add nothing twice), and that every input job was acknowledged.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark.helpers import DEADLINE, batches, unacked
from tests.support.servers import SRC, ServerProcess, running_server, wait_for

ROOT = SRC.parent
BATCH = 100


@pytest.fixture
def node(tmp_path) -> Iterator[ServerProcess]:
    """A node of each test's own: the test counts the node's job tags, and what a failed
    run left there must not fail the next."""
    with running_server(tmp_path) as server:
        yield server


@contextlib.contextmanager
def driver(
    node: ServerProcess, checkpoint: Path, stop_file: Path, *extra: str, queue: str = "crash"
) -> Iterator[subprocess.Popen]:
    """The crash driver, in a process group of its own; killed at the end if still running."""
    command = [sys.executable, "-m", "tests.spark.crash_driver"]
    command += ["--nodes", f"127.0.0.1:{node.port}", "--source", f"{queue}-in"]
    command += ["--sink", f"{queue}-out", "--checkpoint", str(checkpoint)]
    command += ["--stop-file", str(stop_file), "--max-jobs", str(BATCH), *extra]
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{SRC}")
    with open(checkpoint.parent / "driver.log", "ab") as log:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def in_flight(checkpoint: Path) -> bool:
    """A micro-batch was planned (offset written) and not committed, after two committed ones."""
    planned, committed = batches(checkpoint, "offsets"), batches(checkpoint, "commits")
    return len(committed) >= 2 and bool(planned - committed)


def offset(checkpoint: Path, batch: int) -> dict:
    """The end offset of ``batch`` (the last line of Spark's offset file)."""
    return json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])


def planned(checkpoint: Path, batch: int) -> int:
    """The jobs a planned batch may take (its partitions' counts)."""
    return sum(sum(counts) for counts in offset(checkpoint, batch)["parts"].values())


def driver_log(tmp_path: Path) -> str:
    return (tmp_path / "driver.log").read_text()


def log_tail(tmp_path: Path, lines: int = 30) -> str:
    return "\n".join(driver_log(tmp_path).splitlines()[-lines:])


# Two driver JVMs one after the other, each slower on a loaded machine: the waits below
# add up to 960 s at most, over the suite's 300 s a test.
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("dedup", [True, False], ids=["dedup", "no-dedup"])
def test_driver_killed_mid_batch_loses_nothing(node, client, tmp_path, dedup):
    # RETRY 300: a job of the killed batch can only come back within the deadline
    # by being taken again under its tags, named in the checkpointed offset.
    queue = "crash" if dedup else "crash-nd"
    source, sink = f"{queue}-in", f"{queue}-out"
    bodies = {f"c{i}" for i in range(400)}
    client.add_jobs(source, sorted(bodies), retry=300)
    checkpoint, stop_file = tmp_path / "cp", tmp_path / "stop"
    extra = () if dedup else ("--no-dedup",)

    def output() -> list[bytes]:
        return [info.body for info in client.jscan(queue=sink, reply="all")]

    def part_written() -> bool:
        """A micro-batch is in flight, every partition of it took its jobs under their
        tags (one may start later than the other), and some rows are in the output queue."""
        committed = len(batches(checkpoint, "commits"))
        return (
            in_flight(checkpoint)
            and client.qlen(sink) > BATCH * committed
            and client.info("extensions")["job_tag_entries"] == BATCH
        )

    hold = tmp_path / "hold"
    with driver(node, checkpoint, stop_file, "--hold-file", str(hold), *extra, queue=queue) as proc:
        # The driver starts a JVM of its own beside the suite's: on a loaded machine its
        # first two batches can take minutes (the failure shows what its log got to).
        wait_for(lambda: len(batches(checkpoint, "commits")) >= 2 or proc.poll() is not None,
                 DEADLINE * 3, 0.02,
                 lambda: f"two batches committed; its log ends:\n{log_tail(tmp_path)}")  # fmt: skip
        # The batch in flight (or the next one) stops in its slow partition, which took
        # its jobs: the kill finds it half written, however slow the machine.
        hold.touch()
        wait_for(lambda: part_written() or proc.poll() is not None, DEADLINE, 0.05,
                 "a batch half written")  # fmt: skip
        assert proc.poll() is None, driver_log(tmp_path)
        os.killpg(proc.pid, signal.SIGKILL)
    hold.unlink()
    hits = client.info("extensions")["dedup_hits"]
    unfinished = batches(checkpoint, "offsets") - batches(checkpoint, "commits")
    assert len(unfinished) == 1
    # The executors took the batch under its tags: delivered, not acknowledged.
    assert planned(checkpoint, max(unfinished)) == BATCH
    assert client.info("extensions")["job_tag_entries"] == BATCH
    assert sum(1 for _ in client.jscan(queue=source, states=("active",))) == BATCH

    with driver(node, checkpoint, stop_file, *extra, queue=queue) as proc:
        wait_for(
            lambda: {b.decode() for b in output()} == bodies and unacked(client, source) == 0,
            DEADLINE * 3,
            0.5,
            lambda: f"every job processed and acknowledged; its log ends:\n{log_tail(tmp_path)}",
        )
        stop_file.touch()
        wait_for(lambda: proc.poll() is not None, DEADLINE, 0.2, "the driver to stop")
    written = sorted(b.decode() for b in output())
    assert set(written) == bodies  # nothing lost
    duplicates = len(written) - len(bodies)
    if dedup:
        assert duplicates == 0
        assert client.info("extensions")["dedup_hits"] > hits  # the replay sent rows again
    else:
        assert 0 < duplicates <= BATCH  # what the killed run wrote of its batch, once more
    assert client.qlen(source) == 0
    assert client.info("extensions")["job_tags"] == 0  # every tag acknowledged
    assert batches(checkpoint, "commits") >= unfinished
