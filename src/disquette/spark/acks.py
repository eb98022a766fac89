"""Acknowledging committed micro-batches beside the next one.

The stream source acknowledges a micro-batch's jobs once Spark has committed it,
which Spark says in its next call to the driver-side reader (docs/spark.md).
Acknowledged right there, in line, they hold up the planning of the next batch,
and every task of it, for as long as the nodes take to acknowledge them (about
1.5 s a million jobs on one node). So they go to a thread of the driver-side
process, batch after batch in order, while the next batch is planned and read;
the batch's jobs are kept alive (:mod:`~disquette.spark.keepalive`) until its
acknowledgements are answered.

What does not change: a job is acknowledged only after Spark committed its batch.
A reader that plans no new batch (the queues are empty, or Trigger.AvailableNow
spent its budget and the query is about to end, its process with it) first waits
for every acknowledgement sent, so that a query that ends leaves nothing it
committed unacknowledged. A failure is raised by the reader's next call, which
stops the query as a failure in line did; the jobs it did not acknowledge come
back through their retry, as after a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger("disquette.spark")

#: Seconds :meth:`Acknowledgements.stop` waits for those still under way.
STOP_WAIT = 120.0


class Acknowledgements:
    """The acknowledgements of committed batches, sent in order from one thread;
    ``on_done(seq)`` is called once batch ``seq``'s were answered (or failed)."""

    def __init__(self, on_done: Callable[[int], None]) -> None:
        self._on_done = on_done
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []

    def submit(self, seq: int, send: Callable[[], object] | None) -> None:
        """Acknowledge batch ``seq`` with ``send`` (None: it holds nothing) after those
        submitted before; raises the failure of an earlier one, if any."""
        self._raise_failed()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="disque-ack")
        self._pending.append(self._pool.submit(self._run, seq, send))

    def wait(self, timeout: float | None = None) -> None:
        """Until every acknowledgement submitted was answered; raises a failure."""
        while self._pending:
            self._pending.pop(0).result(timeout)

    def stop(self) -> None:
        """Wait (a bounded time) for those under way, then end the thread."""
        if self._pool is None:
            return
        try:
            self.wait(STOP_WAIT)
        except Exception as exc:  # (stopping: said, not raised)
            log.warning("disque source: acknowledging at stop failed: %s", exc)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None

    def _run(self, seq: int, send: Callable[[], object] | None) -> None:
        try:
            if send is not None:
                send()
        finally:
            self._on_done(seq)

    def _raise_failed(self) -> None:
        while self._pending and self._pending[0].done():
            self._pending.pop(0).result()
