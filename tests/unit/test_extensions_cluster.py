"""Policies, dead letters and de-duplication across cores on the in-memory bus,
on a virtual clock (the cluster harness of test_cluster_jobs)."""

from __future__ import annotations

from disquette.core.job import ACKED, QUEUED
from tests.unit.core_harness import RecordingClient
from tests.unit.test_cluster_jobs import Cluster, addjob


def tables(c: Cluster) -> list[dict]:
    return [
        {name: (p.version, p.deleted, p.options) for name, p in n.policies.records.items()}
        for n in c.nodes
    ]


def test_a_policy_reaches_every_node_at_once():
    c = Cluster(3)
    c.nodes[1].policies.set(b"p", b"q*", {"retry": 9})
    c.pump()
    assert all(n.policies.get(b"p").options == {"retry": 9} for n in c.nodes)


def test_writes_on_both_sides_of_a_partition_converge_after_it():
    c = Cluster(3)
    c.net.cut.add(c.nodes[2].myself)
    c.nodes[0].policies.set(b"a", b"a*", {"ttl": 100})
    c.nodes[2].policies.set(b"a", b"a*", {"ttl": 200})  # same counter: the greater ID wins
    c.nodes[2].policies.set(b"b", b"b*", {"maxlen": 3})
    c.nodes[0].policies.set(b"b", b"b*", {"maxlen": 4})
    c.nodes[0].policies.delete(b"b")
    c.pump()
    assert tables(c)[0] != tables(c)[2]
    c.net.cut.clear()
    c.run(5000)  # digests go to a random peer each second
    assert tables(c)[0] == tables(c)[1] == tables(c)[2]
    assert c.nodes[0].policies.get(b"a").options == {"ttl": 200}  # node 2's ID is greater
    assert c.nodes[1].policies.get(b"b") is None  # the later deletion wins


def test_a_dead_letter_is_made_once_and_the_original_acked_on_every_holder():
    c = Cluster(3)
    c.nodes[0].policies.set(b"p", b"q", {"max-nacks": 1, "deadletter": b"dead"})
    c.pump()
    client = RecordingClient()
    assert addjob(c.nodes[0], client, timeout=5000, repl=3) is None
    c.pump()
    job_id = client.replies[-1][1:41]
    for _ in range(2):
        [job] = c.nodes[0].get_jobs([b"q"], 1)
        c.nodes[0].requeue_jobs([job.id], nack=True)
        c.pump()
    c.run(2000)
    assert all(n.jobs.get(job_id) is None or n.jobs.get(job_id).state == ACKED for n in c.nodes)
    letters = {j.id for n in c.nodes for j in n.jobs.values() if j.queue == b"dead"}
    assert len(letters) == 1
    [letter] = letters
    copy = c.nodes[0].jobs.get(letter)
    assert copy.extra.origin_id == job_id and copy.extra.origin_nacks == 2
    assert c.nodes[0].dead_lettered == 1
    # A second requeue of the original (a late holder) finds the dead letter: none more.
    assert c.nodes[0].add_job(None, b"dead", b"body", 0, async_=True, extra=copy.extra) is copy


def test_a_partition_can_make_two_dead_letters():
    """The documented case: holders on both sides each requeue the job past its bound."""
    c = Cluster(2)
    c.nodes[0].policies.set(b"p", b"q", {"max-deliveries": 1, "deadletter": b"dead"})
    c.pump()
    client = RecordingClient()
    addjob(c.nodes[0], client, timeout=5000, repl=2, retry=1)
    c.pump()
    job_id = client.replies[-1][1:41]
    c.nodes[0].get_jobs([b"q"], 1)
    c.nodes[0].requeue_jobs([job_id], nack=True)  # node 0: past the bound
    c.net.cut.add(c.nodes[0].myself)  # what node 0 said is lost, and it stops
    c.run(3000)  # node 1: its retry timer requeues its copy, past the bound too
    c.net.cut.clear()
    c.run(3000)
    letters = {j.id for n in c.nodes for j in n.jobs.values() if j.queue == b"dead"}
    assert len(letters) == 2
    copies = [n.jobs.get(i) for n in c.nodes for i in letters]
    assert {copy.extra.origin_id for copy in copies if copy is not None} == {job_id}


def test_a_dedup_retry_on_a_replica_holder_returns_the_job():
    c = Cluster(3)
    client = RecordingClient()
    addjob(c.nodes[0], client, timeout=5000, repl=3, dedup=b"k")
    c.pump()
    job_id = client.replies[-1][1:41]
    again = c.nodes[2].add_job(RecordingClient(), b"q", b"body", 5000, repl=3, dedup=b"k")
    assert again is not None and again.id == job_id
    assert c.nodes[2].dedup_hits == 1


def test_a_dead_letter_that_cannot_be_added_leaves_the_job_queued():
    c = Cluster(1)
    node = c.nodes[0]
    node.policies.set(b"p", b"q", {"max-nacks": 1, "deadletter": b"dead"})
    node.pause(b"dead", 1, bcast=False)  # PAUSE dead in: the dead letter is refused
    job = addjob(node, repl=1)
    for _ in range(2):
        node.get_jobs([b"q"], 1)
        node.requeue_jobs([job.id], nack=True)
    assert job.state == QUEUED and list(node.queues.get(b"q").jobs) == [job]
    assert node.dead_lettered == 0 and job.nacks == 2
