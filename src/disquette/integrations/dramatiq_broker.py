"""A Dramatiq broker on disquette, and a results backend: ``DisqueBroker(url="disque://...")``.

A Dramatiq queue is a disquette queue and a message is a job (its body the
message's encoding), so what Dramatiq's other brokers do in worker memory or
Lua scripts, the cluster does:

- **Acknowledgements**: a message is acknowledged (ACKJOB) after its actor ran
  (the acknowledgements a worker's consumer collects between two fetches go out
  in one ACKJOB);
  a worker that dies acknowledges nothing and its jobs come back after their
  retry time (``retry``, seconds, default 300; WORKING keeps a long run's job
  from coming back, every ``retry / 3`` seconds). Messages a stopping worker had
  prefetched are NACKed back at once.
- **Delays** (``send_with_options(delay=ms)``) are DELAY: the job waits in the
  cluster and is queued when due (rounded up to whole seconds), with no delay
  queue and nothing held in a worker.
- **Retries with backoff**: when the Retries middleware re-enqueues a message
  that failed, the broker NACKs its job with ``DELAY`` the backoff instead of
  adding a copy, so the job keeps its ID and its NACK count; the message's
  ``retries`` option is read back from that count.
- **Dead letters**: a message that failed for good (``message.fail()``: retries
  exhausted, ``throws``) goes to disquette's dead-letter queue
  (``dead_letter_queue``, default ``dead-letters``) as a
  :class:`~disquette.DeadLetter` (its origin, the reason, the traceback, then the
  body), the same format the project's worker writes, then is acknowledged.
- **Priorities**: an actor's ``priority`` (Dramatiq's: lower runs first, default
  0) is sent as PRIORITY ``9 - priority`` clamped to 0-9, so the cluster serves
  higher-priority messages of a queue first too.
- **Prefetch** is GETJOB COUNT; an idle consumer blocks on the cluster
  (GETJOB TIMEOUT) instead of polling.

:class:`DisqueResultBackend` (for ``dramatiq.results.Results``) stores results
as :class:`~disquette.integrations.keyed.KeyedStore` values; a blocking
``get_result`` waits on the key's home node rather than polling.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from typing import Any

from dramatiq import Message
from dramatiq.broker import Broker, Consumer, MessageProxy
from dramatiq.common import compute_backoff
from dramatiq.errors import ConnectionClosed
from dramatiq.results import ResultMissing, ResultTimeout
from dramatiq.results.backend import DEFAULT_TIMEOUT, Missing, ResultBackend

from disquette import DeadLetter
from disquette.client import ConnectionFailedError, DisqueError, Job, ReplyLostError
from disquette.integrations.delays import delay_and_ttl, needs_working_now
from disquette.integrations.keyed import KeyedStore
from disquette.integrations.url import ClusterURL

#: The job a message came from, on the message proxy the worker passes around.
JOB = "_disque_job"
#: Set on a proxy whose job was already settled (NACKed with a delay for a retry).
SETTLED = "_disque_settled"


class DisqueBroker(Broker):
    """A Dramatiq broker on a disquette cluster (see the module docstring).

    ``url``: ``disque://host:port[,host:port...]`` (or ``client``, a
    :class:`disquette.Client`). ``retry``, ``ttl`` and ``replicate``: the ADDJOB
    options of every message. ``dead_letter_queue``: where failed messages go.
    """

    def __init__(
        self,
        *,
        url: str = "disque://127.0.0.1:7711",
        client: Any = None,
        middleware: Any = None,
        retry: int = 300,
        ttl: int = 86400,
        replicate: int | None = None,
        dead_letter_queue: str = "dead-letters",
    ) -> None:
        super().__init__(middleware=middleware)
        self.client = client or ClusterURL.parse(url).client()
        self.queues: set[str] = set()
        self.retry = retry
        self.ttl = ttl
        self.replicate = replicate
        self.dead_letter_queue = dead_letter_queue

    def close(self) -> None:
        self.client.close()

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> Consumer:
        return _DisqueConsumer(self, queue_name, prefetch, timeout)

    def declare_queue(self, queue_name: str) -> None:
        """Queues exist as soon as a job is added; this only tells the worker to consume it."""
        if queue_name not in self.queues:
            self.emit_before("declare_queue", queue_name)
            self.queues.add(queue_name)
            self.emit_after("declare_queue", queue_name)

    def enqueue(self, message: Message, *, delay: int | None = None) -> Message:
        """ADDJOB, or for a message being retried, NACK with the backoff as DELAY."""
        seconds = math.ceil(delay / 1000) if delay else 0
        job = getattr(message, JOB, None)
        if job is not None:
            self.emit_before("enqueue", message, delay)
            self.client.nack(job, delay=seconds)
            setattr(message, SETTLED, True)
            self.emit_after("enqueue", message, delay)
            return message
        self.emit_before("enqueue", message, delay)
        delay_s, ttl = delay_and_ttl(seconds, self.ttl)
        actor = self.actors.get(message.actor_name)
        priority = None if actor is None else max(0, min(9, 9 - int(actor.priority)))
        self.client.add_job(
            message.queue_name,
            message.encode(),
            retry=self.retry,
            ttl=ttl,
            delay=delay_s or None,
            priority=priority,
            replicate=self.replicate,
        )
        self.emit_after("enqueue", message, delay)
        return message

    def get_declared_queues(self) -> set[str]:
        return self.queues.copy()

    def get_declared_delay_queues(self) -> set[str]:
        """None: delayed messages wait in the cluster (DELAY), not in delay queues."""
        return set()

    def flush(self, queue_name: str) -> None:
        while jobs := self.client.get_jobs(queue_name, count=1000, nohang=True):
            self.client.ack(*jobs)

    def flush_all(self) -> None:
        for queue_name in self.queues:
            self.flush(queue_name)

    def join(self, queue_name: str, *, timeout: int | None = None, interval: int = 100) -> None:
        """Wait until the queue has no job queued or in flight anywhere (tests)."""
        deadline = None if timeout is None else time.monotonic() + timeout / 1000
        while True:
            states = ("queued", "active")
            if not any(True for _ in self.client.jscan(queue=queue_name, states=states)):
                return
            if deadline is not None and time.monotonic() > deadline:
                from dramatiq.errors import QueueJoinTimeout

                raise QueueJoinTimeout(queue_name)
            time.sleep(interval / 1000)

    def dead_letter(self, job: Job, message: MessageProxy) -> None:
        """Move a failed message's job to the dead-letter queue, then acknowledge it."""
        retries = message.options.get("retries", 0)
        reason = f"dramatiq: failed for good after {retries} runs"
        error = message.options.get("traceback")
        letter = DeadLetter.of(job, reason, error).encode()
        self.client.add_job(self.dead_letter_queue, letter, ttl=self.ttl, dedup=job.id)
        self.client.ack(job)


