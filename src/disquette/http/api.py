"""The JSON API of the HTTP port: the whole cluster from any node, and its actions.

Every answer is a JSON object; errors are ``{"error": ...}`` with a 4xx/5xx status;
answers built from several nodes carry ``"unanswered"``: the IDs of the nodes that did
not answer within a second (observe/gather.py, which also states the merging rules).

* ``GET /api/cluster``: the nodes (this node's table with each node's release and bus
  protocol as this node knows them, each node's own counters) and
  ``history``: per-second cluster totals of jobs in and out for the last 10 minutes,
  sampled by this node once a second while its HTTP port is on (:class:`History`).
* ``GET /api/queues?sort=name|len|activity&after=&limit=50&prefix=``: queues merged
  across nodes, paged (``next`` is the cursor: a name, or an offset for rankings).
* ``GET /api/queues/<name>``: one queue merged, and each node's part.
* ``GET /api/queues/<name>/jobs?offset=0&limit=50``: its queued jobs, node after node
  (each node's jobs in serving order), paged by an offset over the cluster.
* ``GET /api/jobs/<id>``: SHOW's fields, each node's copy, ``replicate``, ``live``
  and ``synchronised`` (every copy it should have is live).
* ``POST`` actions (header ``X-Disquette-Action: 1``): ``/api/queues/<name>/pause``
  ``{"state": ...}`` (PAUSE ... BCAST), ``/api/queues/<name>/jobs`` ``{"body": ...,
  "replicate", "ttl", "retry", "delay", "maxlen", "async"}`` (ADDJOB here),
  ``/api/jobs/<id>/enqueue|dequeue|delete|nack`` (ENQUEUE, DEQUEUE, DELJOB, NACK on
  every node holding a copy), ``/api/nodes/<id>/leave`` ``{"leaving": bool}``.
* Failed jobs, the dead letters of every dead-letter queue (observe/failed.py says
  what they are, how they are read and what a retry does):
  ``GET /api/failed?dlq=&queue=&task=&error=&min_age=&max_age=&limit=50&cursor=``
  lists them merged across nodes, newest first (``dlq``, repeatable: the dead-letter
  queues to read, default every known one; ``queue``: the origin queue; ``task``;
  ``error``: text in the reason or the error; ages in seconds or ``30s``, ``5m``,
  ``2h``, ``1d``), with ``next`` (the cursor), ``total``, ``counts``, the
  ``dead_letter_queues`` known and read, ``truncated``; ``POST
  /api/failed/retry|delete`` ``{"ids": [...]}`` or ``{"all": true, <filters>}``
  answers ``results`` (per ID: ``retried`` and the new ``job``, ``deleted``, or
  ``error``), ``done`` and ``failed``.
* Workflows of the task API (observe/workflows.py; their records and how their jobs'
  states are read: client/workflow_record.py, client/workflow_state.py):
  ``GET /api/workflows?limit=20&cursor=`` lists them newest first, each with its
  kind, name, age, state, counts per job state and percent done (``counted: false``
  past the request's budget of jobs), ``next`` and ``total``; ``GET
  /api/workflows/<id>?offset=0&limit=50&state=`` one workflow's summary (with its
  result once finished) and a page of its jobs (each with its role, task, state and
  result); ``POST /api/workflows/<id>/cancel`` cancels every job of it not finished
  yet (``cancelled``: how many the nodes held). An unknown workflow is a 404.

Actions run as commands through the client port (the asyncio client, with the
request's user and password, docs/security.md, or this node's password), so they
take exactly the path, checks and replies of redis-cli's; reads made as a
restricted user show only what it may read (observe/gather.py).
Names in URLs are percent-encoded text; a name that is not UTF-8 is
``~b64~<urlsafe base64>`` (observe/merge.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from disquette.client.errors import ResponseError
from disquette.core.ids import is_valid
from disquette.observe import failed, pages, view, workflows
from disquette.observe.gather import Gatherer
from disquette.observe.merge import merge_queues, name_bytes, name_text, rank_key
from disquette.state.server import ServerState

#: Seconds of history /api/cluster keeps.
HISTORY_SECONDS: Final = 600
MAX_RANKED: Final = view.MAX_COUNT
ADDJOB_TIMEOUT_MS: Final = 5000
ADDJOB_OPTIONS: Final = {"replicate": "REPLICATE", "ttl": "TTL", "retry": "RETRY",
                         "delay": "DELAY", "maxlen": "MAXLEN"}  # fmt: skip
JOB_ACTIONS: Final = {"enqueue": "ENQUEUE", "dequeue": "DEQUEUE", "delete": "DELJOB",
                      "nack": "NACK"}  # fmt: skip


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class History:
    """Per-second cluster totals of jobs in and out (a ring of HISTORY_SECONDS)."""

    def __init__(self, gatherer: Gatherer) -> None:
        self.gatherer = gatherer
        self.t: deque[int] = deque(maxlen=HISTORY_SECONDS)
        self.jobs_in: deque[int] = deque(maxlen=HISTORY_SECONDS)
        self.jobs_out: deque[int] = deque(maxlen=HISTORY_SECONDS)
        self._last: dict[str, tuple[int, int]] = {}  # node id -> its totals last time
        self._sampling: asyncio.Task[None] | None = None

    def tick(self) -> None:
        """The 1 s timer: sample unless the last sample is still waiting for a node."""
        if self._sampling is None or self._sampling.done():
            self._sampling = asyncio.get_running_loop().create_task(self.sample())

    async def sample(self) -> None:
        state = self.gatherer.state
        answers, _ = await self.gatherer.ask(view.node_view(state), "NODE")
        added_in = added_out = 0
        for node_id, node in answers.items():
            now = (node["jobs_in"], node["jobs_out"])
            before = self._last.get(node_id, now)
            self._last[node_id] = now
            # (An evicted queue takes its counters along: a drop is no negative traffic.)
            added_in += max(0, now[0] - before[0])
            added_out += max(0, now[1] - before[1])
        self.t.append(int(time.time()))
        self.jobs_in.append(added_in)
        self.jobs_out.append(added_out)

    def as_json(self) -> dict[str, list[int]]:
        return {"t": list(self.t), "jobs_in": list(self.jobs_in), "jobs_out": list(self.jobs_out)}


STATE = web.AppKey("state", ServerState)
GATHERER = web.AppKey("gatherer", Gatherer)
#: A request made as an ACL user: (name, password, permissions or None for every one);
#: absent for the default user with every permission (http/server.py sets it).
USER: Final = "disquette.user"
HISTORY = web.AppKey("history", History)


def ok(**fields: Any) -> web.Response:
    return web.json_response({"ok": True, **fields}, dumps=dumps)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def reply(value: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(value, status=status, dumps=dumps)


def fail(status: int, message: str) -> web.Response:
    return reply({"error": message}, status)


def gatherer_of(request: web.Request) -> Gatherer:
    """The request's gatherer: as its ACL user when it was made as one."""
    base = request.app[GATHERER]
    who = request.get(USER)
    return base if who is None else base.as_user(*who)


