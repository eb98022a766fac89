"""NACK DELAY, retry backoff, ACKJOB RESULT, WAITJOB, CANCEL and overflow drop-oldest on
real servers (docs/queues.md).

Single-node tests share one server (each its own queues; each policy names only its
test's queue); the cluster tests share three nodes of their own. redis-cli, redis-py
(protocol 2) and a raw RESP connection talk to the processes. Nothing here measures
time: a delay is shown by the job's state and its requeue time (SHOW), and every wait
is a condition with a deadline.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.integration.test_queue_extensions import add, extensions
from tests.support.cluster import DEADLINE, Cluster, pairs
from tests.support.cluster import running_cluster as cluster
from tests.support.raw import Error, RawConnection, Status, encode
from tests.support.servers import redis_cli, running_server, wait_for

CANCELLED = Error(b"CANCELLED Job was cancelled")


def show(raw: RawConnection, job_id: bytes) -> dict:
    return pairs(raw.command(b"SHOW", job_id))


def take(raw: RawConnection, queue: bytes) -> bytes:
    [[_, job_id, _]] = raw.command(b"GETJOB", b"NOHANG", b"FROM", queue)
    return job_id


@contextlib.contextmanager
def waiter_elsewhere(three: Cluster, jid: bytes) -> Iterator[tuple[list[int], RawConnection]]:
    """A WAITJOB blocked on a node that holds no copy of the job; the holders' indexes."""
    holders = [i for i in range(3) if three.show(i, jid) is not None]
    outsider = next(i for i in range(3) if i not in holders)
    with RawConnection(three.servers[outsider].port) as waiter:
        waiter.send(encode(b"WAITJOB", jid))
        wait_for(lambda: three.command(outsider, "INFO", "extensions")["waitjob_clients"] == 1,
                 DEADLINE, what="the waiter blocked")  # fmt: skip
        yield holders, waiter


# ---------------------------------------------------------------- NACK DELAY and backoff


def test_nack_delay_puts_the_job_back_after_the_delay(raw, queue):
    jid = add(raw, queue, b"body", b"RETRY", 300)
    take(raw, queue)
    assert raw.command(b"NACK", jid, b"DELAY", 3600) == 1
    job = show(raw, jid)
    assert (job["state"], job["nacks"], raw.command(b"QLEN", queue)) == (b"active", 1, 0)
    assert job["next-requeue-within"] > 3_500_000  # ms: the delay, not the retry
    take_again = add(raw, queue + b"-2", b"body", b"RETRY", 300)
    take(raw, queue + b"-2")
    assert raw.command(b"NACK", take_again, b"DELAY", 1) == 1
    wait_for(lambda: raw.command(b"QLEN", queue + b"-2") == 1, DEADLINE, what="queued after 1 s")
    assert show(raw, take_again)["nacks"] == 1  # counted once, at the NACK


def test_enqueue_ends_a_delay_and_a_second_nack_counts(raw, queue):
    jid = add(raw, queue)
    take(raw, queue)
    raw.command(b"NACK", jid, b"DELAY", 3600)
    raw.command(b"NACK", jid, b"DELAY", 3600)
    assert show(raw, jid)["nacks"] == 2
    assert raw.command(b"ENQUEUE", jid) == 1
    assert raw.command(b"QLEN", queue) == 1
    assert show(raw, jid)["nacks"] == 2


def test_a_jobs_backoff_postpones_each_requeue(raw, queue):
    fixed = add(raw, queue, b"f", b"BACKOFF", b"fixed", 3600)
    exponential = add(raw, queue, b"e", b"BACKOFF", b"exponential", 100, 10_000)
    for _ in range(2):
        take(raw, queue)
    before = extensions(raw)["jobs_postponed"]
    assert raw.command(b"NACK", fixed, exponential) == 2
    assert raw.command(b"QLEN", queue) == 0
    assert show(raw, fixed)["next-requeue-within"] > 3_500_000
    assert 90_000 < show(raw, exponential)["next-requeue-within"] <= 100_000
    assert extensions(raw)["jobs_postponed"] == before + 2
    raw.command(b"ENQUEUE", exponential)
    take(raw, queue)
    raw.command(b"NACK", exponential)  # the second requeue: twice the base
    assert 190_000 < show(raw, exponential)["next-requeue-within"] <= 200_000


