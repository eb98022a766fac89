"""Keeping held jobs from being delivered again while their micro-batch runs.

The stream source acknowledges the jobs of a micro-batch only once Spark has
committed it. A job not acknowledged within its RETRY time is queued again and
would be delivered a second time. So while a batch runs, a daemon thread in the
driver-side Python process (which lives as long as the query) keeps its jobs
alive, at 40 % of their retry time:

* a planned batch (the executors took the jobs under tags, docs/spark.md):
  ``WORKING TAG t`` for each of its tags, on its node, whose reply (the smallest
  retry time among the tag's jobs) sets the pace; every :data:`MIN_INTERVAL`
  until a tag answers one (the tags fill as the tasks read);
* a taken batch (plain Disque: the driver took the jobs): WORKING for every
  held job, at 40 % of the retry time learnt with SHOW from the first one.

At-most-once jobs (RETRY 0) are never queued again and need none.
"""

from __future__ import annotations

import logging
import threading

from disquette.client import Client
from disquette.client.models import at_least_once
from disquette.spark.cluster import keep_alive, on_tags

log = logging.getLogger("disquette.spark")

#: WORKING is sent at this fraction of the retry time, and never more often than MIN_INTERVAL.
FRACTION = 0.4
MIN_INTERVAL = 0.5


class KeepAlive:
    """The jobs (or tags) held per micro-batch, and the thread that keeps them alive."""

    def __init__(self, client: Client) -> None:
        self._client = client
        #: seq -> (tagged, {node: job IDs or tag names})
        self._held: dict[int, tuple[bool, dict[str, list[str]]]] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._interval: float | None = None

    def hold(self, seq: int, held: dict[str, list[str]], tagged: bool = False) -> None:
        """Keep micro-batch ``seq`` alive until :meth:`release_through`: its job IDs
        by node, or with ``tagged`` its tags by node."""
        with self._lock:
            self._held[seq] = (tagged, held)
        if self._thread is None:
            interval = MIN_INTERVAL if tagged else self._interval_of(held)
            if interval is not None:
                self._interval = interval
                self._thread = threading.Thread(
                    target=self._run, name="disque-keepalive", daemon=True
                )
                self._thread.start()

    def release_through(self, seq: int) -> None:
        """Stop keeping alive the jobs of micro-batches up to ``seq`` (acknowledged)."""
        with self._lock:
            for done in [s for s in self._held if s <= seq]:
                del self._held[done]

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _interval_of(self, jobs: dict[str, list[str]]) -> float | None:
        """Seconds between two rounds of WORKING, from the retry time of one held job."""
        for ids in jobs.values():
            for job_id in ids:
                if not at_least_once(job_id):
                    return None
                info = self._client.show(job_id)
                if info is not None:
                    return max(MIN_INTERVAL, info.retry * FRACTION) if info.retry else None
        return None

    def _run(self) -> None:
        log.info("disque source: keeping held jobs alive")
        while self._interval is not None and not self._stopped.wait(self._interval):
            with self._lock:
                held = list(self._held.values())
            for tagged, jobs in held:
                if not tagged:
                    keep_alive(self._client, jobs)
                    continue
                retry = on_tags(self._client, "WORKING", jobs)
                if retry:
                    self._interval = max(MIN_INTERVAL, retry * FRACTION)
