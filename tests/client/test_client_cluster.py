"""The client against a real three-node cluster: discovery, failover, -LEAVING,
job-ID routing and consumer affinity (both observed through each node's INFO
commandstats), and the ``disquette cluster`` tools."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading

import pytest

from disquette import Affinity, Client, LeavingError, ReplyLostError, aio
from tests.support.cluster import running_cluster
from tests.support.servers import SRC, free_port, running_server, wait_for

DEADLINE = 60.0


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path, 3) as c:
        yield c


def index_of(cluster, address) -> int:
    return [("127.0.0.1", s.port) for s in cluster.servers].index(address)


def test_one_seed_is_enough_to_learn_every_node(cluster):
    with Client(cluster.addresses[0]) as c:
        c.ping()
        nodes = {n.id: n.address for n in c.topology.nodes}
    assert nodes == {
        node_id.decode(): ("127.0.0.1", s.port)
        for node_id, s in zip(cluster.ids, cluster.servers, strict=True)
    }


def test_seeds_are_tried_in_random_order(cluster):
    first = set()
    for seed in range(12):
        with Client(cluster.addresses, rng=random.Random(seed)) as c:
            c.ping()
            first.add(c.topology.current)
    assert len(first) > 1


def test_failover_when_the_connected_node_is_killed(cluster, qname):
    with Client(cluster.addresses[0]) as c:
        job_id = c.add_job(qname, b"replicated", replicate=3, retry=1)
        dead = index_of(cluster, c.topology.current)
        cluster.kill(dead)
        assert c.add_job(qname, b"after", replicate=2)
        assert index_of(cluster, c.topology.current) != dead
        # the replicas queue the first job again after its retry time
        got = set()
        wait_for(
            lambda: (
                got.update(j.id for j in c.get_jobs(qname, count=2, timeout=1)) or job_id in got
            ),
            DEADLINE,
            what="the replicated job delivered by a surviving node",
        )


def test_a_getjob_blocked_on_a_killed_node_raises_reply_lost(cluster, qname):
    with Client(cluster.addresses[0]) as c:
        c.ping()
        errors = []

        def consume() -> None:
            try:
                c.get_jobs(qname)
            except ReplyLostError as exc:
                errors.append(exc)

        thread = threading.Thread(target=consume)
        thread.start()
        wait_for(lambda: cluster.blocked(0) == 1, what="a blocked consumer")
        cluster.kill(0)
        thread.join(DEADLINE)
        assert [e.command for e in errors] == ["GETJOB"]
        assert c.add_job(qname, b"x", replicate=2)  # the client moved on


def test_leaving_node_redirects_consumers(cluster, qname):
    with Client(cluster.addresses[0]) as c:
        c.ping()
        assert c.topology.current == ("127.0.0.1", cluster.servers[0].port)
        job_id = c.on_node(cluster.addresses[1]).add_job(qname, b"x", replicate=1)
        cluster.command(0, "CLUSTER", "LEAVING", "yes")
        before = cluster.calls(0, "getjob")
        (job,) = c.get_jobs(qname, timeout=DEADLINE)
        assert job.id == job_id
        assert cluster.calls(0, "getjob") == before + 1  # refused with -LEAVING, then elsewhere
        assert c.topology.current != ("127.0.0.1", cluster.servers[0].port)


def test_a_blocked_consumer_is_redirected_when_its_node_starts_leaving(cluster, qname):
    with Client(cluster.addresses[0]) as c:
        c.ping()
        result = []
        thread = threading.Thread(target=lambda: result.extend(c.get_jobs(qname, timeout=DEADLINE)))
        thread.start()
        wait_for(lambda: cluster.blocked(0) == 1, what="a blocked consumer")
        cluster.command(0, "CLUSTER", "LEAVING", "yes")
        wait_for(
            lambda: cluster.blocked(1) + cluster.blocked(2) == 1,
            what="the consumer blocked on another node",
        )
        job_id = c.on_node(cluster.addresses[1]).add_job(qname, b"x", replicate=2)
        thread.join(DEADLINE)
        assert [j.id for j in result] == [job_id]


def calls_during(cluster, command: str, action) -> tuple[object, list[int]]:
    """``action()``'s value, and how many times each node ran ``command`` meanwhile."""
    before = [cluster.calls(i, command) for i in range(len(cluster.servers))]
    value = action()
    return value, [cluster.calls(i, command) - n for i, n in enumerate(before)]


