"""Progress logs: what a worker says about a job while it runs (WORKING id text,
JOBLOG; beyond Disque).

``WORKING id text`` postpones the job's requeue as Disque's WORKING does and also
appends ``(unix ms, this node's ID, text)`` to the job's log, kept in its
:class:`~disquette.core.job.Extra`, in the AOF (the job's record is written again)
and on every holder. A log is bounded (:data:`MAX_ENTRIES` entries of at most
:data:`MAX_TEXT` bytes) so that a job cannot grow without limit.

Why the logs of all holders converge. A log is a set of entries kept sorted by
(time, node, text): merging two logs is their union, so the order in which
entries arrive does not matter, and past the bound every node keeps the same
first :data:`MAX_ENTRIES`. A node whose log grows (an append here, or a merge
that brought news) sends its whole log (PROGRESS) to the job's other holders and
keeps sending it, once a second, to those that have not confirmed (GOTPROGRESS
with the size of their merged log, at least what was sent) while they and the
job live. A receiver that had entries the sender lacked sends its log back. So
every entry reaches, through any holder that has it, every holder that can be
reached, however the partitions came and went. Who confirmed is not kept in the
AOF: a job reloaded with a log is sent again to all its other holders; and a
holder learned of later (an ASYNC job's AOF record names no replica, federation
and repair make copies elsewhere) is sent the log as one that has not confirmed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.core import messages as msg
from disquette.core import replies
from disquette.core.errors import DisqueError
from disquette.core.job import ACKED, Job, LogEntry
from disquette.core.messages import Message

if TYPE_CHECKING:
    from disquette.core.node import Node

MAX_ENTRIES: Final = 64
MAX_TEXT: Final = 1024
RESEND_EVERY: Final = 1000  # ms
MAX_TIME: Final = 1 << 62  # entries from a peer outside [0, MAX_TIME) are dropped

LOG_FULL: Final = replies.error(f"LOGFULL The job's progress log is full ({MAX_ENTRIES} entries)")
TEXT_TOO_LONG: Final = replies.err(f"progress text longer than {MAX_TEXT} bytes")
TEXT_EMPTY: Final = replies.err("empty progress text")


def install(node: Node) -> None:
    handlers = node.message_handlers
    handlers[msg.PROGRESS] = on_progress
    handlers[msg.GOTPROGRESS] = on_gotprogress


def check_text(text: bytes) -> None:
    if not text:
        raise DisqueError(TEXT_EMPTY)
    if len(text) > MAX_TEXT:
        raise DisqueError(TEXT_TOO_LONG)


def append(node: Node, job: Job, text: bytes) -> None:
    """WORKING's text: a new entry in the job's log, sent to its other holders."""
    check_text(text)
    extra = node.extra_of(job)
    log = extra.log
    if log is not None and len(log) >= MAX_ENTRIES:
        raise DisqueError(LOG_FULL)
    before = node.extra_size(job)
    extra.log = merge(log, [(node.clock(), node.myself, text)])
    node.extra_changed(job, before)
    grown(node, job, ())


def merge(log: list[LogEntry] | None, entries: list[LogEntry]) -> list[LogEntry]:
    """The union of a log and entries, sorted, cut to the bound."""
    merged = set(entries)
    if log is not None:
        merged.update(log)
    return sorted(merged)[:MAX_ENTRIES]


def grown(node: Node, job: Job, informed: tuple[bytes, ...]) -> None:
    """A job's log grew here: keep it (AOF) and send it to the other holders but
    ``informed`` (who already have all of it)."""
    node.persist(job)
    log = job.extra.log  # type: ignore[union-attr]
    count = len(log)  # type: ignore[arg-type]
    pending = node.progress_pending.setdefault(job.id, {})
    message = (msg.PROGRESS, job.id, flatten(log))  # type: ignore[arg-type]
    me = node.myself
    for node_id in job.nodes_delivered:
        if node_id != me and node_id not in informed:
            pending[node_id] = count
            node.send(node_id, message)
    if not pending:
        del node.progress_pending[job.id]


def reloaded(node: Node, job: Job) -> None:
    """A job with a log was read from the AOF: none of its other holders is known to
    have confirmed it, so the cron sends it to each of them."""
    count = len(job.extra.log)  # type: ignore[union-attr, arg-type]
    pending = {n: count for n in job.nodes_delivered if n != node.myself}
    if pending:
        node.progress_pending[job.id] = pending


def new_holders(node: Node, job: Job, added: tuple[bytes, ...]) -> None:
    """Holders of a job with a log were just learned of: the cron sends them the log
    until they confirm it."""
    count = len(job.extra.log)  # type: ignore[union-attr, arg-type]
    pending = node.progress_pending.setdefault(job.id, {})
    me = node.myself
    for node_id in added:
        if node_id != me:
            pending[node_id] = count
    if not pending:
        del node.progress_pending[job.id]


def flatten(log: list[LogEntry]) -> tuple[int | bytes, ...]:
    return tuple(item for entry in log for item in entry)


def on_progress(node: Node, sender: bytes, message: Message) -> None:
    """Another holder's log: merge it, confirm, and pass on what it brought."""
    job = node.jobs.get(message[1])
    if job is None or job.state == ACKED:
        return
    flat = message[2]
    entries = [
        (flat[i], flat[i + 1], flat[i + 2])
        for i in range(0, len(flat), 3)
        if 0 <= flat[i] < MAX_TIME and len(flat[i + 2]) <= MAX_TEXT
    ]
    extra = node.extra_of(job)
    old = extra.log or []
    merged = merge(old, entries)
    node.send(sender, (msg.GOTPROGRESS, job.id, len(merged)))
    if merged != old:
        before = node.extra_size(job)
        extra.log = merged
        node.extra_changed(job, before)
        sender_complete = set(entries) >= set(merged)
        grown(node, job, (sender,) if sender_complete else ())


def on_gotprogress(node: Node, sender: bytes, message: Message) -> None:
    pending = node.progress_pending.get(message[1])
    if pending is not None and pending.get(sender, 1 << 62) <= message[2]:
        del pending[sender]
        if not pending:
            del node.progress_pending[message[1]]


def cron(node: Node, now: int) -> None:
    """Send the logs not confirmed yet again, once a second."""
    if not node.progress_pending or now < node.progress_resend_at:
        return
    node.progress_resend_at = now + RESEND_EVERY
    jobs = node.jobs
    for job_id, pending in list(node.progress_pending.items()):
        job = jobs.get(job_id)
        if job is None or job.state == ACKED or job.extra is None or not job.extra.log:
            del node.progress_pending[job_id]
            continue
        message = (msg.PROGRESS, job_id, flatten(job.extra.log))
        for node_id in pending:
            node.send(node_id, message)
