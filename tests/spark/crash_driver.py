"""A streaming query in a driver process of its own, for the crash-recovery test.

``python -m tests.spark.crash_driver --nodes ... --checkpoint DIR --stop-file F``
reads ``--source`` with the disque stream source, passes each body through a
Python UDF deliberately slow in all partitions but the first (so that a
micro-batch lasts long enough to be killed in the middle, after its first
partition was written; while ``--hold-file`` exists they stop before their next
row, so the test finds a batch half written however slow the machine), and
writes it into ``--sink`` with the disque sink
(``dedup`` on unless ``--no-dedup``: a replayed micro-batch then adds nothing
twice; without it, what the killed run wrote of it is written again). It
runs until the stop file exists, then stops the query and Spark. The test
kills it with SIGKILL instead, and starts it again from the same checkpoint.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pyspark import TaskContext
from pyspark.sql.functions import udf
from pyspark.sql.types import StringType

from disquette.spark.local import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--stop-file", type=Path, required=True)
    parser.add_argument("--max-jobs", type=int, default=100)
    parser.add_argument("--row-delay", type=float, default=0.02)
    parser.add_argument("--hold-file", type=Path)
    parser.add_argument("--no-dedup", action="store_true")
    args = parser.parse_args()

    delay, hold = args.row_delay, args.hold_file

    @udf(returnType=StringType(), useArrow=False)
    def slow(body: str) -> str:
        # Partition 0 is fast: its rows reach the sink while partition 1 is still
        # running, so a kill can find part of a micro-batch written, uncommitted.
        if TaskContext.get().partitionId():
            while hold is not None and hold.exists():
                time.sleep(0.05)
            time.sleep(delay)
        return body

    spark = local_session("disquette-crash-driver")
    df = (
        spark.readStream.format("disque")
        .option("nodes", args.nodes)
        .option("queues", args.source)
        .option("maxJobsPerTrigger", args.max_jobs)
        .option("bodyType", "string")
        .load()
    )
    query = (
        df.select(slow("body").alias("body"))
        .writeStream.format("disque")
        .option("nodes", args.nodes)
        .option("queue", args.sink)
        .option("replicate", 1)
        .option("dedup", str(not args.no_dedup).lower())
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="0.1 seconds")
        .start()
    )
    while query.isActive and not args.stop_file.exists():
        time.sleep(0.1)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