def state_of(request: web.Request) -> ServerState:
    return request.app[STATE]


def int_param(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(reason=f"{name} must be an integer") from None
    if not lo <= value <= hi:
        raise web.HTTPBadRequest(reason=f"{name} must be between {lo} and {hi}")
    return value


def queue_name(request: web.Request) -> bytes:
    name = name_bytes(request.match_info["name"])
    if name is None:
        raise web.HTTPBadRequest(reason="malformed ~b64~ queue name")
    return name


def job_id(request: web.Request) -> bytes:
    raw = request.match_info["id"].encode(errors="replace")
    if not is_valid(raw):
        raise web.HTTPBadRequest(reason="BADID Invalid Job ID format.")
    return raw


async def body_of(request: web.Request) -> dict[str, Any]:
    """The JSON object an action carries ({} when none)."""
    if not request.can_read_body:
        return {}
    try:
        value = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise web.HTTPBadRequest(reason="the body is not JSON") from None
    if not isinstance(value, dict):
        raise web.HTTPBadRequest(reason="the body must be a JSON object")
    return value


# --------------------------------------------------------------------------
# Reading.


async def cluster(request: web.Request) -> web.Response:
    state = state_of(request)
    local = view.node_view(state)
    answers, unanswered = await gatherer_of(request).ask(local, "NODE")
    host = request.host.rsplit(":", 1)[0] if request.host else "127.0.0.1"
    nodes = []
    for row in local["table"]:
        node_id = row["id"]
        own = answers.get(node_id)
        ip = row["addr"].rsplit(":", 1)[0] or host
        state_name = row["state"]
        if own is None and state_name == "ok":
            state_name = "unreachable"
        entry: dict[str, Any] = {
            "id": node_id,
            "addr": f"{ip}:{row['addr'].rsplit(':', 1)[1]}",
            "http": None,
            "flags": row["flags"],
            "state": state_name,
            # What it runs, as this node knows it (from the bus: old releases included).
            "release": row["release"],
            "bus": row["bus"],
            "refused": row["refused"],
        }
        for field in ("generation", "repair_backlog", "jobs", "queued", "active", "acked",
                      "queues", "memory", "clients", "blocked_clients", "uptime",
                      "ops_per_sec", "aof"):  # fmt: skip
            entry[field] = None if own is None else own[field]
        if own is not None and own["http_port"]:
            entry["http"] = f"http://{ip}:{own['http_port']}/"
        nodes.append(entry)
    return reply(
        {
            "myself": local["id"],
            "nodes": nodes,
            "unanswered": unanswered,
            "history": request.app[HISTORY].as_json(),
        }
    )


async def queues(request: web.Request) -> web.Response:
    state = state_of(request)
    sort = request.query.get("sort", "name")
    if sort not in view.SORTS:
        return fail(400, "sort must be name, len or activity")
    limit = int_param(request, "limit", view.DEFAULT_COUNT, 0, view.MAX_COUNT)
    prefix = name_bytes(request.query.get("prefix", "")) or b""
    after = request.query.get("after") or None
    gatherer = gatherer_of(request)
    if sort == "name":
        after_name = None if after is None else name_bytes(after)
        local = view.queues_page(state, "name", after_name, limit, prefix)
        args: list[bytes | str] = ["QUEUES", "SORT", "name", "COUNT", str(limit), "PREFIX", prefix]
        if after_name is not None:
            args += ["AFTER", after_name]
        answers, unanswered = await gatherer.ask(local, *args)
        merged = merge_queues(answers)
        names = sorted(merged)
        more = len(names) > limit or any(a["next"] for a in answers.values())
        page = [merged[n] for n in names[:limit]]
        cursor = page[-1]["name"] if more and page else None
    else:
        offset = int_param(request, "after", 0, 0, MAX_RANKED)
        depth = min(offset + limit + 1, MAX_RANKED)  # (one more: is there a next page?)
        local = view.queues_page(state, sort, None, depth, prefix)
        args = ["QUEUES", "SORT", sort, "COUNT", str(depth), "PREFIX", prefix]
        answers, unanswered = await gatherer.ask(local, *args)
        ranked = sorted(merge_queues(answers).values(), key=rank_key(sort))
        page = ranked[offset : offset + limit]
        more = len(ranked) > offset + limit and offset + limit < MAX_RANKED
        cursor = str(offset + limit) if more else None
    total = max((a["total"] for a in answers.values()), default=0)
    return reply({"queues": page, "next": cursor, "total": total, "unanswered": unanswered})


async def queue(request: web.Request) -> web.Response:
    state = state_of(request)
    name = queue_name(request)
    local = view.queues_page(state, "name", None, 1, name)
    answers, unanswered = await gatherer_of(request).ask(
        local, "QUEUES", "SORT", "name", "COUNT", "1", "PREFIX", name
    )
    text = name_text(name)
    here = {
        node_id: page["queues"][0]
        for node_id, page in answers.items()
        if page["queues"] and page["queues"][0]["name"] == text
    }
    if not here:
        return reply({"error": "no such queue", "unanswered": unanswered}, 404)
    merged = merge_queues({n: {"queues": [q]} for n, q in here.items()})[name]
    return reply({"queue": merged, "per_node": here, "unanswered": unanswered})


async def queue_jobs(request: web.Request) -> web.Response:
    state = state_of(request)
    name = queue_name(request)
    offset = int_param(request, "offset", 0, 0, 1 << 62)
    limit = int_param(request, "limit", view.DEFAULT_COUNT, 0, view.MAX_COUNT)
    gatherer = gatherer_of(request)
    # First the lengths (a page of none), then the nodes the window falls on.
    sizes, unanswered = await gatherer.ask(
        view.jobs_page(state, name, 0, 0), "JOBS", name, "COUNT", "0"
    )
    order = sorted(sizes)
    jobs: list[dict[str, Any]] = []
    start = 0
    for node_id in order:
        length = sizes[node_id]["len"]
        if len(jobs) < limit and offset < start + length:
            skip = max(0, offset - start)
            want = limit - len(jobs)
            local = view.jobs_page(state, name, skip, want)
            answers, missing = await gatherer.ask(
                local, "JOBS", name, "OFFSET", str(skip), "COUNT", str(want), only=[node_id]
            )
            unanswered += missing
            if node_id in answers:
                jobs += answers[node_id]["jobs"]
        start += length
    following = offset + len(jobs)
    return reply(
        {
            "jobs": jobs,
            "next": following if following < start and jobs else None,
            "len": start,
            "unanswered": unanswered,
        }
    )


async def job(request: web.Request) -> web.Response:
    state = state_of(request)
    raw = job_id(request)
    answers, unanswered = await gatherer_of(request).ask(view.job_view(state, raw), "JOB", raw)
    copies = [
        {"node": node_id, "state": None if shown is None else shown["state"]}
        for node_id, shown in sorted(answers.items())
    ]
    found = [shown for shown in answers.values() if shown is not None]
    if not found:
        return reply({"error": "no such job", "unanswered": unanswered}, 404)
    shown = next((s for s in found if s["state"] == "queued"), found[0])
    replicate = shown["repl"]
    live = len(found)
    return reply(
        {
            "job": shown,
            "copies": copies,
            "replicate": replicate,
            "live": live,
            "synchronised": live >= replicate,
            "unanswered": unanswered,
        }
    )


# --------------------------------------------------------------------------
# Actions.


async def run_here(request: web.Request, *args: Any) -> Any:
    gatherer = gatherer_of(request)
    return await gatherer.command(gatherer.own_address(), *args)


async def pause(request: web.Request) -> web.Response:
    name = queue_name(request)
    wanted = (await body_of(request)).get("state")
    if wanted not in ("in", "out", "all", "none"):
        return fail(400, 'state must be "in", "out", "all" or "none"')
    shown = await run_here(request, "PAUSE", name, wanted, "BCAST")
    return ok(paused=shown.decode() if isinstance(shown, bytes) else shown)


async def add_job(request: web.Request) -> web.Response:
    name = queue_name(request)
    body = await body_of(request)
    text = body.get("body")
    if not isinstance(text, str):
        return fail(400, 'the job needs a "body" (a string)')
    args: list[Any] = ["ADDJOB", name, text, ADDJOB_TIMEOUT_MS]
    for field, option in ADDJOB_OPTIONS.items():
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            return fail(400, f"{field} must be an integer")
        args += [option, value]
    if body.get("async"):
        args.append("ASYNC")
    new_id = await run_here(request, *args)
    return ok(id=new_id.decode())


async def job_action(request: web.Request) -> web.Response:
    state = state_of(request)
    raw = job_id(request)
    action = request.match_info["action"]
    gatherer = gatherer_of(request)
    answers, unanswered = await gatherer.ask(view.job_view(state, raw), "JOB", raw)
    holders = [node_id for node_id, shown in answers.items() if shown is not None]
    if not holders:
        return reply({"error": "no such job", "unanswered": unanswered}, 404)
    peers = gatherer.peers()
    myself = state.node.myself.decode()
    done: dict[str, Any] = {}
    for node_id in sorted(holders):
        address = gatherer.own_address() if node_id == myself else peers[node_id]
        done[node_id] = await gatherer.command(address, JOB_ACTIONS[action], raw)
    return ok(nodes=done, unanswered=unanswered)


async def leave(request: web.Request) -> web.Response:
    state = state_of(request)
    node_id = request.match_info["id"]
    leaving = (await body_of(request)).get("leaving")
    if not isinstance(leaving, bool):
        return fail(400, '"leaving" must be true or false')
    gatherer = gatherer_of(request)
    myself = state.node.myself.decode()
    address = gatherer.own_address() if node_id == myself else gatherer.peers().get(node_id)
    if address is None:
        return fail(404, "no such node")
    await gatherer.command(address, "CLUSTER", "LEAVING", "yes" if leaving else "no")
    return ok(leaving=leaving)


# --------------------------------------------------------------------------
# Failed jobs.


def node_addresses(request: web.Request) -> dict[str, str]:
    """Every node with an address, this one included: ``{id: "host:port"}``."""
    gatherer = gatherer_of(request)
    return {state_of(request).node.myself.decode(): gatherer.own_address(), **gatherer.peers()}


def failed_nodes(request: web.Request) -> failed.Nodes:
    """The cluster as the request reaches it: every node with an address, actions here."""
    gatherer = gatherer_of(request)
    return failed.Nodes(node_addresses(request), gatherer.own_address(), gatherer.command)


async def failed_jobs(request: web.Request) -> web.Response:
    query = request.query
    try:
        chosen = failed.Filter.parse({**query, "dlq": query.getall("dlq", [])})
        after = pages.parse_cursor(query.get("cursor"))
    except ValueError as e:
        return fail(400, str(e))
    limit = int_param(request, "limit", view.DEFAULT_COUNT, 0, view.MAX_COUNT)
    listing = await failed.read(failed_nodes(request), chosen)
    return reply(listing.page(chosen, limit, after))


async def failed_action(request: web.Request) -> web.Response:
    body = await body_of(request)
    ids, every = body.get("ids"), body.get("all", False)
    try:
        if not isinstance(every, bool):
            raise ValueError('"all" must be true or false')
        if every == (ids is not None):
            raise ValueError('give "ids" (a list of job IDs) or "all": true (with filters)')
        chosen = failed.Filter.parse(body)
        named = None if every else failed.check_ids(ids)
    except ValueError as e:
        return fail(400, str(e))
    action = request.match_info["action"]
    report = await failed.apply(failed_nodes(request), action, chosen, named)
    return ok(**report.as_json())


# --------------------------------------------------------------------------
# Workflows.


async def workflow_list(request: web.Request) -> web.Response:
    try:
        after = pages.parse_cursor(request.query.get("cursor"))
    except ValueError as e:
        return fail(400, str(e))
    limit = int_param(request, "limit", 20, 0, view.MAX_COUNT)
    client = gatherer_of(request).client()
    return reply(await workflows.listing(client, node_addresses(request), limit, after))


async def workflow(request: web.Request) -> web.Response:
    workflow_id = job_id(request).decode()
    try:
        state = workflows.check_state(request.query.get("state"))
    except ValueError as e:
        return fail(400, str(e))
    offset = int_param(request, "offset", 0, 0, 1 << 62)
    limit = int_param(request, "limit", view.DEFAULT_COUNT, 0, view.MAX_COUNT)
    client = gatherer_of(request).client()
    found = await workflows.detail(
        client, node_addresses(request), workflow_id, offset, limit, state
    )
    return reply(found) if found is not None else fail(404, "no such workflow")


async def workflow_cancel(request: web.Request) -> web.Response:
    workflow_id = job_id(request).decode()
    client = gatherer_of(request).client()
    done = await workflows.cancel(client, node_addresses(request), workflow_id)
    return ok(**done) if done is not None else fail(404, "no such workflow")


@web.middleware
async def command_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A command's error reply is the action's 400; a node that does not answer, 504."""
    try:
        return await handler(request)
    except ResponseError as e:
        return fail(400, str(e))
    except TimeoutError:
        return fail(504, "a node did not answer in time")
    except (OSError, ConnectionError) as e:
        return fail(502, f"a node could not be reached: {e}")


def add_routes(app: web.Application) -> None:
    """The API's routes, and the helpers they share (build_app calls it)."""
    state = app[STATE]
    gatherer = Gatherer(state)
    app[GATHERER] = gatherer
    app[HISTORY] = History(gatherer)
    app.middlewares.append(command_errors)
    r = app.router
    r.add_get("/api/cluster", cluster)
    r.add_get("/api/queues", queues)
    r.add_get("/api/queues/{name:.+}/jobs", queue_jobs)
    r.add_post("/api/queues/{name:.+}/jobs", add_job)
    r.add_post("/api/queues/{name:.+}/pause", pause)
    r.add_get("/api/queues/{name:.+}", queue)
    r.add_post("/api/jobs/{id:.+}/{action:enqueue|dequeue|delete|nack}", job_action)
    r.add_get("/api/jobs/{id:.+}", job)  # (an ID may hold a slash)
    r.add_post("/api/nodes/{id}/leave", leave)
    r.add_get("/api/failed", failed_jobs)
    r.add_post("/api/failed/{action:retry|delete}", failed_action)
    r.add_get("/api/workflows", workflow_list)
    r.add_post("/api/workflows/{id:.+}/cancel", workflow_cancel)
    r.add_get("/api/workflows/{id:.+}", workflow)

    async def closing(app: web.Application) -> None:
        await gatherer.close()

    app.on_cleanup.append(closing)
