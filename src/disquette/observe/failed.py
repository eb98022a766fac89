"""Failed jobs: the cluster's dead letters read as records, filtered, retried, deleted.

The dashboard's page of failed jobs, its JSON API (http/api.py) and ``disquette
failed`` (cli/failed.py) all go through this module, so they read, filter and act
alike.

**What a failed job is.** A job that failed for good is a *dead letter*: a job of a
dead-letter queue, made in one of two ways, and :class:`FailedJob` reads either:

* by a queue policy (core/deadletter.py): the original body as it was, and SHOW's
  ``origin-id``, ``origin-queue``, ``origin-nacks`` and
  ``origin-additional-deliveries`` (its reason is ``queue policy``);
* by a worker (client/dead_letter.py's ``DeadLetter``): a body that wraps the original one
  with its origin, its counters, the reason and the handler's traceback.

When the original body is a task message (client/task_body.py), its task is named. A
job of a dead-letter queue that is neither is listed with an unknown origin: it can be
deleted, not retried. The dead-letter queues are every policy's ``deadletter`` queue
(QPOLICY LIST), the task API's ``dead-letters``, and any queue the caller names
(:attr:`Filter.dead_letter_queues`, which then narrows the reading to those). Both
formats are the client's (client/dead_letter.py, client/task_body.py): a node reads
them without loading the worker or the task API.

**Reading** (:func:`read`) asks every node at once, each for the copies it holds:
``JSCAN QUEUE q REPLY all`` per dead-letter queue, step after step until the scan
ends. A dead letter held by three nodes comes three times and is listed once (by ID),
with the nodes that hold it, whatever its state (one that a consumer of the
dead-letter queue holds is listed too), unless a node that answered has it
acknowledged: an acknowledgement is final, and on its way to the other holders (so a
job just retried or deleted is not listed again). JSCAN has no per-queue index: each
node walks its whole job registry, at most ``10 * SCAN_COUNT`` jobs a step, serving
its other clients between steps. So the page is read when asked for, not polled every
second, and a node gives at most :data:`MAX_READ` dead letters per reading (the answer
then says ``truncated``). Nodes that do not answer are listed as ``unanswered`` and the
reading goes on without them. Failed jobs are listed newest first (the dead letter's
creation time, which is when the job was dead-lettered); a page's cursor is the last
job's time and ID, so that jobs retried meanwhile do not shift the next page.

**Retry** is ``ADDJOB <origin queue> <original body>`` with fresh counters (a new job,
with the origin queue's policy's defaults), replicated synchronously, then ``ACKJOB``
of the dead letter, which removes it from every node (a node without a copy spreads a
dummy ack). The ADDJOB carries the DEDUP key ``retry:<dead letter ID>``: a retry sent
twice (a lost answer, two operators at once) finds the first one's job on the node
that added it and adds nothing. An ADDJOB that cannot have its copies within
:data:`RETRY_TIMEOUT_MS` fails (NOREPL) and the dead letter stays. **Delete** is
``ACKJOB``. Actions go to one node (:attr:`Nodes.here`), as commands, so they get the
checks of any client (a restricted user's included); each job's outcome is reported
on its own, and one that fails does not stop the others.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from disquette.client.dead_letter import (
    DEAD_LETTER_MAGIC,
    DEFAULT_DEAD_LETTER_QUEUE,
    SERVER_REASON,
    DeadLetter,
)
from disquette.client.errors import DisqueError, ResponseError
from disquette.client.models import JobInfo, Policy
from disquette.client.task_body import BodyError, decode
from disquette.core.ids import is_valid
from disquette.observe.merge import name_bytes, name_text
from disquette.observe.pages import now_ms

#: Jobs a JSCAN step returns at most (it examines ten times as many).
SCAN_COUNT: Final = 1000
#: Dead-letter copies one node gives to one reading at most.
MAX_READ: Final = 10_000
#: Job IDs one action names at most.
MAX_IDS: Final = 1000
#: Milliseconds a retry's ADDJOB waits for its copies (a node is given 1 s to answer).
RETRY_TIMEOUT_MS: Final = 800
#: The DEDUP key of a retry is this and the dead letter's ID.
RETRY_KEY: Final = "retry:"
#: Bytes of the original body a record shows.
PREVIEW: Final = 200
#: Jobs looked up or acted on at once.
CONCURRENCY: Final = 8
#: SHOW's ctime is milliseconds times this (plus a counter).
CTIME_UNIT: Final = 1_000_000
_AGE = re.compile(r"(\d+(?:\.\d*)?)\s*([smhd]?)")
_UNITS: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

Run = Callable[..., Awaitable[Any]]
"""``run(address, *args)``: one command on the node at ``address``, its reply as
hiredis gives it; raises on an error reply, a timeout or a broken connection."""


@dataclass(frozen=True, slots=True)
class Nodes:
    """The cluster as the caller reaches it: ``addresses`` (each node's ID and
    ``host:port``: where dead letters are read), ``here`` (the node actions go to)."""

    addresses: Mapping[str, str]
    here: str
    run: Run


def _name(text: str, what: str) -> str:
    """A queue name as the API writes it (``~b64~`` for one that is not UTF-8), as the
    client spells names (UTF-8 with surrogate escapes)."""
    raw = name_bytes(text)
    if raw is None:
        raise ValueError(f"{what}: malformed ~b64~ queue name")
    return raw.decode("utf-8", "surrogateescape")


def _text(name: str | None) -> str | None:
    """A queue name as the API writes it."""
    return None if name is None else name_text(name.encode("utf-8", "surrogateescape"))


def age_seconds(value: object, what: str) -> float | None:
    """An age: seconds (a number, or text such as ``90``, ``30s``, ``5m``, ``2h``,
    ``1d``); None when not given."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _AGE.fullmatch(value.strip().lower()) if isinstance(value, str) else None
        if match is None:
            raise ValueError(f"{what} must be a duration: seconds, or 30s, 5m, 2h, 1d")
        seconds = float(match[1]) * _UNITS[match[2]]
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"{what} must be a duration of 0 seconds or more")
    return seconds