def test_a_policys_backoff_applies_and_nack_delay_wins(raw, queue, policy):
    raw.command(b"QPOLICY", b"SET", policy, queue, b"backoff", b"fixed", b"backoff-base", 3600)
    jid = add(raw, queue)
    take(raw, queue)
    raw.command(b"NACK", jid)
    assert raw.command(b"QLEN", queue) == 0
    assert show(raw, jid)["next-requeue-within"] > 3_500_000
    raw.command(b"ENQUEUE", jid)
    take(raw, queue)
    raw.command(b"NACK", jid, b"DELAY", 0)  # the NACK's own delay wins: now
    assert raw.command(b"QLEN", queue) == 1
    take(raw, queue)
    raw.command(b"ENQUEUE", jid)  # ENQUEUE queues at once, whatever the backoff
    assert raw.command(b"QLEN", queue) == 1


def test_backoff_and_delay_errors(raw, queue, policy):
    bad = [
        ([b"ADDJOB", queue, b"b", 0, b"BACKOFF"], b"ERR BACKOFF must be followed by fixed"),
        ([b"ADDJOB", queue, b"b", 0, b"BACKOFF", b"linear", 1], b"ERR BACKOFF must be"),
        ([b"ADDJOB", queue, b"b", 0, b"BACKOFF", b"exponential", 1], b"ERR BACKOFF must be"),
        ([b"ADDJOB", queue, b"b", 0, b"BACKOFF", b"fixed", 0], b"ERR BACKOFF seconds"),
        ([b"ADDJOB", queue, b"b", 0, b"BACKOFF", b"exponential", 9, 2], b"ERR BACKOFF seconds"),
        ([b"ADDJOB", queue, b"b", 0, b"BACKOFF", b"fixed", b"x"], b"ERR BACKOFF seconds"),
        ([b"NACK", b"DELAY", -1], b"ERR DELAY time must be a non negative number"),
        ([b"NACK", b"DELAY", b"soon"], b"ERR DELAY time must be a non negative number"),
        ([b"QPOLICY", b"SET", policy, queue, b"backoff", b"often"],
         b"ERR backoff must be fixed or exponential"),
        ([b"QPOLICY", b"SET", policy, queue, b"overflow", b"spill"],
         b"ERR overflow must be refuse or drop-oldest"),
        ([b"QPOLICY", b"SET", policy, queue, b"backoff-cap", 0],
         b"ERR backoff-cap must be a positive number"),
    ]  # fmt: skip
    for argv, error in bad:
        reply = raw.command(*argv)
        assert isinstance(reply, Error) and reply.startswith(error), (argv, reply)
    jid = add(raw, queue)
    assert raw.command(b"NACK", jid, b"DELAY") == Error(b"ERR syntax error")


# ---------------------------------------------------------------- results and WAITJOB


def test_waitjob_returns_the_result_of_the_ack(shared_server, raw, queue):
    jid = add(raw, queue)
    with RawConnection(shared_server.port) as waiter, RawConnection(shared_server.port) as other:
        waiter.send(encode(b"WAITJOB", jid))
        other.send(encode(b"WAITJOB", jid, b"TIMEOUT", 0))
        wait_for(lambda: extensions(raw)["waitjob_clients"] >= 2, DEADLINE, what="two waiters")
        take(raw, queue)
        assert raw.command(b"ACKJOB", jid, b"RESULT", b"42 rows") == 1
        assert waiter.read() == [b"acked", b"42 rows"]
        assert other.read() == [b"acked", b"42 rows"]
    assert raw.command(b"WAITJOB", jid) == [b"acked", b"42 rows"]  # kept after the ack


def test_waitjob_answers_at_once_times_out_and_knows_unknown_jobs(shared_server, raw, queue):
    jid = add(raw, queue)
    assert raw.command(b"WAITJOB", jid, b"TIMEOUT", 50) is None
    raw.command(b"ACKJOB", jid)
    assert raw.command(b"WAITJOB", jid) == [b"acked", None]  # waited for: remembered
    fast = add(raw, queue)
    assert raw.command(b"WAITJOB", fast, b"TIMEOUT", 50) is None
    raw.command(b"FASTACK", fast)
    assert raw.command(b"WAITJOB", fast) == [b"acked", None]
    unwatched = add(raw, queue)
    raw.command(b"ACKJOB", unwatched)  # collected at once, nothing kept: no node knows it
    assert raw.command(b"WAITJOB", unwatched) == [b"unknown", None]
    gone = add(raw, queue, b"b", b"TTL", 1)
    with RawConnection(shared_server.port) as waiter:
        waiter.send(encode(b"WAITJOB", gone))
        assert waiter.read() == [b"gone", None]  # expired without an ack


