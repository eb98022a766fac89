"""Jobs across a real cluster: several server processes joined over the TCP bus.

Each cluster is started in its own directories on free ports, joined with
CLUSTER MEET and waited for until every node has a link to every other one.
A module-wide four-node cluster serves the tests that leave it as they found
it (replication, acks, federation, PAUSE BCAST; each uses its own queue); the
tests that kill, restart or set nodes leaving get a cluster of their own. Every
wait is a condition polled with a deadline, and every process is stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from tests.support.cluster import DEADLINE, Cluster, pairs
from tests.support.cluster import running_cluster as cluster
from tests.support.servers import wait_for


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Iterator[Cluster]:
    with cluster(tmp_path_factory.mktemp("cluster"), 4) as c:
        yield c


def getjob(client: redis.Redis, queue: bytes, timeout_ms: int = 30_000) -> list | None:
    return client.execute_command("GETJOB", "TIMEOUT", timeout_ms, "FROM", queue)


# ----------------------------------------------------------------------------
# On a shared cluster.


def test_sync_replication_puts_a_copy_on_repl_nodes(shared: Cluster, queue: bytes):
    c0 = shared.clients[0]
    jid = c0.execute_command("ADDJOB", queue, "body", 5000, "REPLICATE", 3)
    assert jid.startswith(b"D-")
    show = shared.show(0, jid)
    assert show["state"] == b"queued" and show["repl"] == 3
    assert set(show["nodes-delivered"]) <= set(shared.ids) and len(show["nodes-delivered"]) == 3
    replicas = [i for i in shared.holders(jid) if i != 0]
    assert len(replicas) == 2  # copies exist by the time the ID is answered
    for i in replicas:
        copy = shared.show(i, jid)
        assert copy["state"] == b"active" and copy["body"] == b"body"
        assert copy["ctime"] == show["ctime"]
        assert set(copy["nodes-delivered"]) == set(show["nodes-delivered"])


def test_async_replication_answers_at_once_and_copies_later(shared: Cluster, queue: bytes):
    jid = shared.clients[1].execute_command("ADDJOB", queue, "b", 0, "REPLICATE", 4, "ASYNC")
    wait_for(lambda: len(shared.holders(jid)) == 4, DEADLINE, what="four copies")
    assert shared.show(1, jid)["state"] == b"queued"
    assert sum(shared.show(i, jid)["state"] == b"queued" for i in range(4)) == 1


def test_ack_propagates_and_every_copy_is_collected(shared: Cluster, queue: bytes):
    c0 = shared.clients[0]
    jid = c0.execute_command("ADDJOB", queue, "body", 5000, "REPLICATE", 3)
    [[_, got, _]] = getjob(c0, queue)
    assert got == jid
    assert c0.execute_command("ACKJOB", jid) == 1
    wait_for(lambda: not shared.holders(jid), DEADLINE, what="the job collected everywhere")


def test_ack_on_nodes_that_never_had_the_job(shared: Cluster, queue: bytes):
    jid = shared.clients[0].execute_command("ADDJOB", queue, "body", 5000, "REPLICATE", 2)
    strangers = [i for i in range(4) if shared.show(i, jid) is None]
    assert len(strangers) == 2
    assert shared.clients[strangers[0]].execute_command("ACKJOB", jid) == 0
    wait_for(lambda: not shared.holders(jid), DEADLINE, what="the job collected everywhere")
    assert shared.clients[0].execute_command("GETJOB", "NOHANG", "FROM", queue) is None


def test_federation_moves_jobs_to_the_consumer_and_acks_back(shared: Cluster, queue: bytes):
    producer, consumer = shared.clients[0], shared.clients[1]
    jid = producer.execute_command("ADDJOB", queue, "body", 5000, "REPLICATE", 1)
    [[name, got, body]] = getjob(consumer, queue)
    assert (name, got, body) == (queue, jid, b"body")
    qstat = pairs(consumer.execute_command("QSTAT", queue))
    assert qstat["import-from"] == [shared.ids[0]] and qstat["import-rate"] >= 1
    assert pairs(producer.execute_command("QSTAT", queue))["jobs-out"] == 1
    assert set(shared.show(1, jid)["nodes-delivered"]) == {shared.ids[0], shared.ids[1]}
    assert consumer.execute_command("ACKJOB", jid) == 1
    wait_for(lambda: not shared.holders(jid), DEADLINE, what="the job collected everywhere")


def test_federation_serves_a_consumer_that_was_waiting(shared: Cluster, queue: bytes):
    with ThreadPoolExecutor(1) as pool, shared.servers[2].client() as client:
        waiting = pool.submit(getjob, client, queue)
        wait_for(
            lambda: (
                pairs(shared.clients[2].execute_command("QSTAT", queue) or []).get("blocked") == 1
            ),
            DEADLINE,
            what="a blocked consumer",
        )
        jid = shared.clients[3].execute_command("ADDJOB", queue, "late", 5000, "REPLICATE", 1)
        [[_, got, body]] = waiting.result(DEADLINE)
    assert (got, body) == (jid, b"late")


def test_federation_of_at_most_once_jobs(shared: Cluster, queue: bytes):
    producer, consumer = shared.clients[3], shared.clients[2]
    jid = producer.execute_command("ADDJOB", queue, "once", 5000, "REPLICATE", 1, "RETRY", 0)
    [[_, got, _]] = getjob(consumer, queue)
    assert got == jid
    assert shared.show(3, jid) is None  # moved, not copied
    copy = shared.show(2, jid)
    assert copy["retry"] == 0 and copy["state"] == b"active"
    assert copy["next-requeue-within"] is None


def test_pause_bcast_reaches_every_node(shared: Cluster, queue: bytes):
    assert shared.clients[0].execute_command("PAUSE", queue, "in", "bcast") == b"in"

    def paused(state: bytes) -> bool:
        stats = [c.execute_command("QSTAT", queue) for c in shared.clients]
        return all(s is not None and pairs(s)["pause"] == state for s in stats)

    wait_for(lambda: paused(b"in"), DEADLINE, what="the queue paused everywhere")
    with pytest.raises(redis.ResponseError, match=r"^PAUSED Queue paused in input"):
        shared.clients[1].execute_command("ADDJOB", queue, "x", 0, "REPLICATE", 1)
    assert shared.clients[2].execute_command("PAUSE", queue, "none", "bcast") == b"none"
    wait_for(lambda: paused(b"none"), DEADLINE, what="the queue resumed everywhere")


# ----------------------------------------------------------------------------
# On clusters of their own.


def test_norepl_when_replica_nodes_are_killed(tmp_path):
    with cluster(tmp_path, 3, ["--cluster-node-timeout", "5000"]) as c:
        c.kill(1)
        c.kill(2)
        with pytest.raises(redis.ResponseError, match=r"^NOREPL "):
            c.clients[0].execute_command("ADDJOB", "q", "x", 300, "REPLICATE", 3)
        assert c.clients[0].execute_command("JSCAN", "BUSYLOOP") == [b"0", []]
        wait_for(
            lambda: b"cluster_reachable_nodes:0" in c.clients[0].execute_command("CLUSTER", "INFO"),
            DEADLINE,
            what="the killed nodes flagged failing",
        )
        with pytest.raises(redis.ResponseError) as e:
            c.clients[0].execute_command("ADDJOB", "q", "x", 300, "REPLICATE", 2)
        assert str(e.value) == (
            "NOREPL Not enough reachable nodes for the requested replication level"
        )
        assert c.clients[0].execute_command("ADDJOB", "q", "x", 300, "REPLICATE", 1)


def test_requeue_after_the_queueing_node_dies(tmp_path):
    with cluster(tmp_path, 3) as c:
        jid = c.clients[0].execute_command("ADDJOB", "q", "x", 5000, "REPLICATE", 3, "RETRY", 1)
        assert c.show(0, jid)["state"] == b"queued"
        c.kill(0)
        [[_, got, _]] = getjob(c.clients[1], b"q", 50_000)
        assert got == jid
        assert c.clients[1].execute_command("ACKJOB", jid) == 1
        # The dead node may still hold it: the ack stays until it answers or expires.
        wait_for(lambda: c.acked_or_gone(jid, [1, 2]), DEADLINE, what="the ack everywhere")
        assert c.clients[2].execute_command("GETJOB", "NOHANG", "FROM", "q") is None


def test_delivery_survives_repl_minus_one_dead_holders(tmp_path):
    with cluster(tmp_path, 5) as c:
        jid = c.clients[0].execute_command("ADDJOB", "q", "x", 5000, "REPLICATE", 3, "RETRY", 1)
        holders = c.holders(jid)
        assert len(holders) == 3 and 0 in holders
        (other,) = [i for i in holders if i != 0][:1]
        c.kill(0)
        c.kill(other)
        survivors = [i for i in range(5) if i not in (0, other)]
        consumer = next(i for i in survivors if i not in holders)  # federation too
        [[_, got, _]] = getjob(c.clients[consumer], b"q", 50_000)
        assert got == jid
        assert c.clients[consumer].execute_command("ACKJOB", jid) == 1
        wait_for(lambda: c.acked_or_gone(jid, survivors), DEADLINE, what="the ack everywhere")
        for i in survivors:
            assert c.clients[i].execute_command("GETJOB", "NOHANG", "FROM", "q") is None


def test_federated_stream_survives_the_consumer_node_dying(tmp_path):
    """Producers on node 0, consumers on node 1: every job travels by federation and
    its ack goes back in batches. Node 1 is killed (SIGKILL) holding imported jobs
    it never handed out; node 0 still holds them and queues them again, and the
    consumers, now on node 2, get every job: none is lost, duplicates are counted."""
    total = 600
    with cluster(tmp_path, 3) as c:
        added = set()
        for i in range(total):
            added.add(
                c.clients[0].execute_command(
                    "ADDJOB", "fq", b"job %d" % i, 5000, "REPLICATE", 1, "RETRY", 2
                )
            )
        delivered: list[bytes] = []
        while len(delivered) < total // 2:
            reply = c.clients[1].execute_command(
                "GETJOB", "TIMEOUT", 30_000, "COUNT", 10, "FROM", "fq"
            )
            assert reply is not None
            jids = [jid for _, jid, _ in reply]
            delivered += jids
            assert c.clients[1].execute_command("ACKJOB", *jids) == len(jids)
        imported = pairs(c.clients[1].execute_command("QSTAT", "fq"))["len"]
        c.kill(1)
        deadline_reached = False
        while not added <= set(delivered) and not deadline_reached:
            reply = getjob(c.clients[2], b"fq", 30_000)
            deadline_reached = reply is None
            for _, jid, _ in reply or []:
                delivered.append(jid)
                assert c.clients[2].execute_command("ACKJOB", jid) == 1
        assert added <= set(delivered), f"{len(added - set(delivered))} jobs never delivered"
        assert set(delivered) <= added
        duplicates = len(delivered) - len(set(delivered))
        print(f"\n{imported} jobs queued on node 1 when it died; {duplicates} delivered twice")
        wait_for(
            lambda: all(c.acked_or_gone(jid, [0, 2]) for jid in added),
            DEADLINE,
            what="every job acknowledged or collected on the live nodes",
        )
        assert c.clients[0].execute_command("GETJOB", "NOHANG", "FROM", "fq") is None


def test_gc_waits_for_a_holder_that_is_down_and_restarted(tmp_path):
    with cluster(tmp_path, 3, ["--appendonly", "yes"]) as c:
        jid = c.clients[0].execute_command("ADDJOB", "q", "x", 5000, "REPLICATE", 3)
        c.kill(2)
        [[_, got, _]] = getjob(c.clients[0], b"q")
        assert got == jid
        assert c.clients[0].execute_command("ACKJOB", jid) == 1
        wait_for(lambda: c.show(1, jid)["state"] == b"acked", DEADLINE, what="the ack on node 1")
        show = c.show(0, jid)
        assert show is not None and show["state"] == b"acked"  # node 2 is owed a SETACK
        c.restart(2)
        assert c.show(2, jid)["state"] == b"active"  # reloaded from its AOF
        c.wait_meshed(range(3))
        wait_for(lambda: not c.holders(jid), DEADLINE, what="the job collected everywhere")
        assert c.clients[2].execute_command("GETJOB", "NOHANG", "FROM", "q") is None


def test_leaving_node(tmp_path):
    with cluster(tmp_path, 3) as c:
        leaving = c.clients[0]
        assert leaving.execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
        with pytest.raises(redis.ResponseError, match=r"^LEAVING This node is leaving"):
            leaving.execute_command("GETJOB", "TIMEOUT", 100, "FROM", "q")
        unknown = b"D-00000000-" + b"A" * 24 + b"-0005"
        assert leaving.execute_command("ACKJOB", unknown) == 0
        assert c.show(0, unknown) is None  # no dummy ack while leaving

        def queued_by_one_replica(jid: bytes) -> bool:
            shows = [c.show(i, jid) for i in (1, 2)]
            return None not in shows and [s["state"] for s in shows].count(b"queued") == 1

        # ADDJOB replicates externally: no copy here, two elsewhere, one queued.
        jid = leaving.execute_command("ADDJOB", "q", "a", 0, "REPLICATE", 2, "ASYNC")
        assert c.show(0, jid) is None
        wait_for(lambda: queued_by_one_replica(jid), DEADLINE, what="two copies, one queued")
        jid = None
        for _ in range(20):  # a confirmation may lose the race with the -LEAVING cron
            try:
                jid = leaving.execute_command("ADDJOB", "q", "s", 5000, "REPLICATE", 2)
                break
            except redis.ResponseError as e:
                assert str(e).startswith("LEAVING ")
        assert jid is not None and c.show(0, jid) is None
        wait_for(lambda: queued_by_one_replica(jid), DEADLINE, what="two copies, one queued")

        # The others see the flag: the leaving node no longer counts as reachable.
        wait_for(
            lambda: b"cluster_reachable_nodes:1" in c.clients[1].execute_command("CLUSTER", "INFO"),
            DEADLINE,
            what="the leaving flag propagated",
        )
        with pytest.raises(redis.ResponseError, match=r"^NOREPL Not enough reachable"):
            c.clients[1].execute_command("ADDJOB", "q", "x", 0, "REPLICATE", 3)
