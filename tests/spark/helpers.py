"""Helpers shared by the Spark tests: addresses, streams, and the queue's own view."""

from __future__ import annotations

from pathlib import Path

import disquette
from tests.support.servers import ServerProcess, wait_for

#: Seconds any wait may take: generous, for a loaded two-core machine.
DEADLINE = 120.0


def addresses(*servers: ServerProcess) -> str:
    return ",".join(f"127.0.0.1:{s.port}" for s in servers)


def unacked(client: disquette.Client, queue: str) -> int:
    """Jobs of ``queue`` the node still holds unacknowledged (queued or delivered)."""
    return sum(1 for _ in client.jscan(queue=queue, states=("queued", "active")))


def until(query, condition, what: str) -> None:
    """Wait for ``condition``, failing at once if the streaming query died."""

    def check() -> bool:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        return condition()

    wait_for(check, DEADLINE, 0.2, what)


def stream(spark, node: ServerProcess, queue: str, **options):
    """A streaming DataFrame of ``queue`` on ``node``."""
    reader = spark.readStream.format("disque").option("nodes", addresses(node))
    return reader.option("queues", queue).options(**options).load()


def to_memory(df, name: str, checkpoint: Path, **trigger):
    """Start writing ``df`` into the memory table ``name``; ``trigger`` as writeStream's."""
    writer = df.writeStream.format("memory").queryName(name)
    writer = writer.option("checkpointLocation", str(checkpoint))
    return writer.trigger(**(trigger or {"processingTime": "0.2 seconds"})).start()


def batches(checkpoint: Path, kind: str) -> set[int]:
    folder = checkpoint / kind
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()
