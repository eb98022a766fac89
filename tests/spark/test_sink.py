"""The sink, batch and streaming, into one node and into a three-node cluster.

Every check uses the queue's own view: QLEN, and the bodies of the jobs read
back with JSCAN on each node.
"""

from __future__ import annotations

from pathlib import Path

import disquette
from tests.support.servers import ServerProcess


def nodes(*servers: ServerProcess) -> str:
    return ",".join(f"127.0.0.1:{s.port}" for s in servers)


def bodies_on(client: disquette.Client, queue: str) -> list[bytes]:
    return [info.body for info in client.jscan(queue=queue, reply="all")]


def test_batch_write_into_one_node(spark, node, client):
    df = spark.range(5000).selectExpr("concat('job-', id) AS body")
    df.write.format("disque").mode("append").option("nodes", nodes(node)).option(
        "queue", "sink-batch"
    ).option("replicate", 1).save()
    assert client.qlen("sink-batch") == 5000
    assert sorted(bodies_on(client, "sink-batch")) == sorted(b"job-%d" % i for i in range(5000))
