"""The sink, batch and streaming, into one node and into three-node clusters.

Every check uses the queue's own view: QLEN, and the jobs read back with
JSCAN on each node. The streaming writes read Parquet files with
Trigger.AvailableNow, so each query ends by itself.
"""

from __future__ import annotations

import re
import threading
import zlib
from pathlib import Path

import pytest
from pyspark.sql.functions import udf
from pyspark.sql.types import StringType

import disquette
from tests.spark.helpers import DEADLINE, addresses
from tests.support.cluster import pairs, running_cluster
from tests.support.servers import ServerProcess, running_server, wait_for


def bodies_on(client: disquette.Client, queue: str) -> list[bytes]:
    return [info.body for info in client.jscan(queue=queue, reply="all")]


def write(df, nodes: str, **options) -> None:
    writer = df.write.format("disque").mode("append").option("nodes", nodes)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def write_stream(spark, rows: Path, checkpoint: Path, nodes: str, **options) -> None:
    """Stream the Parquet files in ``rows`` into the sink until they are all written."""
    df = spark.readStream.schema(spark.read.parquet(str(rows)).schema).parquet(str(rows))
    writer = df.writeStream.format("disque").option("nodes", nodes)
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    assert query.awaitTermination(DEADLINE)
    assert query.exception() is None


def test_batch_write_into_one_node(spark, node, client):
    df = spark.range(5000).selectExpr("concat('job-', id) AS body")
    write(df, addresses(node), queue="sink-batch", replicate=1, retry=60)
    assert client.qlen("sink-batch") == 5000
    assert sorted(bodies_on(client, "sink-batch")) == sorted(b"job-%d" % i for i in range(5000))
    info = client.show(client.qpeek("sink-batch", 1)[0].id)
    assert (info.repl, info.retry) == (1, 60)


def test_stream_write_with_a_queue_column_and_binary_bodies(spark, node, client, tmp_path):
    rows = tmp_path / "rows"
    spark.range(3000).selectExpr(
        "IF(id % 3 = 0, 'sink-s0', 'sink-s1') AS queue", "CAST(concat('b', id) AS BINARY) AS body"
    ).repartition(3).write.parquet(str(rows))
    write_stream(spark, rows, tmp_path / "cp", addresses(node), replicate=1, window=64)
    assert (client.qlen("sink-s0"), client.qlen("sink-s1")) == (1000, 2000)
    assert sorted(bodies_on(client, "sink-s0")) == sorted(b"b%d" % i for i in range(0, 3000, 3))


def test_batch_and_stream_writes_into_three_nodes_replicate_3(spark, cluster, tmp_path):
    nodes = ",".join(cluster.addresses)
    write(spark.range(1500).selectExpr("concat('a', id) AS body"), nodes, queue="sink-r3")
    rows = tmp_path / "rows"
    spark.range(1500).selectExpr("concat('s', id) AS body").write.parquet(str(rows))
    write_stream(spark, rows, tmp_path / "cp", nodes, queue="sink-r3", replicate=3)
    expected = sorted([b"a%d" % i for i in range(1500)] + [b"s%d" % i for i in range(1500)])
    with disquette.Client(nodes) as client:
        views = [client.on_node(a) for a in cluster.addresses]
        # Each job is queued on the node that received it, and a copy is on every node.
        assert sum(v.qlen("sink-r3") for v in views) == 3000
        for view in views:
            assert sorted(bodies_on(view, "sink-r3")) == expected
        assert {views[0].show(i).repl for i in views[0].jscan(queue="sink-r3")} == {3}


