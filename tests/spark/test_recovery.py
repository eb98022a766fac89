"""Crash recovery and keep-alive of the stream source.

The crash test runs the query in a driver subprocess (tests/spark/crash_driver.py),
kills its whole process group (Python driver, JVM, Python workers) with SIGKILL
while a micro-batch is in flight (its offset is in the checkpoint, its commit
is not) and part of it is already written, starts it again from the
checkpoint, and then checks with the queues' own view that every job reached
the output queue exactly once (the replayed micro-batch has the same rows in
the same partitions, and the disque sink's DEDUP keys, the same as in the
first run, add nothing twice), and that every input job was acknowledged.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark import TaskContext
from pyspark.sql.functions import udf
from pyspark.sql.types import BinaryType, StringType

from tests.spark.helpers import DEADLINE, stream, to_memory, unacked, until
from tests.support.servers import SRC, ServerProcess, wait_for

ROOT = SRC.parent
BATCH = 100


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


def batches(checkpoint: Path, kind: str) -> set[int]:
    folder = checkpoint / kind
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


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
            DEADLINE * 2,
            0.5,
            "every job processed and acknowledged",
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


@udf(BinaryType())
def slowly(body):
    time.sleep(0.03)
    return body


def test_held_jobs_are_kept_alive_while_a_batch_runs_long(spark, node, client, tmp_path):
    # RETRY 2: without WORKING the jobs would be queued again after 2 s, and the
    # batch takes about 3 s (100 rows at 30 ms on each of two cores).
    client.add_jobs("alive", [b"a%d" % i for i in range(200)], retry=2)
    df = stream(spark, node, "alive").select(slowly("body").alias("body"))
    query = to_memory(df, "alive", tmp_path / "cp")
    stolen = []
    try:
        until(query, lambda: client.qlen("alive") == 0, "the jobs taken")
        while not (spark.table("alive").count() == 200 or query.exception()):
            stolen += client.get_jobs("alive", count=10, nohang=True)
            time.sleep(0.1)
        until(query, lambda: unacked(client, "alive") == 0, "every job acked")
    finally:
        query.stop()
    assert stolen == []
    assert sorted(r.body for r in spark.table("alive").collect()) == sorted(
        b"a%d" % i for i in range(200)
    )


def test_stop_mid_batch_acknowledges_nothing_and_the_restart_replays(spark, node, client, tmp_path):
    client.add_jobs("stop", [b"s%d" % i for i in range(200)], retry=60)
    df = stream(spark, node, "stop").select(slowly("body").alias("body"))
    out = tmp_path / "out"

    def start(**trigger):
        writer = df.writeStream.format("parquet").option("path", str(out))
        return writer.option("checkpointLocation", str(tmp_path / "cp")).trigger(**trigger).start()

    query = start(processingTime="0.2 seconds")
    until(query, lambda: batches(tmp_path / "cp", "offsets"), "the batch's offset written")
    query.stop()  # in the middle of the ~3 s batch
    assert unacked(client, "stop") == 200  # delivered, none acknowledged
    query = start(availableNow=True)
    assert query.awaitTermination(DEADLINE)
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.body for r in rows) == sorted(b"s%d" % i for i in range(200))
    assert unacked(client, "stop") == 0


def test_a_python_worker_killed_mid_batch_loses_nothing(spark, node, client, tmp_path):
    """The Python worker of one task is SIGKILLed in the middle of its partition;
    Spark runs the task again, which takes the same jobs back under the same tags.
    Written to the disque sink without dedup, so that what the killed attempt had
    written shows up as duplicates: at most that task's jobs."""
    bodies = {f"w{i}" for i in range(400)}
    client.add_jobs("wkill-in", sorted(bodies), retry=300)  # back only by tag
    marker = tmp_path / "killed"

    seen: list[str] = []  # (in the worker's copy of the function)

    @udf(StringType())
    def die_once(body):
        # Partition 1 (of 2 per batch), until it was killed once: killed at its 30th row.
        if TaskContext.get().partitionId() == 1 and not marker.exists():
            seen.append(body)
            if len(seen) >= 30:
                marker.touch()
                os.kill(os.getpid(), signal.SIGKILL)
        return body

    df = stream(spark, node, "wkill-in", maxJobsPerTrigger=BATCH, bodyType="string")
    query = (
        df.select(die_once("body").alias("body"))
        .writeStream.format("disque")
        .option("nodes", f"127.0.0.1:{node.port}")
        .option("queue", "wkill-out")
        .option("replicate", 1)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="0.2 seconds")
        .start()
    )

    def output() -> list[str]:
        return [info.body.decode() for info in client.jscan(queue="wkill-out", reply="all")]

    try:
        until(
            query,
            lambda: set(output()) == bodies and unacked(client, "wkill-in") == 0,
            "every job written and acknowledged",
        )
    finally:
        query.stop()
    assert marker.exists()  # the worker was killed
    written = output()
    assert set(written) == bodies
    assert len(written) - len(bodies) <= BATCH // 2  # at most the killed task's jobs
    assert client.info("extensions")["job_tags"] == 0
