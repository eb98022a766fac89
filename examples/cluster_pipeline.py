"""Orders through a three-node disquette cluster with Spark: Parquet in, Parquet out.

    make example-cluster          # starts its own three nodes, runs, stops them
    python examples/cluster_pipeline.py --nodes host:7711,host:7712,host:7713

1. **Produce** (batch job). A fixed-seed set of orders is written as a Parquet
   file, read back with Spark and added as JSON jobs to the queue ``orders``
   with ``df.write.format("disque")``: each task spreads its rows over the
   three nodes, every job replicated to two of them.
2. **Consume** (streaming job). ``spark.readStream.format("disque")`` with
   Trigger.AvailableNow: the driver plans each micro-batch (partitions per node,
   in proportion to what each node holds) and the executors take the jobs from
   their nodes; the rows are converted and appended to a Parquet table, and each
   micro-batch's jobs are acknowledged once Spark committed it.
3. **Report**. What went through: orders in and out, duplicates, the jobs and
   partitions each node's micro-batches planned, and what is left in the queue
   (nothing queued, nothing unacknowledged). Exit status 0 when nothing was lost.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from pipeline import (  # (examples/pipeline.py)
    ORDER_SCHEMA,
    example_args,
    generate_orders,
    orders_stream,
    run_example,
)
from pyspark.sql import functions as F

import disquette
from disquette.spark.local import local_session


@contextmanager
def local_cluster(workdir: Path, size: int = 3) -> Iterator[str]:
    """``size`` disquette nodes on free loopback ports, joined; stopped at the end."""
    with ExitStack() as stack:
        addresses = []
        for i in range(size):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            folder = workdir / f"node{i}"
            folder.mkdir()
            command = [sys.executable, "-m", "disquette.server", "--port", str(port)]
            with open(folder / "node.log", "wb") as log:
                node = subprocess.Popen(
                    [*command, "--bind", "127.0.0.1"], cwd=folder, stdout=log, stderr=log
                )
            stack.callback(node.wait, 30)
            stack.callback(node.terminate)
            addresses.append(f"127.0.0.1:{port}")
        with disquette.Client(addresses) as client:
            deadline = time.monotonic() + 30
            for address in addresses:
                while True:
                    try:
                        client.on_node(address).ping()
                        break
                    except disquette.DisqueError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)
            first = client.on_node(addresses[0])
            for address in addresses[1:]:
                host, port = address.rsplit(":", 1)
                first.cluster_meet(host, int(port))
            while any(
                len(client.on_node(a).hello().nodes) < size for a in addresses
            ):  # every node knows every other
                if time.monotonic() > deadline:
                    raise TimeoutError("the nodes did not join")
                time.sleep(0.1)
        yield ",".join(addresses)


def planned_per_node(checkpoint: Path) -> dict[str, tuple[int, int]]:
    """(partitions, jobs) each node's micro-batches planned, from the checkpoint's offsets."""
    per_node: dict[str, tuple[int, int]] = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            offset = json.loads(path.read_text().splitlines()[-1])
            for node, counts in offset.get("parts", {}).items():
                parts, jobs = per_node.get(node, (0, 0))
                per_node[node] = (parts + len(counts), jobs + sum(counts))
    return per_node


def run(nodes: str, workdir: Path, count: int, batch: int) -> bool:
    spark = local_session("disquette-cluster-example")
    orders_csv, orders_parquet = workdir / "orders.csv", workdir / "orders.parquet"
    table, checkpoint = workdir / "enriched.parquet", workdir / "checkpoint"
    generate_orders(orders_csv, count)
    spark.read.csv(str(orders_csv), header=True, schema=ORDER_SCHEMA).write.parquet(
        str(orders_parquet)
    )

    # 1. Produce: Parquet rows -> jobs, replicated to two nodes each.
    orders = spark.read.parquet(str(orders_parquet))
    (
        orders.select(F.to_json(F.struct("*")).alias("body"))
        .write.format("disque")
        .mode("append")
        .option("nodes", nodes)
        .option("queue", "orders")
        .option("replicate", 2)
        .option("retry", 120)
        .save()
    )
    print(f"produced {count} orders from {orders_parquet.name} into 'orders'", flush=True)

    # 2. Consume: executors read from their nodes; Parquet out; acknowledged on commit.
    query = (
        orders_stream(spark, nodes, batch, numPartitions=3)
        .writeStream.format("parquet")
        .option("path", str(table))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    # 3. Report.
    stored = spark.read.parquet(str(table))
    rows, distinct = stored.count(), stored.select("order_id").distinct().count()
    with disquette.Client(nodes) as client:
        views = [client.on_node(n) for n in nodes.split(",")]
        left = sum(v.qlen("orders") for v in views)
        unacked = sum(
            1 for v in views for _ in v.jscan(queue="orders", states=("queued", "active"))
        )
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    print(f"micro-batches:                      {len(batches)} of at most {batch} jobs")
    for node, (parts, jobs) in sorted(planned_per_node(checkpoint).items()):
        print(f"  {node}: {jobs} jobs planned in {parts} partitions")
    print(f"orders produced:                    {count}")
    print(f"rows in the Parquet table:          {rows} ({rows - distinct} duplicates)")
    print(f"distinct orders stored:             {distinct}")
    print(f"jobs left in 'orders':              {left} queued, {unacked} unacknowledged")
    spark.stop()
    ok = distinct == count and left == 0 and unacked == 0
    print("nothing was lost" if ok else "MISMATCH: something was lost")
    return ok


def main() -> int:
    description = __doc__.split("\n\n")[0]
    args = example_args(description, "three local nodes", orders=20_000, batch=5000)
    return run_example("disquette-cluster-example", run, local_cluster, args)


if __name__ == "__main__":
    sys.exit(main())
