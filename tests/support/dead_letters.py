"""Dead letters made for real on a test cluster: by a queue policy, or by a worker whose
handler raises (its traceback in the dead letter), for the failed-jobs tests of the API,
the CLI and the dashboard."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import disquette
from disquette.tasks import App
from tests.support.cluster import Cluster
from tests.support.servers import wait_for


def policy_dead_letters(cluster: Cluster, tag: str, bodies: list[str]) -> dict[str, str]:
    """Jobs of queue ``<tag>`` NACKed once under a policy with ``max-deliveries 1``, on
    node 0: their dead letters in ``<tag>-dead`` (dead letter's ID -> original's ID)."""
    dead = f"{tag}-dead"
    cluster.command(0, "QPOLICY", "SET", tag, tag, "max-deliveries", 1, "deadletter", dead)
    originals = [cluster.command(0, "ADDJOB", tag, body, 0).decode() for body in bodies]
    jobs = cluster.command(0, "GETJOB", "COUNT", len(bodies), "FROM", tag)
    cluster.command(0, "NACK", *(job[1] for job in jobs))
    wait_for(lambda: cluster.command(0, "QLEN", dead) == len(bodies), what="the dead letters")
    letters = cluster.command(0, "QPEEK", dead, len(bodies))
    origin = {
        letter[1].decode(): cluster.show(0, letter[1])["origin-id"].decode() for letter in letters
    }
    assert sorted(origin.values()) == sorted(originals)
    return origin


def worker_dead_letters(
    cluster: Cluster, worker: App | Callable[[disquette.Job], Any], queue: str, dead: str, n: int
) -> list[str]:
    """Run a worker of node 0 until ``n`` dead letters are in ``dead`` (of ``queue``, with
    ``max_nacks`` 0): a task app's, or a plain worker whose handler is ``worker``.
    Returns the dead letters' IDs."""
    if isinstance(worker, App):
        running = worker.worker(poll_timeout=0.1)
    else:
        running = disquette.Worker(worker, queue, seeds=cluster.addresses[0], poll_timeout=0.1,
                                   dead_letter_queue=dead, max_nacks=0)  # fmt: skip
    thread = threading.Thread(target=running.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        wait_for(lambda: cluster.command(0, "QLEN", dead) == n, what=f"{n} dead letters in {dead}")
    finally:
        running.stop(hurry=True)
        thread.join(30)
    return [job[1].decode() for job in cluster.command(0, "QPEEK", dead, n)]
