"""The disquette task app bench/chord.py runs (``disquette worker _chord_tasks:app``).

A member returns its index; the callback sums the list it is given and appends
``tag time sum`` to ``$BENCH_DIR/callbacks`` (bench/chord.py reads when it ran, and
how many times).
"""

import os
import time
from pathlib import Path

from disquette.tasks import App

app = App(os.environ.get("DISQUETTE_SEEDS", "127.0.0.1:7711"))
QUEUE = os.environ.get("BENCH_QUEUE", "bench-chord")


@app.task(queue=QUEUE, name="member")
def member(i: int) -> int:
    return i


@app.task(queue=QUEUE, name="total")
def total(results: list[int], tag: str) -> None:
    with (Path(os.environ["BENCH_DIR"]) / "callbacks").open("a") as f:
        f.write(f"{tag} {time.time()} {sum(results)}\n")
