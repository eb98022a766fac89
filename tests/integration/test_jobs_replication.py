"""Disque's cluster unit 02 (jobs replication), as our own tests on seven real nodes.

Disque's cluster suite runs seven nodes with a node timeout of 3 s; unit 02 adds jobs
with REPLICATE while some nodes are down, killed just before the ADDJOB so that no
node has flagged them failing yet. Disque counts every node not flagged PFAIL or
FAIL when it checks REPLICATE, and keeps sending REPLJOB to nodes that have not
confirmed (adding a node whose link comes back) until the ADDJOB's timeout: a job
whose copies cannot all be placed at once still gets them when a node returns
("Sync REPLJOB messages are retried against old nodes"), and one that can never get
them answers NOREPL when its timeout or TTL ends.

The tests run in the order of Disque's unit on one seven-node cluster (each test
restarts the nodes it killed, in their directories and on their ports, and waits
for the mesh again, as Disque's ``restart_instance`` and its next test do).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from tests.support.cluster import DEADLINE, Cluster, running_cluster
from tests.support.raw import RawConnection, encode
from tests.support.servers import wait_for

NODES = 7
QUEUE = b"myqueue"


@pytest.fixture(scope="module")
def seven(tmp_path_factory) -> Iterator[Cluster]:
    with running_cluster(
        tmp_path_factory.mktemp("unit02"), NODES, ["--cluster-node-timeout", "3000"]
    ) as c:
        yield c


def copies(cluster: Cluster, job: dict) -> int:
    """How many of the nodes the job lists as holders have it active or queued (Disque's
    ``count_job_copies``)."""
    holders = set(job["nodes-delivered"])
    count = 0
    for i in range(NODES):
        if cluster.ids[i] not in holders:
            continue
        copy = cluster.show(i, job["id"])
        if copy is not None and copy["state"] in (b"queued", b"active"):
            count += 1
    return count


def addjob(cluster: Cluster, *args: object) -> bytes:
    """ADDJOB on node 0; an error reply comes back as its text (as Tcl's ``catch``)."""
    try:
        return cluster.command(0, "ADDJOB", QUEUE, "myjob", *args)
    except redis.ResponseError as e:
        return str(e).encode()


def kill(cluster: Cluster, *indexes: int) -> None:
    for i in indexes:
        cluster.kill(i)


def restart(cluster: Cluster, *indexes: int) -> None:
    """As Disque's ``restart_instance``: back once it answers PING (the mesh may still
    be healing when the next test starts, as in Disque's suite)."""
    for i in indexes:
        cluster.restart(i)


def test_addjob_single_node(seven: Cluster):
    jid = addjob(seven, 5000, "REPLICATE", 1)
    job = seven.show(0, jid)
    assert jid.startswith(b"D-")
    assert len(job["nodes-delivered"]) == 1
    assert job["state"] == b"queued"


def test_synchronous_replication_to_multiple_nodes(seven: Cluster):
    jid = addjob(seven, 5000, "REPLICATE", 3)
    assert jid.startswith(b"D-")
    job = seven.show(0, jid)
    assert len(job["nodes-delivered"]) >= 3
    assert job["state"] == b"queued"
    assert copies(seven, job) >= 3  # at once: the ID is answered after the copies exist


def test_asynchronous_replication_to_multiple_nodes(seven: Cluster):
    jid = addjob(seven, 5000, "REPLICATE", 3, "ASYNC")
    assert jid.startswith(b"D-")
    job = seven.show(0, jid)
    assert len(job["nodes-delivered"]) >= 3
    assert job["state"] == b"queued"
    wait_for(lambda: copies(seven, job) >= 3, DEADLINE, what="three copies")


def test_sync_addjob_fails_if_not_enough_nodes_are_available(seven: Cluster):
    assert addjob(seven, 5000, "REPLICATE", 100).startswith(b"NOREPL")


def test_sync_addjob_fails_if_not_enough_nodes_are_reachable(seven: Cluster):
    kill(seven, 1, 2, 3)
    try:
        # Not flagged failing yet: counted, but the timeout ends before five copies.
        assert addjob(seven, 5000, "REPLICATE", NODES - 3 + 1).startswith(b"NOREPL")
    finally:
        restart(seven, 1, 2, 3)


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_sync_addjob_uses_more_nodes_when_first_contacted_are_down(seven: Cluster, attempt):
    kill(seven, 1, 2, 3)
    try:
        assert addjob(seven, 5000, "REPLICATE", NODES - 3).startswith(b"D-")
    finally:
        restart(seven, 1, 2, 3)
    time.sleep(1)  # Disque's own pause: the restarted nodes' failure flags likely cleared


def test_replicating_job_expires_before_reaching_the_replication_level(seven: Cluster):
    kill(seven, 1)
    try:
        assert addjob(seven, 15000, "REPLICATE", NODES, "TTL", 1).startswith(b"NOREPL")
    finally:
        restart(seven, 1)


def test_sync_repljob_messages_are_retried_against_old_nodes(seven: Cluster):
    kill(seven, 1)
    with RawConnection(seven.servers[0].port) as conn:
        conn.send(encode("ADDJOB", QUEUE, "myjob", 30000, "REPLICATE", NODES))
        wait_for(lambda: seven.blocked(0) == 1, DEADLINE, what="the ADDJOB waiting")
        time.sleep(2)  # the scenario's own pause (Disque's "after 2000"), not a wait
        restart(seven, 1)
        assert conn.read().startswith(b"D-")
