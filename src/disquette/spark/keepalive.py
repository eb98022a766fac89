"""Keeping held jobs from being delivered again while their micro-batch runs.

The stream source takes jobs with GETJOB on the driver and acknowledges them
only once Spark has committed the micro-batch that processed them. A job not
acknowledged within its RETRY time is queued again and would be delivered a
second time. So while a batch runs, a daemon thread in the driver-side Python
process (which lives as long as the query) sends WORKING for every held job
at 40 % of the jobs' retry time, learnt with SHOW from the first job held.
At-most-once jobs (RETRY 0) are never queued again and need none.
"""

from __future__ import annotations

import logging
import threading

from disquette.client import Client
from disquette.client.models import at_least_once
from disquette.spark.cluster import keep_alive

log = logging.getLogger("disquette.spark")

#: WORKING is sent at this fraction of the retry time, and never more often than MIN_INTERVAL.
FRACTION = 0.4
MIN_INTERVAL = 0.5


class KeepAlive:
    """The jobs held per micro-batch, and the thread that keeps them alive."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._held: dict[int, dict[str, list[str]]] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, seq: int, jobs: dict[str, list[str]]) -> None:
        """Keep the jobs of micro-batch ``seq`` alive until :meth:`release_through`."""
        with self._lock:
            self._held[seq] = jobs
        if self._thread is None:
            interval = self._interval(jobs)
            if interval is not None:
                self._thread = threading.Thread(
                    target=self._run, args=(interval,), name="disque-keepalive", daemon=True
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

    def _interval(self, jobs: dict[str, list[str]]) -> float | None:
        """Seconds between two rounds of WORKING, from the retry time of one held job."""
        for ids in jobs.values():
            for job_id in ids:
                if not at_least_once(job_id):
                    return None
                info = self._client.show(job_id)
                if info is not None:
                    return max(MIN_INTERVAL, info.retry * FRACTION) if info.retry else None
        return None

    def _run(self, interval: float) -> None:
        log.info("disque source: keeping held jobs alive every %.1fs", interval)
        while not self._stopped.wait(interval):
            with self._lock:
                held = list(self._held.values())
            for jobs in held:
                keep_alive(self._client, jobs)
