"""The Dramatiq app bench/celery.py runs: a no-op actor and a per-process counter.

$BENCH_BROKER is ``disque://...`` (disquette's broker) or ``redis://...``
(Dramatiq's own Redis broker); progress is counted as in ``_celery_app``.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.middleware import Middleware

from _progress import count_one

URL = os.environ.get("BENCH_BROKER", "disque://127.0.0.1:7711")
QUEUE = os.environ.get("BENCH_QUEUE", "bench")

if URL.startswith("redis"):
    from dramatiq.brokers.redis import RedisBroker

    broker: dramatiq.Broker = RedisBroker(url=URL)
else:
    from disquette.dramatiq import DisqueBroker

    broker = DisqueBroker(url=URL)


class Count(Middleware):
    def after_process_message(self, broker, message, *, result=None, exception=None):  # type: ignore[no-untyped-def]
        count_one()


broker.add_middleware(Count())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE)
def noop() -> None:
    """Nothing."""
