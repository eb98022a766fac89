"""Rate and concurrency limits on a real three-node cluster.

Consumers on all three nodes go through redis-py (protocol 2), redis-cli and the
project's client. Nothing is timed: concurrency is checked by counting the jobs
handed out (and the nodes' own in-flight counts in QSTAT); the rate by counting
the jobs handed out over an interval measured around the polling, against the
bound for that interval plus a whole second of slack, never below it.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from disquette.client import Client
from tests.support.cluster import DEADLINE, Cluster, pairs
from tests.support.cluster import running_cluster as cluster
from tests.support.servers import wait_for


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> Iterator[Cluster]:
    with cluster(tmp_path_factory.mktemp("rate"), 3) as c:
        yield c


def limit(c: Cluster, queue: bytes, *options: object) -> None:
    """A policy on ``queue`` set on node 0, known to every node."""
    assert c.command(0, "QPOLICY", "SET", queue, queue, *options) == b"OK"
    wait_for(
        lambda: all(c.command(i, "QPOLICY", "GET", queue) for i in range(3)),
        DEADLINE,
        what="the policy on every node",
    )


def backlog(c: Cluster, queue: bytes, jobs: int) -> None:
    for n in range(jobs):
        c.command(n % 3, "ADDJOB", queue, b"j%d" % n, 0, "REPLICATE", 1, "RETRY", 300)


def poll(c: Cluster, queue: bytes) -> list[tuple[int, bytes]]:
    """One GETJOB NOHANG COUNT 2 on each node: the (node, job ID) pairs handed out."""
    got = []
    for i in range(3):
        for job in c.command(i, "GETJOB", "NOHANG", "COUNT", 2, "FROM", queue) or []:
            got.append((i, job[1]))
    return got


def qstat(c: Cluster, i: int, queue: bytes) -> dict:
    return pairs(c.command(i, "QSTAT", queue))


def test_bad_values_are_refused_and_good_ones_shown(three: Cluster, queue: bytes):
    for option, value in (("rate", 0), ("rate", "x"), ("concurrency", -1), ("rate", 1 << 33)):
        with pytest.raises(Exception, match=f"{option} must be a positive number"):
            three.command(1, "QPOLICY", "SET", queue, queue, option, value)
    limit(three, queue, "rate", 7, "concurrency", 2)
    assert three.command(2, "QPOLICY", "GET", queue) == [
        queue, queue, [b"rate", 7, b"concurrency", 2]
    ]  # fmt: skip


def test_concurrency_holds_across_the_cluster(three: Cluster, queue: bytes):
    limit(three, queue, "concurrency", 3)
    backlog(three, queue, 30)
    held: list[tuple[int, bytes]] = []

    def full() -> bool:
        held.extend(poll(three, queue))
        assert len(held) <= 3
        return len(held) == 3

    wait_for(full, DEADLINE, interval=0.05, what="three jobs handed out")
    # At the limit, NOHANG answers empty on every node for as long as we look.
    end = time.monotonic() + 2.5  # (past an epoch's edge: shares are computed again)
    while time.monotonic() < end:
        assert poll(three, queue) == []
        time.sleep(0.05)
    assert sum(qstat(three, i, queue)["in-flight"] for i in range(3)) == 3
    assert sum(int(three.clients[i].info("extensions")["jobs_throttled"]) for i in range(3)) > 0
    # Acknowledged on a node that never held it (a dummy ack, which reaches the holder
    # by SETACK): the slot frees.
    node, job_id = held.pop()
    assert three.command((node + 1) % 3, "ACKJOB", job_id) == 0
    wait_for(lambda: len(held.extend(poll(three, queue)) or held) == 3, DEADLINE,
             interval=0.05, what="the freed slot used")  # fmt: skip
    assert len(held) == 3


def test_a_blocked_getjob_is_served_when_an_ack_frees_the_slot(three: Cluster, queue: bytes):
    limit(three, queue, "concurrency", 1)
    backlog(three, queue, 5)
    held: list[tuple[int, bytes]] = []
    wait_for(lambda: held.extend(poll(three, queue)) or held, DEADLINE, interval=0.05,
             what="one job handed out")  # fmt: skip
    [(node, job_id)] = held
    replies: list[object] = []
    consumer = three.servers[node].client()
    waiter = threading.Thread(
        target=lambda: replies.append(
            consumer.execute_command("GETJOB", "TIMEOUT", 30000, "FROM", queue)
        )
    )
    waiter.start()
    wait_for(lambda: three.blocked(node) == 1, DEADLINE, what="the GETJOB blocked")
    time.sleep(0.3)  # (a few cron ticks: it stays blocked, the slot is taken)
    assert replies == []
    assert three.command(node, "ACKJOB", job_id) == 1
    waiter.join(DEADLINE)
    [[got_queue, got_id, _body]] = replies[0]
    assert got_queue == queue and got_id != job_id
    consumer.close()


def test_nohang_at_the_limit_through_redis_cli(three: Cluster, queue: bytes):
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.fail("redis-cli is not installed (make tools installs it)")
    limit(three, queue, "concurrency", 1)
    backlog(three, queue, 4)
    wait_for(lambda: poll(three, queue), DEADLINE, interval=0.05, what="one job handed out")
    for server in three.servers:
        run = [cli, "-p", str(server.port), "GETJOB", "NOHANG", "FROM", queue.decode()]
        out = subprocess.run(run, capture_output=True, text=True, check=True).stdout
        assert out.strip() == ""  # an empty reply, as for an empty queue
    shown = subprocess.run([cli, "-p", str(three.servers[0].port), "QSTAT", queue.decode()],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "concurrency-share" in shown and "in-flight" in shown


def test_the_rate_holds_across_the_cluster_with_the_project_client(three: Cluster, queue: bytes):
    rate = 10
    limit(three, queue, "rate", rate)
    backlog(three, queue, 200)
    clients = [Client(address) for address in three.addresses]
    try:
        wait_for(lambda: poll(three, queue), DEADLINE, interval=0.05, what="a first delivery")
        delivered = 0
        start = time.monotonic()
        while time.monotonic() - start < 4:
            for client in clients:
                delivered += len(client.get_jobs(queue, count=3, nohang=True))
            time.sleep(0.01)
        elapsed = time.monotonic() - start
    finally:
        for client in clients:
            client.close()
    # Any interval: its share of the rate plus the buckets (a tenth of each share, at
    # least one token each) -- and a whole second more than measured, never less.
    bound = rate * (elapsed + 1) + rate // 10 + 3
    assert rate <= delivered <= bound
    fields = qstat(three, 0, queue)
    assert 0 <= fields["rate-share"] <= rate and "in-flight" not in fields
