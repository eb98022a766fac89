"""A workflow's state and progress on a real three-node cluster, read from its ID on any
node: a chord's progress moves from pending to succeeded with its result; a failing
member shows failed, and fails the workflow; cancelling from the ID cancels what is
pending; the three nodes agree. The same through the JSON API (list, detail, cancel,
bad input) with real HTTP, and through ``disquette workflows`` run as a process. One
cluster and one worker per node for the module; every wait has a deadline."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from disquette import Client
from disquette.client.workflow_record import QUEUE
from disquette.tasks import App
from disquette.tasks.workflow import Handle, chord, group
from tests.integration.test_http_api import get, post
from tests.support.cluster import Cluster, running_cluster
from tests.support.servers import wait_for

DEADLINE = 120
QUEUE_NAME = "wf-state"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("wfstate"), 3, http=True) as c:
        yield c


@pytest.fixture(scope="module")
def gate() -> threading.Event:
    """Released by a test: the ``held`` task waits for it."""
    return threading.Event()


@pytest.fixture(scope="module")
def tasks(cluster: Cluster, gate: threading.Event) -> Iterator[dict[str, Any]]:
    """The same tasks on an app per node, a worker on threads on each; the first app's
    tasks (the producer's)."""
    apps, workers = [], []
    for address in cluster.addresses:
        app = App(address)

        @app.task(queue=QUEUE_NAME, name="held")
        def held(x: int) -> int:
            gate.wait(DEADLINE)
            return x * 10

        @app.task(queue=QUEUE_NAME, name="square")
        def square(x: int) -> int:
            return x * x

        @app.task(queue=QUEUE_NAME, name="fails", max_retries=0)
        def fails(x: int) -> None:
            raise RuntimeError(f"member {x} fails")

        @app.task(queue=QUEUE_NAME, name="later", delay=3600)
        def later(x: int) -> int:
            return x

        @app.task(queue=QUEUE_NAME, name="total")
        def total(results: list[int | None]) -> int:
            return sum(r for r in results if r is not None)

        worker = app.worker(poll_timeout=0.1)
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        apps.append(app)
        workers.append((worker, thread))
    yield apps[0].tasks
    gate.set()
    for worker, _ in workers:
        worker.stop(hurry=True)
    for (_, thread), app in zip(workers, apps, strict=True):
        thread.join(30)
        app.client.close()


@pytest.fixture(scope="module")
def clients(cluster: Cluster) -> Iterator[list[Client]]:
    """A client of each node (reads from each)."""
    made = [Client(address) for address in cluster.addresses]
    yield made
    for client in made:
        client.close()


def settled(handle: Handle) -> str:
    """The workflow's state once it is no longer running."""
    wait_for(lambda: handle.state().state != "running", DEADLINE, 0.05, "the workflow to finish")
    return handle.state().state


def test_a_chords_progress_moves_from_pending_to_succeeded(tasks, gate, clients):
    handle = chord((tasks["held"].s(i) for i in range(4)), tasks["total"].s(), name="album").send()
    assert handle.id and handle.kind == "chord" and handle.name == "album"
    other = Handle.of(clients[2], handle.id)  # from its ID, on another node
    assert (other.members, other.steps, other.kind, other.name) == (
        handle.members, handle.steps, "chord", "album"
    )  # fmt: skip
    pending = other.state()
    assert pending.state == "running" and pending.result is None
    callback = pending.jobs[-1]
    assert callback.job.role == "callback" and callback.state == "waiting"
    assert {j.state for j in pending.jobs[:4]} <= {"queued", "active"}
    summary = pending.summary(0)
    assert summary["percent"] == 0 and summary["done"] == 0 and summary["jobs"] == 5
    gate.set()
    assert settled(other) == "succeeded"
    done = other.state()
    assert done.result == 60 and done.counts()["succeeded"] == 5
    assert done.summary(0)["percent"] == 100
    assert [j.result for j in done.jobs] == ["0", "10", "20", "30", "60"]


def test_a_failing_member_shows_failed(tasks, clients):
    members = [tasks["square"].s(2), tasks["fails"].s(3)]
    handle = chord(members, tasks["total"].s()).send()
    assert settled(handle) == "failed"
    reading = Handle.of(clients[1], handle.id).state()
    states = {j.job.id: j.state for j in reading.jobs}
    assert states == {
        handle.members[0]: "succeeded",
        handle.members[1]: "failed",
        handle.last: "failed",
    }  # fmt: skip  (the callback: rejected)
    assert reading.summary(0)["failed"] == [handle.members[1], handle.last]


def test_cancel_from_the_id_cancels_what_is_pending_and_every_node_agrees(tasks, clients):
    handle = group((tasks["later"].s(i) for i in range(5)), name="delayed").send()
    assert Handle.of(clients[1], handle.id).cancel() == 5
    assert settled(handle) == "cancelled"
    readings = [Handle.of(client, handle.id).state() for client in clients]
    assert all(r.counts()["cancelled"] == 5 for r in readings)
    assert len({json.dumps(r.summary(0), sort_keys=True) for r in readings}) == 1


def test_a_workflow_without_a_record_is_unknown(clients):
    with pytest.raises(LookupError):
        Handle.of(clients[0], "D-00000000-000000000000000000000000-0000")
    assert clients[0].qlen(QUEUE) >= 0  # (the reserved queue is an ordinary queue)


# ------------------------------------------------------------------ the JSON API


def api(cluster: Cluster, path: str, node: int = 0) -> tuple[int, dict[str, Any]]:
    return get(cluster.servers[node].http_url + path)


def test_the_api_lists_shows_and_cancels(cluster, tasks):
    done = group((tasks["square"].s(i) for i in range(3)), name="squares").send()
    assert settled(done) == "succeeded"
    pending = group((tasks["later"].s(i) for i in range(3)), name="api-later").send()
    status, listing = api(cluster, "/api/workflows?limit=100", node=1)
    assert status == 200 and listing["unanswered"] == []
    shown = {w["id"]: w for w in listing["workflows"]}
    assert shown[done.id]["state"] == "succeeded" and shown[done.id]["name"] == "squares"
    assert shown[done.id]["percent"] == 100 and shown[done.id]["result"] == [0, 1, 4]
    assert shown[pending.id]["state"] == "running" and shown[pending.id]["percent"] == 0
    assert shown[pending.id]["counts"]["active"] == 3  # (delayed: active until queued)
    created = [w["created"] for w in listing["workflows"]]
    assert created == sorted(created, reverse=True)  # newest first
    first = api(cluster, "/api/workflows?limit=1")[1]
    second = api(cluster, f"/api/workflows?limit=1&cursor={quote(first['next'])}")[1]
    assert first["workflows"][0]["id"] != second["workflows"][0]["id"]
    status, detail = api(cluster, f"/api/workflows/{quote(done.id)}?limit=2", node=2)
    assert status == 200 and detail["workflow"]["kind"] == "group"
    assert [j["id"] for j in detail["jobs"]] == done.members[:2] and detail["next"] == 2
    assert detail["jobs"][1] == {"id": done.members[1], "role": "member", "task": "square",
                                 "state": "succeeded", "result": "1"}  # fmt: skip
    status, reply = post(cluster.servers[2].http_url + f"/api/workflows/{quote(pending.id)}/cancel")
    assert status == 200 and reply["cancelled"] == 3
    wait_for(lambda: api(cluster, f"/api/workflows/{quote(pending.id)}")[1]["workflow"]["state"]
             == "cancelled", DEADLINE, 0.05, "cancelled")  # fmt: skip
    cancelled = api(cluster, f"/api/workflows/{quote(pending.id)}?state=cancelled")[1]
    assert cancelled["matching"] == 3


def test_the_api_refuses_bad_input(cluster):
    unknown = "D-00000000-000000000000000000000000-0000"
    for path, status, reason in (
        ("/api/workflows?cursor=bogus", 400, "malformed cursor"),
        ("/api/workflows?limit=-1", 400, "limit must be between"),
        ("/api/workflows/not-an-id", 400, "BADID"),
        (f"/api/workflows/{unknown}?state=done", 400, "state must be one of"),
        (f"/api/workflows/{unknown}", 404, "no such workflow"),
    ):
        got, reply = api(cluster, path)
        assert got == status and reason in reply["error"], path
    got, reply = post(cluster.servers[0].http_url + f"/api/workflows/{unknown}/cancel")
    assert got == 404 and reply["error"] == "no such workflow"


# ------------------------------------------------------------------ the CLI


def disquette_workflows(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "disquette.cli.main", "workflows", *args]
    return subprocess.run(
        [*argv, "--node", cluster.addresses[1]], capture_output=True, text=True, timeout=60
    )


def test_the_cli_lists_shows_and_cancels(cluster, tasks):
    handle = chord([tasks["later"].s(1), tasks["later"].s(2)], tasks["total"].s(),
                   name="cli-chord").send()  # fmt: skip
    listed = disquette_workflows(cluster, "list")
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith(handle.id))
    assert line.split()[1:5] == ["chord", "cli-chord", "running", "0/3"]
    shown = disquette_workflows(cluster, "show", handle.id)
    assert shown.returncode == 0, shown.stderr
    assert "state: running, 0% done (0 of 3 jobs: 1 waiting, 2 active)" in shown.stdout
    assert f"{handle.last}  callback  total  waiting" in shown.stdout
    cancelled = disquette_workflows(cluster, "cancel", handle.id)
    assert cancelled.returncode == 0 and cancelled.stdout.startswith("cancelled "), cancelled
    assert settled(handle) == "cancelled"
    as_json = json.loads(disquette_workflows(cluster, "show", handle.id, "--json").stdout)
    assert as_json["workflow"]["state"] == "cancelled"
    missing = disquette_workflows(cluster, "show", "D-00000000-000000000000000000000000-0000")
    assert missing.returncode == 1 and "no workflow" in missing.stderr
    bad = disquette_workflows(cluster, "show", handle.id, "--state", "done")
    assert bad.returncode == 2 and "state must be one of" in bad.stderr
