"""A workflow's state and progress, read from the cluster: what each of its jobs became.

A workflow's record (client/workflow_record.py) names its jobs; this module says where
each one is: **waiting** (for the jobs it is added ``AFTER``), **queued**, **active**
(delivered to a worker, or delayed), or finished: **succeeded**, **failed**
(acknowledged without a result: dead-lettered, rejected, a step skipped), **cancelled**,
**gone** (expired or deleted without an acknowledgement) or **unknown** (no node
remembers: its outcome outlived ``result-ttl``). A member or a step is acknowledged
with its return value, JSON (tasks/workflow.py), so a result marks success; a join job
is acknowledged without one, so any acknowledgement is its success.

**Reading**, from the cheapest exact sources, every step pipelined:

1. ``SHOW`` of every job on every node (one pipeline a node): the copies still live
   and their state. A job acknowledged on any node is finished (an acknowledgement is
   final); otherwise the most advanced live copy counts (queued, then active, then
   waiting, then one still being replicated).
2. ``WAITJOB id TIMEOUT 1`` of each finished job, to the node that created it (one
   pipeline a node): the outcome every holder of a job keeps ``result-ttl`` seconds
   (the result, ``cancelled``, ``gone``). With a 1 ms timeout a node without the
   outcome answers nil at once rather than asking the others. Nothing is kept of a
   job acknowledged without a result that nothing waited on (a group's member or a
   step dead-lettered), nor of one past ``result-ttl``: a job without an outcome is
   **failed** while the workflow is younger than ``result-ttl`` (``CONFIG GET``, one
   command; a member that succeeded would have its result kept), **unknown** after.

The cost is ``jobs x nodes`` SHOWs and one WAITJOB per finished job: for a chord of
10,000 members on three nodes, 30,000 SHOWs and up to 10,000 WAITJOBs, in pipelines of
:data:`WINDOW`, one node after the other (a few hundred milliseconds). Callers that
show many workflows read them within a budget (observe/workflows.py). A node that does
not answer is listed in ``unanswered``; its copies are missing from the reading, so a
job only it holds reads as finished and unknown.

Every reading is a client *plan* (client/calls.py), so the sync client, the asyncio
client, the node's HTTP port (observe/workflows.py) and the CLI run the same code:
``client.call(read(nodes, record))``. ``nodes`` maps each node's ID to its address;
:func:`cluster` reads it with HELLO.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from disquette.client import commands
from disquette.client.calls import Command, Compound, Context, Pipelined, Plan
from disquette.client.errors import DisqueError
from disquette.client.models import JobInfo, JobOutcome
from disquette.client.topology import format_address, parse_address
from disquette.client.workflow_record import QUEUE, Job, Record, RecordError

#: A job's states, pending then finished, in the order counts are shown.
PENDING: Final = ("waiting", "queued", "active")
FINISHED: Final = ("succeeded", "failed", "cancelled", "gone", "unknown")
STATES: Final = PENDING + FINISHED
#: SHOW's state of a live copy, most advanced first.
_LIVE_ORDER: Final = {"queued": 0, "active": 1, "waiting": 2, "wait-repl": 3}
_LIVE_STATE: Final = {"queued": "queued", "active": "active", "waiting": "waiting",
                      "wait-repl": "queued"}  # fmt: skip
#: A workflow's state: the first whose job states one of its jobs is in (else succeeded).
_OVERALL: Final = (("running", PENDING), ("cancelled", ("cancelled",)),
                   ("failed", ("failed", "gone")), ("unknown", ("unknown",)))  # fmt: skip
#: The server's default ``result-ttl`` (seconds).
DEFAULT_RESULT_TTL: Final = 3600
#: Commands in flight on one connection.
WINDOW: Final = 256
#: WAITJOB's timeout (ms): long enough for a node to answer from what it keeps.
WAIT_MS: Final = 1
#: Jobs a JSCAN step returns at most (it examines ten times as many).
SCAN_COUNT: Final = 1000
#: Bytes of a result a job's state keeps.
RESULT_PREVIEW: Final = 1000
#: CANCEL takes this many IDs at once.
CANCEL_CHUNK: Final = 256


@dataclass(frozen=True, slots=True)
class JobState:
    """What became of one job: its state and, when it succeeded, its result (JSON text)."""

    job: Job
    state: str
    result: str | None = None

    def as_json(self) -> dict[str, Any]:
        job = self.job
        result = self.result
        if result is not None and len(result) > RESULT_PREVIEW:
            result = result[:RESULT_PREVIEW] + "…"
        return {"id": job.id, "role": job.role, "task": job.task, "state": self.state,
                "result": result}  # fmt: skip


@dataclass(slots=True)
class Reading:
    """A workflow's record and its jobs' states (in the record's order), and the
    nodes that did not answer."""

    record: Record
    jobs: list[JobState]
    unanswered: list[str]

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATES, 0)
        for job in self.jobs:
            counts[job.state] += 1
        return counts

    @property
    def state(self) -> str:
        """``running`` while a job is pending; then ``cancelled`` if one was, ``failed``
        if one failed or is gone, ``unknown`` if an outcome is forgotten, else
        ``succeeded``."""
        counts = self.counts()
        for overall, states in _OVERALL:
            if any(counts[s] for s in states):
                return overall
        return "succeeded"

    @property
    def result(self) -> Any:
        """The workflow's result once finished: the last step's (or a group's members',
        in order) return value; None when it has none."""
        if self.state == "running":
            return None
        if self.record.steps:
            last = self.jobs[-1]
            return None if last.result is None else json.loads(last.result)
        members = self.jobs[: len(self.record.members)]
        return [None if j.result is None else json.loads(j.result) for j in members]

    def summary(self, now_ms: int) -> dict[str, Any]:
        """The workflow without its jobs: record, counts, percent done, state, result."""
        counts = self.counts()
        total = len(self.jobs)
        done = sum(counts[s] for s in FINISHED)
        return {
            **describe(self.record, now_ms),
            "state": self.state,
            "counts": counts,
            "done": done,
            "percent": 100 if total == 0 else int(100 * done / total),
            "result": _preview(self.result) if self.state != "running" else None,
            "failed": [j.job.id for j in self.jobs if j.state in ("failed", "gone")][:10],
            "unanswered": self.unanswered,
        }


def _preview(value: Any) -> Any:
    """A result as JSON shows it, cut when long (a group's results may be many)."""
    text = json.dumps(value, ensure_ascii=False)
    return value if len(text) <= RESULT_PREVIEW else text[:RESULT_PREVIEW] + "…"


def describe(record: Record, now_ms: int) -> dict[str, Any]:
    """A record's fields as the API shows them (its jobs counted, not listed)."""
    return {
        "id": record.id,
        "kind": record.kind,
        "name": record.name,
        "created": record.created,
        "age": max(0, now_ms - record.created) // 1000,
        "on_failure": record.on_failure,
        "members": len(record.members),
        "joins": len(record.joins),
        "steps": [{"id": s.id, "task": s.task, "role": s.role} for s in record.steps],
        "jobs": record.size,
    }


# ------------------------------------------------------------------------ plans


def _pinned(ctx: Context, address: str) -> Context:
    return dataclasses.replace(ctx, pinned=parse_address(address))


def _on_each(
    ctx: Context, nodes: Mapping[str, str], calls: Sequence[Command[Any]]
) -> Plan[tuple[dict[str, list[Any]], list[str]]]:
    """``calls`` pipelined on every node: each node's replies (an exception in place of a
    failed one), and the nodes that could not be reached."""
    replies: dict[str, list[Any]] = {}
    unanswered: list[str] = []
    for node_id, address in nodes.items():
        pipeline = Pipelined(calls, WINDOW, raise_on_error=False)
        try:
            replies[node_id] = yield from pipeline.plan(_pinned(ctx, address))
        except (DisqueError, OSError):
            unanswered.append(node_id)
    return replies, unanswered


def _finished_state(job: Job, outcome: Any, forgotten: str) -> JobState:
    """A finished job's state from its outcome; ``forgotten``: when it has none."""
    if not _kept(outcome):
        return JobState(job, forgotten)
    if outcome.outcome == "acked":
        if job.role == "join":
            return JobState(job, "succeeded")
        if outcome.result is None:
            return JobState(job, "failed")
        return JobState(job, "succeeded", outcome.result.decode(errors="replace"))
    return JobState(job, outcome.outcome)  # (cancelled or gone)


def _kept(outcome: Any) -> bool:
    """Whether a WAITJOB's answer says what became of the job."""
    return isinstance(outcome, JobOutcome) and outcome.outcome != "unknown"


def _result_ttl(ctx: Context) -> Plan[int]:
    """The cluster's ``result-ttl`` (seconds), as a node says (its default when it
    does not: a user who may not run CONFIG)."""
    try:
        reply = yield from commands.execute("CONFIG", "GET", "result-ttl").plan(ctx)
        return int(reply[1])
    except (DisqueError, OSError, IndexError, ValueError):
        return DEFAULT_RESULT_TTL


def states(nodes: Mapping[str, str], record: Record) -> Compound[tuple[list[JobState], list[str]]]:
    """The states of the record's jobs (in its order), and the nodes that did not answer."""
    jobs = list(record.jobs())

    def plan(ctx: Context) -> Plan[tuple[list[JobState], list[str]]]:
        ids = [job.id for job in jobs]
        replies, unanswered = yield from _on_each(ctx, nodes, [commands.show(i) for i in ids])
        live: dict[str, str] = {}
        acked: set[str] = set()
        for shown in replies.values():
            for job_id, info in zip(ids, shown, strict=True):
                if not isinstance(info, JobInfo):
                    continue
                if info.state == "acked":
                    acked.add(job_id)
                elif info.state in _LIVE_ORDER and (
                    job_id not in live or _LIVE_ORDER[info.state] < _LIVE_ORDER[live[job_id]]
                ):
                    live[job_id] = info.state
        finished = [i for i in ids if i in acked or i not in live]
        # (those a node did not give read as forgotten)
        outcomes = yield from commands.waited_by_node(ctx, finished, WAIT_MS / 1000, WINDOW)
        forgotten = "unknown"
        if any(not _kept(outcomes.get(i)) for i in finished):
            ttl = yield from _result_ttl(ctx)
            if time.time() * 1000 - record.created < ttl * 1000:
                forgotten = "failed"
        found = [
            _finished_state(job, outcomes.get(job.id), forgotten)
            if job.id in acked or job.id not in live
            else JobState(job, _LIVE_STATE[live[job.id]])
            for job in jobs
        ]
        return found, unanswered

    return Compound(plan)


def find(nodes: Mapping[str, str], workflow_id: str) -> Compound[tuple[Record | None, list[str]]]:
    """The record of the workflow ``workflow_id`` from the first node holding it (None:
    no node that answered holds one), and the nodes that did not answer."""

    def plan(ctx: Context) -> Plan[tuple[Record | None, list[str]]]:
        replies, unanswered = yield from _on_each(ctx, nodes, [commands.show(workflow_id)])
        for (info,) in replies.values():
            if isinstance(info, JobInfo) and info.queue == QUEUE and info.state != "acked":
                try:
                    return Record.decode(info.body or b"", info.id), unanswered
                except RecordError:
                    break
        return None, unanswered

    return Compound(plan)


def read(nodes: Mapping[str, str], workflow_id: str) -> Compound[Reading | None]:
    """The workflow ``workflow_id``: its record and every job's state (None: no record
    on any node that answered)."""

    def plan(ctx: Context) -> Plan[Reading | None]:
        record, missing = yield from find(nodes, workflow_id).plan(ctx)
        if record is None:
            return None
        found, unanswered = yield from states(nodes, record).plan(ctx)
        return Reading(record, found, sorted({*missing, *unanswered}))

    return Compound(plan)


def records(nodes: Mapping[str, str], limit: int) -> Compound[tuple[list[Record], list[str], bool]]:
    """Every workflow record of every node that answers, once each (by ID), newest
    first; the nodes that did not answer; whether a node held more than ``limit``
    (then only that many of its records are read)."""

    def plan(ctx: Context) -> Plan[tuple[list[Record], list[str], bool]]:
        found: dict[str, Record] = {}
        gone: set[str] = set()
        unanswered: list[str] = []
        truncated = False
        for node_id, address in nodes.items():
            scan = commands.jscan(queue=QUEUE, reply="all", count=SCAN_COUNT)
            pinned = _pinned(ctx, address)
            read_here = 0
            try:
                while not scan.done and read_here < limit:
                    items: list[JobInfo] = yield from scan.plan(pinned)
                    read_here += len(items)
                    _collect(items, found, gone)
            except (DisqueError, OSError):
                unanswered.append(node_id)
                continue
            truncated |= not scan.done
        listed = [r for job_id, r in found.items() if job_id not in gone]
        listed.sort(key=sort_key)
        return listed, unanswered, truncated

    return Compound(plan)


def _collect(items: Iterable[JobInfo], found: dict[str, Record], gone: set[str]) -> None:
    for info in items:
        if info.state == "acked":
            gone.add(info.id)  # (deleted: on its way out of every node)
        elif info.id not in found:
            try:
                found[info.id] = Record.decode(info.body or b"", info.id)
            except RecordError:
                continue  # (not ours: someone else's job in the reserved queue)


def sort_key(record: Record) -> tuple[int, str]:
    """Newest first, then by ID."""
    return (-record.created, record.id or "")


def cancel(job_ids: Sequence[str]) -> Compound[int]:
    """CANCEL every job of ``job_ids`` not finished yet; how many the nodes held."""

    def plan(ctx: Context) -> Plan[int]:
        total = 0
        for i in range(0, len(job_ids), CANCEL_CHUNK):
            total += yield from commands.cancel(*job_ids[i : i + CANCEL_CHUNK]).plan(ctx)
        return total

    return Compound(plan)


def cluster() -> Compound[dict[str, str]]:
    """The cluster's nodes, ``{id: "host:port"}``, as HELLO tells them."""

    def plan(ctx: Context) -> Plan[dict[str, str]]:
        hello = yield from commands.hello().plan(ctx)
        answered = ctx.pinned or ctx.topology.current  # (its host, for a node without one)
        host = answered[0] if answered else "127.0.0.1"
        return {n.id: format_address((n.host or host, n.port)) for n in hello.nodes}

    return Compound(plan)
