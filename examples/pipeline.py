"""An order pipeline on Spark and disquette: load, consume, transform, store, forward, check.

    make example                  # starts its own disquette node, runs, stops it
    python examples/pipeline.py --nodes host:7711,host:7712   # against your cluster

1. **Load** (batch job). A dataset of orders is generated as a CSV file (a fixed
   seed, so every run sees the same orders), read with Spark and written as JSON
   jobs into the queue ``orders`` with ``df.write.format("disque")``.
2. **Consume** (streaming job). ``spark.readStream.format("disque")`` reads
   ``orders`` with Trigger.AvailableNow in micro-batches of ``--batch`` jobs. Each
   batch parses the JSON, converts the amount to euros and flags large orders,
   appends the rows to a Parquet table, and forwards them as jobs to the queue
   ``orders-enriched``. The source acknowledges a batch's jobs only after Spark
   committed it, so a crash at any point replays rather than loses orders.
3. **Check**. The Parquet table and ``orders-enriched`` are counted against the
   CSV file, and ``orders`` must be empty with nothing left unacknowledged.
   Exit status 0 when nothing was lost.
"""

from __future__ import annotations

import argparse
import csv
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import disquette
from disquette.spark.local import local_session

CURRENCIES = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17, "CHF": 1.05}
CUSTOMERS = ["ada", "grace", "edsger", "barbara", "ken", "margaret", "dennis", "frances"]
ORDER_SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE, currency STRING"


def generate_orders(path: Path, count: int) -> None:
    rng = random.Random(6)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["order_id", "customer", "amount", "currency"])
        for order_id in range(1, count + 1):
            amount = round(rng.lognormvariate(3.5, 1.0), 2)
            out.writerow([order_id, rng.choice(CUSTOMERS), amount, rng.choice(list(CURRENCIES))])


@contextmanager
def local_node(workdir: Path) -> Iterator[str]:
    """One disquette node on a free loopback port, stopped at the end."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "disquette.server", "--port", str(port)]
    command += ["--bind", "127.0.0.1"]
    with open(workdir / "node.log", "wb") as log:
        node = subprocess.Popen(command, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with disquette.Client(address) as client:
                    client.ping()
                break
            except disquette.DisqueError:
                if time.monotonic() > deadline or node.poll() is not None:
                    raise
                time.sleep(0.1)
        yield address
    finally:
        node.terminate()
        node.wait(30)


def enrich(orders: DataFrame) -> DataFrame:
    """JSON bodies to typed orders, in euros, with a flag for large ones."""
    rates = F.create_map(*[F.lit(x) for pair in CURRENCIES.items() for x in pair])
    parsed = orders.select(F.from_json("body", ORDER_SCHEMA).alias("o"), "id").select("o.*", "id")
    return parsed.select(
        "order_id",
        "customer",
        F.round(F.col("amount") * rates[F.col("currency")], 2).alias("amount_eur"),
        (F.col("amount") * rates[F.col("currency")] > 100).alias("large"),
        F.col("id").alias("job_id"),
    )


def orders_stream(spark: SparkSession, nodes: str, batch: int, **options: int) -> DataFrame:
    """The queue ``orders`` read as a stream of enriched orders, at most ``batch`` jobs per
    micro-batch; ``options``: more of the source's options."""
    source = (
        spark.readStream.format("disque")
        .option("nodes", nodes)
        .option("queues", "orders")
        .option("bodyType", "string")
        .option("maxJobsPerTrigger", batch)
        .options(**options)
        .load()
    )
    return enrich(source)


def run(nodes: str, workdir: Path, count: int, batch: int) -> bool:
    spark = local_session("disquette-example")
    orders_csv, table = workdir / "orders.csv", workdir / "enriched.parquet"
    generate_orders(orders_csv, count)

    def add_jobs(rows: DataFrame, queue: str) -> None:
        writer = rows.select(F.to_json(F.struct("*")).alias("body")).write.format("disque")
        writer.mode("append").option("nodes", nodes).option("queue", queue).save()

    # 1. Load: one job per order.
    add_jobs(spark.read.csv(str(orders_csv), header=True, schema=ORDER_SCHEMA), "orders")
    print(f"loaded {count} orders into the queue 'orders'", flush=True)

    # 2. Consume: transform, store as Parquet, forward to a second queue.
    def store_and_forward(rows: DataFrame, batch_id: int) -> None:
        rows.persist()  # used three times: computed (and its jobs read) once
        rows.write.mode("append").parquet(str(table))
        add_jobs(rows.drop("job_id"), "orders-enriched")
        print(f"  micro-batch {batch_id}: {rows.count()} orders stored and forwarded", flush=True)
        rows.unpersist()

    query = (
        orders_stream(spark, nodes, batch)
        .writeStream.foreachBatch(store_and_forward)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    # 3. Check, with Spark for the table and the queues' own view for the rest.
    stored = spark.read.parquet(str(table))
    distinct = stored.select("order_id").distinct().count()
    with disquette.Client(nodes) as client:
        nodes_list = nodes.split(",")
        forwarded = sum(client.on_node(n).qlen("orders-enriched") for n in nodes_list)
        left = sum(client.on_node(n).qlen("orders") for n in nodes_list)
        unacked = sum(
            1
            for n in nodes_list
            for _ in client.on_node(n).jscan(queue="orders", states=("queued", "active"))
        )
    large = stored.where("large").select("order_id").distinct().count()
    print(f"orders in the CSV file:              {count}")
    rows = stored.count()
    print(f"distinct orders in the Parquet table: {distinct} ({rows} rows, {large} large)")
    print(f"jobs forwarded to 'orders-enriched':  {forwarded}")
    print(f"jobs left in 'orders':                {left} queued, {unacked} unacknowledged")
    spark.stop()
    ok = distinct == count and forwarded >= count and left == 0 and unacked == 0
    print("nothing was lost" if ok else "MISMATCH: something was lost")
    return ok


def example_args(description: str, local: str, orders: int, batch: int) -> argparse.Namespace:
    """An example's options: ``--nodes`` (by default, ``local`` nodes are started),
    ``--orders`` and ``--batch`` (their defaults ``orders`` and ``batch``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--nodes", help=f"host:port,... (default: start {local})")
    parser.add_argument("--orders", type=int, default=orders)
    parser.add_argument("--batch", type=int, default=batch, help="jobs per micro-batch")
    return parser.parse_args()


def run_example(
    name: str,
    pipeline: Callable[[str, Path, int, int], bool],
    local_nodes: Callable[[Path], AbstractContextManager[str]],
    args: argparse.Namespace,
) -> int:
    """``pipeline`` against ``--nodes``, or else against the nodes ``local_nodes`` starts, in a
    temporary directory named after ``name``; the exit status: 0 when nothing was lost."""
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        workdir = Path(tmp)
        with nullcontext(args.nodes) if args.nodes else local_nodes(workdir) as nodes:
            return 0 if pipeline(nodes, workdir, args.orders, args.batch) else 1


def main() -> int:
    args = example_args(__doc__.split("\n\n")[0], "a local node", orders=5000, batch=1000)
    return run_example("disquette-example", run, local_node, args)


if __name__ == "__main__":
    sys.exit(main())
