"""Nothing deleted stays referenced: after every way a job can be deleted, the jobs
reachable from a node's state are exactly the jobs it has registered.

Each job here keeps Disque's default retry (five minutes) and TTL (a day), so a
timer, queue, client or protocol table that still pointed at a deleted job
would keep it alive for that long; the walk is the simulator's
(:func:`disquette.sim.properties.reachable_jobs`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from disquette.core.node import Node
from disquette.sim.properties import reachable_jobs
from tests.unit.core_harness import Harness, RecordingClient
from tests.unit.test_cluster_jobs import Cluster, addjob, replicated


def assert_only_registered(*nodes: Node) -> None:
    for node in nodes:
        registered = {id(job) for job in node.jobs.values()}
        stray = [job for key, job in reachable_jobs(node).items() if key not in registered]
        assert stray == []
        assert len(node.schedule) <= len(node.jobs)


def single(path: Callable[[Harness, list[bytes]], None], **settings) -> Harness:
    """A node with ten jobs (five of them delivered) and one kept; ``path`` deletes
    the ten, given their IDs."""
    h = Harness(**settings)
    client = RecordingClient()
    ids = [h.node.add_job(client, b"q", b"x" * 64, 0).id for _ in range(10)]
    h.node.add_job(client, b"keep", b"kept", 0)
    h.node.get_jobs([b"q"], 5)
    path(h, ids)
    return h


SINGLE_PATHS: dict[str, Callable[[Harness, list[bytes]], None]] = {
    "ackjob": lambda h, ids: h.node.ack_jobs(ids),
    "fastack": lambda h, ids: h.node.fast_ack(ids),
    "deljob": lambda h, ids: h.node.delete_jobs(ids),
    "dequeue-then-deljob": lambda h, ids: (h.node.dequeue_jobs(ids), h.node.delete_jobs(ids)),
    "nack-then-ackjob": lambda h, ids: (h.node.requeue_jobs(ids, True), h.node.ack_jobs(ids)),
    "working-then-fastack": lambda h, ids: (
        [h.node.working(i) for i in ids[:5]],
        h.node.fast_ack(ids),
    ),
}


@pytest.mark.parametrize("path", sorted(SINGLE_PATHS))
def test_deleted_jobs_are_let_go_on_a_single_node(path: str):
    h = single(SINGLE_PATHS[path])
    assert len(h.node.jobs) == 1
    assert_only_registered(h.node)


def test_expired_jobs_are_let_go():
    h = Harness()
    client = RecordingClient()
    for _ in range(5):
        h.node.add_job(client, b"q", b"x", 0, ttl=2, retry=1)
    h.node.get_jobs([b"q"], 2)
    h.run_for(3500)
    assert len(h.node.jobs) == 0
    assert_only_registered(h.node)


def test_evicted_jobs_are_let_go():
    """Above 95 % of maxmemory, delivered at-most-once jobs are evicted to make room
    (the limit is lowered under a full node, as CONFIG SET maxmemory does)."""
    h = Harness(maxmemory=4_000_000)
    client = RecordingClient()
    for _ in range(1000):
        h.node.add_job(client, b"q", b"x" * 1000, 0, retry=0)
    h.node.get_jobs([b"q"], 1000)
    h.settings.maxmemory = h.node.used_memory
    assert h.node.memory_level() == 2
    assert h.node.reclaim_memory()
    assert 0 < len(h.node.jobs) < 1000
    assert_only_registered(h.node)


def test_flushall_lets_go_of_everything():
    h = single(lambda h, ids: h.node.flush_all())
    assert len(h.node.jobs) == 0
    assert_only_registered(h.node)


def cluster_ack(c: Cluster, ids: list[bytes]) -> None:
    c.nodes[1].ack_jobs(ids)
    c.pump()


def cluster_fastack(c: Cluster, ids: list[bytes]) -> None:
    c.nodes[2].fast_ack(ids)
    c.pump()


def cluster_dummy_acks(c: Cluster, ids: list[bytes]) -> None:
    """Acks for jobs a node never held, collected once the holders have acked too."""
    for node in c.nodes:
        node.ack_jobs(ids)
    fake = [b"D-aaaaaaaa-" + b"%024d" % i + b"-0005" for i in range(5)]
    c.nodes[0].ack_jobs(fake)
    c.pump()
    c.run(5000)


def cluster_federated_at_most_once(c: Cluster, ids: list[bytes]) -> None:
    """RETRY 0 jobs moved by federation are deleted where they were."""
    for _ in range(5):
        addjob(c.nodes[0], queue=b"far", repl=1, retry=0)
    consumer = RecordingClient(9)
    c.nodes[1].block_for_jobs(consumer, [b"far"], 0, False)
    c.run(2000)
    cluster_ack(c, ids)


CLUSTER_PATHS = {
    "ackjob-gc": cluster_ack,
    "fastack": cluster_fastack,
    "dummy-acks": cluster_dummy_acks,
    "federated-retry-0": cluster_federated_at_most_once,
}


@pytest.mark.parametrize("path", sorted(CLUSTER_PATHS))
def test_deleted_jobs_are_let_go_across_a_cluster(path: str):
    c = Cluster(3)
    ids = [replicated(c, c.nodes[0], repl=3) for _ in range(5)]
    kept = replicated(c, c.nodes[0], repl=2, queue=b"keep")
    CLUSTER_PATHS[path](c, ids)
    for node in c.nodes:
        assert all(node.jobs.get(jid) is None for jid in ids)
    assert len(c.holders(kept)) == 2
    assert_only_registered(*c.nodes)


def test_failed_and_abandoned_replication_lets_go():
    """An ADDJOB that times out, and one whose client disconnects, leave nothing."""
    c = Cluster(3)
    c.net.cut.add(c.nodes[2].myself)
    timed_out = RecordingClient(1)
    assert addjob(c.nodes[0], timed_out, timeout=500, repl=3) is None
    gone = RecordingClient(2)
    assert addjob(c.nodes[0], gone, repl=3) is None
    c.nodes[0].client_gone(gone)
    c.run(1000)
    assert timed_out.replies and timed_out.replies[0].startswith(b"-NOREPL")
    c.net.cut.clear()
    c.run(1000)
    assert [len(node.jobs) for node in c.nodes] == [0, 0, 0]
    assert_only_registered(*c.nodes)