def test_waitjob_and_result_errors(raw, queue):
    jid = add(raw, queue)
    assert raw.command(b"WAITJOB", b"nope") == Error(b"BADID Invalid Job ID format.")
    assert raw.command(b"WAITJOB", jid, b"TIMEOUT") == Error(b"ERR syntax error")
    assert raw.command(b"WAITJOB", jid, b"TIMEOUT", -1) == Error(b"ERR timeout is negative")
    assert raw.command(b"ACKJOB", b"RESULT", b"x") == Error(b"ERR syntax error")
    too_long = raw.command(b"ACKJOB", jid, b"RESULT", b"x" * 65537)
    assert too_long == Error(b"ERR RESULT must be at most 65536 bytes")
    assert raw.command(b"QLEN", queue) == 1  # nothing was acknowledged


# ---------------------------------------------------------------- CANCEL


def test_cancel_removes_a_queued_job_and_stops_its_worker(raw, queue):
    worked = add(raw, queue, b"worked")
    assert take(raw, queue) == worked
    queued = add(raw, queue, b"queued")
    assert raw.command(b"CANCEL", queued, worked) == 2
    assert raw.command(b"QLEN", queue) == 0
    assert raw.command(b"WORKING", worked) == CANCELLED
    assert raw.command(b"WORKING", worked, b"still at it") == CANCELLED
    assert raw.command(b"WAITJOB", worked) == [b"cancelled", None]
    assert raw.command(b"ACKJOB", worked, b"RESULT", b"late") == 0
    assert raw.command(b"WAITJOB", worked) == [b"cancelled", None]
    assert raw.command(b"CANCEL", worked) == 0  # done already
    assert raw.command(b"CANCEL", b"nope") == Error(b"BADID Invalid Job ID format.")


def test_a_job_after_a_cancelled_one_fails(raw, queue):
    parent = add(raw, queue, b"parent")
    child = add(raw, queue + b"-c", b"child", b"AFTER", parent)
    raw.command(b"CANCEL", parent)
    wait_for(lambda: raw.command(b"SHOW", child) is None, DEADLINE, what="the child failed")


# ---------------------------------------------------------------- overflow


def test_overflow_drop_oldest_makes_room(raw, queue, policy):
    raw.command(b"QPOLICY", b"SET", policy, queue, b"maxlen", 3, b"overflow", b"drop-oldest")
    before = extensions(raw)["jobs_dropped_oldest"]
    ids = [add(raw, queue, b"%d" % i) for i in range(5)]
    assert raw.command(b"QLEN", queue) == 3
    assert [job[1] for job in raw.command(b"QPEEK", queue, 10)] == ids[2:]
    assert pairs(raw.command(b"QSTAT", queue))["dropped-oldest"] == 2
    assert extensions(raw)["jobs_dropped_oldest"] == before + 2
    assert raw.command(b"SHOW", ids[0]) is None or show(raw, ids[0])["state"] == b"acked"
    refused = raw.command(b"ADDJOB", queue + b"x", b"b", 0, b"MAXLEN", 1)
    assert isinstance(refused, Status)  # another queue: refuse stays the default
    assert raw.command(b"ADDJOB", queue + b"x", b"b", 0, b"MAXLEN", 1) == Error(
        b"MAXLEN Queue is already longer than the specified MAXLEN count"
    )


def test_plain_disque_replies_are_unchanged(raw, queue):
    jid = add(raw, queue)
    assert len(raw.command(b"QSTAT", queue)) == 20
    take(raw, queue)
    assert raw.command(b"NACK", jid) == 1
    assert raw.command(b"QLEN", queue) == 1  # no delay, no backoff: at once


def test_redis_cli_speaks_the_new_commands(shared_server, queue):
    def run(*args: str) -> str:
        return redis_cli(shared_server.port, *args)

    q = queue.decode()
    jid = run("ADDJOB", q, "body", "0", "BACKOFF", "exponential", "1", "60")
    run("GETJOB", "FROM", q)
    assert run("NACK", jid, "DELAY", "3600") == "1"
    assert run("ENQUEUE", jid) == "1"
    run("GETJOB", "FROM", q)
    assert run("ACKJOB", jid, "RESULT", "done") == "1"
    assert run("WAITJOB", jid).splitlines() == ["acked", "done"]
    other = run("ADDJOB", q, "body", "0")
    assert run("CANCEL", other) == "1"
    assert run("WAITJOB", other, "TIMEOUT", "1000").splitlines()[0] == "cancelled"


