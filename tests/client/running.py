"""A :class:`disquette.Worker` run on a thread for the length of a ``with`` block.

The worker and coordination tests drive a worker in the test's own process so they
can look at its jobs as it handles them; leaving the block stops it and fails the
test if its thread does not end.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from disquette import Worker


@contextlib.contextmanager
def working(worker: Worker) -> Iterator[Worker]:
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(60)
        assert not thread.is_alive()
