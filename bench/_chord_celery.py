"""The Celery app bench/chord.py runs: the same chord as ``_chord_tasks.py``, on Redis.

Redis is both the broker and the result backend (Celery's chord then counts its
members in Redis itself, without the polling ``chord_unlock`` task). Settings come
from the environment ($BENCH_BROKER, $BENCH_DIR, $BENCH_QUEUE).
"""

import os
import time
from pathlib import Path

from celery import Celery

broker = os.environ.get("BENCH_BROKER", "redis://127.0.0.1:6379/0")
app = Celery("bench_chord", broker=broker, backend=broker)
app.conf.update(
    task_default_queue=os.environ.get("BENCH_QUEUE", "bench-chord"),
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    result_expires=3600,
)


@app.task(name="member")
def member(i: int) -> int:
    return i


@app.task(name="total")
def total(results: list[int], tag: str) -> None:
    with (Path(os.environ["BENCH_DIR"]) / "callbacks").open("a") as f:
        f.write(f"{tag} {time.time()} {sum(results)}\n")
