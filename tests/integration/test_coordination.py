"""Dependencies (ADDJOB AFTER), progress logs (WORKING text, JOBLOG) and claim
numbers (GETJOB WITHCLAIM, CLAIM n) on real servers.

Single-node tests share one server (each uses its own queues); the cluster tests
share three nodes of their own. redis-cli, redis-py (protocol 2) and a raw RESP
connection talk to the processes; every wait is a condition with a deadline.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster import DEADLINE, Cluster, pairs
from tests.support.cluster import running_cluster as cluster
from tests.support.raw import Error, RawConnection, Status
from tests.support.servers import redis_cli, running_server, wait_for

UNKNOWN = b"D-dddddddd-" + b"x" * 24 + b"-05a1"


def add(raw: RawConnection, queue: bytes, body: bytes = b"body", *options: object) -> bytes:
    reply = raw.command(b"ADDJOB", queue, body, 0, *options)
    assert isinstance(reply, Status), reply
    return bytes(reply)


def show(raw: RawConnection, job_id: bytes) -> dict:
    return pairs(raw.command(b"SHOW", job_id))


def take(raw: RawConnection, queue: bytes, *options: object) -> list:
    return raw.command(b"GETJOB", b"NOHANG", *options, b"COUNT", 100, b"FROM", queue) or []


# ---------------------------------------------------------------- one node


def test_a_chain_runs_in_order(raw, queue):
    first = add(raw, queue, b"first")
    second = add(raw, queue, b"second", b"AFTER", first)
    third = add(raw, queue, b"third", b"AFTER", second)
    assert show(raw, third)["state"] == b"waiting"
    assert show(raw, third)["waiting-for"] == [second]
    assert show(raw, third)["if-gone"] == b"fail"
    for expected, jid in [(b"first", first), (b"second", second), (b"third", third)]:
        [[_, got, body]] = take(raw, queue)
        assert (got, body) == (jid, expected)
        assert take(raw, queue) == []  # the next one still waits
        assert raw.command(b"ACKJOB", jid) == 1
        wait_for(lambda jid=jid: raw.command(b"SHOW", jid) is None or jid == third, DEADLINE)


def test_a_fan_in_waits_for_every_parent(raw, queue):
    parents = [add(raw, queue, b"p%d" % i) for i in range(3)]
    child = add(raw, queue + b"-then", b"child", *[x for p in parents for x in (b"AFTER", p)])
    assert set(show(raw, child)["waiting-for"]) == set(parents)
    _, found = raw.command(b"JSCAN", b"BUSYLOOP", b"STATE", b"waiting")
    assert child in found
    _, active = raw.command(b"JSCAN", b"BUSYLOOP", b"QUEUE", queue + b"-then", b"STATE", b"active")
    assert active == []
    for parent in parents[:2]:
        raw.command(b"ACKJOB", parent)
    assert show(raw, child)["waiting-for"] == [parents[2]]
    raw.command(b"FASTACK", parents[2])
    wait_for(lambda: show(raw, child)["state"] == b"queued", DEADLINE, what="the child queued")
    assert "waiting-for" not in show(raw, child)


def test_a_dependency_gone_fails_or_releases_as_asked(raw, queue):
    parent = add(raw, queue, b"parent", b"TTL", 1)
    fails = add(raw, queue, b"fails", b"AFTER", parent)
    runs = add(raw, queue, b"runs", b"AFTER", parent, b"IFGONE", b"release")
    assert show(raw, runs)["if-gone"] == b"release"
    wait_for(lambda: raw.command(b"SHOW", fails) is None, DEADLINE, what="the failed job gone")
    wait_for(lambda: show(raw, runs)["state"] == b"queued", DEADLINE, what="the released job")
    assert raw.command(b"QLEN", queue) == 1
    info = raw.command(b"INFO", b"extensions").decode()
    assert "jobs_failed_by_dependencies:" in info and "jobs_released:" in info


def test_deljob_of_a_dependency_counts_as_gone(raw, queue):
    parent = add(raw, queue, b"parent")
    child = add(raw, queue, b"child", b"AFTER", parent)
    raw.command(b"DELJOB", parent)
    wait_for(lambda: raw.command(b"SHOW", child) is None, DEADLINE, what="the child failed")


def test_enqueue_releases_a_waiting_job(raw, queue):
    child = add(raw, queue, b"child", b"AFTER", add(raw, queue + b"-other"))
    assert raw.command(b"NACK", child) == 0
    assert raw.command(b"ENQUEUE", child) == 1
    assert [j[1] for j in take(raw, queue)] == [child]


def test_after_and_ifgone_errors(raw, queue):
    assert raw.command(b"ADDJOB", queue, b"x", 0, b"AFTER", b"nope") == Error(
        b"BADID Invalid Job ID format."
    )
    assert raw.command(b"ADDJOB", queue, b"x", 0, b"IFGONE", b"release") == Error(
        b"ERR IFGONE needs AFTER"
    )
    assert raw.command(b"ADDJOB", queue, b"x", 0, b"AFTER", UNKNOWN, b"IFGONE", b"x") == Error(
        b"ERR IFGONE must be fail or release"
    )
    many = [x for i in range(257) for x in (b"AFTER", UNKNOWN[:11] + b"%024x" % i + UNKNOWN[35:])]
    assert raw.command(b"ADDJOB", queue, b"x", 0, *many) == Error(
        b"ERR too many AFTER dependencies (at most 256)"
    )
    assert raw.command(b"ADDJOB", queue, b"x", 0, b"AFTER") == Error(b"ERR syntax error")


def test_after_an_unknown_job_on_a_lone_node_is_queued_at_once(raw, queue):
    jid = add(raw, queue, b"x", b"AFTER", UNKNOWN)
    assert show(raw, jid)["state"] == b"queued"


def test_progress_is_logged_shown_and_bounded(raw, queue):
    jid = add(raw, queue)
    assert raw.command(b"JOBLOG", jid) == []
    assert "progress" not in show(raw, jid)
    assert raw.command(b"WORKING", jid, b"step 1") == raw.command(b"WORKING", jid)
    raw.command(b"WORKING", jid, b"step \xff 2")
    log = raw.command(b"JOBLOG", jid)
    assert [entry[2] for entry in log] == [b"step 1", b"step \xff 2"]
    assert all(isinstance(entry[0], int) and len(entry[1]) == 40 for entry in log)
    assert show(raw, jid)["progress"] == log
    for i in range(62):
        raw.command(b"WORKING", jid, b"%d" % i)
    assert raw.command(b"WORKING", jid, b"more") == Error(
        b"LOGFULL The job's progress log is full (64 entries)"
    )
    assert raw.command(b"WORKING", jid, b"x" * 1025) == Error(
        b"ERR progress text longer than 1024 bytes"
    )
    assert raw.command(b"WORKING", jid, b"") == Error(b"ERR empty progress text")
    assert raw.command(b"WORKING", jid, b"a", b"b") == Error(b"ERR syntax error")
    assert raw.command(b"JOBLOG", UNKNOWN) == Error(
        b"NOJOB Job not known in the context of this node."
    )
    assert raw.command(b"JOBLOG", b"bad") == Error(b"BADID Invalid Job ID format.")


def test_claims_fence_a_stale_worker(raw, queue):
    jid = add(raw, queue)
    [[_, got, _, claim_word, first]] = take(raw, queue, b"WITHCLAIM")
    assert (got, claim_word, first) == (jid, b"claim", 1)
    assert raw.command(b"NACK", jid, b"CLAIM", 1) == 1
    [[*_, nacks, n, _, _, _, second]] = take(raw, queue, b"WITHCOUNTERS", b"WITHCLAIM")
    assert (nacks, n, second) == (b"nacks", 1, 2)
    stale = Error(b"STALECLAIM Job " + jid + b" was delivered again since claim 1 (now 2)")
    assert raw.command(b"ACKJOB", jid, b"CLAIM", 1) == stale
    assert raw.command(b"WORKING", jid, b"CLAIM", 1, b"late") == stale
    assert raw.command(b"JOBLOG", jid) == []  # nothing of a refused command was done
    assert raw.command(b"WORKING", jid, b"CLAIM", 2, b"on time") > 0
    assert show(raw, jid)["claim"] == 2
    assert raw.command(b"ACKJOB", jid, b"CLAIM", 0) == Error(
        b"ERR CLAIM must be a number greater than zero"
    )
    assert raw.command(b"ACKJOB", b"CLAIM", 2) == Error(b"ERR syntax error")
    assert raw.command(b"ACKJOB", jid, b"CLAIM", 2) == 1


def test_plain_getjob_replies_are_disques(raw, queue):
    jid = add(raw, queue)
    [[*_, claim]] = take(raw, queue, b"WITHCLAIM")
    raw.command(b"NACK", jid)
    # A job with a claim counts every delivery, but shows it only to WITHCLAIM.
    assert take(raw, queue) == [[queue, jid, b"body"]]
    assert show(raw, jid)["claim"] == claim + 1


def test_redis_cli_speaks_the_extensions(shared_server, queue):
    def run(*args: str) -> str:
        return redis_cli(shared_server.port, *args)

    q = queue.decode()
    parent = run("ADDJOB", q, "parent", "0")
    child = run("ADDJOB", q, "child", "0", "AFTER", parent)
    assert run("SHOW", child).splitlines()[5] == "waiting"
    assert run("WORKING", parent, "almost done") == "300"
    assert run("JOBLOG", parent).splitlines()[-1] == "almost done"
    assert run("ACKJOB", parent) == "1"


def test_logs_and_claims_survive_a_restart_with_the_aof(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as raw:
        port = srv.port
        jid = add(raw, b"q")
        waiting = add(raw, b"q2", b"w", b"AFTER", add(raw, b"q3"))
        take(raw, b"q", b"WITHCLAIM")
        raw.command(b"WORKING", jid, b"kept")
    with (
        running_server(tmp_path, ["--appendonly", "yes"], port=port) as srv,
        RawConnection(srv.port) as raw,
    ):
        wait_for(lambda: raw.command(b"SHOW", jid) is not None, DEADLINE, what="the AOF loaded")
        assert [e[2] for e in raw.command(b"JOBLOG", jid)] == [b"kept"]
        assert show(raw, jid)["claim"] == 1
        assert show(raw, waiting)["state"] == b"waiting"


# ---------------------------------------------------------------- in a cluster


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> Iterator[Cluster]:
    with cluster(tmp_path_factory.mktemp("cluster"), 3) as c:
        yield c


def states(three: Cluster, jid: bytes) -> list[bytes | None]:
    return [(s or {}).get("state") for s in (three.show(i, jid) for i in range(3))]


def test_a_job_waits_for_an_ack_on_another_node(three: Cluster, queue: bytes):
    parent = three.command(0, "ADDJOB", queue, "parent", 5000, "REPLICATE", 2)
    child = three.command(1, "ADDJOB", queue + b"-c", "child", 5000, "REPLICATE", 3,
                          "AFTER", parent)  # fmt: skip
    assert states(three, child) == [b"waiting"] * 3
    assert three.command(2, "GETJOB", "NOHANG", "FROM", queue + b"-c") is None
    three.command(2, "ACKJOB", parent)  # a node that may not hold it: the ack still spreads
    wait_for(lambda: b"queued" in states(three, child), DEADLINE, what="the child queued")
    wait_for(lambda: b"waiting" not in states(three, child), DEADLINE, what="every copy released")
    assert states(three, child).count(b"queued") == 1


def test_progress_reaches_every_holder(three: Cluster, queue: bytes):
    jid = three.command(0, "ADDJOB", queue, "body", 5000, "REPLICATE", 3)
    three.command(0, "WORKING", jid, "on node 0")
    three.command(2, "WORKING", jid, "on node 2")

    def logs() -> list[list[bytes]]:
        return [[e[2] for e in three.command(i, "JOBLOG", jid)] for i in range(3)]

    wait_for(lambda: all(len(log) == 2 for log in logs()), DEADLINE, what="the logs everywhere")
    assert logs()[0] == logs()[1] == logs()[2]


def test_claims_spread_to_every_holder(three: Cluster, queue: bytes):
    jid = three.command(0, "ADDJOB", queue, "body", 5000, "REPLICATE", 3, "RETRY", 1)
    [[_, got, _, _, claim]] = three.command(0, "GETJOB", "WITHCLAIM", "FROM", queue)
    assert (got, claim) == (jid, 1)
    # Not acknowledged: a holder requeues it a RETRY later; take it wherever it is.
    delivered: list = []

    def again() -> bool:
        for i in range(3):
            delivered.extend(three.command(i, "GETJOB", "NOHANG", "WITHCLAIM", "FROM", queue) or [])
        return bool(delivered)

    wait_for(again, DEADLINE, what="the job delivered again")
    assert delivered[0][4] == 2
    wait_for(lambda: all(three.show(i, jid)["claim"] == 2 for i in range(3)), DEADLINE,
             what="the claim on every holder")  # fmt: skip
    for i in range(3):
        with pytest.raises(Exception, match="STALECLAIM"):
            three.command(i, "ACKJOB", jid, "CLAIM", 1)
    assert three.command(1, "ACKJOB", jid, "CLAIM", 2) == 1
