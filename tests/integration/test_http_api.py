"""The JSON API on a real three-node cluster: jobs added with redis-cli, read back
from any node's HTTP port with real HTTP (urllib); a killed node listed in
``unanswered`` and shown failing; the actions seen through redis-cli; the password
(401 and nothing done), the CSRF rule (403 and nothing done); hostile names and
bodies coming back intact in JSON."""

from __future__ import annotations

import base64
import json
import urllib.parse

import pytest

from tests.integration.test_http_port import request
from tests.support.cluster import running_cluster
from tests.support.servers import redis_cli, running_server, wait_for

ACTION = {"X-Disquette-Action": "1", "Content-Type": "application/json"}


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    status, _, body = request(url, headers=headers)
    return status, json.loads(body)


def post(url: str, body: object = None, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    status, _, reply = request(url, "POST", headers if headers is not None else ACTION, data)
    return status, json.loads(reply)


def node_of(url: str, node_id: str) -> dict:
    return next(n for n in get(url + "/api/cluster")[1]["nodes"] if n["id"] == node_id)


def flags_of(url: str, node_id: str) -> list[str]:
    return node_of(url, node_id)["flags"]


def quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("http"), 3, http=True) as c:
        yield c


def add(cluster, node: int, queue: str, body: str, *options: str) -> str:
    return redis_cli(cluster.servers[node].port, "ADDJOB", queue, body, "0", *options)


def test_cluster_lists_every_node_from_any_node(cluster):
    for server in cluster.servers:
        status, reply = get(server.http_url + "/api/cluster")
        assert status == 200 and reply["unanswered"] == []
        assert {n["id"] for n in reply["nodes"]} == {i.decode() for i in cluster.ids}
        for node in reply["nodes"]:
            assert node["state"] == "ok" and node["http"].startswith("http://127.0.0.1:")
            assert node["memory"]["max"] > 0 and node["aof"] == "off"
        assert set(reply["history"]) == {"t", "jobs_in", "jobs_out"}


def test_queues_merged_across_nodes_and_paged(cluster):
    for node in range(3):
        add(cluster, node, "merged-q", f"job on {node}")
    add(cluster, 1, "merged-r", "x")
    url = cluster.servers[2].http_url
    status, reply = get(url + "/api/queues?prefix=merged-&limit=1")
    assert status == 200 and [q["name"] for q in reply["queues"]] == ["merged-q"]
    merged = reply["queues"][0]
    assert merged["len"] == 3 and len(merged["nodes"]) == 3 and reply["next"] == "merged-q"
    _, following = get(url + "/api/queues?prefix=merged-&limit=1&after=merged-q")
    assert [q["name"] for q in following["queues"]] == ["merged-r"] and following["next"] is None
    _, ranked = get(url + "/api/queues?prefix=merged-&sort=len")
    assert [q["name"] for q in ranked["queues"]] == ["merged-q", "merged-r"]
    status, one = get(url + "/api/queues/merged-q")
    assert status == 200 and one["queue"]["len"] == 3 and len(one["per_node"]) == 3
    assert get(url + "/api/queues/no-such-queue")[0] == 404
    assert get(url + "/api/queues?sort=bogus")[0] == 400
    assert get(url + "/api/queues?limit=1001")[0] == 400


def test_a_queues_jobs_paged_across_nodes(cluster):
    ids = {add(cluster, node, "paged", f"b{node}{k}") for node in range(3) for k in range(2)}
    url = cluster.servers[0].http_url + "/api/queues/paged/jobs"
    seen, offset = [], 0
    while offset is not None:
        _, page = get(f"{url}?limit=4&offset={offset}")
        seen += [job["id"] for job in page["jobs"]]
        offset = page["next"]
    assert sorted(seen) == sorted(ids) and page["len"] == 6


def test_one_job_with_its_copies(cluster):
    job_id = add(cluster, 0, "shown", "body", "REPLICATE", "3")
    status, reply = get(cluster.servers[1].http_url + f"/api/jobs/{quoted(job_id)}")
    assert status == 200 and reply["job"]["id"] == job_id and reply["job"]["body"] == "body"
    assert reply["replicate"] == 3 and reply["live"] == 3 and reply["synchronised"]
    assert {c["node"] for c in reply["copies"]} == {i.decode() for i in cluster.ids}
    assert get(cluster.servers[1].http_url + "/api/jobs/D-nope")[0] == 400
    missing = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
    assert get(cluster.servers[1].http_url + f"/api/jobs/{missing}")[0] == 404


def test_actions_seen_through_redis_cli(cluster):
    url = cluster.servers[0].http_url
    reply = post(url + "/api/queues/acted/pause", {"state": "out"})
    assert reply == (200, {"ok": True, "paused": "out"})
    for server in cluster.servers:  # BCAST: every node pauses it
        wait_for(lambda s=server: redis_cli(s.port, "PAUSE", "acted", "state") == "out")
    post(url + "/api/queues/acted/pause", {"state": "none"})
    assert post(url + "/api/queues/acted/pause", {"state": "sideways"})[0] == 400
    status, added = post(url + "/api/queues/acted/jobs", {"body": "from http", "replicate": 1})
    assert status == 200
    job_id = added["id"]
    assert redis_cli(cluster.servers[0].port, "QLEN", "acted") == "1"
    assert post(url + f"/api/jobs/{quoted(job_id)}/dequeue")[0] == 200
    assert redis_cli(cluster.servers[0].port, "QLEN", "acted") == "0"
    assert post(url + f"/api/jobs/{quoted(job_id)}/enqueue")[0] == 200
    assert redis_cli(cluster.servers[0].port, "QLEN", "acted") == "1"
    redis_cli(cluster.servers[0].port, "GETJOB", "FROM", "acted")
    assert post(url + f"/api/jobs/{quoted(job_id)}/nack")[0] == 200
    assert "nacks" in redis_cli(cluster.servers[0].port, "SHOW", job_id)
    assert get(url + f"/api/jobs/{quoted(job_id)}")[1]["job"]["nacks"] == 1
    assert post(url + f"/api/jobs/{quoted(job_id)}/delete")[0] == 200
    assert redis_cli(cluster.servers[0].port, "SHOW", job_id) == ""
    assert post(url + "/api/queues/acted/jobs", {"nobody": 1})[0] == 400
    assert post(url + "/api/queues/acted/jobs", {"body": "x", "ttl": "long"})[0] == 400


