"""One node's view for operators, as JSON-able dicts: the node, a page of its queues, a
page of a queue's jobs, one job.

The extension command OBSERVE (commands/observe.py) serves these to the HTTP API of
any node of the cluster (observe/gather.py merges them) and to ``disquette top``.
Every function costs a bounded amount per call, whatever the dataset: a page holds
at most :data:`MAX_COUNT` entries; the queues page scans queue *names and counters*
(never jobs: a queue's length and counters are kept as jobs move, and the cost is
O(queues), 10,000 queues in about a millisecond); the jobs page skips whole chunks of
the queue's sorted list (``JobList.page``); one job is SHOW's reply, decoded (the same
function SHOW uses, never a second copy of its logic).

Text fields: names and bodies may hold any bytes. A queue name is written as
observe/merge.py's :func:`~disquette.observe.merge.name_text` (UTF-8 text or a
``~b64~`` escape); a body is text with replacement characters, plus ``body_b64`` when
it is not valid UTF-8.
"""

from __future__ import annotations

import base64
import heapq
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import hiredis

from disquette.core import replies
from disquette.core.job import STATE_NAMES, Job
from disquette.core.membership import FAIL, FLAG_NAMES, LEAVING, MYSELF, PFAIL
from disquette.core.queue import Queue
from disquette.observe.merge import name_text

if TYPE_CHECKING:
    from disquette.core.membership import ClusterNode
    from disquette.core.node import Node
    from disquette.state.server import ServerState

#: The most entries one page (queues or jobs) holds.
MAX_COUNT: Final = 1000
DEFAULT_COUNT: Final = 50
SORTS: Final = ("name", "len", "activity")
CTIME_UNIT: Final = 1_000_000  # a job's ctime is ms * 1e6 (+ a counter)


def body_fields(body: bytes | None) -> dict[str, Any]:
    """``body`` as text, and ``body_b64`` too when it is not UTF-8."""
    if body is None:
        return {"body": None}
    try:
        return {"body": body.decode()}
    except UnicodeDecodeError:
        return {
            "body": body.decode(errors="replace"),
            "body_b64": base64.b64encode(body).decode(),
        }


def text(value: bytes) -> str:
    return value.decode(errors="replace")


# --------------------------------------------------------------------------
# The node.


def flag_list(flags: int) -> list[str]:
    """A node's flags by name (``fail?`` is written ``pfail``)."""
    return ["pfail" if name == "fail?" else name for bit, name in FLAG_NAMES if flags & bit]


def node_state(flags: int) -> str:
    if flags & FAIL:
        return "fail"
    if flags & PFAIL:
        return "pfail"
    if flags & LEAVING:
        return "leaving"
    return "ok"


def release_of(node: Node, row: ClusterNode) -> dict[str, Any]:
    """What a row of the node table runs, as this node knows it (core/dialect.py):
    ``release`` and ``bus`` (its bus protocol), None where not known yet, and whether
    this node ``refused`` it (no protocol in common)."""
    dialect = node.dialect
    if row is node.cluster.myself:
        return {"release": text(dialect.speech.release), "bus": dialect.speech.version,
                "refused": False}  # fmt: skip
    return {
        "release": text(row.release) or None,
        "bus": row.bus_version or None,
        "refused": row.id in dialect.refused,
    }


def node_view(state: ServerState) -> dict[str, Any]:
    """This node: its counters, and the node table as it sees it (``table``)."""
    node = state.node
    config = state.config
    cluster = node.cluster
    queued = jobs_in = jobs_out = 0
    for queue in node.queues.values():
        queued += len(queue)
        jobs_in += queue.jobs_in
        jobs_out += queue.jobs_out
    jobs = len(node.jobs) + node.spill.count
    queued += node.spill.count  # (jobs on disk are queued jobs past a queue's head)
    used = node.memory_used
    maxmemory = config.maxmemory
    aof = "off" if state.aof is None else state.aof.status().state
    return {
        "id": text(node.myself),
        "http_port": config.http_port or None,
        "generation": cluster.generation,
        "repair_backlog": node.repair.backlog,
        "jobs": jobs,
        "queued": queued,
        "active": jobs - queued - node.jobs_acked,  # active or waiting to be queued
        "acked": node.jobs_acked,
        "queues": len(node.queues),
        "jobs_in": jobs_in,
        "jobs_out": jobs_out,
        "memory": {
            "used": used,
            "max": maxmemory,
            "level": round(used / maxmemory, 4) if maxmemory else None,
        },
        "clients": len(state.clients),
        "blocked_clients": len(node.blocked_clients),
        "uptime": int(time.time() - state.start_time),
        "ops_per_sec": state.stats.ops_per_sec,
        "aof": "rewriting" if aof.startswith("rewrit") else ("off" if aof == "off" else "on"),
        "table": [
            {
                "id": text(row.id),
                "addr": f"{text(row.ip)}:{row.port}",
                "flags": flag_list(row.flags),
                "state": node_state(row.flags),
                "myself": bool(row.flags & MYSELF),
                **release_of(node, row),
            }
            for row in cluster.nodes.values()
        ],
    }


