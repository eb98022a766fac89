"""The Dramatiq app the tests run with ``dramatiq tests.integrations.dramatiqapp``.

The broker is ``DisqueBroker(url="disque://$DISQUETTE_SEEDS")`` with the results
middleware on :class:`DisqueResultBackend`; actors use $DISQUETTE_TEST_QUEUE and
report to the test by appending ``tag pid time`` lines to files in
$DISQUETTE_TEST_DIR.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import dramatiq
from dramatiq.results import Results

from disquette.dramatiq import DisqueBroker, DisqueResultBackend

URL = "disque://" + os.environ.get("DISQUETTE_SEEDS", "127.0.0.1:7711")
QUEUE = os.environ.get("DISQUETTE_TEST_QUEUE", "default")

broker = DisqueBroker(url=URL, retry=int(os.environ.get("DISQUETTE_TEST_RETRY", "2")))
broker.add_middleware(Results(backend=DisqueResultBackend(url=URL)))
dramatiq.set_broker(broker)


def record(name: str, tag: object) -> None:
    with (Path(os.environ["DISQUETTE_TEST_DIR"]) / f"{name}.log").open("a") as f:
        f.write(f"{tag} {os.getpid()} {time.time():.3f}\n")


@dramatiq.actor(queue_name=QUEUE, store_results=True)
def add(x: int, y: int) -> int:
    return x + y


@dramatiq.actor(queue_name=QUEUE)
def mark(tag: str) -> None:
    record("mark", tag)


@dramatiq.actor(queue_name=QUEUE, priority=5)
def mark_low(tag: str) -> None:
    record("mark", tag)


@dramatiq.actor(queue_name=QUEUE)
def slow(tag: str, seconds: float) -> None:
    record("started", tag)
    time.sleep(seconds)
    record("done", tag)


@dramatiq.actor(queue_name=QUEUE, max_retries=2, min_backoff=1000, max_backoff=1000)
def flaky(tag: str) -> None:
    record("flaky", tag)
    raise RuntimeError(f"{tag} failed")
