"""Recurring jobs (CRON) on real server processes: one job per tick cluster-wide, the
next node firing when the usual one is killed, CRON DEL everywhere, schedules kept in
nodes.conf and taught to a node that joins later, redis-cli and the project's client.

Every wait is a condition with a deadline; ticks are read back from the jobs
themselves (their ``dedup`` key is ``cron:<name>:<tick>``).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator

import pytest

from disquette.client import Client
from tests.support.cluster import DEADLINE, Cluster
from tests.support.cluster import running_cluster as cluster
from tests.support.raw import Error, RawConnection
from tests.support.servers import running_server, wait_for

RETRY_RANGE = b"ERR RETRY time must be a non negative number"
NOT_OPTIONS = b"ERR DEDUP, AFTER, IFGONE and GROUP are not options of a schedule"


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> Iterator[Cluster]:
    with cluster(tmp_path_factory.mktemp("cron"), 3) as c:
        yield c


def ticks(c: Cluster, queue: bytes, among: Iterable[int] = range(3)) -> dict[int, set[bytes]]:
    """The IDs of the jobs of ``queue`` the listed nodes hold, by tick."""
    found: dict[int, set[bytes]] = defaultdict(set)
    for i in among:
        _, ids = c.command(i, "JSCAN", "BUSYLOOP", "QUEUE", queue)
        for job_id in ids:
            shown = c.show(i, job_id)
            if shown is not None:
                found[int(shown["dedup"].rsplit(b":", 1)[1])].add(job_id)
    return found


def fired(c: Cluster, among: Iterable[int] = range(3)) -> int:
    return sum(c.clients[i].info("extensions")["cron_ticks_fired"] for i in among)


def everywhere(c: Cluster, name: str, present: bool, among: Iterable[int] = range(3)) -> None:
    for i in among:
        what = f"schedule {name} {'on' if present else 'gone from'} node {i}"
        wait_for(lambda i=i: (c.command(i, "CRON", "GET", name) is not None) == present,
                 DEADLINE, what=what)  # fmt: skip


def test_every_second_adds_one_job_per_tick_cluster_wide_and_del_stops_it(three, queue):
    name = queue.decode()
    assert three.command(0, "CRON", "SET", name, queue, "tick", "EVERY", 1) == b"OK"
    everywhere(three, name, True)
    wait_for(lambda: len(ticks(three, queue)) >= 5, DEADLINE, what="five ticks")
    found = ticks(three, queue)
    first, last = min(found), max(found)
    assert all(len(found.get(t, ())) == 1 for t in range(first, last + 1)), found
    entry = three.command(1, "CRON", "GET", name)
    assert entry[:6] == [name.encode(), queue, b"tick", b"every", 1, []]
    assert entry[6] > time.time() - 2 and entry[7] >= last  # next tick, last fired
    # Deleted on another node: no tick fires after every node learned it (a second
    # schedule, set afterwards, is the clock that shows time went by).
    assert three.command(2, "CRON", "DEL", name) == 1
    assert three.command(2, "CRON", "DEL", name) == 0
    everywhere(three, name, False)
    stopped = max(ticks(three, queue))
    witness = queue + b"-witness"
    three.command(0, "CRON", "SET", witness.decode(), witness, "w", "EVERY", 1, "REPLICATE", 1)
    wait_for(lambda: len(ticks(three, witness)) >= 3, DEADLINE, what="three witness ticks")
    assert max(ticks(three, queue)) == stopped
    three.command(0, "CRON", "DEL", witness.decode())


def test_the_project_client_consumes_the_jobs_with_their_options(three, queue):
    name = queue.decode()
    three.command(1, "CRON", "SET", name, queue, "body", "SCHEDULE", "* * * * * *",
                  "REPLICATE", 2, "TTL", 600, "PRIORITY", 3)  # fmt: skip
    with Client(",".join(three.addresses)) as client:
        jobs = []
        while len(jobs) < 2:
            jobs += client.get_jobs(queue, timeout=DEADLINE)
        # Read before the ack: an acked job may vanish between two SHOWs.
        shown = next(filter(None, (three.show(i, jobs[0].id) for i in range(3))))
        for job in jobs:
            assert job.body == b"body"
            client.ack(job)
    # A replica's TTL may read one second more: the bus carries it relative and rounded
    # up (core/serialize.py, as Disque's does). nodes-delivered may list a third node: a
    # replication unconfirmed after 50 ms adds one more (core/replication.py, as Disque).
    assert (shown["priority"], shown["repl"]) == (3, 2) and shown["ttl"] <= 601
    three.command(1, "CRON", "DEL", name)


def test_killing_a_node_leaves_no_tick_without_its_job(tmp_path, queue):
    with cluster(tmp_path, 3) as c:
        c.command(0, "CRON", "SET", "k", queue, "b", "EVERY", 1, "REPLICATE", 1)
        everywhere(c, "k", True)
        wait_for(lambda: fired(c) >= 3, DEADLINE, what="ticks before the kill")
        c.kill(0)  # every third tick or so was node 0's to fire
        killed = int(time.time())
        wait_for(lambda: fired(c, (1, 2)) >= 15 and max(ticks(c, queue, (1, 2))) > killed + 10,
                 DEADLINE, what="ticks after the kill")  # fmt: skip
        found = ticks(c, queue, (1, 2))
        after = range(killed + 2, max(found))
        assert [len(found.get(t, ())) for t in after] == [1] * len(after), found


def test_schedules_survive_a_restart_in_nodes_conf(tmp_path):
    with running_server(tmp_path) as srv, RawConnection(srv.port) as raw:
        assert raw.command(b"CRON", b"SET", b"daily", b"reports", b"{}", b"SCHEDULE",
                           b"0 9 * * MON-FRI", b"RETRY", 60) == b"OK"  # fmt: skip
        raw.command(b"CRON", b"SET", b"gone", b"q", b"b", b"EVERY", 60)
        assert raw.command(b"CRON", b"DEL", b"gone") == 1
        port = srv.port
    assert b"vars cron " in (tmp_path / "nodes.conf").read_bytes()
    with running_server(tmp_path, port=port) as srv, RawConnection(srv.port) as raw:
        [entry] = raw.command(b"CRON", b"LIST")
        assert entry[:6] == [b"daily", b"reports", b"{}", b"schedule", b"0 9 * * MON-FRI",
                             [b"retry", 60]]  # fmt: skip
        assert raw.command(b"CRON", b"GET", b"gone") is None
        text = raw.command(b"INFO", b"extensions").decode()
        assert "cron_schedules:1" in text


def test_a_node_joining_later_learns_the_schedules(tmp_path):
    with cluster(tmp_path, 3, meet=False) as c:
        c.command(0, "CRON", "SET", "early", "q", "b", "EVERY", 3600)
        c.meet_all()
        everywhere(c, "early", True)


def test_through_redis_cli(shared_server, queue):
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.fail("redis-cli is not installed (make tools installs it)")
    run = [cli, "-p", str(shared_server.port)]

    def out(*args: str) -> str:
        return subprocess.run([*run, *args], capture_output=True, text=True, check=True).stdout

    name = queue.decode()
    assert out("CRON", "SET", name, name, "hello", "EVERY", "1", "ASYNC") == "OK\n"
    wait_for(lambda: out("QLEN", name).strip() not in ("0", ""), DEADLINE, what="a tick")
    listed = out("CRON", "GET", name).splitlines()
    assert listed[:7] == [name, name, "hello", "every", "1", "async", "1"]
    assert "ERR" in out("CRON", "SET", name, name, "b", "EVERY", "0")
    assert out("CRON", "DEL", name) == "1\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((b"EVERY", b"0"), b"ERR EVERY must be a number of seconds between 1 and 4294967296"),
        ((b"EVERY", b"x"), b"ERR EVERY must be a number of seconds between 1 and 4294967296"),
        ((b"SCHEDULE", b"61 * * * *"), b"ERR bad cron expression: Bad minute"),
        ((b"SCHEDULE", b"* * *"), b"ERR bad cron expression: Wrong number of fields"),
        ((b"HOURLY", b"1"), b"ERR syntax error"),
        ((b"EVERY", b"1", b"PRIORITY", b"10"), b"ERR PRIORITY must be between 0 and 9"),
        ((b"EVERY", b"1", b"REPLICATE", b"0"), b"ERR REPLICATE must be between 1 and 65535"),
        ((b"EVERY", b"1", b"TTL", b"0"), b"ERR TTL must be a number > 0"),
        ((b"EVERY", b"1", b"RETRY", b"99999999999"), RETRY_RANGE),
        ((b"EVERY", b"1", b"DEDUP", b"k"), NOT_OPTIONS),
        ((b"EVERY", b"1", b"REPLICATE"), b"ERR syntax error"),
        ((b"EVERY", b"1", b"NOSUCH", b"1"), b"ERR syntax error"),
        ((b"EVERY", b"1", b"RETRY", b"0", b"REPLICATE", b"2"),
         b"ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)"),
    ],
)  # fmt: skip
def test_bad_schedules_are_refused(raw, queue, args, error):
    assert raw.command(b"CRON", b"SET", b"bad", queue, b"b", *args) == Error(error)
    assert raw.command(b"CRON", b"GET", b"bad") is None


def test_cron_usage_errors(raw):
    assert raw.command(b"CRON") == Error(b"ERR wrong number of arguments for 'cron' command")
    assert raw.command(b"CRON", b"NOSUCH") == Error(
        b"ERR Unknown CRON subcommand, try SET, DEL, LIST or GET"
    )
    assert raw.command(b"CRON", b"GET") == Error(b"ERR syntax error")
    assert raw.command(b"CRON", b"SET", b"n", b"q", b"b", b"EVERY") == Error(b"ERR syntax error")
    assert raw.command(b"CRON", b"SET", b"x" * 201, b"q", b"b", b"EVERY", 1) == Error(
        b"ERR schedule names must be 1 to 200 bytes long"
    )
    assert raw.command(b"CRON", b"SET", b"n", b"q", b"b" * 4097, b"EVERY", 1) == Error(
        b"ERR the job body of a schedule must be at most 4096 bytes"
    )