def task_of(body: bytes) -> str | None:
    """The task a body calls, when it is a task message."""
    try:
        return decode(body).task
    except BodyError:
        return None


def _worker_letter(body: bytes) -> DeadLetter | None:
    """A worker's dead letter, or None when the body is not one (or not a whole one)."""
    if not body.startswith(DEAD_LETTER_MAGIC):
        return None
    try:
        return DeadLetter.decode(body)
    except ValueError:
        return None


def _typed(value: Any, kind: type) -> Any:
    """A header's field when it has the right type (else None: a header written by
    another program may hold anything)."""
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class FailedJob:
    """One dead letter: its ID and queue, when it was made (``ctime``, SHOW's), how
    (``kind``: ``policy``, ``worker`` or ``unknown``), the nodes that hold it; and what
    it says of the job that failed: its queue and ID (``origin_*``, None when not
    known), its counters then, the ``reason`` and the ``error`` (a worker's traceback),
    its ``body`` and the ``task`` that body calls."""

    id: str
    queue: str
    ctime: int
    kind: str
    origin_queue: str | None
    origin_id: str | None
    nacks: int | None
    additional_deliveries: int | None
    reason: str
    error: str | None
    body: bytes
    task: str | None
    nodes: tuple[str, ...] = ()

    @classmethod
    def of(cls, info: JobInfo, nodes: Iterable[str] = ()) -> FailedJob:
        """The failed job a dead letter's SHOW tells of: a worker's from its body, a
        policy's from SHOW's origin fields."""
        body = info.body or b""
        mine = (info.id, info.queue or "", info.ctime)
        letter = _worker_letter(body)
        if letter is not None:
            return cls(
                *mine, "worker", _typed(letter.queue, str), _typed(letter.id, str),
                _typed(letter.nacks, int), _typed(letter.additional_deliveries, int),
                _typed(letter.reason, str) or "unknown", _typed(letter.error, str),
                letter.body, task_of(letter.body), tuple(nodes),
            )  # fmt: skip
        known = info.origin_id is not None
        return cls(
            *mine, "policy" if known else "unknown", info.origin_queue, info.origin_id,
            info.origin_nacks, info.origin_additional_deliveries,
            SERVER_REASON if known else "unknown origin", None, body, task_of(body), tuple(nodes),
        )  # fmt: skip

    @property
    def created_ms(self) -> int:
        return self.ctime // CTIME_UNIT

    def age(self, now: int) -> float:
        """Seconds since the job was dead-lettered."""
        return max(0, now - self.created_ms) / 1000

    def sort_key(self) -> tuple[int, str]:
        """Newest first, then by ID."""
        return (-self.ctime, self.id)

    def cursor(self) -> str:
        return f"{self.ctime}:{self.id}"

    def as_json(self, now: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "queue": _text(self.queue),
            "kind": self.kind,
            "origin_queue": _text(self.origin_queue),
            "origin_id": self.origin_id,
            "task": self.task,
            "reason": self.reason,
            "error": self.error,
            "nacks": self.nacks,
            "additional_deliveries": self.additional_deliveries,
            "ctime": self.created_ms,
            "age": int(self.age(now)),
            "body": self.body[:PREVIEW].decode(errors="replace"),
            "body_size": len(self.body),
            "nodes": list(self.nodes),
        }


