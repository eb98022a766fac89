"""Postponed requeues (NACK DELAY, backoff), results, WAITJOB and CANCEL across cores on
the in-memory bus, on a virtual clock (the cluster harness of test_cluster_jobs)."""

from __future__ import annotations

import pytest

from disquette.core import backoff, outcome
from disquette.core.client import BLOCK_NONE
from disquette.core.errors import DisqueError
from disquette.core.job import ACTIVE, BACKOFF_EXPONENTIAL, BACKOFF_FIXED, QUEUED, Extra, Job
from disquette.core.serialize import decode, encode
from tests.unit.core_harness import RecordingClient
from tests.unit.test_cluster_jobs import Cluster, addjob, replicated


def delivered(c: Cluster, node_index: int, job_id: bytes) -> None:
    [job] = c.nodes[node_index].get_jobs([b"q"], 1)
    assert job.id == job_id


@pytest.mark.parametrize(
    ("spec", "delays"),
    [
        ((BACKOFF_FIXED, 7, 7), [7, 7, 7, 7]),
        ((BACKOFF_EXPONENTIAL, 2, 10), [2, 4, 8, 10, 10]),
        ((BACKOFF_EXPONENTIAL, 1, 1 << 32), [1, 2, 4, 8]),
    ],
)
def test_the_backoff_grows_with_each_requeue_up_to_its_cap(spec, delays):
    c = Cluster(1)
    job = Job(b"D-" + b"0" * 38, b"q", b"b")
    job.extra = Extra()
    job.extra.backoff = spec
    for attempt, seconds in enumerate(delays, start=1):
        job.nacks = attempt // 2
        job.additional_deliveries = attempt - job.nacks
        assert backoff.delay_of(c.nodes[0], job) == seconds * 1000


def test_a_huge_attempt_count_does_not_overflow_the_cap():
    c = Cluster(1)
    job = Job(b"D-" + b"0" * 38, b"q", b"b")
    job.extra = Extra()
    job.extra.backoff = (BACKOFF_EXPONENTIAL, 3, 100)
    job.nacks = 10**9
    assert backoff.delay_of(c.nodes[0], job) == 100_000


def test_a_backoff_survives_serialization_for_the_bus_and_the_aof():
    job = Job(b"D-dcb833cf-0OHcDVOpG4xYd8PsqN0ppBJH-05a1", b"q", b"b", ctime=1, etime=100)
    job.extra = Extra()
    job.extra.backoff = (BACKOFF_EXPONENTIAL, 5, 600)
    for bus in (True, False):
        copy, _ = decode(encode(job, bus=bus, now_s=10), bus=bus, now_s=10)
        assert copy.extra.backoff == (2, 5, 600)


def test_a_nack_delay_holds_every_copy_until_it_ends():
    c = Cluster(3)
    jid = replicated(c, c.nodes[0], repl=3, retry=1)
    delivered(c, 0, jid)
    assert c.nodes[0].requeue_jobs([jid], nack=True, delay=30_000) == 1
    c.pump()
    assert all(n.jobs.get(jid).nacks == 1 for n in c.nodes)
    c.run(29_000)  # retry timers of 1 s each: none of them may queue it yet
    assert c.queued_on(jid) == []
    assert all(n.jobs.get(jid).state == ACTIVE for n in c.nodes)
    c.run(1_500)
    assert c.queued_on(jid) == [c.nodes[0]]
    assert all(n.jobs.get(jid).nacks == 1 for n in c.nodes)  # counted once


def test_a_timer_requeue_with_a_backoff_counts_a_delivery_and_waits():
    c = Cluster(1)
    jid = addjob(c.nodes[0], repl=1, retry=1, retry_backoff=(BACKOFF_FIXED, 60, 60)).id
    delivered(c, 0, jid)
    c.run(2_000)  # the retry timer fires: postponed, not queued
    job = c.nodes[0].jobs.get(jid)
    assert (job.state, job.additional_deliveries, c.nodes[0].postponed) == (ACTIVE, 1, 1)
    c.run(57_000)
    assert job.state == ACTIVE
    c.run(3_000)  # 60 s after the timer fired (its jitter: +-250 ms)
    assert job.state == QUEUED and job.additional_deliveries == 1


