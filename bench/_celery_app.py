"""The Celery app bench/celery.py runs: a no-op task, a delayed-task probe, a counter.

Settings come from the environment ($BENCH_BROKER, $BENCH_DIR, $BENCH_QUEUE).
Each task done is counted (Celery's ``task_postrun`` signal, ``_progress.count_one``);
``probe`` records each run's tag (the delayed tasks: none may run twice).
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_postrun

from _progress import DIR, count_one

app = Celery("bench", broker=os.environ.get("BENCH_BROKER", "disque://127.0.0.1:7711"))
app.conf.update(
    task_default_queue=os.environ.get("BENCH_QUEUE", "bench"),
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=int(os.environ.get("BENCH_PREFETCH", "4")),
)


@app.task
def noop() -> None:
    """Nothing: the broker's and the worker's cost per task is what is measured."""


@app.task
def probe(tag: int) -> None:
    with (DIR / f"probe-{os.getpid()}").open("a") as f:
        f.write(f"{tag}\n")


@task_postrun.connect
def _count_task(**_: object) -> None:
    count_one()
