"""What became of a job, kept after it is gone: ACKJOB's RESULT, CANCEL and WAITJOB
(beyond Disque).

Disque forgets a job once its acknowledgement is collected, which takes a few
milliseconds. Three features need to know more, for a while:

* ``ACKJOB id RESULT value`` acknowledges a job with a small result (up to
  :data:`MAX_RESULT` bytes);
* ``CANCEL id ...`` cancels jobs: a queued job leaves its queue everywhere, and a
  job being worked on is flagged, so that the worker's next ``WORKING`` gets
  ``-CANCELLED`` and it stops;
* ``WAITJOB id [TIMEOUT ms]`` waits until a job is acknowledged, anywhere, and
  returns its outcome and result.

An *outcome* (acknowledged with a result, or cancelled) is recorded on the node
where it happens and sent at once (``OUTCOME``) to the job's other holders -- to
every linked node when this node holds no copy -- and to the nodes watching it
(below). Every node keeps the outcomes it hears of for ``result-ttl`` seconds
(in memory, counted against maxmemory: above 95 % of it the oldest are
forgotten first), after the job itself is collected. A
cancellation then acknowledges the job, so Disque's own acknowledgement and its
garbage collection remove every copy: nothing cancelled is ever delivered again
once the cancellation reached its holder, and a job that was acknowledged first
stays acknowledged (its CANCEL counts 0).

WAITJOB rides on the dependency protocol (core/dependency.py), which already
learns, across the cluster and through failures, when a job is acknowledged: a
waiting client is one more waiter of that job's wait, beside the jobs added
``AFTER`` it. A node holding the job watches it itself; another asks every node
(``DEPQUERY``, again at growing intervals while unsettled), and the holders push
the news the moment they acknowledge it, their ``OUTCOME`` first, so the result
arrives before the settlement. The answer is ``[outcome, result]``: ``acked``
(with the result, or nil), ``cancelled``, ``gone`` (expired or deleted without
an acknowledgement), or ``unknown`` when every known node answered that it does
not know the job (it was acknowledged and collected without a result kept, or
never existed); nil when the timeout passes first. A waiter is never answered
before the acknowledgement: every answer comes from a node that saw it (or saw
the job go).

For a dependency, a cancelled job is gone, not acknowledged: jobs added
``AFTER`` it fail unless added with ``IFGONE release``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Final

from disquette.core import messages as msg
from disquette.core import replies
from disquette.core.client import BLOCK_WAITJOB
from disquette.core.errors import DisqueError
from disquette.core.ids import is_valid
from disquette.core.job import ACKED, ACTIVE, QUEUED
from disquette.core.memory import DICT_ENTRY, block_size, bytes_cost
from disquette.core.messages import Message

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.core.job import Job
    from disquette.core.node import Node

# Outcome kinds (the OUTCOME message's flags: a kind, maybe with HAS_RESULT).
ACKED_OUTCOME: Final = 1
CANCELLED: Final = 2
HAS_RESULT: Final = 4
MAX_RESULT: Final = 65536

CANCELLED_ERROR: Final = replies.error("CANCELLED Job was cancelled")
RESULT_TOO_LONG: Final = replies.err(f"RESULT must be at most {MAX_RESULT} bytes")

#: WAITJOB's answers other than from a record.
ACKED_REPLY: Final[bytes] = replies.outcome(b"acked")
GONE_REPLY: Final[bytes] = replies.outcome(b"gone")
UNKNOWN_REPLY: Final[bytes] = replies.outcome(b"unknown")
CANCELLED_REPLY: Final[bytes] = replies.outcome(b"cancelled")
_RECORD: Final = DICT_ENTRY + block_size(40 + 3 * 8) + bytes_cost(40)

Record = tuple[int, bytes | None, int]  # (kind, result, forgotten at ms)


def install(node: Node) -> None:
    node.message_handlers[msg.OUTCOME] = on_outcome


class Outcomes:
    """The outcomes this node knows, oldest first, and its counters."""

    def __init__(self, node: Node) -> None:
        self.node = node
        # Oldest first. An OrderedDict, not a dict: a dict emptied from its front keeps the
        # holes there, and finding its first entry walks them (quadratic over a burst).
        self.records: OrderedDict[bytes, Record] = OrderedDict()
        self.cancelled = 0  # CANCELs of jobs held here
        self.results = 0  # results recorded here (ACKJOB RESULT)
        self.evicted = 0  # outcomes forgotten early, the node's memory above 95 %

    def __len__(self) -> int:
        return len(self.records)

    def get(self, job_id: bytes) -> Record | None:
        records = self.records
        return records.get(job_id) if records else None

    def is_cancelled(self, job_id: bytes) -> bool:
        record = self.get(job_id)
        return record is not None and record[0] == CANCELLED

    def record(self, job_id: bytes, kind: int, result: bytes | None) -> None:
        """Keep an outcome for result-ttl seconds (a cancellation is not replaced by a
        later acknowledgement: it came first)."""
        node = self.node
        old = self.records.pop(job_id, None)
        if old is not None:
            node.used_memory -= _cost(old)
            if old[0] == CANCELLED:
                kind, result = CANCELLED, None
        until = node.clock() + node.settings.result_ttl * 1000
        new = self.records[job_id] = (kind, result, until)
        node.used_memory += _cost(new)
        if node.memory_level() >= 2:
            self._shed()

    def _shed(self) -> None:
        """Memory above 95 % of maxmemory: forget the oldest outcomes until it is below
        (or only the newest is left), so that results cannot outgrow memory."""
        node = self.node
        records = self.records
        while len(records) > 1 and node.memory_level() >= 2:
            node.used_memory -= _cost(records.popitem(last=False)[1])
            self.evicted += 1

    def cron(self, now: int) -> None:
        """Forget the outcomes whose time is over (oldest first: a changed result-ttl
        only delays a few)."""
        records = self.records
        while records:
            job_id, record = next(iter(records.items()))
            if record[2] > now:
                break
            del records[job_id]
            self.node.used_memory -= _cost(record)

    def clear(self) -> None:
        self.records = OrderedDict()


def _cost(record: Record) -> int:
    result = record[1]
    return _RECORD + (0 if result is None else bytes_cost(len(result)))


def reply_of(record: Record) -> bytes:
    """WAITJOB's answer for a recorded outcome."""
    kind, result, _ = record
    if kind == CANCELLED:
        return CANCELLED_REPLY
    if result is None:
        return ACKED_REPLY
    return replies.outcome(b"acked", result)