class SinkConnections:
    """The most sink connections each node of ``cluster`` had, sampled with CLIENT LIST."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.peak = [0] * len(cluster.servers)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        clients = [s.client() for s in self.cluster.servers]
        try:
            while not self._stop.wait(0.02):
                for i, r in enumerate(clients):
                    listed = r.client_list()
                    count = sum(1 for c in listed if c.get("name") == "disquette-spark-sink")
                    self.peak[i] = max(self.peak[i], count)
                self.samples += 1
        finally:
            for r in clients:
                r.close()

    def __enter__(self) -> SinkConnections:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(DEADLINE)


def test_replicate_3_write_spreads_over_many_connections(spark, cluster):
    # Synchronous replication blocks a connection per ADDJOB, so each task opens
    # many connections per node (one per node and task before: 2 per node here).
    nodes = ",".join(cluster.addresses)
    rows = 30_000
    df = spark.range(rows).repartition(2).selectExpr("concat('m', id) AS body")
    with SinkConnections(cluster) as seen:
        wait_for(lambda: seen.samples > 0, DEADLINE, 0.02, "the first CLIENT LIST")
        write(df, nodes, queue="sink-many", replicate=3, retry=60)
    assert max(seen.peak) > 2, seen.peak
    with disquette.Client(nodes) as client:
        views = [client.on_node(a) for a in cluster.addresses]
        assert sum(v.qlen("sink-many") for v in views) == rows
        expected = sorted(b"m%d" % i for i in range(rows))
        for view in views:
            jobs = list(view.jscan(queue="sink-many", reply="all"))
            assert len({j.id for j in jobs}) == rows  # every job once, a copy on every node
            assert sorted(j.body for j in jobs) == expected
    # Every connection was closed when the tasks ended.
    for server in cluster.servers:
        with server.client() as r:
            wait_for(
                lambda r=r: (
                    not any(c.get("name") == "disquette-spark-sink" for c in r.client_list())
                ),
                DEADLINE,
                0.05,
                "the sink's connections to be closed",
            )


def test_a_node_killed_during_a_write_makes_the_task_retry(spark, tmp_path):
    # The write runs in this thread (PySpark finds Python data sources only in
    # threads with an active session, see docs/spark.md); a helper thread kills
    # a node once it has jobs.
    with running_cluster(tmp_path, 3) as cluster, disquette.Client(cluster.addresses) as client:
        views = [client.on_node(a) for a in cluster.addresses]
        killed = threading.Event()

        def kill_when_busy() -> None:
            wait_for(lambda: views[2].info("jobs")["registered_jobs"] > 1000, DEADLINE, 0.05)
            cluster.kill(2)
            killed.set()

        killer = threading.Thread(target=kill_when_busy, daemon=True)
        killer.start()
        df = spark.range(12_000).repartition(2).selectExpr("concat('k', id) AS body")
        write(df, ",".join(cluster.addresses), queue="sink-kill", replicate=2)
        killer.join(DEADLINE)
        assert killed.is_set()
        # Every row is a job on a surviving node (REPLICATE 2 left a copy there);
        # the killed node had received some first, so the failed tasks ran again.
        seen = {
            info.id: info.body
            for v in views[:2]
            for info in v.jscan(queue="sink-kill", reply="all")
        }
        assert set(seen.values()) == {b"k%d" % i for i in range(12_000)}
        assert len(seen) >= 12_000


def test_password_protected_node(spark, tmp_path):
    with running_server(tmp_path, ["--requirepass", "s3cret"]) as secured:
        nodes = addresses(secured)
        df = spark.range(100).selectExpr("concat('p', id) AS body")
        write(df, nodes, queue="sink-auth", password="s3cret")
        peek = spark.read.format("disque").options(nodes=nodes, queues="sink-auth")
        assert peek.option("password", "s3cret").load().count() == 100
        with pytest.raises(Exception, match="NOAUTH"):
            write(df, nodes, queue="sink-auth")
        with disquette.Client(nodes, password="s3cret") as client:
            assert client.qlen("sink-auth") == 100


def test_an_acl_user_writes_only_its_queues(spark, tmp_path):
    with running_server(tmp_path) as node:
        with node.client() as r:
            r.execute_command("ACL", "SETUSER", "etl", "on", ">e", "~sink-acl*", "+@all")
        nodes = addresses(node)
        df = spark.range(50).selectExpr("concat('u', id) AS body")
        write(df, nodes, queue="sink-acl", user="etl", password="e")
        with pytest.raises(Exception, match="NOPERM"):
            write(df, nodes, queue="elsewhere", user="etl", password="e")
        with disquette.Client(nodes, username="etl", password="e") as client:
            assert client.qlen("sink-acl") == 50


def shown(node: ServerProcess, job_id: str) -> dict:
    with node.client() as r:
        return pairs(r.execute_command("SHOW", job_id))


#: A batch write's DEDUP key: <write ID>:0:<partition>:<row, 10 digits>:<CRC-32 of the body>.
BATCH_KEY = re.compile(rb"([0-9a-f-]{36}):0:(\d+):(\d{10}):([0-9a-f]{8})")


def test_priority_and_dedup_keys_reach_the_jobs(spark, node, client):
    df = spark.range(200, numPartitions=2).selectExpr("concat('pr', id) AS body")
    write(df, addresses(node), queue="sink-prio", replicate=1, priority=7, dedup="true")
    jobs = list(client.jscan(queue="sink-prio"))
    assert len(jobs) == 200
    keys = {}
    for job_id in jobs:
        info = shown(node, job_id)
        assert info["priority"] == 7
        keys[info["body"]] = BATCH_KEY.fullmatch(info["dedup"])
    assert all(keys.values()), keys
    # One write: one write ID; rows numbered from 0 in each of the two partitions.
    assert len({m[1] for m in keys.values()}) == 1
    for body, m in keys.items():
        assert int(m[4], 16) == zlib.crc32(body)
    rows = sorted((int(m[2]), int(m[3])) for m in keys.values())
    assert rows == [(p, r) for p in (0, 1) for r in range(100)]
    # By default, no key and no priority (0).
    write(df.limit(1), addresses(node), queue="sink-prio", replicate=1)
    plain = [i for i in client.jscan(queue="sink-prio") if "dedup" not in shown(node, i)]
    assert len(plain) == 1 and "priority" not in shown(node, plain[0])  # priority 0


def kill_once(port: int, queue: str, at_row: int, after_jobs: int):
    """A UDF that, in the first attempt of its task, SIGKILLs its Python worker on
    row ``at_row`` once ``queue`` has ``after_jobs`` jobs (the sink added them)."""

    @udf(returnType=StringType(), useArrow=False)
    def body(i: int) -> str:
        import os
        import signal
        import time

        from pyspark import TaskContext

        if i == at_row and TaskContext.get().attemptNumber() == 0:
            with disquette.Client(f"127.0.0.1:{port}") as c:
                deadline = time.monotonic() + DEADLINE
                while c.qlen(queue) < after_jobs and time.monotonic() < deadline:
                    time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGKILL)
        # Long bodies: the UDF's worker sends its results on when its 64 KB
        # output buffer fills, and the sink must get rows before the kill.
        return f"kill-{i}-" + "x" * 200

    return body


@pytest.mark.parametrize("dedup", ["true", "false"])
def test_a_task_killed_mid_write_and_retried_adds_each_row_once(spark, node, client, dedup):
    # One task writes 6000 rows; its first attempt dies (a Python worker of the
    # task is SIGKILLed) after the sink added 2000 or more of them, and Spark
    # runs it again from the first row. With DEDUP keys the retry adds nothing
    # twice; without them (the control) it duplicates what the first added.
    queue, rows = f"sink-kill-{dedup}", 6000
    hits = node_info(client)["dedup_hits"]
    df = spark.range(rows, numPartitions=1).select(
        kill_once(node.port, queue, 4000, 2000)("id").alias("body")
    )
    # Record batches of 500 rows: the sink gets rows while the UDF waits.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        write(df, addresses(node), queue=queue, replicate=1, dedup=dedup)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    bodies = bodies_on(client, queue)
    assert set(bodies) == {b"kill-%d-%s" % (i, b"x" * 200) for i in range(rows)}
    resent = node_info(client)["dedup_hits"] - hits
    if dedup == "true":
        assert len(bodies) == client.qlen(queue) == rows
        assert resent >= 2000  # the retry sent again what the first attempt added
    else:
        assert len(bodies) - rows >= 2000 and resent == 0


def node_info(client: disquette.Client) -> dict:
    return client.info("extensions")


def test_per_row_columns_set_each_jobs_options(spark, node, client):
    """``priority``, ``ttl``, ``retry``, ``delay``, ``dedup`` and ``group`` columns set
    each job's own; a null leaves the option's value; a row key adds nothing twice."""
    df = spark.createDataFrame(
        [
            ("a", "row-q1", 3, 600, 30, 0, "k-a", "tenant-a"),
            ("b", "row-q2", None, None, None, None, None, None),
            ("c", "row-q1", 9, 1200, 45, 0, "k-c", "tenant-c"),
        ],
        "body string, queue string, priority int, ttl long, retry int, delay short, "
        "dedup string, group string",
    )
    write(df, addresses(node), replicate=1, priority=1, retry=20)
    write(df.where("dedup IS NOT NULL"), addresses(node), replicate=1)  # the same keys again
    jobs = {i: client.show(i) for q in ("row-q1", "row-q2") for i in client.jscan(queue=q)}
    by_body = {info.body: info for info in jobs.values()}
    assert len(jobs) == 3 and set(by_body) == {b"a", b"b", b"c"}
    a, b, c = by_body[b"a"], by_body[b"b"], by_body[b"c"]
    assert (a.queue, a.priority, a.retry, a.dedup) == ("row-q1", 3, 30, "k-a")
    assert (c.queue, c.priority, c.retry, c.dedup) == ("row-q1", 9, 45, "k-c")
    assert 500 < a.ttl <= 600 and 1100 < c.ttl <= 1200  # (SHOW: the seconds left)
    assert (b.queue, b.priority, b.retry, b.dedup) == ("row-q2", 1, 20, None)  # the options
    assert (a.group, b.group, c.group) == ("tenant-a", None, "tenant-c")


@pytest.mark.parametrize(
    ("column", "kind", "wanted"),
    [("priority", "string", "an integer"), ("ttl", "double", "an integer"),
     ("dedup", "int", "a string"), ("delay", "boolean", "an integer"),
     ("group", "long", "a string")],
)  # fmt: skip
def test_a_per_row_column_of_the_wrong_type_is_refused(spark, node, column, kind, wanted):
    df = spark.createDataFrame([("x", None)], f"body string, {column} {kind}")
    with pytest.raises(Exception, match=f"the '{column}' column must be {wanted}"):
        write(df, addresses(node), queue="row-bad")
