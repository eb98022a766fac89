"""Workflows of tasks (beyond Disque): chain, group, chord and batch, on AFTER and results.

::

    chain(fetch.s(url), parse.s(), store.s()).send()        # each gets the previous result
    photos = group(resize.s(p) for p in paths).send()
    photos.results(timeout=60)                                # every member's return value
    chord((resize.s(p) for p in paths), album.s(title)).send()   # album(results, title), once
    batch(jobs, on_success=notify.s(), on_complete=report.s()).send()

No new machinery runs on the cluster, and no task polls. The members are ordinary
jobs; a step that waits for others is a job added ``AFTER`` them
(docs/coordination.md), which the holders of its dependencies release, without a
leader, once every one is acknowledged. A chord's callback is therefore one job,
queued once: twice only where Disque may deliver any job twice (its holders cut
apart by a partition while it is released). ADDJOB takes 256 ``AFTER`` at most, so
a step waiting on more waits on *join* jobs instead, each ``AFTER`` up to 256 members
(or joins, for more than 65,536), which a worker of the step's queue acknowledges at
once.

Results travel as job results (``ACKJOB RESULT``, ``WAITJOB``): a member of a
workflow is acknowledged with its return value, JSON, ``null`` included, so a member
acknowledged without one failed (a job dead-lettered counts as acknowledged for
``AFTER``). A step that takes results reads them with ``WAITJOB`` when it runs,
from any node: they are kept ``result-ttl`` seconds (an hour by default).

What a failed member (dead-lettered, cancelled, expired) does is chosen per workflow:
``on_failure="fail"`` (the default) rejects the step waiting on it to the dead-letter
queue with the reason, and the steps after it in turn; ``"call"`` runs it anyway, with
``None`` in place of each failed member's result. A batch's ``on_success`` is left
out quietly when a member failed, its ``on_complete`` always runs (Sidekiq's
callbacks).

Each ``send()`` ends by adding the workflow's *record* (client/workflow_record.py): one
job in the reserved queue ``disquette.workflows``, never consumed, that names the
workflow's jobs; its ID is the workflow's (:attr:`Handle.id`). From that ID any client
reads the workflow's state and progress (:meth:`Handle.of`, :meth:`Handle.state`:
client/workflow_state.py) and cancels it, as the dashboard and ``disquette workflows``
do. A workflow whose record could not be added (the call raised after its jobs were
sent) runs all the same, unlisted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from disquette.client import workflow_state
from disquette.client.commands import MAX_AFTER
from disquette.client.task_body import Message, encode
from disquette.client.workflow_record import QUEUE, Record, Step, record_ttl
from disquette.worker.core import Reject

if TYPE_CHECKING:
    from disquette.client.sync import Client
    from disquette.tasks.app import Task

#: The body's ``meta`` keys a workflow's jobs carry (disquette's own: a prefix no
#: middleware uses).
PARENTS: Final = "disquette.parents"  # the member IDs whose results a step reads
TAKES: Final = "disquette.takes"  # what of them it takes: "one", "all" or "none"
ON_FAILURE: Final = "disquette.on-failure"  # "fail", "call" or "drop"
KEEP: Final = "disquette.keep"  # acknowledge with the return value, even None
#: The built-in task of join jobs (acknowledged by any worker of an App).
JOIN: Final = "disquette.join"
#: How long a step waits for a parent's outcome before it is NACKed and tried again
#: (its parents are settled when it runs: this covers a node that does not answer).
RESULT_WAIT_S: Final = 10.0
FAILURES: Final = ("fail", "call")
#: ADDJOB options a join takes from the step it gates.
_JOIN_OPTIONS: Final = ("replicate", "retry", "ttl", "async_")


class WorkflowError(Exception):
    """Members of a workflow failed: ``failed`` holds their IDs, in order."""

    def __init__(self, failed: list[str]) -> None:
        super().__init__(f"{len(failed)} member(s) failed: {', '.join(failed[:5])}")
        self.failed = failed


@dataclass(slots=True)
class Signature(Message):
    """A call of a task, not sent yet (``task.s(...)``): what a workflow is made of."""

    of: Task | None = field(default=None, compare=False, repr=False)

    def task_of(self) -> Task:
        if self.of is None:
            raise TypeError(f"a workflow step is made with task.s(...), not a bare {self.task}")
        return self.of


@dataclass
class Handle:
    """A workflow sent: its members' job IDs (in order), the join jobs and the steps
    that wait on them (a chain's steps after the first, a chord's callback); its
    ``kind``, ``name`` and ``id`` (its record's job ID: the workflow's ID)."""

    client: Client
    members: list[str]
    joins: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    kind: str = "group"
    name: str | None = None
    id: str | None = None

    @classmethod
    def of(cls, client: Client, workflow_id: str) -> Handle:
        """The handle of the workflow ``workflow_id``, sent from anywhere, rebuilt from
        its record; ``LookupError`` when no node holds it."""
        nodes = client.call(workflow_state.cluster())
        record, _ = client.call(workflow_state.find(nodes, workflow_id))
        if record is None:
            raise LookupError(f"no workflow {workflow_id} (expired, or never sent)")
        steps = [step.id for step in record.steps]
        return cls(client, record.members, record.joins, steps, record.kind, record.name,
                   workflow_id)  # fmt: skip

    @property
    def last(self) -> str:
        """The job whose result is the workflow's: the last step, or the last member."""
        return (self.steps or self.members)[-1]

    def state(self) -> workflow_state.Reading:
        """Where the workflow is, read from every node now: each job's state, the
        ``counts()``, the overall ``state``, its ``result`` once finished and
        ``summary()`` (client/workflow_state.py says what it costs)."""
        if self.id is None:
            raise LookupError("this workflow has no record: its state cannot be read")
        nodes = self.client.call(workflow_state.cluster())
        reading = self.client.call(workflow_state.read(nodes, self.id))
        if reading is None:
            raise LookupError(f"no workflow {self.id} (expired, or on no node that answered)")
        return reading

    def results(self, timeout: float | None = None) -> list[Any]:
        """The members' return values, in order, once every one finished;
        :class:`WorkflowError` if some failed, ``TimeoutError`` past ``timeout``."""
        values, failed = collect(self.client, self.members, timeout)
        if failed:
            raise WorkflowError(failed)
        return values

    def result(self, timeout: float | None = None) -> Any:
        """The return value of :attr:`last` (a chain's end, a chord's callback)."""
        (value,), failed = collect(self.client, [self.last], timeout)
        if failed:
            raise WorkflowError(failed)
        return value

    def cancel(self) -> int:
        """Cancel every job of the workflow not finished yet; how many were."""
        jobs = self.members + self.joins + self.steps
        return self.client.call(workflow_state.cancel(jobs))