def message_of(job_id: bytes, record: Record) -> Message:
    """The OUTCOME message of a record."""
    kind, result, _ = record
    return (msg.OUTCOME, job_id, kind if result is None else kind | HAS_RESULT, result or b"")


def tell(node: Node, job_id: bytes, job: Job | None) -> None:
    """Send the outcome recorded here to the job's other holders, or to every linked
    node when this node holds no copy."""
    message = message_of(job_id, node.outcomes.records[job_id])
    targets = node.linked_nodes() if job is None else job.nodes_delivered
    me = node.myself
    for node_id in targets:
        if node_id != me:
            node.send(node_id, message)


def tell_before_ack(node: Node, node_id: bytes, job_ids: list[bytes]) -> None:
    """SETACKs of ``job_ids`` go to ``node_id`` now (core/acks.py): the outcomes recorded
    here of those jobs go first, so that the holder acknowledging its copy knows what
    the acknowledgement was, even when the OUTCOME sent at the time was lost."""
    records = node.outcomes.records
    for job_id in job_ids:
        record = records.get(job_id)
        if record is not None:
            node.send(node_id, message_of(job_id, record))


def acknowledged_with(node: Node, results: dict[bytes, bytes]) -> None:
    """ACKJOB RESULT: record each result and send it, before the acknowledgement
    itself (whose news to the watchers must find the result there)."""
    for job_id, result in results.items():
        job = node.jobs.get(job_id)
        if job is not None and job.state == ACKED:
            continue  # acknowledged already: its outcome stands
        node.outcomes.record(job_id, ACKED_OUTCOME, result)
        node.outcomes.results += 1
        tell(node, job_id, job)


def cancel(node: Node, job_ids: list[bytes]) -> int:
    """CANCEL: the jobs not acknowledged yet are cancelled and acknowledged; how many
    of them this node held. An unknown job is cancelled too (its holders hear it)."""
    count = 0
    for job_id in job_ids:
        job = node.jobs.get(job_id)
        if job is not None and job.state == ACKED:
            continue
        node.outcomes.record(job_id, CANCELLED, None)
        tell(node, job_id, job)
        if job is not None:
            count += 1
            node.outcomes.cancelled += 1
        node.ack_jobs((job_id,))
    return count


def check_working(node: Node, job_id: bytes) -> None:
    """WORKING on a cancelled job: -CANCELLED, so that its worker stops."""
    if node.outcomes.is_cancelled(job_id):
        raise DisqueError(CANCELLED_ERROR)


def on_outcome(node: Node, sender: bytes, message: Message) -> None:
    """A job's outcome from another node: keep it, acknowledge a cancelled copy held
    here, and settle what waits for the job here."""
    job_id, flags, result = message[1], message[2], message[3]
    kind = flags & 3
    if kind not in (ACKED_OUTCOME, CANCELLED) or not is_valid(job_id) or len(result) > MAX_RESULT:
        return
    node.outcomes.record(job_id, kind, result if flags & HAS_RESULT else None)
    job = node.jobs.get(job_id)
    if kind == CANCELLED and job is not None and job.state in (ACTIVE, QUEUED):
        node.acknowledge(job)
    elif job_id in node.deps.waits:
        node.deps.settle_outcome(job_id)


def waitjob(node: Node, client: Client, job_id: bytes, timeout_ms: int) -> bytes | None:
    """WAITJOB: the answer now, or None with the client blocked until the job's wait
    settles (or its deadline passes: nil)."""
    record = node.outcomes.get(job_id)
    if record is not None:
        return reply_of(record)
    deps = node.deps
    answer = deps.answer_now(job_id)
    if answer is not None:
        return answer
    deps.wait_client(job_id, client)
    client.blocked = BLOCK_WAITJOB
    client.block_job = job_id
    client.block_deadline = node.clock() + timeout_ms if timeout_ms else 0
    node.blocked_clients[client] = None
    return None
