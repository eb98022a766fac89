"""Recovery and keep-alive of the stream source in the shared Spark session: held jobs
kept alive through a long batch, a query stopped mid-batch and started again, a Python
worker killed mid-batch. (The driver killed mid-batch: test_driver_crash.py.)
"""

from __future__ import annotations

import os
import signal
import time

from pyspark import TaskContext
from pyspark.sql.functions import udf
from pyspark.sql.types import BinaryType, StringType

from tests.spark.helpers import DEADLINE, batches, stream, to_memory, unacked, until

BATCH = 100


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