def collect(
    client: Client, ids: Sequence[str], timeout: float | None
) -> tuple[list[Any], list[str]]:
    """The results of ``ids`` (None for a failed one), and the IDs that failed: their
    WAITJOBs pipelined (a callback of 10,000 parents reads them in a few round trips)."""
    values: list[Any] = []
    failed: list[str] = []
    outcomes = client.wait_many(ids, timeout)
    for job_id, outcome in zip(ids, outcomes, strict=True):
        if outcome is None:
            raise TimeoutError(f"job {job_id} not finished within {timeout} s")
        if outcome.acked and outcome.result is not None:
            values.append(json.loads(outcome.result))
        else:
            values.append(None)
            failed.append(job_id)
    return values, failed


def inputs(client: Client, message: Message) -> Message | None:
    """The call a step makes: its parents' results put before its arguments, as its
    ``meta`` asks. ``None``: leave it out (a batch's ``on_success`` after a failure);
    :class:`Reject` for a step that fails with its parents."""
    meta = message.meta
    parents = meta[PARENTS].split(",")
    values, failed = collect(client, parents, RESULT_WAIT_S)
    if failed:
        policy = meta.get(ON_FAILURE, "fail")
        if policy == "drop":
            return None
        if policy == "fail":
            raise Reject(f"workflow step skipped: {WorkflowError(failed)}")
    takes = meta.get(TAKES, "none")
    if takes == "none":
        return message
    first = values[0] if takes == "one" else values
    return Message(message.task, (first, *message.args), message.kwargs, meta)


