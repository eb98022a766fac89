"""A Celery result backend on disquette: ``result_backend = "disque://host:7711,..."``.

A stored value (a task's state and result, a saved group) is a job whose body is
the value, in a queue named by its key (``celery-task-meta-<task id>``, as
Celery's key-value backends name keys), added with the backend's ``expires``
(``result_expires``) as its TTL and replicated like any job, so it outlives the
failure of a node and disappears by itself. Nobody consumes these queues:
reading is QPEEK, which leaves the job where it is.

**Where a value lives.** Every key has a home node, the one its CRC-32 picks
among the healthy nodes HELLO lists (sorted by node ID); writers add there and
readers peek there, so a reader blocked for a result (GETJOB TIMEOUT on the
home node, the job put back with NACK once seen) wakes up the moment it is
stored, without polling and without waiting for federation. When the home node
cannot be reached the value goes to the client's current node, and readers look
at the other nodes before they call a task PENDING.

**Latest state wins.** A state is added with PRIORITY 9 when it is a ready
state (SUCCESS, FAILURE, REVOKED) and 1 otherwise, so a peek sees the final
state first; the job of the state a process stored before for the same task is
acknowledged when it stores the next, so a queue usually holds one job.

**Chords without polling.** ``apply_chord`` adds one *slot* job per header task
(queue ``celery-chord-slot-<task id>``, at the task's home node) and publishes
Celery's own ``celery.chord_unlock`` task through the transport with ``AFTER``
every slot: the cluster queues it once every slot is acknowledged, exactly once,
wherever the members ran. A header task acknowledges its slot when it returns
(``on_chord_part_return``, after its result is stored), so the unlock task finds
the group ready at its first look and calls the body with the results. A slot
that expires unacknowledged (``result_chord_expires``) releases the unlock task
anyway (IFGONE release), which then waits for the group as Celery does. A
header of more than 256 tasks (the most ``AFTER`` takes) uses Celery's polling
``chord_unlock`` unchanged; so does a chord whose broker is not disquette.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import OrderedDict
from typing import Any

from celery import states
from celery.backends.base import KeyValueStoreBackend
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.utils.encoding import bytes_to_str

from disquette.client import Client, DisqueError
from disquette.client.topology import format_address
from disquette.integrations.url import ClusterURL

#: The most AFTER IDs one job takes (docs/coordination.md).
MAX_AFTER = 256
#: Seconds a result job waits before it is queued again when a reader that took it
#: died before putting it back.
RESULT_RETRY = 30
#: Seconds a chord slot's copy waits before it is queued again on another node when
#: its home node fails.
SLOT_RETRY = 5
#: Seconds between refreshes of the node table the home nodes are chosen from.
NODES_REFRESH = 30.0
#: The most recent stored jobs remembered per process (to drop superseded states).
STORED_KEPT = 4096


class Nodes:
    """The cluster's healthy nodes, for picking a key's home node; refreshed from HELLO."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._views: dict[str, Client] = {}
        self._addresses: list[str] = []
        self._refreshed = -NODES_REFRESH
        self._lock = threading.Lock()

    def addresses(self) -> list[str]:
        if time.monotonic() - self._refreshed > NODES_REFRESH:
            self.refresh()
        return self._addresses

    def refresh(self) -> None:
        """Ask HELLO again; the client's topology keeps the nodes at the addresses it uses."""
        try:
            self.client.hello()
        except DisqueError:
            return
        healthy = sorted((n for n in self.client.topology.nodes if n.priority < 10),
                         key=lambda n: n.id)  # fmt: skip
        with self._lock:
            self._addresses = [format_address(n.address) for n in healthy]
            self._refreshed = time.monotonic()

    def view(self, address: str) -> Client:
        view = self._views.get(address)
        if view is None:
            view = self._views[address] = self.client.on_node(address)
        return view

    def home(self, key: bytes) -> Client:
        addresses = self.addresses()
        if not addresses:
            return self.client
        return self.view(addresses[zlib.crc32(key) % len(addresses)])

    def others(self, key: bytes) -> list[Client]:
        home = self.home(key)
        return [self.view(a) for a in self.addresses() if self.view(a) is not home]


