"""The Spark Connect side of tests/spark/test_connect.py, in a process of its own.

A Python process that has a classic SparkSession cannot open a Connect one
(PySpark refuses with ``SESSION_ALREADY_EXIST``, and a Connect session sets
``SPARK_CONNECT_MODE_ENABLED`` for the rest of the process), so the test runs
this script: ``python -m tests.spark.connect_client --remote sc://... --nodes
... --workdir DIR``. It writes 500 rows into ``connect-q`` with the disque sink,
drains them with the stream source into Parquet, streams ``connect-in`` into
``connect-out`` with the disque sink, and prints the Parquet rows' bodies as
JSON; the test checks the queues itself.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pyspark.sql import SparkSession

DEADLINE = 120


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--remote", required=True)
    parser.add_argument("--nodes", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    spark = SparkSession.builder.remote(args.remote).getOrCreate()
    nodes, work = args.nodes, args.workdir

    df = spark.range(500).selectExpr("concat('cx-', id) AS body")
    df.write.format("disque").mode("append").option("nodes", nodes).option(
        "queue", "connect-q"
    ).option("retry", 60).save()
    source = (
        spark.readStream.format("disque")
        .option("nodes", nodes)
        .option("queues", "connect-q")
        .option("bodyType", "string")
        .option("maxJobsPerTrigger", 200)
        .load()
    )
    query = (
        source.writeStream.format("parquet")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "cp1"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(DEADLINE)
    bodies = sorted(r.body for r in spark.read.parquet(str(work / "out")).collect())

    relay = spark.readStream.format("disque").option("nodes", nodes)
    relay = relay.option("queues", "connect-in").load()
    query = (
        relay.select("body")
        .writeStream.format("disque")
        .option("nodes", nodes)
        .option("queue", "connect-out")
        .option("dedup", "true")
        .option("checkpointLocation", str(work / "cp2"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(DEADLINE)
    print(json.dumps({"parquet": bodies}))
    spark.stop()


if __name__ == "__main__":
    main()