# ------------------------------------------------------------------------ producers


def _send_members(signatures: Sequence[Signature]) -> list[str]:
    """Add the members, pipelined per task; their IDs in the order given."""
    ids = [""] * len(signatures)
    by_task: dict[Task, list[int]] = {}
    for i, signature in enumerate(signatures):
        by_task.setdefault(signature.task_of(), []).append(i)
    for task, positions in by_task.items():
        calls = [_marked(signatures[i], {}) for i in positions]
        for i, job_id in zip(positions, task.send_many(calls), strict=True):
            ids[i] = job_id
    return ids


def _marked(signature: Signature, meta: dict[str, str]) -> Message:
    """The message of a workflow's job: acknowledged with its result, even None."""
    return Message(signature.task, signature.args, signature.kwargs,
                   {**signature.meta, **meta, KEEP: "1"})  # fmt: skip


def _gates(step: Task, parents: list[str], if_gone: str, joins: list[str]) -> list[str]:
    """What a step waits on: ``parents``, or join jobs over them when too many
    (appended to ``joins``), in the step's queue."""
    client = step.app.client
    options = {k: v for k, v in step.options.items() if k in _JOIN_OPTIONS}
    body = encode(Message(JOIN), step.app.encoding)
    while len(parents) > MAX_AFTER:
        chunks = [parents[i : i + MAX_AFTER] for i in range(0, len(parents), MAX_AFTER)]
        parents = [
            client.add_job(step.queue, body, after=chunk, if_gone=if_gone, **options)
            for chunk in chunks
        ]
        joins += parents
    return parents


def _send_step(
    signature: Signature, parents: list[str], takes: str, on_failure: str, joins: list[str]
) -> str:
    """Add a step AFTER ``parents`` (through joins when many), taking their results."""
    task = signature.task_of()
    if_gone = "release" if on_failure in ("call", "drop") else "fail"
    after = _gates(task, parents, if_gone, joins)
    meta = {PARENTS: ",".join(parents), TAKES: takes, ON_FAILURE: on_failure}
    return task.send_message(_marked(signature, meta), after=after, if_gone=if_gone)


def _failure_policy(on_failure: str) -> str:
    if on_failure not in FAILURES:
        raise ValueError(f"on_failure must be one of {', '.join(FAILURES)}, not {on_failure!r}")
    return on_failure


def _recorded(
    handle: Handle,
    members: Sequence[Signature],
    steps: Sequence[tuple[Signature, str, str]],
    on_failure: str | None,
) -> Handle:
    """Add the workflow's record (its ID becomes the handle's): ``steps`` are the
    signatures of :attr:`Handle.steps` with their roles and failure policies."""
    record = Record(
        handle.kind,
        int(time.time() * 1000),
        handle.members,
        [signature.task for signature in members],
        handle.joins,
        [Step(job_id, signature.task, role, policy)
         for job_id, (signature, role, policy) in zip(handle.steps, steps, strict=True)],
        handle.name,
        on_failure,
    )  # fmt: skip
    tasks = {signature.task_of() for signature in [*members, *(s for s, _, _ in steps)]}
    ttl = record_ttl(task.options.get("ttl") for task in tasks)
    handle.id = handle.client.add_job(QUEUE, record.encode(), ttl=ttl)
    return handle