class DisqueBackend(KeyValueStoreBackend):
    """Results, groups and chords in a disquette cluster (see the module docstring)."""

    supports_autoexpire = True
    supports_native_join = False
    implements_incr = False
    chord_slot_prefix = "celery-chord-slot-"

    def __init__(self, url: str | None = None, app: Any = None, **kwargs: Any) -> None:
        super().__init__(app=app, url=url, **kwargs)
        conf = self.app.conf
        options = dict(conf.get("result_backend_transport_options") or {})
        cluster = ClusterURL.parse(url or conf.get("result_backend") or "disque://127.0.0.1:7711")
        self.client = cluster.client(socket_timeout=options.get("socket_timeout", 10.0))
        self.nodes = Nodes(self.client)
        self.replicate: int | None = options.get("replicate")
        self.lookup_slice = float(options.get("wait_slice", 1.0))
        self._stored: OrderedDict[bytes, tuple[Client, str]] = OrderedDict()
        self._stored_lock = threading.Lock()
        self._disque_broker: bool | None = None

    # ------------------------------------------------------------- key-value store

    @property
    def _ttl(self) -> int:
        expires = self.expires
        return int(expires) if expires else 30 * 86400

    def _set_with_state(self, key: bytes, value: Any, state: str) -> None:
        priority = 9 if state in states.READY_STATES else 1
        node = self.nodes.home(key)
        try:
            job_id = self._add(node, key, value, priority)
        except DisqueError:
            node = self.client
            job_id = self._add(node, key, value, priority)
        with self._stored_lock:
            previous = self._stored.pop(key, None)
            self._stored[key] = (node, job_id)
            if len(self._stored) > STORED_KEPT:
                self._stored.popitem(last=False)
        if previous is not None:
            try:
                previous[0].ack(previous[1])
            except DisqueError:
                pass  # it expires with its TTL

    def _add(self, node: Client, key: bytes, value: Any, priority: int) -> str:
        return node.add_job(  # type: ignore[no-any-return]
            key,
            value,
            ttl=self._ttl,
            retry=RESULT_RETRY,
            priority=priority,
            replicate=self.replicate,
        )

    def set(self, key: bytes, value: Any) -> None:
        self._set_with_state(key, value, states.SUCCESS)

    def get(self, key: bytes) -> bytes | None:
        for node in (self.nodes.home(key), *self.nodes.others(key)):
            try:
                jobs = node.qpeek(key, 1)
            except DisqueError:
                continue
            if jobs:
                return jobs[0].body  # type: ignore[no-any-return]
        return None

    def mget(self, keys: list[bytes]) -> list[bytes | None]:
        return [self.get(key) for key in keys]

    def delete(self, key: bytes) -> None:
        for node in (self.nodes.home(key), *self.nodes.others(key)):
            try:
                while jobs := node.get_jobs(key, count=100, nohang=True):
                    node.ack(*jobs)
            except DisqueError:
                continue

    def incr(self, key: bytes) -> int:
        raise NotImplementedError("the disque backend counts chords with AFTER, not INCR")

    def expire(self, key: bytes, value: int) -> None:
        """Nothing to do: every value was added with its TTL."""

    # ------------------------------------------------------------- blocking reads

    def wait_for(self, task_id: str, timeout: float | None = None, interval: float = 0.5,
                 no_ack: bool = True, on_interval: Any = None) -> dict[str, Any]:  # fmt: skip
        """Block on the key's home node until the task is in a ready state.

        GETJOB TIMEOUT on the home node wakes up when the state is stored (the
        job taken is put back at once with NACK); a task in a state that is not
        ready yet (STARTED, RETRY) is looked at again every ``interval``.
        """
        self._ensure_not_eager()
        key = self.get_key_for_task(task_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            meta = self._get_task_meta_for(task_id)
            if meta["status"] in states.READY_STATES:
                return meta  # type: ignore[no-any-return]
            if on_interval:
                on_interval()
            left = self.lookup_slice if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise CeleryTimeoutError("The operation timed out.")
            if meta["status"] != states.PENDING:
                time.sleep(min(interval, left))
            else:
                self._block(key, min(left, self.lookup_slice))

    def _block(self, key: bytes, seconds: float) -> None:
        node = self.nodes.home(key)
        try:
            jobs = node.get_jobs(key, timeout=max(seconds, 0.001))
        except DisqueError:
            self.nodes.refresh()
            time.sleep(min(seconds, 0.1))
            return
        if jobs:
            node.nack(*jobs)

    # ------------------------------------------------------------- chords

    def apply_chord(self, header_result_args: Any, body: Any, **kwargs: Any) -> None:
        self.ensure_chords_allowed()
        header_result = self.app.GroupResult(*header_result_args)
        members = [r.id for r in header_result.results]
        if not members or len(members) > MAX_AFTER or not self._broker_is_disque():
            self.fallback_chord_unlock(header_result, body, **kwargs)
            return
        slots = [self._add_slot(task_id) for task_id in members]
        unlock = self.app.tasks["celery.chord_unlock"]
        queue = body.options.get("queue") or getattr(body.type, "queue", None)
        options: dict[str, Any] = {"disquette_after": slots}
        if queue:
            options["queue"] = queue
        priority = body.options.get("priority", getattr(body.type, "priority", None))
        if priority is not None:
            options["priority"] = priority
        unlock.apply_async(
            (header_result.id, body),
            {"result": [r.as_tuple() for r in header_result], "interval": kwargs.get("interval")},
            **options,
        )

    def _add_slot(self, task_id: str) -> str:
        key = self._slot_key(task_id)
        node = self.nodes.home(key)
        ttl = int(self.chord_expires or self._ttl)
        options = {"ttl": ttl, "retry": SLOT_RETRY, "replicate": self.replicate}
        try:
            return node.add_job(key, b"", **options)  # type: ignore[no-any-return]
        except DisqueError:
            return self.client.add_job(key, b"", **options)  # type: ignore[no-any-return]

    def on_chord_part_return(self, request: Any, state: str, result: Any, **kwargs: Any) -> None:
        """Acknowledge this member's slot (its result is stored already).

        The slot is queued at its home node; when that node cannot be reached,
        the slot's copy elsewhere is queued again within ``SLOT_RETRY`` seconds,
        so the other nodes are looked at for twice that long.
        """
        if not request.id:
            return
        key = self._slot_key(request.id)
        deadline = time.monotonic() + 2 * SLOT_RETRY
        while True:
            home_failed = False
            for node in (self.nodes.home(key), *self.nodes.others(key)):
                try:
                    jobs = node.get_jobs(key, count=10, nohang=True)
                except DisqueError:
                    home_failed = home_failed or node is self.nodes.home(key)
                    continue
                if jobs:
                    node.ack(*jobs)
                    return
            if not home_failed or time.monotonic() > deadline:
                return  # no slot: a polling chord, or a member run twice
            self.nodes.refresh()
            time.sleep(0.5)

    def _slot_key(self, task_id: str) -> bytes:
        return (self.chord_slot_prefix + bytes_to_str(task_id)).encode()

    def _broker_is_disque(self) -> bool:
        if self._disque_broker is None:
            with self.app.connection_for_write() as conn:
                self._disque_broker = getattr(conn.transport, "driver_type", None) == "disque"
        return self._disque_broker

    def as_uri(self, include_password: bool = False) -> str:
        return str(self.url or "disque://")