@dataclass(frozen=True, slots=True)
class Filter:
    """Which failed jobs: read from ``dead_letter_queues`` (none named: every known
    one), from the origin ``queue``, of ``task``, whose reason or error holds
    ``error`` (any case), dead-lettered at least ``min_age`` and at most ``max_age``
    seconds ago."""

    dead_letter_queues: tuple[str, ...] = ()
    queue: str | None = None
    task: str | None = None
    error: str | None = None
    min_age: float | None = None
    max_age: float | None = None

    @classmethod
    def parse(cls, params: Mapping[str, Any]) -> Filter:
        """The filter of a request's parameters (``dlq``: a name or a list of names;
        ``queue``, ``task``, ``error``; ``min_age``, ``max_age``: see
        :func:`age_seconds`); ``ValueError`` saying what is wrong."""
        dlq = params.get("dlq") or []
        dlq = [dlq] if isinstance(dlq, str) else dlq
        texts = {k: params.get(k) or None for k in ("queue", "task", "error")}
        if not isinstance(dlq, list) or not all(isinstance(q, str) and q for q in dlq):
            raise ValueError("dlq must be a queue name or a list of queue names")
        for key, value in texts.items():
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{key} must be a string")
        min_age = age_seconds(params.get("min_age"), "min_age")
        max_age = age_seconds(params.get("max_age"), "max_age")
        if min_age is not None and max_age is not None and min_age > max_age:
            raise ValueError("min_age (older than) is above max_age (newer than): nothing matches")
        return cls(
            tuple(dict.fromkeys(_name(q, "dlq") for q in dlq)),
            None if texts["queue"] is None else _name(texts["queue"], "queue"),
            texts["task"],
            texts["error"],
            min_age,
            max_age,
        )

    def matches(self, job: FailedJob, now: int) -> bool:
        if self.queue is not None and job.origin_queue != self.queue:
            return False
        if self.task is not None and job.task != self.task:
            return False
        if self.error is not None:
            needle = self.error.casefold()
            if needle not in f"{job.reason}\n{job.error or ''}".casefold():
                return False
        age = job.age(now)
        if self.min_age is not None and age < self.min_age:
            return False
        return self.max_age is None or age <= self.max_age

    def select(self, jobs: Iterable[FailedJob], now: int) -> list[FailedJob]:
        return [job for job in jobs if self.matches(job, now)]


def check_ids(ids: object) -> list[str]:
    """The job IDs an action names; ``ValueError`` saying what is wrong."""
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or not ids:
        raise ValueError("ids must be a non-empty list of job IDs")
    if len(ids) > MAX_IDS:
        raise ValueError(f"at most {MAX_IDS} ids at once (or all, with filters)")
    bad = next((i for i in ids if not is_valid(i.encode(errors="replace"))), None)
    if bad is not None:
        raise ValueError(f"BADID Invalid Job ID format: {bad!r}")
    return list(dict.fromkeys(ids))


# --------------------------------------------------------------------------
# Reading.


@dataclass(slots=True)
class Listing:
    """Every failed job read, newest first; the known dead-letter queues (``known``)
    and the ones read; the nodes that did not answer; whether a node had more than
    :data:`MAX_READ`."""

    jobs: list[FailedJob]
    known: list[str]
    read: list[str]
    unanswered: list[str]
    truncated: bool

    def counts(self) -> dict[str, dict[str, int]]:
        """How many failed jobs per dead-letter queue, origin queue and task (for
        the page's choices)."""

        def tally(names: Iterable[str | None]) -> dict[str, int]:
            return dict(sorted(Counter(n for n in names if n is not None).items()))

        return {
            "dead_letter_queues": tally(_text(j.queue) for j in self.jobs),
            "queues": tally(_text(j.origin_queue) for j in self.jobs),
            "tasks": tally(j.task for j in self.jobs),
        }

    def page(self, chosen: Filter, limit: int, after: tuple[int, str] | None) -> dict[str, Any]:
        """The answer of a listing request: the ``limit`` jobs ``chosen`` selects after
        the cursor ``after``, the ``next`` page's cursor (None: no more), how many
        match (``total``), the counts, the queues known and read."""
        now = now_ms()
        matching = chosen.select(self.jobs, now)
        rest = matching if after is None else [j for j in matching if j.sort_key() > after]
        shown = rest[:limit]
        return {
            "jobs": [job.as_json(now) for job in shown],
            "next": shown[-1].cursor() if len(rest) > limit and shown else None,
            "total": len(matching),
            "counts": self.counts(),
            "dead_letter_queues": [_text(q) for q in self.known],
            "queues_read": [_text(q) for q in self.read],
            "truncated": self.truncated,
            "unanswered": self.unanswered,
        }


