"""A Celery result backend on disquette: ``result_backend = "disque://host:7711,..."``.

Task states and results and saved groups are values of a
:class:`~disquette.integrations.keyed.KeyedStore` (a job per key, at the key's
home node, under Celery's key names: ``celery-task-meta-<task id>``), kept for
``result_expires`` (the job's TTL) and replicated like any job. A ready state
(SUCCESS, FAILURE, REVOKED) is added with PRIORITY 9, others with 1, so a peek
sees the final state first. ``AsyncResult.get()`` blocks on the cluster: GETJOB
TIMEOUT at the key's home node wakes when the state is stored, instead of
Celery's polling every half second.

**Chords without polling.** ``apply_chord`` adds one *slot* job per header task
(key ``celery-chord-slot-<task id>``) and publishes Celery's own
``celery.chord_unlock`` task through the transport with ``AFTER`` every slot:
the cluster queues it once every slot is acknowledged, exactly once, wherever
the members ran. A header task acknowledges its slot when it returns
(``on_chord_part_return``, after its result is stored), so the unlock task finds
the group ready at its first look and calls the body with the results. A slot
that expires unacknowledged (``result_chord_expires``) releases the unlock task
anyway (IFGONE release), which then waits for the group as Celery does. A
header of more than 256 tasks (the most ``AFTER`` takes) or with groups nested in
it uses Celery's polling ``chord_unlock`` unchanged; so does a chord whose broker
is not disquette.

Options (``result_backend_transport_options``): ``replicate`` (copies of each
value, default the server's), ``socket_timeout``, ``wait_slice`` (the longest
single blocking read, default 1 s).
"""

from __future__ import annotations

import time
from typing import Any

from celery import states
from celery.backends.base import KeyValueStoreBackend
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import ResultSet
from kombu.utils.encoding import bytes_to_str

from disquette.integrations.keyed import KeyedStore
from disquette.integrations.url import ClusterURL

#: The most AFTER IDs one job takes (docs/coordination.md).
MAX_AFTER = 256
#: Seconds a chord slot's copy waits before it is queued again on another node when
#: its home node fails.
SLOT_RETRY = 5


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
        self.cluster = ClusterURL.parse(
            url or conf.get("result_backend") or "disque://127.0.0.1:7711"
        )
        self.client = self.cluster.client(socket_timeout=options.get("socket_timeout", 10.0))
        self.store = KeyedStore(self.client, options.get("replicate"))
        self.wait_slice = float(options.get("wait_slice", 1.0))
        self._disque_broker: bool | None = None

    # ------------------------------------------------------------- key-value store

    @property
    def _ttl(self) -> int:
        expires = self.expires
        return int(expires) if expires else 30 * 86400

    def _set_with_state(self, key: bytes, value: Any, state: str) -> None:
        self.store.put(key, value, self._ttl, 9 if state in states.READY_STATES else 1)

    def set(self, key: bytes, value: Any) -> None:
        self._set_with_state(key, value, states.SUCCESS)

    def get(self, key: bytes) -> bytes | None:
        return self.store.peek(key)

    def mget(self, keys: list[bytes]) -> list[bytes | None]:
        return [self.store.peek(key) for key in keys]

    def delete(self, key: bytes) -> None:
        self.store.take(key)

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
            left = self.wait_slice if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise CeleryTimeoutError("The operation timed out.")
            if meta["status"] != states.PENDING:
                time.sleep(min(interval, left))
            else:
                self.store.wait(key, min(left, self.wait_slice))

    # ------------------------------------------------------------- chords

    def apply_chord(self, header_result_args: Any, body: Any, **kwargs: Any) -> None:
        self.ensure_chords_allowed()
        header_result = self.app.GroupResult(*header_result_args)
        members = [r.id for r in header_result.results]
        nested = any(isinstance(r, ResultSet) for r in header_result.results)
        if nested or not members or len(members) > MAX_AFTER or not self._broker_is_disque():
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
        ttl = int(self.chord_expires or self._ttl)
        return self.store.put(
            self._slot_key(task_id), b"", ttl, retry=SLOT_RETRY, keep_previous=True
        )

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
            taken, home_answered = self.store.take(key)
            if taken or home_answered or time.monotonic() > deadline:
                return  # no slot at a reachable home: a polling chord, or a member run twice
            self.store.refresh()
            time.sleep(0.5)

    def _slot_key(self, task_id: str) -> bytes:
        return (self.chord_slot_prefix + bytes_to_str(task_id)).encode()

    def _broker_is_disque(self) -> bool:
        if self._disque_broker is None:
            with self.app.connection_for_write() as conn:
                self._disque_broker = getattr(conn.transport, "driver_type", None) == "disque"
        return self._disque_broker

    def as_uri(self, include_password: bool = False) -> str:
        return self.cluster.display(include_password)
