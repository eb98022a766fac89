"""One plain ``Worker`` process for bench/tasks.py: ``_tasks_worker.py SEEDS QUEUE THREADS KIND``.

A script of its own (not a ``multiprocessing`` child) so that it runs whichever
disquette ``PYTHONPATH`` points at: this tree's, or an older revision's sources
extracted by ``--baseline`` to measure the worker as it was, in the same run. It uses
only the API every revision has: ``Worker(handler, queue, seeds=, concurrency=)``.
"""

import sys

from disquette import Worker


def noop(job) -> None:
    pass


async def noop_async(job) -> None:
    pass


if __name__ == "__main__":
    seeds, queue, threads, kind = sys.argv[1:]
    handler = noop if kind == "sync" else noop_async
    Worker(handler, queue, seeds=seeds, concurrency=int(threads)).run()