class _DisqueConsumer(Consumer):
    """One queue's consumer: GETJOB for the free prefetch slots, blocking on the cluster."""

    def __init__(self, broker: DisqueBroker, queue_name: str, prefetch: int, timeout: int) -> None:
        self.broker = broker
        self.client = broker.client
        self.queue_name = queue_name
        self.prefetch = prefetch
        self.timeout = timeout / 1000
        self.cache: list[tuple[Job, Message]] = []
        self.held: dict[str, Job] = {}
        self.lock = threading.Lock()
        self.last_working = time.monotonic()
        self.misses = 0
        #: Jobs acknowledged since the last call: one ACKJOB for them all.
        self.acks: list[Job] = []

    def __next__(self) -> MessageProxy | None:
        try:
            self._flush_acks()
            self._keep_working()
            if not self.cache:
                free = self.prefetch - len(self.held)
                if free <= 0:  # the worker acks between calls: back off a little, as Redis's
                    longest = min(1000, self.broker.retry * 1000 / 3)
                    self.misses, backoff_ms = compute_backoff(self.misses, max_backoff=longest)
                    time.sleep(backoff_ms / 1000)
                    return None
                jobs = self.client.get_jobs(
                    self.queue_name,
                    count=free,
                    timeout=max(0.001, min(self.timeout, 1.0, self.broker.retry / 3)),
                    with_counters=True,
                )
                if not jobs:
                    return None
                self.cache = [(job, Message.decode(job.body)) for job in jobs]
                self._postpone_late(self.cache)
            job, message = self.cache.pop(0)
            self.misses = 0
        except (ConnectionFailedError, ReplyLostError, OSError) as exc:
            raise ConnectionClosed(exc) from None
        if job.nacks:
            message.options["retries"] = max(message.options.get("retries", 0), job.nacks)
        proxy = MessageProxy(message)
        setattr(proxy, JOB, job)
        with self.lock:
            self.held[job.id] = job
        return proxy

    def _postpone_late(self, fetched: list[tuple[Job, Message]]) -> None:
        """WORKING at once for the jobs fetched late in their retry period (delays.py);
        a message's age counts from its creation (a delayed one's is always late)."""
        now = time.time()
        late = [
            job.id
            for job, message in fetched
            if needs_working_now(message.message_timestamp / 1000, self.broker.retry, now,
                                 bool(job.nacks or job.additional_deliveries))
        ]  # fmt: skip
        if late:
            pipe = self.client.pipeline()
            for job_id in late:
                pipe.working(job_id)
            pipe.execute(raise_on_error=False)

    def _keep_working(self) -> None:
        """WORKING for the jobs held, every ``retry / 3`` seconds."""
        now = time.monotonic()
        if now - self.last_working < self.broker.retry / 3:
            return
        self.last_working = now
        with self.lock:
            held = list(self.held)
        for job_id in held:
            try:
                self.client.working(job_id)
            except DisqueError:
                continue

    def _release(self, message: MessageProxy) -> Job | None:
        job: Job | None = getattr(message, JOB, None)
        if job is not None:
            with self.lock:
                self.held.pop(job.id, None)
        return None if getattr(message, SETTLED, False) else job

    def ack(self, message: MessageProxy) -> None:
        """Counted now; sent with the others of this pass (the worker acks between calls)."""
        job = self._release(message)
        if job is not None:
            self.acks.append(job)

    def _flush_acks(self) -> None:
        if self.acks:
            jobs, self.acks = self.acks, []
            self.client.ack(*jobs)

    def nack(self, message: MessageProxy) -> None:
        job = self._release(message)
        if job is not None:
            self.broker.dead_letter(job, message)

    def requeue(self, messages: Iterable[MessageProxy]) -> None:
        jobs = [job for job in map(self._release, messages) if job is not None]
        jobs += [job for job, _ in self.cache]
        self.cache = []
        if jobs:
            self.client.nack(*jobs)

    def close(self) -> None:
        self._flush_acks()
        self.requeue([])


class DisqueResultBackend(ResultBackend):
    """Dramatiq's results on disquette: a value per message key, kept ``result_ttl`` ms."""

    def __init__(self, *, url: str = "disque://127.0.0.1:7711", client: Any = None,
                 replicate: int | None = None, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.store = KeyedStore(client or ClusterURL.parse(url).client(), replicate)

    def get_result(self, message: Any, *, block: bool = False, timeout: int | None = None) -> Any:
        key = self.build_message_key(message).encode()
        deadline = time.monotonic() + (DEFAULT_TIMEOUT if timeout is None else timeout) / 1000
        while True:
            data = self.store.peek(key)
            if data is not None:
                return self.unwrap_result(self.encoder.decode(data))
            if not block:
                raise ResultMissing(message)
            left = deadline - time.monotonic()
            if left <= 0:
                raise ResultTimeout(message)
            self.store.wait(key, min(left, 1.0))

    def _get(self, message_key: str) -> Any:
        data = self.store.peek(message_key.encode())
        return Missing if data is None else self.encoder.decode(data)

    def _store(self, message_key: str, result: Any, ttl: int) -> None:
        seconds = max(1, math.ceil(ttl / 1000))
        self.store.put(message_key.encode(), self.encoder.encode(result), seconds)
