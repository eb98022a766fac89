"""The task app bench/tasks.py runs with ``disquette worker _tasks_app:app``: one no-op task."""

import os

from disquette.tasks import App

app = App(os.environ.get("DISQUETTE_SEEDS", "127.0.0.1:7711"))


@app.task(queue=os.environ.get("BENCH_QUEUE", "bench-tasks"), name="noop")
def noop(n: int) -> None:
    pass