def test_job_commands_go_to_the_node_that_created_the_job(cluster, qname):
    with Client(cluster.addresses[1:]) as producer:
        on_b, on_c = (producer.on_node(a) for a in cluster.addresses[1:])
        b_job, b_job2 = on_b.add_jobs(qname, [b"b", b"b2"], replicate=3, retry=60)
        c_job = on_c.add_job(qname, b"c", replicate=3, retry=60)
        assert len(on_b.get_jobs(qname, count=2) + on_c.get_jobs(qname)) == 3  # now active
    with Client(cluster.addresses[0]) as c:
        c.ping()
        assert calls_during(cluster, "show", lambda: c.show(b_job).id) == (b_job, [0, 1, 0])
        assert calls_during(cluster, "working", lambda: c.working(c_job)) == (60, [0, 0, 1])
        assert calls_during(cluster, "nack", lambda: c.nack(b_job, c_job)) == (2, [0, 1, 1])
        assert calls_during(cluster, "ackjob", lambda: c.ack(b_job, c_job)) == (2, [0, 1, 1])
        assert calls_during(cluster, "fastack", lambda: c.fast_ack(b_job2)) == (1, [0, 1, 0])
        assert c.topology.current == ("127.0.0.1", cluster.servers[0].port)


def test_an_addjob_refused_with_leaving_is_not_sent_again(cluster, qname):
    # node 2 is stopped (still counted reachable for the node timeout, 15 s), so
    # node 0 waits for its replica; then node 0 starts leaving and refuses the ADDJOB.
    stalled = cluster.servers[2].proc
    with Client(cluster.addresses[0]) as c:
        c.ping()
        before = [cluster.calls(i, "addjob") for i in range(3)]
        errors: list[Exception] = []

        def produce() -> None:
            try:
                c.add_job(qname, b"x", replicate=3, timeout=DEADLINE)
            except Exception as exc:  # checked below
                errors.append(exc)

        thread = threading.Thread(target=produce)
        os.kill(stalled.pid, signal.SIGSTOP)
        try:
            thread.start()
            wait_for(lambda: cluster.blocked(0) == 1, what="an ADDJOB waiting for replicas")
            cluster.command(0, "CLUSTER", "LEAVING", "yes")
            thread.join(DEADLINE)
        finally:
            os.kill(stalled.pid, signal.SIGCONT)
        (error,) = errors
        assert isinstance(error, LeavingError) and error.code == "LEAVING"
        assert "ADDJOB was not sent to another node" in str(error)
        assert "retrying may create a duplicate" in str(error)
        assert error.node == cluster.addresses[0]
        assert [cluster.calls(i, "addjob") - n for i, n in enumerate(before)] == [1, 0, 0]
        # calling again is the caller's choice, and goes to a node that is not leaving
        _, added = calls_during(cluster, "addjob", lambda: c.add_job(qname, b"y", replicate=1))
        assert added[0] == 0 and sum(added) == 1


def test_cluster_commands(tmp_path):
    with running_cluster(tmp_path, 3, meet=False) as cluster, Client(cluster.addresses) as c:
        first, third = c.on_node(cluster.addresses[0]), c.on_node(cluster.addresses[2])
        for server in cluster.servers[1:]:
            assert first.cluster_meet("127.0.0.1", server.port) is None
        cluster.wait_meshed()
        third_id = third.cluster_myid()
        assert third.cluster_leaving() is False
        assert third.cluster_leaving(True) is None
        assert third.cluster_leaving() is True
        wait_for(
            lambda: any(n.id == third_id and "leaving" in n.flags for n in first.cluster_nodes()),
            DEADLINE,
            what="the leaving flag gossiped",
        )
        assert third.cluster_leaving(False) is None
        (cluster.dirs[0] / "nodes.conf").unlink(missing_ok=True)
        assert first.cluster_saveconfig() is None
        assert third_id in (cluster.dirs[0] / "nodes.conf").read_text()
        assert first.cluster_forget(third_id) is None
        assert third_id not in {n.id for n in first.cluster_nodes()}
        assert third.cluster_reset(hard=True) is None
        assert third.cluster_myid() != third_id
        assert third.cluster_info()["cluster_known_nodes"] == 1