def test_a_backoff_is_shown_and_survives_a_restart_with_the_aof(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as raw:
        port = srv.port
        with srv.client() as client:
            wait_for(lambda: client.info("persistence")["loading"] == 0, DEADLINE,
                     what="the empty AOF loaded")  # fmt: skip
        fixed = add(raw, b"q", b"f", b"BACKOFF", b"fixed", 30)
        exponential = add(raw, b"q", b"e", b"BACKOFF", b"exponential", 2, 600)
        assert show(raw, fixed)["backoff"] == b"fixed 30"
    with (
        running_server(tmp_path, ["--appendonly", "yes"], port=port) as srv,
        RawConnection(srv.port) as raw,
    ):
        wait_for(lambda: raw.command(b"SHOW", exponential) is not None, DEADLINE, what="loaded")
        assert show(raw, exponential)["backoff"] == b"exponential 2 600"
        assert show(raw, fixed)["backoff"] == b"fixed 30"


def test_outcomes_are_kept_for_result_ttl(tmp_path):
    with running_server(tmp_path, ["--result-ttl", "1"]) as srv, RawConnection(srv.port) as raw:
        jid = add(raw, b"q")
        raw.command(b"ACKJOB", jid, b"RESULT", b"r")
        assert raw.command(b"WAITJOB", jid) == [b"acked", b"r"]
        wait_for(lambda: extensions(raw)["job_outcomes_kept"] == 0, DEADLINE, what="forgotten")
        assert raw.command(b"CONFIG", b"GET", b"result-ttl") == [b"result-ttl", b"1"]
        assert raw.command(b"CONFIG", b"SET", b"result-ttl", 0).startswith(b"ERR")


# ---------------------------------------------------------------- in a cluster


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> Iterator[Cluster]:
    with cluster(tmp_path_factory.mktemp("cluster"), 3) as c:
        yield c


def test_a_waiter_on_a_node_without_the_job_gets_the_result(three: Cluster, queue: bytes):
    jid = three.command(0, "ADDJOB", queue, "body", 5000, "REPLICATE", 2)
    with waiter_elsewhere(three, jid) as (holders, waiter):
        three.command(holders[-1], "ACKJOB", jid, "RESULT", "from a holder")
        assert waiter.read() == [b"acked", b"from a holder"]
    outsider = 3 - sum(holders)
    assert three.command(outsider, "WAITJOB", jid) == [b"acked", b"from a holder"]


def test_cancel_on_any_node_removes_every_copy(three: Cluster, queue: bytes):
    jid = three.command(0, "ADDJOB", queue, "body", 5000, "REPLICATE", 3)
    assert three.command(2, "CANCEL", jid) == 1
    wait_for(lambda: all(three.show(i, jid) is None for i in range(3)), DEADLINE,
             what="every copy collected")  # fmt: skip
    for i in range(3):
        assert three.command(i, "WAITJOB", jid) == [b"cancelled", None]
        assert three.command(i, "QLEN", queue) == 0


def test_a_worker_on_another_node_learns_the_cancellation(three: Cluster, queue: bytes):
    jid = three.command(0, "ADDJOB", queue, "body", 5000, "REPLICATE", 3)
    three.command(0, "GETJOB", "FROM", queue)
    three.command(1, "CANCEL", jid)

    def refused() -> bool:
        try:
            three.command(0, "WORKING", jid)
        except Exception as e:  # redis-py raises the server's error
            return "Job was cancelled" in str(e)
        return False

    wait_for(refused, DEADLINE, what="WORKING refused on the worker's node")


def test_a_nack_delay_reaches_the_other_holders(three: Cluster, queue: bytes):
    jid = three.command(0, "ADDJOB", queue, "body", 5000, "REPLICATE", 3, "RETRY", 1)
    three.command(0, "GETJOB", "FROM", queue)
    three.command(0, "NACK", jid, "DELAY", 3600)

    def postponed(i: int) -> bool:
        job = three.show(i, jid)
        return job is not None and job["nacks"] == 1 and job["next-requeue-within"] > 3_500_000

    wait_for(lambda: all(postponed(i) for i in range(3)), DEADLINE, what="every holder waits")
    assert all(three.command(i, "QLEN", queue) == 0 for i in range(3))


def test_a_waiter_outlives_a_failed_holder(tmp_path, queue: bytes):
    with cluster(tmp_path, 3) as three:
        jid = three.command(1, "ADDJOB", queue, "body", 5000, "REPLICATE", 2)
        with waiter_elsewhere(three, jid) as (holders, waiter):
            three.kill(holders[0])
            three.command(holders[1], "ACKJOB", jid, "RESULT", "despite it")
            assert waiter.read() == [b"acked", b"despite it"]
