"""A workflow's record: the one job that says a workflow exists, and what it is made of.

A workflow (tasks/workflow.py: a chain, group, chord or batch) is ordinary jobs: its
members, the join jobs and the steps that wait on them. Nothing on the cluster would
tie them together, so ``send()`` ends by adding one more job, the *record*, to the
reserved queue :data:`QUEUE`, which no worker consumes: its body lists the workflow's
kind, the ``name`` its sender gave, when it was made, its members (in order, with their
tasks), joins and steps (with their roles and failure policies). The record's job ID
is the workflow's ID. Any node can then list the workflows (JSCAN of the queue) and
read one's state from its jobs (client/workflow_state.py), without the sender's handle.

The record lives as long as the longest-lived of its jobs could, plus an hour, so that
a finished workflow stays readable while its results are kept (a result outlives its
job by the server's ``result-ttl``, an hour by default): :func:`record_ttl`. It is a
queued job like any other, with the default replication, so it survives as its jobs do.

The body is JSON, version :data:`VERSION`::

    {"v": 1, "kind": "chord", "name": "album", "created": 1717000000000,
     "on_failure": "fail", "tasks": ["resize", "album"],
     "members": ["D-...", ...], "member_tasks": [0, ...],
     "joins": ["D-...", ...],
     "steps": [{"id": "D-...", "task": 1, "role": "callback", "on_failure": "fail"}]}

Task names are given once (``tasks``) and referred to by index, so a chord of 10,000
members costs about 45 bytes a member. The format lives with the client because the
task API writes it and the node's HTTP side and the CLI read it, neither of which may
load the task API (docs/architecture.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

#: The reserved queue of workflow records (never consumed).
QUEUE: Final = "disquette.workflows"
VERSION: Final = 1
KINDS: Final = ("chain", "group", "chord", "batch")
#: What a step is: a chain's step after the first, a chord's callback, a batch's callbacks.
STEP_ROLES: Final = ("step", "callback", "on_success", "on_complete")
#: A job's TTL when its ADDJOB gives none (the server's default, as Disque's).
DEFAULT_JOB_TTL: Final = 86400
#: Seconds the record outlives the longest-lived job (the default ``result-ttl``).
AFTERLIFE: Final = 3600


class RecordError(ValueError):
    """A body that is not a workflow record of a known version."""


@dataclass(frozen=True, slots=True)
class Step:
    """A job that waits on others: its ID, task, role and failure policy."""

    id: str
    task: str
    role: str
    on_failure: str


@dataclass(frozen=True, slots=True)
class Job:
    """One job of a workflow as its state is read: ID, role (``member``, ``join`` or a
    step's role) and task (None for a join)."""

    id: str
    role: str
    task: str | None


@dataclass(slots=True)
class Record:
    """A workflow as its record says: see the module docstring. ``id`` is the record's
    job ID (None until it is added)."""

    kind: str
    created: int
    members: list[str]
    member_tasks: list[str]
    joins: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    name: str | None = None
    on_failure: str | None = None
    id: str | None = None

    def jobs(self) -> Iterator[Job]:
        """Every job, members first (in order), then the joins, then the steps."""
        for job_id, task in zip(self.members, self.member_tasks, strict=True):
            yield Job(job_id, "member", task)
        for job_id in self.joins:
            yield Job(job_id, "join", None)
        for step in self.steps:
            yield Job(step.id, step.role, step.task)

    @property
    def size(self) -> int:
        return len(self.members) + len(self.joins) + len(self.steps)

    def encode(self) -> bytes:
        tasks = list(dict.fromkeys([*self.member_tasks, *(s.task for s in self.steps)]))
        index = {name: i for i, name in enumerate(tasks)}
        body = {
            "v": VERSION,
            "kind": self.kind,
            "name": self.name,
            "created": self.created,
            "on_failure": self.on_failure,
            "tasks": tasks,
            "members": self.members,
            "member_tasks": [index[t] for t in self.member_tasks],
            "joins": self.joins,
            "steps": [
                {"id": s.id, "task": index[s.task], "role": s.role, "on_failure": s.on_failure}
                for s in self.steps
            ],
        }
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def decode(cls, body: bytes, job_id: str | None = None) -> Record:
        """The record a body holds; :class:`RecordError` when it is not one."""
        try:
            value = json.loads(body)
            if not isinstance(value, dict) or value.get("v") != VERSION:
                raise RecordError(f"not a workflow record of version {VERSION}")
            tasks = _strings(value["tasks"])
            members = _strings(value["members"])
            member_tasks = [tasks[i] for i in value["member_tasks"]]
            steps = [
                Step(_text(s["id"]), tasks[s["task"]], _text(s["role"]), _text(s["on_failure"]))
                for s in value["steps"]
            ]
            record = cls(
                _text(value["kind"]),
                _number(value["created"]),
                members,
                member_tasks,
                _strings(value["joins"]),
                steps,
                None if value["name"] is None else _text(value["name"]),
                None if value["on_failure"] is None else _text(value["on_failure"]),
                job_id,
            )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"malformed workflow record: {exc!r}") from None
        if len(record.members) != len(record.member_tasks) or not record.members:
            raise RecordError("malformed workflow record: members and their tasks differ")
        return record


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a string expected, not {value!r}")
    return value


def _number(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"an integer expected, not {value!r}")
    return value


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"a list expected, not {value!r}")
    return [_text(v) for v in value]


def record_ttl(job_ttls: Iterable[int | None]) -> int:
    """The record's TTL (seconds): the longest of its jobs' (``None``: the server's
    default), plus :data:`AFTERLIFE`."""
    return max((t or DEFAULT_JOB_TTL for t in job_ttls), default=DEFAULT_JOB_TTL) + AFTERLIFE
