"""A task app for the tests that run ``disquette worker tests.tasks.taskapp:app``.

The queue and the seeds come from the environment ($DISQUETTE_TEST_QUEUE,
$DISQUETTE_SEEDS); tasks talk to the test through files in $DISQUETTE_TEST_DIR:
``add`` writes its result, ``hold`` marks each start (with its process ID) and
returns once ``<name>.release`` exists, ``fail`` always raises.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from disquette.tasks import App

POLL = 0.01
QUEUE = os.environ.get("DISQUETTE_TEST_QUEUE", "tasks")

app = App(os.environ.get("DISQUETTE_SEEDS", "127.0.0.1:7711"), max_retries=1)


def _dir() -> Path:
    return Path(os.environ["DISQUETTE_TEST_DIR"])


@app.task(queue=QUEUE)
def add(a: int, b: int, *, scale: int = 1, tag: str = "sum") -> int:
    # Written whole, then renamed: a test waiting for the file never reads it half done.
    partial = _dir() / f"{tag}.result.{os.getpid()}"
    partial.write_text(json.dumps((a + b) * scale))
    partial.replace(_dir() / f"{tag}.result")
    return (a + b) * scale


@app.task(queue=QUEUE, retry=1)
def hold(name: str) -> None:
    with (_dir() / f"{name}.started").open("a") as f:
        f.write(f"{os.getpid()}\n")
    while not (_dir() / f"{name}.release").exists():
        time.sleep(POLL)


@app.task(queue=QUEUE)
def fail(name: str) -> None:
    raise RuntimeError(f"{name} fails")
