"""The stream source end to end, Trigger.AvailableNow, and the batch peek.

Jobs are added with the client library; what the query saw is read from a
memory sink; whether jobs were acknowledged is asked of the node itself.
"""

from __future__ import annotations

from tests.spark.helpers import DEADLINE, stream, to_memory, unacked, until


def test_stream_delivers_every_job_and_acknowledges_it(spark, node, client, tmp_path):
    bodies = [b"body-%d" % i for i in range(3000)]
    client.add_jobs("src-e2e", bodies, retry=60)
    df = stream(spark, node, "src-e2e", maxJobsPerTrigger=1000)
    query = to_memory(df, "src_e2e", tmp_path / "cp")
    try:
        until(query, lambda: spark.table("src_e2e").count() == 3000, "3000 rows")
        until(query, lambda: unacked(client, "src-e2e") == 0, "every job acked")
    finally:
        query.stop()
    rows = spark.table("src_e2e").collect()
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert len({r.id for r in rows}) == 3000
    assert {r.queue for r in rows} == {"src-e2e"}
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
