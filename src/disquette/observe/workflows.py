"""Workflows as an operator reads them: the list with each one's progress, one in
detail, and cancelling one, for the JSON API (http/api.py) and ``disquette workflows``
(cli/workflows.py), so both answer alike.

What a workflow's record is and how its jobs' states are read is the client's
(client/workflow_record.py, client/workflow_state.py: the task API's handles read
them the same way); this module pages and budgets them. It runs the client's reading
plans with the asyncio client it is given (the HTTP port's, as the request's user), on
the nodes it is given (``{id: address}``, every node of the node table).

**The list** (:func:`listing`) reads every record of every node (``JSCAN QUEUE
disquette.workflows REPLY all``, merged by ID), newest first, and pages them with a
cursor (the last one's creation time and ID). It counts the jobs of the workflows of
the page, within a budget of :data:`MAX_COUNTED` jobs a request: a page of big
workflows has the first ones counted and the others listed without their counts
(``counted: false``: open one to read it). A record is about 45 bytes a member, and a
node gives at most :data:`MAX_READ` records to a reading (``truncated``).

**The detail** (:func:`detail`) reads every job of one workflow (its summary needs
them all: ``jobs x nodes`` SHOWs and a WAITJOB per finished job, client/workflow_state.py)
and answers a page of them (``offset``, ``limit``), optionally of one ``state``.

**Cancel** (:func:`cancel`) sends CANCEL for every job of the workflow (256 a
command, each to the node that created it): a finished job stays as it was.
"""

from __future__ import annotations

from typing import Any, Final

from disquette.aio import Client
from disquette.client import workflow_state
from disquette.client.workflow_state import STATES, Reading
from disquette.observe.pages import now_ms

#: Jobs the list counts for one request at most (beyond: listed without counts).
MAX_COUNTED: Final = 20_000
#: Records one node gives to one reading at most.
MAX_READ: Final = 10_000

Nodes = dict[str, str]


def check_state(state: str | None) -> str | None:
    """A job state to filter on; ``ValueError`` when it is none."""
    if state and state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}")
    return state or None


async def listing(
    client: Client, nodes: Nodes, limit: int, after: tuple[int, str] | None = None
) -> dict[str, Any]:
    """A page of workflows, newest first, after the cursor ``after``: each one's
    summary (counted within the budget), ``next`` (the cursor), ``total``."""
    records, unanswered, truncated = await client.call(workflow_state.records(nodes, MAX_READ))
    rest = records if after is None else [r for r in records if workflow_state.sort_key(r) > after]
    shown = rest[:limit]
    now = now_ms()
    budget = MAX_COUNTED
    workflows = []
    missing = set(unanswered)
    for record in shown:
        if record.size > budget:
            workflows.append({**workflow_state.describe(record, now), "counted": False})
            continue
        budget -= record.size
        found, more = await client.call(workflow_state.states(nodes, record))
        missing.update(more)
        reading = Reading(record, found, more)
        workflows.append({**reading.summary(now), "counted": True})
    last = shown[-1] if len(rest) > limit and shown else None
    return {
        "workflows": workflows,
        "next": None if last is None else f"{last.created}:{last.id}",
        "total": len(records),
        "truncated": truncated,
        "unanswered": sorted(missing),
    }


async def detail(
    client: Client, nodes: Nodes, workflow_id: str, offset: int, limit: int, state: str | None
) -> dict[str, Any] | None:
    """One workflow: its summary, and a page of its jobs (of ``state`` if given) in the
    record's order (members, joins, steps); None when no node holds its record."""
    reading = await client.call(workflow_state.read(nodes, workflow_id))
    if reading is None:
        return None
    jobs = [j for j in reading.jobs if state is None or j.state == state]
    page = jobs[offset : offset + limit]
    following = offset + len(page)
    return {
        "workflow": reading.summary(now_ms()),
        "jobs": [job.as_json() for job in page],
        "matching": len(jobs),
        "next": following if following < len(jobs) and page else None,
        "unanswered": reading.unanswered,
    }


async def cancel(client: Client, nodes: Nodes, workflow_id: str) -> dict[str, Any] | None:
    """Cancel every job of the workflow not finished yet: how many the nodes held;
    None when no node holds its record."""
    record, unanswered = await client.call(workflow_state.find(nodes, workflow_id))
    if record is None:
        return None
    ids = [job.id for job in record.jobs()]
    cancelled = await client.call(workflow_state.cancel(ids))
    return {"id": workflow_id, "cancelled": cancelled, "jobs": len(ids), "unanswered": unanswered}