class chain:
    """Steps one after the other, each queued once the previous one succeeded, and
    given its result as first argument (``pass_results=False``: only the order).
    ``name``: shown with its state (the dashboard, ``disquette workflows``)."""

    def __init__(
        self, *signatures: Signature, pass_results: bool = True, name: str | None = None
    ) -> None:
        if not signatures:
            raise ValueError("a chain needs a step")
        self.signatures = signatures
        self.pass_results = pass_results
        self.name = name

    def send(self) -> Handle:
        first, *rest = self.signatures
        task = first.task_of()
        members = [task.send_message(_marked(first, {}))]
        handle = Handle(task.app.client, members, kind="chain", name=self.name)
        takes = "one" if self.pass_results else "none"
        previous = handle.members[0]
        for signature in rest:
            previous = _send_step(signature, [previous], takes, "fail", handle.joins)
            handle.steps.append(previous)
        return _recorded(handle, [first], [(s, "step", "fail") for s in rest], "fail")


class group:
    """Calls run side by side; :meth:`Handle.results` waits for them all."""

    def __init__(
        self, *signatures: Signature | Iterable[Signature], name: str | None = None
    ) -> None:
        self.signatures = _flatten(signatures)
        self.name = name

    def send(self) -> Handle:
        return _recorded(self.send_members("group", self.name), self.signatures, [], None)

    def send_members(self, kind: str, name: str | None) -> Handle:
        """The members sent, without a record (a chord's or a batch's header)."""
        if not self.signatures:
            raise ValueError(f"a {kind} needs a member")
        client = self.signatures[0].task_of().app.client
        return Handle(client, _send_members(self.signatures), kind=kind, name=name)


class chord:
    """A group, then ``callback`` called once with the list of its results (in the
    members' order) before its own arguments; see the module's docstring for
    ``on_failure``."""

    def __init__(
        self,
        header: group | Iterable[Signature],
        callback: Signature,
        on_failure: str = "fail",
        name: str | None = None,
    ) -> None:
        self.header = header if isinstance(header, group) else group(header)
        self.callback = callback
        self.on_failure = _failure_policy(on_failure)
        self.name = name

    def send(self) -> Handle:
        handle = self.header.send_members("chord", self.name)
        step = _send_step(self.callback, handle.members, "all", self.on_failure, handle.joins)
        handle.steps.append(step)
        steps = [(self.callback, "callback", self.on_failure)]
        return _recorded(handle, self.header.signatures, steps, self.on_failure)


class batch:
    """A group with Sidekiq's callbacks, each given the list of results:
    ``on_success`` once every member succeeded (left out otherwise),
    ``on_complete`` once every member finished or failed (``None`` for a failure)."""

    def __init__(
        self,
        members: group | Iterable[Signature],
        on_success: Signature | None = None,
        on_complete: Signature | None = None,
        name: str | None = None,
    ) -> None:
        self.members = members if isinstance(members, group) else group(members)
        self.callbacks = [(on_success, "on_success", "drop"), (on_complete, "on_complete", "call")]
        self.name = name

    def send(self) -> Handle:
        handle = self.members.send_members("batch", self.name)
        steps = []
        for callback, role, policy in self.callbacks:
            if callback is not None:
                step = _send_step(callback, handle.members, "all", policy, handle.joins)
                handle.steps.append(step)
                steps.append((callback, role, policy))
        return _recorded(handle, self.members.signatures, steps, None)


def _flatten(items: Iterable[Signature | Iterable[Signature]]) -> list[Signature]:
    """``group(a, b)`` and ``group(generator)`` alike."""
    out: list[Signature] = []
    for item in items:
        for signature in [item] if isinstance(item, Message) else item:
            if not isinstance(signature, Signature):
                raise TypeError(f"a workflow step is made with task.s(...), not {signature!r}")
            out.append(signature)
    return out


__all__ = ["Handle", "Signature", "WorkflowError", "batch", "chain", "chord", "group"]
