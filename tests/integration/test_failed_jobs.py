"""Failed jobs on a real three-node cluster: dead letters made by a queue policy and by
the task API's worker (with its traceback), listed once across nodes through the JSON
API with real HTTP, filtered and paged; retried back to their origin queue with fresh
counters (and a retry sent twice adding one job), deleted, one by one and all at
once, every dead letter removed on every node; bad input refused with a 400; and the
same from ``disquette failed``, run as a process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

import disquette
from disquette.aio import Client
from disquette.observe import failed
from disquette.tasks import App
from tests.integration.test_http_api import get, post
from tests.support.cluster import Cluster, running_cluster
from tests.support.dead_letters import policy_dead_letters, worker_dead_letters
from tests.support.servers import wait_for

TASK = "billing.charge"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("failed"), 3, http=True) as c:
        yield c


@pytest.fixture(scope="module")
def letters(cluster: Cluster) -> dict[str, str]:
    """One dead letter of each kind: ``policy`` (queue orders, in orders-dead) and
    ``task`` (billing.charge on queue billing, in the task API's dead-letters)."""
    (policy,) = policy_dead_letters(cluster, "orders", ["order 7"])
    app = App(cluster.addresses[0], max_retries=0)

    @app.task(queue="billing", name=TASK)
    def charge(amount: int) -> None:
        raise RuntimeError(f"card declined for {amount}")

    charge.send(42)
    (task,) = worker_dead_letters(cluster, app, "billing", "dead-letters", 1)
    app.client.close()
    return {"policy": policy, "task": task}


def listing(cluster: Cluster, node: int = 0, **params: Any) -> dict[str, Any]:
    query = urllib.parse.urlencode(params, doseq=True)
    status, reply = get(cluster.servers[node].http_url + "/api/failed?" + query)
    assert status == 200, reply
    return reply


def act(cluster: Cluster, action: str, body: dict[str, Any]) -> dict[str, Any]:
    status, reply = post(cluster.servers[0].http_url + f"/api/failed/{action}", body)
    assert status == 200, reply
    return reply


def gone_everywhere(cluster: Cluster, job_id: str) -> None:
    every = range(len(cluster.servers))
    wait_for(lambda: cluster.acked_or_gone(job_id.encode(), every), what=f"{job_id} removed")


def test_both_kinds_listed_once_with_their_origin(cluster, letters):
    reply = listing(cluster, node=2)
    jobs = {job["id"]: job for job in reply["jobs"]}
    assert set(letters.values()) <= set(jobs) and len(jobs) == len(reply["jobs"])
    assert {"dead-letters", "orders-dead"} <= set(reply["dead_letter_queues"])
    assert reply["unanswered"] == [] and not reply["truncated"]
    policy = jobs[letters["policy"]]
    assert policy["kind"] == "policy" and policy["queue"] == "orders-dead"
    assert policy["origin_queue"] == "orders" and policy["origin_id"].startswith("D-")
    assert policy["reason"] == "queue policy" and policy["error"] is None
    assert policy["nacks"] == 1 and policy["body"] == "order 7" and policy["task"] is None
    assert len(policy["nodes"]) >= 1 and policy["ctime"] > 0 and policy["age"] >= 0
    task = jobs[letters["task"]]
    assert task["kind"] == "worker" and task["queue"] == "dead-letters"
    assert task["origin_queue"] == "billing" and task["task"] == TASK
    assert "Traceback" in task["error"] and "RuntimeError: card declined for 42" in task["error"]
    assert reply["counts"]["tasks"][TASK] >= 1 and reply["counts"]["queues"]["orders"] >= 1


def test_filters_and_pages(cluster, letters):
    def ids(**params: Any) -> set[str]:
        return {job["id"] for job in listing(cluster, **params)["jobs"]}

    both = set(letters.values())
    assert ids(queue="orders") == {letters["policy"]}
    assert ids(task=TASK) == {letters["task"]}
    assert ids(error="CARD DECLINED") == {letters["task"]}  # any case, in the traceback
    assert ids(dlq="orders-dead") == {letters["policy"]}
    assert ids(dlq=["orders-dead", "dead-letters"], max_age="1d") == both
    assert ids(dlq="orders-dead", min_age="1d") == set()
    first = listing(cluster, dlq=["orders-dead", "dead-letters"], limit=1)
    assert first["total"] == 2 and len(first["jobs"]) == 1 and first["next"]
    second = listing(cluster, dlq=["orders-dead", "dead-letters"], limit=1, cursor=first["next"])
    assert {first["jobs"][0]["id"], second["jobs"][0]["id"]} == both and second["next"] is None
    assert first["jobs"][0]["ctime"] >= second["jobs"][0]["ctime"]  # newest first


def test_bad_input_is_a_400_with_its_reason(cluster):
    url = cluster.servers[0].http_url + "/api/failed"
    for query, reason in (
        ("min_age=soon", "min_age must be a duration"),
        ("min_age=2h&max_age=1h", "min_age (older than) is above max_age"),
        ("cursor=bogus", "malformed cursor"),
        ("limit=5000", "limit must be between 0 and 1000"),
        ("queue=~b64~a", "queue: malformed ~b64~ queue name"),
    ):
        status, reply = get(f"{url}?{query}")
        assert status == 400 and reason in reply["error"], query
    for body, reason in (
        ({}, 'give "ids"'),
        ({"ids": ["D-nope"]}, "BADID"),
        ({"ids": "D-1"}, "ids must be a non-empty list"),
        ({"ids": [], "all": True}, 'give "ids"'),
        ({"all": "yes"}, '"all" must be true or false'),
        ({"all": True, "max_age": -1}, "max_age must be a duration of 0 seconds or more"),
    ):
        status, reply = post(url + "/retry", body)
        assert status == 400 and reason in reply["error"], body
    missing = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
    reply = act(cluster, "delete", {"ids": [missing]})
    assert reply["failed"] == 1 and "no such dead letter" in reply["results"][0]["error"]


def test_retry_one_puts_it_back_with_fresh_counters(cluster):
    origin = policy_dead_letters(cluster, "refund", ["refund 9", "refund 10"])
    letter, other = sorted(origin)
    reply = act(cluster, "retry", {"ids": [letter]})
    assert reply["done"] == 1 and reply["failed"] == 0
    (result,) = reply["results"]
    assert result["id"] == letter and result["retried"] and result["job"] != origin[letter]
    shown = cluster.show(0, result["job"].encode())
    assert shown["queue"] == b"refund" and shown["nacks"] == 0
    assert shown["additional-deliveries"] == 0 and shown["dedup"] == f"retry:{letter}".encode()
    gone_everywhere(cluster, letter)
    assert [job["id"] for job in listing(cluster, dlq="refund-dead")["jobs"]] == [other]
    again = act(cluster, "retry", {"ids": [letter]})
    assert again["failed"] == 1 and "no such dead letter" in again["results"][0]["error"]
    # A job of a queue that is no dead-letter queue is not acted on.
    plain = cluster.command(0, "ADDJOB", "refund", "plain", 0).decode()
    refused = act(cluster, "delete", {"ids": [plain]})["results"][0]["error"]
    assert "is no dead-letter queue" in refused


def test_a_retry_sent_twice_adds_one_job(cluster):
    (letter,) = policy_dead_letters(cluster, "twice", ["once"])

    async def twice() -> list[failed.Outcome]:
        async with Client(cluster.addresses[0]) as client:

            async def run(address: str, *args: Any) -> Any:
                return await client.on_node(address).execute(*args)

            addresses = dict(zip((i.decode() for i in cluster.ids), cluster.addresses, strict=True))
            nodes = failed.Nodes(addresses, cluster.addresses[0], run)
            read = await failed.read(nodes, failed.Filter(("twice-dead",)))
            (job,) = read.jobs
            return list(await asyncio.gather(failed.retry(nodes, job), failed.retry(nodes, job)))

    first, second = asyncio.run(twice())
    assert first.job == second.job and first.error is None
    assert sum(cluster.command(i, "QLEN", "twice") for i in range(3)) == 1
    gone_everywhere(cluster, letter)


def test_retry_all_matching_then_delete(cluster):
    def handler(job: disquette.Job) -> None:
        raise ValueError(f"bad input: {job.body.decode()}")

    for n in range(3):
        cluster.command(0, "ADDJOB", "imports", f"row {n}", 0)
    worker_dead_letters(cluster, handler, "imports", "imports-dead", 3)
    everything = listing(cluster, dlq="imports-dead")
    assert everything["total"] == 3
    assert all("ValueError: bad input: row" in job["error"] for job in everything["jobs"])
    # Retry all that match: one, by its error text; it fails again into the queue.
    reply = act(cluster, "retry", {"all": True, "dlq": "imports-dead", "error": "row 1"})
    assert reply["done"] == 1 and reply["results"][0]["retried"]
    gone_everywhere(cluster, reply["results"][0]["id"])
    (job,) = cluster.command(0, "GETJOB", "FROM", "imports")
    assert job[2] == b"row 1"
    cluster.command(0, "ACKJOB", job[1])
    rest = [job["id"] for job in listing(cluster, dlq="imports-dead")["jobs"]]
    assert len(rest) == 2
    # A queue that no policy names is a dead-letter queue when the request names it.
    assert (
        "no dead-letter queue" in act(cluster, "delete", {"ids": rest[:1]})["results"][0]["error"]
    )
    assert act(cluster, "delete", {"ids": rest[:1], "dlq": "imports-dead"})["done"] == 1
    assert act(cluster, "delete", {"all": True, "dlq": "imports-dead"})["done"] == 1
    for letter in rest:
        gone_everywhere(cluster, letter)
    assert listing(cluster, dlq="imports-dead")["total"] == 0
    assert cluster.command(0, "QLEN", "imports") == 0  # deleting puts nothing back


def disquette_failed(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "disquette.cli.main", "failed", *args]
    return subprocess.run(
        [*argv, "--node", cluster.addresses[1]], capture_output=True, text=True, timeout=60
    )


def test_the_cli_lists_retries_and_deletes(cluster):
    origin = policy_dead_letters(cluster, "cli", ["one", "two", "three"])
    letter, *rest = sorted(origin)
    table = disquette_failed(cluster, "list", "--dlq", "cli-dead")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["id", "dead-letter", "queue"] and len(lines) == 4
    assert all(" cli-dead " in line and "queue policy" in line for line in lines[1:])
    listed = json.loads(disquette_failed(cluster, "list", "--dlq", "cli-dead", "--json").stdout)
    assert {job["id"] for job in listed["jobs"]} == set(origin) and listed["total"] == 3
    retried = disquette_failed(cluster, "retry", letter, "--dlq", "cli-dead")
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.startswith(f"retried {letter} as D-")
    assert retried.stdout.endswith("1 done, 0 failed\n")
    deleted = disquette_failed(cluster, "delete", "--all", "--dlq", "cli-dead")
    assert deleted.returncode == 0 and set(deleted.stdout.split()) >= {f"{i}" for i in rest}
    for job_id in origin:
        gone_everywhere(cluster, job_id)
    again = disquette_failed(cluster, "delete", letter)
    assert again.returncode == 1 and again.stdout.startswith(f"failed {letter}: no such")
    usage = disquette_failed(cluster, "retry", "--min-age", "soon", "--all")
    assert usage.returncode == 2 and "min_age must be a duration" in usage.stderr
    both = disquette_failed(cluster, "retry", letter, "--all")
    assert both.returncode == 2 and "or --all" in both.stderr