async def known_queues(nodes: Nodes) -> list[str]:
    """The dead-letter queues: every policy's, and the task API's."""
    try:
        reply = await nodes.run(nodes.here, "QPOLICY", "LIST")
    except ResponseError:
        reply = []  # (a Disque without policies, or a user who may not list them)
    named = (Policy.from_reply(entry).options.get("deadletter") for entry in reply)
    return sorted({DEFAULT_DEAD_LETTER_QUEUE, *(str(q) for q in named if q)})


async def _ask_all(
    nodes: Nodes, ask: Callable[[str], Awaitable[Any]]
) -> tuple[list[tuple[str, Any]], list[str]]:
    """``ask(address)`` of every node at once: the answers with their node's ID, and
    the IDs of the nodes that did not answer."""
    node_ids = list(nodes.addresses)
    replies = await asyncio.gather(
        *(ask(nodes.addresses[n]) for n in node_ids), return_exceptions=True
    )
    answers, unanswered = [], []
    for node_id, reply in zip(node_ids, replies, strict=True):
        if not isinstance(reply, BaseException):
            answers.append((node_id, reply))
        elif isinstance(reply, DisqueError | OSError | TimeoutError):
            unanswered.append(node_id)
        else:
            raise reply
    return answers, unanswered


def _merge(copies: Iterable[tuple[str, Iterable[Any]]]) -> list[FailedJob]:
    """Copies of dead letters (SHOW replies) with their node's ID: one job per ID, with
    the nodes that hold it, but none for an ID acknowledged on one of them."""
    shows: dict[str, Any] = {}
    holders: dict[str, list[str]] = {}
    acked: set[str] = set()
    for node_id, items in copies:
        for item in items:
            job_id = item[1].decode()  # (SHOW's pairs begin with id, queue and state)
            if item[5] == b"acked":
                acked.add(job_id)
                continue
            shows.setdefault(job_id, item)
            holders.setdefault(job_id, []).append(node_id)
    return [
        FailedJob.of(JobInfo.from_reply(item), holders[job_id])
        for job_id, item in shows.items()
        if job_id not in acked
    ]


async def _scan(nodes: Nodes, address: str, queues: Sequence[str]) -> tuple[list[Any], bool]:
    """The dead-letter copies a node holds, as SHOW replies; and whether it had more
    than MAX_READ."""
    items: list[Any] = []
    for queue in queues:
        cursor: Any = "0"
        while True:
            cursor, found = await nodes.run(
                address, "JSCAN", cursor, "COUNT", str(SCAN_COUNT), "QUEUE", queue, "REPLY", "all"
            )  # fmt: skip
            items += found
            if len(items) > MAX_READ:
                return items[:MAX_READ], True
            if int(cursor) == 0:
                break
    return items, False


async def read(nodes: Nodes, chosen: Filter) -> Listing:
    """Every failed job of the dead-letter queues ``chosen`` names (else every known
    one), from every node that answers, each once."""
    known = await known_queues(nodes)
    queues = list(chosen.dead_letter_queues) or known
    answers, unanswered = await _ask_all(nodes, lambda address: _scan(nodes, address, queues))
    jobs = _merge((node_id, items) for node_id, (items, _) in answers)
    jobs.sort(key=FailedJob.sort_key)
    truncated = any(more for _, (_, more) in answers)
    return Listing(jobs, known, queues, unanswered, truncated)