def test_routing_falls_back_when_the_creator_is_down(cluster, qname):
    b_job = (
        Client(cluster.addresses[1]).on_node(cluster.addresses[1]).add_job(qname, b"b", replicate=3)
    )
    with Client(cluster.addresses[0]) as c:
        c.ping()
        cluster.kill(1)
        info = c.show(b_job)  # B refuses the connection; A has a replica
        assert info is not None and info.id == b_job


def test_consumer_affinity_moves_getjob_to_the_producing_node(cluster, qname):
    producer = Client(cluster.addresses[2]).on_node(cluster.addresses[2])
    ids = set(producer.add_jobs(qname, [b"%d" % n for n in range(300)], replicate=1))
    affinity = Affinity(window=20, threshold=0.5, min_jobs=10)
    with Client(cluster.addresses[0], consumer_affinity=affinity) as consumer:
        got: set[str] = set()

        def consume() -> bool:
            jobs = consumer.get_jobs(qname, count=10, timeout=1)
            consumer.fast_ack(*(j.id for j in jobs))
            got.update(j.id for j in jobs)
            return got == ids

        wait_for(consume, DEADLINE, interval=0, what="every job consumed")
        assert consumer.topology.consumer == ("127.0.0.1", cluster.servers[2].port)
    assert cluster.calls(2, "getjob") > 0


def test_asyncio_client_fails_over_too(cluster, qname):
    async def main():
        async with aio.Client(cluster.addresses[0]) as c:
            await c.ping()
            cluster.kill(0)
            return await c.add_job(qname, b"x", replicate=2)

    assert asyncio.run(main())


def disquette(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "disquette.cli.main", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(SRC)),
        timeout=120,
        check=False,
    )


def test_cluster_create_and_status(tmp_path):
    with running_cluster(tmp_path, 3, meet=False) as cluster:
        created = disquette("cluster", "create", *cluster.addresses)
        assert created.returncode == 0, created.stderr
        assert "cluster of 3 nodes ready" in created.stderr
        cluster.wait_meshed()
        lines = created.stdout.splitlines()
        assert lines[0].split() == [
            "id", "address", "flags", "priority", "jobs", "queues", "clients", "state",
        ]  # fmt: skip
        assert len(lines) == 4 and all(line.endswith("up") for line in lines[1:])
        assert "myself" in lines[1]
        status = disquette("cluster", "status", cluster.addresses[1])
        assert status.returncode == 0
        assert len(status.stdout.splitlines()) == 4
        cluster.kill(2)
        status = disquette("cluster", "status", cluster.addresses[0])
        assert status.stdout.splitlines()[-1].endswith("unreachable") or any(
            line.endswith("unreachable") for line in status.stdout.splitlines()
        )


def test_cluster_create_times_out_on_an_unreachable_node(tmp_path):
    with running_cluster(tmp_path, 1, meet=False) as cluster:
        result = disquette(
            "cluster", "create", cluster.addresses[0], "127.0.0.1:1", "--timeout", "1"
        )
        assert result.returncode == 1
        assert "127.0.0.1:1" in result.stderr


def test_cluster_create_waits_for_a_node_still_starting(tmp_path):
    """Nodes started just before ``cluster create`` (``disquette-server ... &``) may not
    listen yet: create waits for them within its timeout."""
    late = free_port()
    with running_cluster(tmp_path, 2, meet=False) as cluster:
        create = subprocess.Popen(
            [sys.executable, "-m", "disquette.cli.main", "cluster", "create",
             *cluster.addresses, f"127.0.0.1:{late}", "--timeout", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONPATH=str(SRC)),
        )  # fmt: skip
        try:
            (tmp_path / "late").mkdir()  # started after create, which is retrying it
            with running_server(tmp_path / "late", port=late):
                out, err = create.communicate(timeout=90)
                assert create.returncode == 0, err
                assert "cluster of 3 nodes ready" in err
                assert len(out.splitlines()) == 4
        finally:
            if create.poll() is None:
                create.kill()
                create.wait()


def test_cli_stat_shows_every_node(cluster):
    result = subprocess.run(
        [sys.executable, "-m", "disquette.cli.cli_tool", "-p", str(cluster.servers[0].port),
         "--stat", "-r", "1"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(SRC)), timeout=60,
        check=True,
    )  # fmt: skip
    rows = result.stdout.splitlines()[1:]
    assert sorted(r.split()[0] for r in rows) == sorted(cluster.addresses)
