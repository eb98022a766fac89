"""The Celery app the tests run with ``celery -A tests.integrations.celeryapp worker``.

Configured from the environment, as a user's app reads its settings: the broker
and the result backend are ``disque://`` URLs of $DISQUETTE_SEEDS (one setting
each, nothing else registers the transport), the default queue is
$DISQUETTE_TEST_QUEUE, and the transport retries after $DISQUETTE_TEST_RETRY
seconds. Tasks report to the test by appending lines to files in
$DISQUETTE_TEST_DIR (``<tag> <pid> <time>``): what ran, where, when.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery

SEEDS = os.environ.get("DISQUETTE_SEEDS", "127.0.0.1:7711")
QUEUE = os.environ.get("DISQUETTE_TEST_QUEUE", "celery")

app = Celery("celeryapp", broker=f"disque://{SEEDS}", backend=f"disque://{SEEDS}")
app.conf.update(
    task_default_queue=QUEUE,
    broker_transport_options={"retry": int(os.environ.get("DISQUETTE_TEST_RETRY", "2"))},
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    task_acks_late=os.environ.get("DISQUETTE_TEST_ACKS_LATE") == "1",
    worker_hijack_root_logger=False,
)


def record(name: str, tag: object) -> None:
    """Append ``tag pid time`` to ``<name>.log`` in the test's directory."""
    with (Path(os.environ["DISQUETTE_TEST_DIR"]) / f"{name}.log").open("a") as f:
        f.write(f"{tag} {os.getpid()} {time.time():.3f}\n")


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def total(values: list[int]) -> int:
    record("total", sum(values))
    return sum(values)


@app.task
def mark(tag: str) -> str:
    record("mark", tag)
    return tag


@app.task
def slow(tag: str, seconds: float) -> str:
    record("started", tag)
    time.sleep(seconds)
    record("done", tag)
    return tag


@app.task(bind=True, max_retries=5)
def flaky(self, tag: str, failures: int) -> str:
    """Fails ``failures`` times (Celery's own retry, with a countdown), then succeeds."""
    record("flaky", tag)
    if self.request.retries < failures:
        raise self.retry(countdown=1)
    return f"{tag} after {self.request.retries} retries"


@app.task
def boom() -> None:
    raise ValueError("boom")
