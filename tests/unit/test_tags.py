"""Delivery tags (GETJOB TAG, ACKJOB TAG, WORKING TAG; core/tags.py) on the virtual
clock: redelivery of a tag's jobs to a retried reader, acknowledgement by name
across the copies, keeping alive, and forgetting idle tags."""

from __future__ import annotations

from disquette.core import tags
from disquette.core.job import ACKED, ACTIVE, QUEUED
from disquette.core.memory import bytes_cost
from tests.unit.test_cluster_jobs import Cluster, addjob, job_on, replicated

TAG = b"spark:run:1:n:0/0"


def queued(c: Cluster, n: int, **kw) -> list[bytes]:
    node = c.nodes[0]
    ids = []
    for _ in range(n):
        job = addjob(node, repl=1, retry=10, **kw)
        assert job is not None
        ids.append(job.id)
    return ids


def test_a_tag_records_what_it_took_and_hands_it_back_first():
    c = Cluster(1)
    node = c.nodes[0]
    ids = queued(c, 5)
    first = [j.id for j in node.tags.get_jobs(TAG, [b"q"], 3, False)]
    assert first == ids[:3]
    # The reader died; run again with the same tag: the same jobs first, nothing new.
    assert [j.id for j in node.tags.get_jobs(TAG, [b"q"], 3, False)] == first
    # A larger count tops the tag up from the queue, and records the new ones.
    assert [j.id for j in node.tags.get_jobs(TAG, [b"q"], 4, False)] == ids[:4]
    assert node.tags.tags[TAG].ids == ids[:4]
    assert len(node.queues.get(b"q")) == 1


def test_a_requeued_job_of_a_tag_is_taken_back_from_its_queue():
    c = Cluster(1)
    node = c.nodes[0]
    [job_id] = queued(c, 1)
    node.tags.get_jobs(TAG, [b"q"], 1, False)
    c.run(12_000)  # past its retry: queued again
    assert job_on(node, job_id).state == QUEUED
    assert [j.id for j in node.tags.get_jobs(TAG, [b"q"], 1, False)] == [job_id]
    assert job_on(node, job_id).state == ACTIVE
    assert not len(node.queues.get(b"q"))


def test_ackjob_tag_acknowledges_every_copy_and_forgets_the_tag():
    c = Cluster(3)
    node = c.nodes[0]
    ids = [replicated(c, node, repl=3, retry=10) for _ in range(3)]
    assert len(node.tags.get_jobs(TAG, [b"q"], 10, False)) == 3
    assert node.tags.ack(TAG) == 3
    assert TAG not in node.tags.tags
    c.run(2000)
    for job_id in ids:
        assert not c.holders(job_id) or all(
            n.jobs[job_id].state == ACKED for n in c.holders(job_id)
        )
    assert node.tags.ack(TAG) == 0  # unknown: nothing


def test_an_acknowledged_job_is_not_delivered_again_under_its_tag():
    c = Cluster(1)
    node = c.nodes[0]
    ids = queued(c, 2)
    node.tags.get_jobs(TAG, [b"q"], 2, False)
    node.ack_jobs([ids[0]])
    assert [j.id for j in node.tags.get_jobs(TAG, [b"q"], 2, False)] == [ids[1]]
    assert node.tags.tags[TAG].ids == [ids[1]]


def test_working_tag_keeps_the_jobs_from_being_queued_again():
    c = Cluster(1)
    node = c.nodes[0]
    ids = queued(c, 2)
    node.tags.get_jobs(TAG, [b"q"], 2, False)
    for _ in range(5):
        c.run(4000)
        assert node.tags.working(TAG) == 10
    assert all(job_on(node, i).state == ACTIVE for i in ids)
    c.run(12_000)  # no more WORKING: back in the queue after the retry time
    assert all(job_on(node, i).state == QUEUED for i in ids)
    assert node.tags.working(b"unknown") == 0


def test_working_tag_leaves_just_delivered_jobs_alone_unless_others_hold_copies():
    c = Cluster(3)
    node = c.nodes[0]
    alone = [addjob(node, repl=1, retry=10) for _ in range(2)]
    copied = replicated(c, node, repl=3, retry=10)
    node.tags.get_jobs(TAG, [b"q"], 3, False)
    requeues = {job.id: job.qtime for job in alone}
    c.clock.advance(500)
    assert node.tags.working(TAG) == 10  # every live job's retry counts
    # Held here only and just delivered: their requeue stays where the delivery put it.
    assert {job.id: job.qtime for job in alone} == requeues
    assert job_on(node, copied).qtime >= node.clock() + 9000  # postponed: others were told
    c.clock.advance(1500)  # more than 10 % of the retry time since the delivery
    node.tags.working(TAG)
    assert all(job.qtime > requeues[job.id] for job in alone)
    c.run(9000)  # 11 s after the delivery, 9 s after the last WORKING: still active
    assert all(job.state == ACTIVE for job in alone)


def test_an_idle_tag_is_forgotten_and_its_memory_returned():
    c = Cluster(1)
    node = c.nodes[0]
    queued(c, 3, ttl=10 * 3600)
    node.tags.get_jobs(TAG, [b"q"], 3, False)
    held = tags.DICT_ENTRY + bytes_cost(len(TAG)) + 3 * tags.ENTRY_COST  # what the tag costs
    c.clock.advance(tags.IDLE_MS)
    # (node.cron would also evict the queue it emptied, which samples idle queues at
    # random: the tags' own cron is what forgets a tag.)
    before = node.used_memory
    node.tags.cron(node.clock())
    assert not node.tags.tags
    assert before - node.used_memory == held


def test_an_empty_queue_gives_an_empty_tag():
    c = Cluster(1)
    assert c.nodes[0].tags.get_jobs(TAG, [b"q"], 3, False) == []
    assert c.nodes[0].tags.ack(TAG) == 0
