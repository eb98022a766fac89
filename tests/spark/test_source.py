"""The stream source end to end, Trigger.AvailableNow, and the batch peek.

Jobs are added with the client library; what the query saw is read from a
memory sink; whether jobs were acknowledged is asked of the node itself.
"""

from __future__ import annotations

import pytest

import disquette
from tests.spark.helpers import DEADLINE, stream, to_memory, unacked, until
from tests.support.servers import wait_for


@pytest.mark.parametrize("mode", ["auto", "driver"])
def test_stream_delivers_every_job_and_acknowledges_it(spark, node, client, tmp_path, mode):
    """Read by the executors (auto, on disquette), and by the driver as against plain
    Disque (readMode=driver): the same rows, every job acknowledged."""
    queue, table = f"src-e2e-{mode}", f"src_e2e_{mode}"
    bodies = [b"body-%d" % i for i in range(3000)]
    client.add_jobs(queue, bodies, retry=60)
    df = stream(spark, node, queue, maxJobsPerTrigger=1000, readMode=mode)
    query = to_memory(df, table, tmp_path / "cp")
    try:
        until(query, lambda: spark.table(table).count() == 3000, "3000 rows")
        until(query, lambda: unacked(client, queue) == 0, "every job acked")
    finally:
        query.stop()
    rows = spark.table(table).collect()
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert len({r.id for r in rows}) == 3000
    assert {r.queue for r in rows} == {queue}
    assert client.info("extensions")["job_tags"] == 0
    assert {r.nacks for r in rows} == {0} and {r.additional_deliveries for r in rows} == {0}


def test_available_now_drains_and_acknowledges_all(spark, node, client, tmp_path):
    client.add_jobs("src-now", [f"j{i}" for i in range(1000)], retry=60)
    df = stream(spark, node, "src-now", maxJobsPerTrigger=300, bodyType="string")
    query = to_memory(df, "src_now", tmp_path / "cp", availableNow=True)
    assert query.awaitTermination(DEADLINE)
    rows = spark.table("src_now").collect()
    assert sorted(r.body for r in rows) == sorted(f"j{i}" for i in range(1000))
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) == 4 and max(p["numInputRows"] for p in batches) == 300
    assert client.qlen("src-now") == 0
    assert unacked(client, "src-now") == 0


@pytest.mark.parametrize(("mode", "batches"), [("auto", 1), ("driver", 3)])
def test_available_now_by_default_takes_what_its_reader_allows(
    spark, node, client, tmp_path, mode, batches
):
    """Without maxJobsPerTrigger, a micro-batch read by the executors takes all that is
    queued (up to 500,000 jobs: Spark's cost per batch stays small against reading),
    one read by the driver 10,000 jobs (it holds their bodies)."""
    queue, table = f"src-default-{mode}", f"src_default_{mode}"
    client.add_jobs(queue, [b"d%d" % i for i in range(25_000)], retry=60)
    df = stream(spark, node, queue, readMode=mode)
    query = to_memory(df, table, tmp_path / "cp", availableNow=True)
    assert query.awaitTermination(DEADLINE)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(sizes) == batches and sum(sizes) == 25_000
    assert spark.table(table).count() == 25_000
    assert unacked(client, queue) == 0


def test_stream_reads_every_node_of_a_cluster(spark, cluster, tmp_path):
    nodes = ",".join(cluster.addresses)
    with disquette.Client(nodes) as client:
        views = [client.on_node(a) for a in cluster.addresses]
        for i, view in enumerate(views):  # REPLICATE 3: a copy on every node
            view.add_jobs("src-3", [b"n%d-%d" % (i, j) for j in range(200)], retry=60)
        df = spark.readStream.format("disque").options(nodes=nodes, queues="src-3").load()
        query = to_memory(df, "src_3", tmp_path / "cp", availableNow=True)
        assert query.awaitTermination(DEADLINE)
        rows = spark.table("src_3").collect()
        assert sorted(r.body for r in rows) == sorted(
            b"n%d-%d" % (i, j) for i in range(3) for j in range(200)
        )
        for view in views:  # acknowledged everywhere (ACKJOB reaches every copy)
            wait_for(lambda v=view: unacked(v, "src-3") == 0, DEADLINE, 0.1, "acks")


def test_batch_read_is_a_peek(spark, node, client):
    client.add_jobs("src-peek", [b"a", b"b", b"c"], retry=60)
    df = (
        spark.read.format("disque")
        .option("nodes", f"127.0.0.1:{node.port}")
        .option("queues", "src-peek")
        .load()
    )
    assert sorted(r.body for r in df.collect()) == [b"a", b"b", b"c"]
    assert client.qlen("src-peek") == 3


@pytest.mark.parametrize("mode", ["auto", "driver"])
def test_job_fields_as_optional_columns(spark, node, client, tmp_path, mode):
    queue, table = f"src-fields-{mode}", f"src_fields_{mode}"
    client.add_job(queue, b"urgent", priority=8, dedup="order-1", retry=60)
    client.add_job(queue, b"plain", retry=60)
    df = stream(spark, node, queue, jobFields="priority,dedup,progress,claim", readMode=mode)
    assert df.columns[-4:] == ["priority", "dedup", "progress", "claim"]
    query = to_memory(df, table, tmp_path / "cp", availableNow=True)
    assert query.awaitTermination(DEADLINE)
    rows = {r.body: r for r in spark.table(table).collect()}
    assert (rows[b"urgent"].priority, rows[b"urgent"].dedup) == (8, "order-1")
    assert (rows[b"plain"].priority, rows[b"plain"].dedup) == (None, None)
    assert all(r.progress is None and r.claim is None for r in rows.values())
    assert unacked(client, queue) == 0
    # The peek takes them too.
    client.add_job(queue, b"peeked", priority=2, retry=60)
    peek = spark.read.format("disque").option("nodes", f"127.0.0.1:{node.port}")
    peek = peek.option("queues", queue).option("jobFields", "priority").load()
    assert [(r.body, r.priority) for r in peek.collect()] == [(b"peeked", 2)]
