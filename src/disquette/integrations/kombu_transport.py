"""A Kombu transport on disquette: Celery's broker (and any Kombu program's), ``disque://``.

A Kombu queue is a disquette queue and a message is a job whose body is the
Kombu message (JSON), so the cluster, not the consumer, keeps every promise:

- **Acknowledgements** are ACKJOB. Celery's early acks send it when a task is
  accepted, ``acks_late`` after the task; a rejected message is NACKed (requeued)
  or acknowledged (dropped), and what a channel still holds unacknowledged when
  it closes is NACKed back at once. A consumer that dies acknowledges nothing:
  its jobs come back after their retry time.
- **No visibility timeout.** Each job carries its own RETRY (transport option
  ``retry``, seconds; default 300); a consumer sends WORKING for the jobs it
  holds every ``working_interval`` seconds (default a third of ``retry``), and at
  once for a job fetched late in its retry period (see
  :mod:`~disquette.integrations.delays`: the requeue clock runs from when the
  job was queued), so a long task is not delivered twice, and a dead consumer's
  jobs come back after ``retry`` seconds whatever the countdown of other tasks.
- **Countdown and ETA** become DELAY: the job waits in the cluster, not in a
  worker's memory, and is queued when due (whole seconds; the worker holds the
  fraction left), its TTL stretched to cover the delay (see
  :mod:`~disquette.integrations.delays` for delays past 45 days).
- **Priority** (0-9, higher first, as Kombu's virtual transports and RabbitMQ
  order it) is PRIORITY; a message's ``expiration`` (AMQP's per-message TTL) is
  the job's TTL.
- **Prefetch** is GETJOB's COUNT: a fetch takes as many jobs as the channel's
  prefetch allows, blocking on the cluster (GETJOB TIMEOUT) rather than polling.
- **Revoke**: Celery's ``revoke`` is a broadcast on the ``celery.pidbox`` fanout
  exchange; this transport answers it with CANCEL for the tasks this process
  published (it remembers the last 65,536 task IDs' jobs). A cancelled job leaves
  its queue on every node; a task a worker already fetched still runs.
- **Exchanges**: direct and topic (routing is done by Kombu in the producer).
  Fanout exchanges (Celery's ``Broadcast`` queues, remote control) are refused at
  declaration with an error saying so; Celery then runs its workers without
  remote control (it asks the transport first).
- **Failover**: the URL lists seeds, ``disque://h1:7711,h2:7711``; the client
  moves to another node when one fails (docs/client.md).

Transport options (``broker_transport_options`` in Celery): ``retry``, ``ttl``
(seconds, default 86400), ``replicate`` (copies, default the server's),
``working_interval``, ``fetch_timeout`` (the longest single GETJOB wait,
default 1 s) and ``socket_timeout``. The message bodies are base64 in the job
(Kombu's default for virtual transports), so any serializer's bytes survive.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from datetime import UTC, datetime
from queue import Empty
from typing import Any

from kombu.serialization import loads as deserialize
from kombu.transport import virtual
from kombu.utils.json import dumps, loads

import disquette
from disquette.client import (
    ConnectionFailedError,
    DisqueError,
    JobCancelledError,
    ReplyLostError,
    ResponseError,
)
from disquette.integrations.delays import delay_and_ttl, needs_working_now
from disquette.integrations.url import ClusterURL

#: Task IDs of the jobs this process published, for revoke (bounded).
PUBLISHED_KEPT = 65536

UNSUPPORTED_EXCHANGE = (
    "the disque transport has no {type} exchanges (exchange {name!r}): a job goes to one "
    "consumer. Celery's Broadcast queues and remote control need fanout; use a queue per "
    "worker instead (docs/celery.md, What differs)"
)


class Published:
    """Task ID -> job ID for the messages this process published (for revoke)."""

    def __init__(self, size: int = PUBLISHED_KEPT) -> None:
        self._jobs: OrderedDict[str, str] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def add(self, task_id: str, job_id: str) -> None:
        with self._lock:
            self._jobs[task_id] = job_id
            if len(self._jobs) > self._size:
                self._jobs.popitem(last=False)

    def jobs(self, task_ids: Iterable[str]) -> list[str]:
        with self._lock:
            return [j for j in (self._jobs.get(t) for t in task_ids) if j is not None]


published = Published()


def eta_delay(eta: Any, now: float | None = None) -> int:
    """Whole seconds until ``eta`` (Celery's ISO 8601 header), 0 when due or absent."""
    if not eta:
        return 0
    when = datetime.fromisoformat(eta) if isinstance(eta, str) else eta
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0, math.floor(seconds))