def test_waitjob_on_a_node_without_the_job_gets_the_result_once_acked():
    c = Cluster(3)
    jid = replicated(c, c.nodes[0], repl=2)
    outsider = next(n for n in c.nodes if jid not in n.jobs)
    holder = next(n for n in c.holders(jid) if n is not c.nodes[0])
    client = RecordingClient()
    assert outcome.waitjob(outsider, client, jid, 0) is None
    c.run(3_000)  # queries go out and are answered LIVE: still waiting
    assert client.replies == []
    outcome.acknowledged_with(holder, {jid: b"the result"})
    holder.ack_jobs([jid])
    c.pump()
    assert client.replies == [b"*2\r\n$5\r\nacked\r\n$10\r\nthe result\r\n"]
    assert client.blocked == BLOCK_NONE


def test_a_waiter_cut_off_at_the_ack_learns_it_after_the_partition():
    c = Cluster(3)
    jid = replicated(c, c.nodes[0], repl=2)
    outsider = next(n for n in c.nodes if jid not in n.jobs)
    client = RecordingClient()
    assert outcome.waitjob(outsider, client, jid, 0) is None
    c.run(1_500)
    c.net.cut.add(outsider.myself)
    outcome.acknowledged_with(c.nodes[0], {jid: b"r"})
    c.nodes[0].ack_jobs([jid])
    c.run(5_000)
    assert client.replies == []  # never before the news of the ack reaches it
    c.net.cut.clear()
    c.run(40_000)  # its next query (intervals double up to 16 s) finds the outcome
    assert client.replies == [b"*2\r\n$5\r\nacked\r\n$1\r\nr\r\n"]


def test_waitjob_times_out_with_nil():
    c = Cluster(3)
    jid = replicated(c, c.nodes[0], repl=3)
    client = RecordingClient()
    assert outcome.waitjob(c.nodes[1], client, jid, 500) is None
    c.run(1_000)
    assert client.replies == [b"*-1\r\n"]
    assert all(not w.clients for w in c.nodes[1].deps.waits.values())


def test_cancel_reaches_the_worker_on_another_holder():
    c = Cluster(3)
    jid = replicated(c, c.nodes[0], repl=3)
    delivered(c, 0, jid)
    assert outcome.cancel(c.nodes[2], [jid]) == 1
    c.pump()
    with pytest.raises(DisqueError) as refused:
        outcome.check_working(c.nodes[0], jid)
    assert refused.value.reply == outcome.CANCELLED_ERROR
    c.run(2_000)
    assert c.holders(jid) == []  # acknowledged and collected everywhere
    assert all(n.outcomes.is_cancelled(jid) for n in c.nodes)


def test_outcomes_are_forgotten_after_result_ttl_and_their_memory_returned():
    c = Cluster(1, result_ttl=2)
    node = c.nodes[0]
    jid = addjob(node, repl=1).id
    node.delete_jobs([jid])
    empty = node.used_memory  # the queue stays
    outcome.acknowledged_with(node, {jid: b"x" * 1000})
    assert node.used_memory > empty + 1000
    c.run(2_500)
    assert len(node.outcomes) == 0 and node.used_memory == empty


def test_outcomes_never_outgrow_memory():
    c = Cluster(1, maxmemory=2 << 20)
    node = c.nodes[0]
    for i in range(200):
        outcome.acknowledged_with(node, {b"D-00000000-%024d-05a1" % i: b"x" * 60_000})
    assert node.memory_level() < 2
    assert 0 < len(node.outcomes) < 200 and node.outcomes.evicted == 200 - len(node.outcomes)
    newest = node.outcomes.get(b"D-00000000-%024d-05a1" % 199)
    assert newest is not None and newest[1] == b"x" * 60_000