def test_leave_and_come_back(cluster):
    url = cluster.servers[0].http_url
    target = cluster.ids[2].decode()
    assert post(url + f"/api/nodes/{target}/leave", {"leaving": True})[0] == 200
    assert "leaving" in redis_cli(cluster.servers[2].port, "CLUSTER", "NODES")
    wait_for(lambda: "leaving" in flags_of(url, target), what="leaving seen")
    assert post(url + f"/api/nodes/{target}/leave", {"leaving": False})[0] == 200
    assert post(url + f"/api/nodes/{target}/leave", {"leaving": "maybe"})[0] == 400
    assert post(url + "/api/nodes/nobody/leave", {"leaving": True})[0] == 404
    # The others learn it back from the node's next frames (a node they see leaving is
    # no replication target), and count it reachable again at their next recompute (the
    # tests after this one replicate to all three).
    for server in cluster.servers:
        wait_for(lambda port=server.port: "leaving" not in redis_cli(port, "CLUSTER", "NODES"),
                 what=f"node {server.port} no longer sees a node leaving")  # fmt: skip
    cluster.wait_meshed()


HOSTILE_NAMES = ["<script>alert(1)</script>", "quo\"te's", "sp ace/slash?&#%", "é" * 300]


def test_hostile_names_and_bodies_come_back_intact(cluster):
    url = cluster.servers[0].http_url
    body = '<img src=x onerror=alert(1)> "quoted" \\ back'
    for name in HOSTILE_NAMES:
        status, added = post(url + f"/api/queues/{quoted(name)}/jobs", {"body": body})
        assert status == 200, added
        _, listed = get(url + f"/api/queues?prefix={quoted(name)}&limit=1")
        assert listed["queues"][0]["name"] == name
        _, jobs = get(url + f"/api/queues/{quoted(name)}/jobs")
        assert jobs["jobs"][0]["body"] == body and jobs["jobs"][0]["queue"] == name
    raw_name, raw_body = b"\xff\xfebin", b"\x00\xff\xc3("
    c = cluster.clients[0]
    job_id = c.execute_command("ADDJOB", raw_name, raw_body, 0).decode()
    escaped = "~b64~" + base64.urlsafe_b64encode(raw_name).decode()
    _, listed = get(url + f"/api/queues?prefix={quoted(escaped)}")
    assert listed["queues"][0]["name"] == escaped
    _, shown = get(url + f"/api/jobs/{quoted(job_id)}")
    assert base64.b64decode(shown["job"]["body_b64"]) == raw_body
    assert shown["job"]["queue"] == escaped


def test_a_killed_node_is_unanswered_then_failing(tmp_path):
    args = ["--cluster-node-timeout", "1000"]
    with running_cluster(tmp_path, 3, args, http=True) as c:
        url = c.servers[0].http_url
        gone = c.ids[2].decode()
        c.kill(2)
        status, reply = get(url + "/api/cluster")
        assert status == 200 and reply["unanswered"] == [gone]

        def shown_failing() -> bool:
            node = node_of(url, gone)
            return node["state"] in ("pfail", "fail") and node["jobs"] is None

        wait_for(shown_failing, what="the killed node shown failing")
        wait_for(lambda: "fail" in flags_of(url, gone), what="FAIL")
        assert get(url + "/api/queues")[1]["unanswered"] == [gone]


def test_password_guards_reads_and_actions(tmp_path):
    with running_server(tmp_path, ["--requirepass", "pw"], http=True) as server:
        url = server.http_url
        assert get(url + "/api/cluster")[0] == 401
        assert post(url + "/api/queues/guarded/jobs", {"body": "x"})[0] == 401
        wrong = {**ACTION, "Authorization": "Bearer nope"}
        assert post(url + "/api/queues/guarded/jobs", {"body": "x"}, wrong)[0] == 401
        assert redis_cli(server.port, "-a", "pw", "QLEN", "guarded") == "0"  # nothing done
        basic = "Basic " + base64.b64encode(b"default:pw").decode()
        assert get(url + "/api/cluster", {"Authorization": basic})[0] == 200
        right = {**ACTION, "Authorization": "Bearer pw"}
        assert post(url + "/api/queues/guarded/jobs", {"body": "x"}, right)[0] == 200
        assert redis_cli(server.port, "-a", "pw", "QLEN", "guarded") == "1"


def test_csrf_refusals_do_nothing(cluster):
    url = cluster.servers[0].http_url + "/api/queues/csrf/jobs"
    no_header = {"Content-Type": "application/json"}
    assert post(url, {"body": "x"}, no_header)[0] == 403
    foreign = {**ACTION, "Origin": "http://attacker.example"}
    assert post(url, {"body": "x"}, foreign)[0] == 403
    assert redis_cli(cluster.servers[0].port, "QLEN", "csrf") == "0"