# --------------------------------------------------------------------------
# Acting.


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an action did to one dead letter: ``done`` (and for a retry ``job``, the
    new job's ID), or ``error``."""

    id: str
    action: str
    done: bool = False
    job: str | None = None
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.job is not None:
            out["job"] = self.job
        if self.done:
            out["retried" if self.action == "retry" else "deleted"] = True
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(slots=True)
class Report:
    """An action's outcomes, in the order of the jobs; the nodes that did not answer
    the lookup; whether the jobs acted on were all there is (see :class:`Listing`)."""

    outcomes: list[Outcome]
    unanswered: list[str]
    truncated: bool = False

    @property
    def failed(self) -> int:
        return sum(1 for o in self.outcomes if not o.done)

    def as_json(self) -> dict[str, Any]:
        return {
            "results": [o.as_json() for o in self.outcomes],
            "done": len(self.outcomes) - self.failed,
            "failed": self.failed,
            "truncated": self.truncated,
            "unanswered": self.unanswered,
        }


async def _bounded(calls: Iterable[Awaitable[Any]]) -> list[Any]:
    """Await ``calls``, CONCURRENCY at a time; their results in order."""
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Awaitable[Any]) -> Any:
        async with slots:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))


async def retry(nodes: Nodes, job: FailedJob) -> Outcome:
    """Put the job back on its origin queue with fresh counters; remove the dead letter."""
    origin = job.origin_queue
    if origin is None:
        return Outcome(
            job.id, "retry", error="its origin is unknown: it can be deleted, not retried"
        )
    try:
        added = await nodes.run(
            nodes.here, "ADDJOB", origin, job.body, str(RETRY_TIMEOUT_MS),
            "DEDUP", RETRY_KEY + job.id,
        )  # fmt: skip
    except (DisqueError, OSError, TimeoutError) as error:
        return Outcome(job.id, "retry", error=f"not added to {origin}: {error or 'timed out'}")
    new_id = added.decode() if isinstance(added, bytes) else str(added)
    try:
        await nodes.run(nodes.here, "ACKJOB", job.id)
    except (DisqueError, OSError, TimeoutError) as error:
        why = f"added as {new_id}, but the dead letter stays: {error or 'timed out'}"
        return Outcome(job.id, "retry", job=new_id, error=f"{why} (a retry adds no second job)")
    return Outcome(job.id, "retry", done=True, job=new_id)


async def delete(nodes: Nodes, job: FailedJob) -> Outcome:
    """Remove the dead letter from every node (ACKJOB)."""
    try:
        await nodes.run(nodes.here, "ACKJOB", job.id)
    except (DisqueError, OSError, TimeoutError) as error:
        return Outcome(job.id, "delete", error=str(error) or "timed out")
    return Outcome(job.id, "delete", done=True)


#: What an action does to one dead letter, by name.
ACTIONS: Final[dict[str, Callable[[Nodes, FailedJob], Awaitable[Outcome]]]] = {
    "retry": retry,
    "delete": delete,
}


async def _find(
    nodes: Nodes, job_id: str, queues: Collection[str], unanswered: set[str]
) -> FailedJob | str:
    """The dead letter ``job_id`` as its holders show it, or why it is not one."""
    answers, missing = await _ask_all(nodes, lambda address: nodes.run(address, "SHOW", job_id))
    unanswered.update(missing)
    found = _merge((node_id, [shown]) for node_id, shown in answers if shown is not None)
    if not found:
        return "no such dead letter (gone, or on no node that answered)"
    (job,) = found
    if job.queue not in queues:
        return f"not a dead letter: its queue {_text(job.queue)} is no dead-letter queue"
    return job


async def apply(
    nodes: Nodes, action: str, chosen: Filter, ids: Sequence[str] | None = None
) -> Report:
    """``action`` (retry or delete) on the dead letters ``ids`` (of the known
    dead-letter queues or those ``chosen`` names), or with ``ids`` None on every
    failed job ``chosen`` selects."""
    act = ACTIONS[action]
    if ids is None:
        listing = await read(nodes, chosen)
        jobs = chosen.select(listing.jobs, now_ms())
        outcomes = await _bounded(act(nodes, job) for job in jobs)
        return Report(outcomes, listing.unanswered, listing.truncated)
    queues = {*await known_queues(nodes), *chosen.dead_letter_queues}
    unanswered: set[str] = set()
    found = await _bounded(_find(nodes, job_id, queues, unanswered) for job_id in ids)

    async def settle(job_id: str, job: FailedJob | str) -> Outcome:
        if isinstance(job, str):
            return Outcome(job_id, action, error=job)
        return await act(nodes, job)

    outcomes = await _bounded(settle(i, job) for i, job in zip(ids, found, strict=True))
    return Report(outcomes, sorted(unanswered))