class QoS(virtual.QoS):
    """Prefetch accounting; unacknowledged jobs go back with NACK, not a copy."""

    def restore_unacked(self) -> list[tuple[BaseException, Any]]:
        self._flush()
        tags = [tag for tag in self._delivered if tag not in self._dirty]
        messages = list(self._delivered.values())
        self._delivered.clear()
        if not tags:
            return []
        try:
            self.channel.client.nack(*tags)
        except DisqueError as exc:
            return [(exc, m) for m in messages]
        return []


class Channel(virtual.Channel):
    """One Kombu channel: publishes with ADDJOB, consumes with GETJOB, acks with ACKJOB."""

    QoS = QoS
    supports_fanout = False
    from_transport_options = (
        *virtual.Channel.from_transport_options,
        "retry",
        "ttl",
        "replicate",
        "working_interval",
        "fetch_timeout",
    )
    retry: int = 300
    ttl: int = 86400
    replicate: int | None = None
    working_interval: float | None = None
    fetch_timeout: float = 1.0
    #: A fetch without a prefetch limit takes up to this many jobs.
    fetch_count = 64

    connection: Transport

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self.client = connection.cluster
        self._no_ack_queues: set[str] = set()
        self._acked = threading.Condition()
        self._last_working = time.monotonic()

    # ---------------------------------------------------------------- declaring

    def exchange_declare(self, exchange: str | None = None, type: str = "direct", *args: Any,
                         **kwargs: Any) -> None:  # fmt: skip
        if type not in ("direct", "topic") and not (type == "fanout" and _pidbox(exchange)):
            raise NotImplementedError(UNSUPPORTED_EXCHANGE.format(type=type, name=exchange))
        super().exchange_declare(exchange, type, *args, **kwargs)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        """Queues exist in disquette as soon as a job is added: nothing to create."""

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return True

    def _size(self, queue: str) -> int:
        """QLEN: the jobs queued on the node this client talks to."""
        return int(self.client.qlen(queue))

    def _purge(self, queue: str) -> int:
        purged = 0
        while jobs := self.client.get_jobs(queue, count=1000, nohang=True):
            purged += self.client.ack(*jobs)
        return purged

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        self._purge(queue)

    # ---------------------------------------------------------------- publishing

    def basic_publish(self, message: dict[str, Any], exchange: str, routing_key: str,
                      **kwargs: Any) -> Any:  # fmt: skip
        if exchange and self.typeof(exchange).type == "fanout":
            return self._broadcast(message, exchange)
        return super().basic_publish(message, exchange, routing_key, **kwargs)

    def _broadcast(self, message: dict[str, Any], exchange: str) -> None:
        """A remote-control broadcast: ``revoke`` becomes CANCEL; the rest is refused."""
        command = deserialize(
            message["body"], message.get("content-type"), message.get("content-encoding")
        )
        if not isinstance(command, dict) or command.get("method") != "revoke":
            raise NotImplementedError(UNSUPPORTED_EXCHANGE.format(type="fanout", name=exchange))
        task_ids = command.get("arguments", {}).get("task_id") or []
        if isinstance(task_ids, str):
            task_ids = [task_ids]
        jobs = published.jobs(task_ids)
        if jobs:
            self.client.cancel(*jobs)

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        headers = message.get("headers") or {}
        properties = message["properties"]
        after = properties.pop("disquette_after", None)
        expiration = properties.get("expiration")  # ms, as AMQP's per-message TTL
        ttl = max(1, math.ceil(float(expiration) / 1000)) if expiration else self.ttl
        delay, ttl = delay_and_ttl(eta_delay(headers.get("eta")), ttl)
        priority = properties.get("priority")
        properties["disquette_due"] = time.time() + delay
        job_id = self.client.add_job(
            queue,
            dumps(message),
            retry=self.retry,
            ttl=ttl,
            delay=delay or None,
            priority=max(0, min(9, int(priority))) if priority else None,
            replicate=self.replicate,
            after=after,
            if_gone="release" if after else None,
        )
        task_id = headers.get("id")
        if task_id:
            published.add(task_id, job_id)

    # ---------------------------------------------------------------- consuming

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        if no_ack:
            self._no_ack_queues.add(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        jobs = self.client.get_jobs(queue, nohang=True, with_counters=True)
        if not jobs:
            raise Empty()
        return self._payload(jobs[0])

    def _payload(self, job: disquette.Job) -> dict[str, Any]:
        payload: dict[str, Any] = loads(job.body)
        properties = payload["properties"]
        properties["delivery_tag"] = job.id
        redelivered = bool(job.nacks or job.additional_deliveries)
        payload["redelivered"] = properties.setdefault("delivery_info", {})["redelivered"] = (
            redelivered
        )
        return payload

    def fetch(self, timeout: float) -> bool:
        """GETJOB for as many jobs as the prefetch allows; deliver them. False if none came."""
        if not self._consumers or not self._active_queues:
            return False
        wait = min(timeout, self.fetch_timeout, self._working_interval())
        if not self.qos.can_consume():
            with self._acked:
                self._acked.wait(wait)
            return False
        count = self.qos.can_consume_max_estimate() or self.fetch_count
        jobs = self.client.get_jobs(
            *self._active_queues,
            count=count,
            timeout=wait if wait > 0 else None,
            nohang=wait <= 0,
            with_counters=True,
        )
        payloads = [self._payload(job) for job in jobs]
        now = time.time()
        late = [
            job.id
            for job, payload in zip(jobs, payloads, strict=True)
            if job.queue not in self._no_ack_queues
            and needs_working_now(
                payload["properties"].get("disquette_due"), self.retry, now,
                payload["redelivered"],
            )
        ]  # fmt: skip
        if late:  # their requeue may be close: postponed before anything else happens
            pipe = self.client.pipeline()
            for job_id in late:
                pipe.working(job_id)
            pipe.execute(raise_on_error=False)
        for job, payload in zip(jobs, payloads, strict=True):
            self.connection._deliver(payload, job.queue)
        no_ack = [job for job in jobs if job.queue in self._no_ack_queues]
        if no_ack:
            self.client.ack(*no_ack)
        return bool(jobs)

    def _working_interval(self) -> float:
        return self.working_interval or self.retry / 3

    def keep_working(self) -> None:
        """WORKING for every job held unacknowledged, every ``working_interval`` seconds."""
        now = time.monotonic()
        if now - self._last_working < self._working_interval():
            return
        self._last_working = now
        for tag in [t for t in list(self.qos._delivered) if t not in self.qos._dirty]:
            try:
                self.client.working(tag)
            except (JobCancelledError, ResponseError):
                continue  # cancelled or gone: its ack will count 0

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        self.client.ack(delivery_tag)
        super().basic_ack(delivery_tag)
        with self._acked:
            self._acked.notify_all()

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            self.client.nack(delivery_tag)
        else:
            self.client.ack(delivery_tag)
        self.qos._quick_ack(delivery_tag)
        with self._acked:
            self._acked.notify_all()

    def _restore(self, message: Any) -> None:
        self.client.nack(message.delivery_tag)


class Transport(virtual.Transport):
    """``disque://host:port[,host:port...]``: see the module docstring."""

    Channel = Channel
    driver_type = "disque"
    driver_name = "disquette"
    default_port = 7711
    can_parse_url = True
    polling_interval = None
    implements = virtual.Transport.implements.extend(
        asynchronous=False, exchange_type=frozenset(["direct", "topic"]), heartbeats=False
    )
    connection_errors = (
        *virtual.Transport.connection_errors,
        ConnectionFailedError,
        ReplyLostError,
        ConnectionError,
        OSError,
    )
    channel_errors = (*virtual.Transport.channel_errors, ResponseError)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        options = client.transport_options
        self.cluster = _cluster_url(client).client(
            connect_timeout=float(client.connect_timeout or 5.0),
            socket_timeout=options.get("socket_timeout", 10.0),
        )

    def establish_connection(self) -> Transport:
        self.cluster.ping()
        return super().establish_connection()  # type: ignore[no-any-return]

    def close_connection(self, connection: Any) -> None:
        super().close_connection(connection)
        self.cluster.close()

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        """Kombu's display of the URL: every seed, the password masked."""
        return ClusterURL.parse(uri).display(include_password, mask)

    def driver_version(self) -> str:
        return disquette.__version__

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        """Deliver what the consuming channels fetch; ``socket.timeout`` when nothing came.

        A fetch blocks on the cluster (GETJOB TIMEOUT) for at most
        ``fetch_timeout`` at a time, so WORKING keeps going out for the jobs held.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            consuming = [c for c in self.channels if c._consumers]
            for channel in consuming:
                channel.keep_working()
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if not consuming:
                time.sleep(max(0.0, min(left, 0.1)))
            else:
                share = max(0.0, left) / len(consuming)
                if any([channel.fetch(share) for channel in consuming]):
                    return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError()


def _pidbox(exchange: str | None) -> bool:
    return bool(exchange) and str(exchange).endswith(".pidbox")


def _cluster_url(connection: Any) -> ClusterURL:
    """The cluster a Kombu connection names: its whole URL, or hostname and port."""
    hostname = connection.hostname or "127.0.0.1"
    if "://" in hostname:
        return ClusterURL.parse(hostname)
    seeds = tuple(
        h if ":" in h else f"{h}:{connection.port or Transport.default_port}"
        for h in hostname.split(",")
    )
    return ClusterURL(seeds, connection.userid or None, connection.password or None)