# --------------------------------------------------------------------------
# Queues.


def queue_summary(queue: Queue, now_ms: int) -> dict[str, Any]:
    """One queue here: its length and counters (no job is read but its head)."""
    head = queue.jobs.first()
    return {
        "name": name_text(queue.name),
        "len": len(queue) + (0 if queue.spilled is None else queue.spilled.count),
        "jobs_in": queue.jobs_in,
        "jobs_out": queue.jobs_out,
        "nacks": queue.nacks,
        "additional_deliveries": queue.additional_deliveries,
        "paused": text(queue.pause_name),
        "age": None if head is None else max(0, now_ms - head.ctime // CTIME_UNIT) // 1000,
        "blocked": len(queue.blocked),
    }


def activity(queue: Queue) -> int:
    """What SORT activity ranks by: the jobs that went in and out of the queue."""
    return queue.jobs_in + queue.jobs_out


def queues_page(
    state: ServerState,
    sort: str = "name",
    after: bytes | None = None,
    count: int = DEFAULT_COUNT,
    prefix: bytes = b"",
    visible: Callable[[bytes], bool] | None = None,
) -> dict[str, Any]:
    """A page of this node's queues whose name starts with ``prefix`` (and that
    ``visible`` accepts: a restricted user's readable queues, state/access.py).

    ``sort name``: the ``count`` first names after ``after`` (bytewise order);
    ``next`` is the last name when more follow. ``sort len``/``activity``: the
    ``count`` largest, ties by name (``after`` ignored: pages of a ranking are offsets,
    observe/gather.py). ``total`` counts every queue with the prefix."""
    node = state.node
    count = max(0, min(count, MAX_COUNT))
    matching = [
        q
        for q in node.queues.values()
        if q.name.startswith(prefix) and (visible is None or visible(q.name))
    ]
    if sort == "name":
        candidates = matching if after is None else [q for q in matching if q.name > after]
        chosen = heapq.nsmallest(count + 1, candidates, key=lambda q: q.name)
        more = len(chosen) > count
        chosen = chosen[:count]
    else:
        rank = len if sort == "len" else activity
        chosen = heapq.nsmallest(count, matching, key=lambda q: (-rank(q), q.name))
        more = False
    now = node.clock()
    return {
        "queues": [queue_summary(q, now) for q in chosen],
        "next": name_text(chosen[-1].name) if more and chosen else None,
        "total": len(matching),
    }


# --------------------------------------------------------------------------
# Jobs.


def job_summary(state: ServerState, job: Job) -> dict[str, Any]:
    return {
        "id": text(job.id),
        "queue": None if job.queue is None else name_text(job.queue),
        "state": "waiting" if job.waiting else text(STATE_NAMES[job.state]),
        **body_fields(job.body),
        "ctime": job.ctime // CTIME_UNIT,
        "nacks": job.nacks,
        "additional_deliveries": job.additional_deliveries,
        "node": text(state.node.myself),
    }


def jobs_page(
    state: ServerState, name: bytes, offset: int = 0, count: int = DEFAULT_COUNT
) -> dict[str, Any]:
    """Queued jobs of a queue here, from the ``offset``-th in serving order (jobs on disk
    past the queue's head are counted in its length, not listed)."""
    queue = state.node.queues.get(name)
    count = max(0, min(count, MAX_COUNT))
    if queue is None:
        return {"jobs": [], "next": None, "len": 0}
    jobs = queue.jobs.page(offset, count)
    more = offset + len(jobs) < len(queue)
    return {
        "jobs": [job_summary(state, job) for job in jobs],
        "next": offset + len(jobs) if more else None,
        "len": len(queue),
    }


def job_view(state: ServerState, job_id: bytes) -> dict[str, Any] | None:
    """SHOW's fields as JSON (None: no such job here)."""
    job = state.node.jobs.get(job_id)
    if job is None:
        return None
    reader = hiredis.Reader()
    reader.feed(replies.show(state.node, job))
    items = reader.gets()
    out: dict[str, Any] = {}
    for i in range(0, len(items), 2):
        out[text(items[i]).replace("-", "_")] = _json_value(items[i + 1])
    out.update(body_fields(job.body))
    if job.queue is not None:
        out["queue"] = name_text(job.queue)
    return out


def _json_value(value: object) -> object:
    if isinstance(value, bytes):
        return text(value)
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value
