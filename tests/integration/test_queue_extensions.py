"""Priorities, de-duplication, queue policies and dead letters on real servers.

Single-node tests share one server (each uses its own queues, and each policy's
pattern names only its test's queues); the cluster tests get three nodes of
their own. redis-cli, redis-py (protocol 2) and a raw RESP connection talk to
the processes; every wait is a condition with a deadline.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.cluster import DEADLINE, Cluster, pairs
from tests.support.cluster import running_cluster as cluster
from tests.support.raw import Error, RawConnection, Status
from tests.support.servers import running_server, wait_for

ZERO_NINE = Error(b"ERR PRIORITY must be between 0 and 9")
RETRY_ZERO = (
    b"ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)"
)
DELAY_TOO_LONG = (
    b"ERR The specified DELAY is greater than TTL. Job refused since would never be delivered"
)


def add(raw: RawConnection, queue: bytes, body: bytes = b"body", *options: object) -> bytes:
    reply = raw.command(b"ADDJOB", queue, body, 0, *options)
    assert isinstance(reply, Status), reply
    return bytes(reply)


def show(raw: RawConnection, job_id: bytes) -> dict | None:
    reply = raw.command(b"SHOW", job_id)
    return None if reply is None else pairs(reply)


def bodies(raw: RawConnection, queue: bytes, count: int = 100) -> list[bytes]:
    jobs = raw.command(b"GETJOB", b"NOHANG", b"COUNT", count, b"FROM", queue) or []
    return [job[2] for job in jobs]


def extensions(raw: RawConnection) -> dict[str, int]:
    text = raw.command(b"INFO", b"extensions").decode()
    return {k: int(v) for k, v in (line.split(":") for line in text.splitlines()[1:])}


# ---------------------------------------------------------------- priorities


def test_higher_priorities_are_served_first_in_ctime_order_within_one(raw, queue):
    for body, priority in [(b"a", 0), (b"b", 5), (b"c", 0), (b"d", 9), (b"e", 5)]:
        add(raw, queue, body, b"PRIORITY", priority)
    assert [j[2] for j in raw.command(b"QPEEK", queue, 10)] == [b"d", b"b", b"e", b"a", b"c"]
    assert [j[2] for j in raw.command(b"QPEEK", queue, -2)] == [b"c", b"a"]
    assert bodies(raw, queue, 2) == [b"d", b"b"]
    add(raw, queue, b"f", b"PRIORITY", 7)
    assert bodies(raw, queue) == [b"f", b"e", b"a", b"c"]


def test_priority_is_shown_and_scanned(raw, queue):
    plain = add(raw, queue)
    urgent = add(raw, queue, b"x", b"PRIORITY", 8)
    assert "priority" not in show(raw, plain)  # a plain job's SHOW is Disque's
    assert show(raw, urgent)["priority"] == 8
    _, found = raw.command(b"JSCAN", b"BUSYLOOP", b"QUEUE", queue, b"PRIORITY", 8)
    assert found == [urgent]
    _, found = raw.command(b"JSCAN", b"BUSYLOOP", b"QUEUE", queue, b"PRIORITY", 0)
    assert found == [plain]


@pytest.mark.parametrize("value", [b"10", b"-1", b"x", b"1.5"])
def test_bad_priorities_are_refused(raw, queue, value):
    assert raw.command(b"ADDJOB", queue, b"b", 0, b"PRIORITY", value) == ZERO_NINE
    assert raw.command(b"JSCAN", b"PRIORITY", value) == ZERO_NINE
    assert raw.command(b"QLEN", queue) == 0


def test_a_requeued_job_keeps_its_priority(raw, queue):
    add(raw, queue, b"low")
    urgent = add(raw, queue, b"high", b"PRIORITY", 4)
    assert bodies(raw, queue, 1) == [b"high"]
    assert raw.command(b"NACK", urgent) == 1
    assert bodies(raw, queue) == [b"high", b"low"]


# ---------------------------------------------------------------- de-duplication


def test_a_repeated_dedup_key_returns_the_first_job(raw, queue):
    first = add(raw, queue, b"one", b"DEDUP", b"order-17")
    assert add(raw, queue, b"two", b"DEDUP", b"order-17", b"RETRY", 5) == first
    assert raw.command(b"QLEN", queue) == 1
    assert show(raw, first)["dedup"] == b"order-17"
    other = add(raw, queue + b"-other", b"one", b"DEDUP", b"order-17")  # keys are per queue
    assert other != first
    assert extensions(raw)["dedup_hits"] >= 1


def test_the_key_lives_as_long_as_the_job(raw, queue):
    first = add(raw, queue, b"one", b"DEDUP", b"k")
    [[_, got, _]] = raw.command(b"GETJOB", b"NOHANG", b"FROM", queue)
    assert got == first and add(raw, queue, b"again", b"DEDUP", b"k") == first  # active
    assert raw.command(b"ACKJOB", first) == 1
    wait_for(lambda: show(raw, first) is None, DEADLINE, what="the job collected")
    assert add(raw, queue, b"again", b"DEDUP", b"k") != first


@pytest.mark.parametrize("key", [b"", b"k" * 257])
def test_bad_dedup_keys_are_refused(raw, queue, key):
    assert raw.command(b"ADDJOB", queue, b"b", 0, b"DEDUP", key) == Error(
        b"ERR DEDUP key must be 1 to 256 bytes long"
    )


def test_dedup_and_priority_through_redis_cli(shared_server, queue):
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.fail("redis-cli is not installed (make tools installs it)")
    run = [cli, "-p", str(shared_server.port)]
    args = ["ADDJOB", queue.decode(), "body", "0", "PRIORITY", "3", "DEDUP", "cli-key"]
    first = subprocess.run([*run, *args], capture_output=True, text=True, check=True).stdout
    again = subprocess.run([*run, *args], capture_output=True, text=True, check=True).stdout
    assert first == again and first.startswith("D-")
    shown = subprocess.run([*run, "SHOW", first.strip()], capture_output=True, text=True)
    assert "priority\n3\ndedup\ncli-key" in shown.stdout


# ---------------------------------------------------------------- policies


def test_policies_set_list_get_match_and_delete(raw, queue, policy):
    pattern = queue + b"*"
    options = [b"retry", 7, b"PRIORITY", 2, b"deadletter", queue + b"-dead", b"max-nacks", 3]
    assert raw.command(b"QPOLICY", b"SET", policy, pattern, *options) == Status(b"OK")
    entry = [policy, pattern, [b"retry", 7, b"priority", 2, b"deadletter", queue + b"-dead",
                               b"max-nacks", 3]]  # fmt: skip
    assert raw.command(b"QPOLICY", b"GET", policy) == entry
    assert entry in raw.command(b"QPOLICY", b"LIST")
    assert raw.command(b"QPOLICY", b"MATCH", queue + b"-x") == entry
    assert raw.command(b"QPOLICY", b"MATCH", b"other-" + queue) is None
    assert extensions(raw)["queue_policies"] >= 1
    assert raw.command(b"QPOLICY", b"DEL", policy) == 1
    assert raw.command(b"QPOLICY", b"DEL", policy) == 0
    assert raw.command(b"QPOLICY", b"GET", policy) is None


def test_the_most_specific_pattern_wins(raw, queue, policy):
    names = [policy + suffix for suffix in (b"-a", b"-b", b"-c")]
    raw.command(b"QPOLICY", b"SET", names[0], queue + b"*", b"retry", 1)
    raw.command(b"QPOLICY", b"SET", names[1], queue + b"-x*", b"retry", 2)
    raw.command(b"QPOLICY", b"SET", names[2], queue + b"-x?", b"retry", 3)
    try:
        # More literal characters first, then fewer '*'; equal ranks: the smaller name.
        assert raw.command(b"QPOLICY", b"MATCH", queue + b"-y")[0] == names[0]
        assert raw.command(b"QPOLICY", b"MATCH", queue + b"-x1")[0] == names[2]
        assert raw.command(b"QPOLICY", b"MATCH", queue + b"-x12")[0] == names[1]
    finally:
        for name in names:
            raw.command(b"QPOLICY", b"DEL", name)


def test_a_policy_gives_addjob_its_defaults(raw, queue, policy):
    raw.command(b"QPOLICY", b"SET", policy, queue, b"retry", 9, b"ttl", 600, b"delay", 0,
                b"priority", 6, b"maxlen", 2)  # fmt: skip
    jid = add(raw, queue)
    shown = show(raw, jid)
    assert (shown["retry"], shown["priority"]) == (9, 6)
    assert 590 <= shown["ttl"] <= 600
    explicit = add(raw, queue, b"b", b"RETRY", 3, b"PRIORITY", 1)
    assert (show(raw, explicit)["retry"], show(raw, explicit)["priority"]) == (3, 1)
    assert raw.command(b"ADDJOB", queue, b"c", 0) == Error(
        b"MAXLEN Queue is already longer than the specified MAXLEN count"
    )
    stat = pairs(raw.command(b"QSTAT", queue))
    assert stat["policy"] == policy
    add(raw, queue + b"-none")
    assert "policy" not in pairs(raw.command(b"QSTAT", queue + b"-none"))


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ([b"colour", 1], b"ERR Unknown policy option 'colour'"),
        ([b"retry"], b"ERR syntax error"),
        ([b"replicate", 0], b"ERR REPLICATE must be between 1 and 65535"),
        ([b"ttl", 0], b"ERR TTL must be a number > 0"),
        ([b"priority", 10], b"ERR PRIORITY must be between 0 and 9"),
        ([b"max-nacks", b"x"], b"ERR max-nacks must be a positive number"),
        ([b"retry", 0], RETRY_ZERO),
        ([b"delay", 10, b"ttl", 10], DELAY_TOO_LONG),
    ],
)
def test_bad_policies_are_refused(raw, queue, policy, options, error):
    assert raw.command(b"QPOLICY", b"SET", policy, queue, *options) == Error(error)
    assert raw.command(b"QPOLICY", b"GET", policy) is None


def test_qpolicy_usage_errors(raw):
    assert raw.command(b"QPOLICY", b"NOPE") == Error(
        b"ERR Unknown QPOLICY subcommand, try SET, DEL, LIST, GET or MATCH"
    )
    assert raw.command(b"QPOLICY", b"GET") == Error(b"ERR syntax error")
    assert raw.command(b"QPOLICY") == Error(b"ERR wrong number of arguments for 'qpolicy' command")


# ---------------------------------------------------------------- dead letters


def test_a_job_nacked_past_max_nacks_becomes_a_dead_letter(raw, queue, policy):
    dead = queue + b"-dead"
    raw.command(b"QPOLICY", b"SET", policy, queue, b"max-nacks", 2, b"deadletter", dead)
    before = extensions(raw)["jobs_dead_lettered"]
    jid = add(raw, queue, b"payload", b"PRIORITY", 3)
    for _ in range(3):
        assert bodies(raw, queue, 1) == [b"payload"]
        assert raw.command(b"NACK", jid) == 1
    assert raw.command(b"QLEN", queue) == 0
    [[_, letter, body]] = raw.command(b"QPEEK", dead, 5)
    assert body == b"payload" and letter != jid
    shown = show(raw, letter)
    assert (shown["origin-id"], shown["origin-queue"], shown["origin-nacks"]) == (jid, queue, 3)
    assert shown["origin-additional-deliveries"] == 0 and shown["dedup"] == jid
    wait_for(lambda: show(raw, jid) is None, DEADLINE, what="the original collected")
    assert extensions(raw)["jobs_dead_lettered"] == before + 1


def test_max_deliveries_counts_requeues_by_the_retry_timer(raw, queue, policy):
    dead = queue + b"-dead"
    raw.command(b"QPOLICY", b"SET", policy, queue, b"max-deliveries", 2, b"deadletter", dead)
    jid = add(raw, queue, b"slow", b"RETRY", 1)
    assert bodies(raw, queue, 1) == [b"slow"]  # delivered, never acknowledged
    got = raw.command(b"GETJOB", b"TIMEOUT", 10_000, b"FROM", queue)  # requeued after ~1 s
    assert got[0][1] == jid
    letter = raw.command(b"GETJOB", b"TIMEOUT", 10_000, b"FROM", dead)
    assert letter[0][2] == b"slow"
    assert show(raw, letter[0][1])["origin-additional-deliveries"] == 2


def test_without_a_deadletter_queue_the_job_is_dropped(raw, queue, policy):
    raw.command(b"QPOLICY", b"SET", policy, queue, b"max-nacks", 1)
    before = extensions(raw)["jobs_dropped_by_limits"]
    jid = add(raw, queue)
    for _ in range(2):
        bodies(raw, queue, 1)
        raw.command(b"NACK", jid)
    assert raw.command(b"QLEN", queue) == 0
    assert extensions(raw)["jobs_dropped_by_limits"] == before + 1


# ---------------------------------------------------------------- restarts and AOF


def test_policies_priority_and_keys_survive_a_restart_with_the_aof(tmp_path):
    args = ["--appendonly", "yes"]
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as raw:
        raw.command(b"QPOLICY", b"SET", b"p", b"q*", b"retry", 77)
        jid = add(raw, b"q1", b"b", b"PRIORITY", 5, b"DEDUP", b"key")
        port = srv.port
    with running_server(tmp_path, args, port=port) as srv, RawConnection(srv.port) as raw:
        assert raw.command(b"QPOLICY", b"GET", b"p") == [b"p", b"q*", [b"retry", 77]]
        shown = show(raw, jid)
        assert (shown["priority"], shown["dedup"], shown["retry"]) == (5, b"key", 77)
        assert add(raw, b"q1", b"again", b"DEDUP", b"key") == jid


def test_policies_survive_a_restart_without_the_aof(tmp_path):
    with running_server(tmp_path) as srv, RawConnection(srv.port) as raw:
        raw.command(b"QPOLICY", b"SET", b"p", b"q*", b"maxlen", 5)
        raw.command(b"QPOLICY", b"SET", b"gone", b"x", b"maxlen", 5)
        raw.command(b"QPOLICY", b"DEL", b"gone")
        port = srv.port
    assert b"vars policy " in (tmp_path / "nodes.conf").read_bytes()
    with running_server(tmp_path, port=port) as srv, RawConnection(srv.port) as raw:
        assert raw.command(b"QPOLICY", b"LIST") == [[b"p", b"q*", [b"maxlen", 5]]]


# ---------------------------------------------------------------- in a cluster


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> Iterator[Cluster]:
    with cluster(tmp_path_factory.mktemp("cluster"), 3) as c:
        yield c


def test_a_policy_set_on_one_node_reaches_every_node(three: Cluster, queue: bytes):
    three.command(1, "QPOLICY", "SET", queue, queue, "retry", 42)
    for i in range(3):
        wait_for(lambda i=i: three.command(i, "QPOLICY", "GET", queue) is not None, DEADLINE,
                 what=f"the policy on node {i}")  # fmt: skip
    three.command(2, "QPOLICY", "DEL", queue)
    for i in range(3):
        wait_for(lambda i=i: three.command(i, "QPOLICY", "GET", queue) is None, DEADLINE,
                 what=f"the deletion on node {i}")  # fmt: skip


def test_a_dedup_retry_on_another_holder_finds_the_job(three: Cluster, queue: bytes):
    jid = three.command(0, "ADDJOB", queue, "body", 5000, "REPLICATE", 3, "DEDUP", "k1")
    assert three.command(1, "ADDJOB", queue, "retry", 5000, "REPLICATE", 3, "DEDUP", "k1") == jid
    assert three.command(2, "ADDJOB", queue, "retry", 5000, "DEDUP", "k1") == jid
    assert all(three.show(i, jid)["dedup"] == b"k1" for i in range(3))


def test_a_dead_letter_is_made_once_and_the_original_acked_everywhere(three: Cluster, queue: bytes):
    dead = queue + b"-dead"
    three.command(0, "QPOLICY", "SET", queue, queue, "max-nacks", 1, "deadletter", dead,
                  "replicate", 3)  # fmt: skip
    for i in range(3):
        wait_for(lambda i=i: three.command(i, "QPOLICY", "GET", queue) is not None, DEADLINE,
                 what="the policy everywhere")  # fmt: skip
    jid = three.command(0, "ADDJOB", queue, "body", 5000, "REPLICATE", 3)
    for _ in range(2):
        [[_, got, _]] = three.command(0, "GETJOB", "TIMEOUT", 10_000, "FROM", queue)
        assert got == jid
        three.command(0, "NACK", jid)
    wait_for(lambda: three.acked_or_gone(jid, range(3)), DEADLINE, what="the original acked")

    def letters() -> set[bytes]:
        found = set()
        for i in range(3):
            _, ids = three.command(i, "JSCAN", "BUSYLOOP", "QUEUE", dead)
            found.update(ids)
        return found

    wait_for(lambda: len(letters()) == 1 and len(three.holders(next(iter(letters())))) == 3,
             DEADLINE, what="the dead letter on three nodes")  # fmt: skip
    [letter] = letters()
    assert three.show(1, letter)["origin-id"] == jid
    [[_, got, body]] = three.command(2, "GETJOB", "TIMEOUT", 10_000, "FROM", dead)
    assert (got, body) == (letter, b"body")
    three.command(2, "ACKJOB", letter)


def test_a_node_joining_later_learns_the_policies(tmp_path):
    with cluster(tmp_path, 3, meet=False) as c:
        c.command(0, "QPOLICY", "SET", "early", "q*", "priority", 4)
        c.meet_all()
        for i in (1, 2):
            wait_for(lambda i=i: c.command(i, "QPOLICY", "GET", "early") is not None,
                     DEADLINE, what=f"node {i} learned the policy")  # fmt: skip
