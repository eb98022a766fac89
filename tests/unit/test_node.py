"""The core on a virtual clock: job life cycle, timers, requeue, expiry, eviction."""

from __future__ import annotations

import pytest

from disquette.core import replies
from disquette.core.errors import DisqueError
from disquette.core.job import ACKED, ACTIVE, QUEUED
from disquette.core.memory import NODE_OVERHEAD, job_cost
from disquette.core.node import MAXLEN_ERROR, NOREPL_OOM, NOREPL_REACHABLE, PAUSED_ERROR
from disquette.core.queue import PAUSE_IN, PAUSE_OUT
from disquette.protocol import reply
from tests.unit.core_harness import Harness, RecordingClient


def add(h: Harness, queue: bytes = b"q", body: bytes = b"body", **kw):
    return h.node.add_job(RecordingClient(), queue, body, 0, **kw)


def test_added_job_is_queued_with_defaults():
    h = Harness()
    job = add(h)
    assert job.state == QUEUED
    assert job.repl == 1
    assert job.retry == 300  # TTL/10 capped at 300
    assert job.etime == h.clock.now // 1000 + 86400
    assert job.id[36:] == b"05a1"
    assert len(h.node.queues.get(b"q").jobs) == 1
    assert job.nodes_delivered == (h.node.myself,)


def test_default_retry_for_short_ttl_is_at_least_one():
    h = Harness()
    assert add(h, ttl=5).retry == 1
    assert add(h, ttl=100).retry == 10


def test_ctime_strictly_increases_within_a_millisecond():
    h = Harness()
    a, b, c = add(h), add(h), add(h)
    assert a.ctime < b.ctime < c.ctime
    assert b.ctime - a.ctime == 1


def test_replicate_beyond_cluster_size_is_norepl():
    h = Harness()
    with pytest.raises(DisqueError) as e:
        add(h, repl=2)
    assert e.value.reply == NOREPL_REACHABLE


def test_memory_pressure_forces_external_replication():
    h = Harness(maxmemory=1)
    with pytest.raises(DisqueError) as e:
        add(h)
    assert e.value.reply == NOREPL_OOM


def test_a_job_that_cannot_fit_under_maxmemory_is_refused():
    """Beyond Disque: one job larger than what maxmemory leaves under its 95 % limit is
    refused with why; Disque took it and then refused every later ADDJOB with OOM."""
    h = Harness(maxmemory=10 << 20)
    with pytest.raises(DisqueError) as e:
        add(h, body=b"x" * (20 << 20))
    text = e.value.reply.decode()
    assert text.startswith("-OOM job cannot fit in memory: it needs 20.00M, maxmemory (10.00M)")
    assert text.endswith(" under its 95 % limit\r\n")
    assert len(h.node.jobs) == 0
    assert add(h, body=b"x" * (5 << 20)).state == QUEUED  # what fits still goes in


def test_maxlen_and_paused_queue():
    h = Harness()
    add(h)
    with pytest.raises(DisqueError) as e:
        add(h, maxlen=1)
    assert e.value.reply == MAXLEN_ERROR
    h.node.pause(b"q", PAUSE_IN, False)
    with pytest.raises(DisqueError) as e:
        add(h)
    assert e.value.reply == PAUSED_ERROR


def test_getjob_round_robin_over_queues():
    h = Harness()
    for q in (b"q1", b"q2"):
        for i in range(3):
            add(h, q, b"%s-%d" % (q, i))
    jobs = h.node.get_jobs([b"q1", b"q2"], 5)
    assert [j.body for j in jobs] == [b"q1-0", b"q2-0", b"q1-1", b"q2-1", b"q1-2"]
    assert all(j.state == ACTIVE for j in jobs)


def test_getjob_creates_missing_queue():
    h = Harness()
    assert h.node.get_jobs([b"nothing"], 1) == []
    assert h.node.queues.get(b"nothing") is not None


def test_unacked_job_is_requeued_after_retry_with_counter():
    h = Harness()
    job = add(h, retry=2)
    [fetched] = h.node.get_jobs([b"q"], 1)
    assert fetched is job and job.state == ACTIVE
    h.run_for(1500)
    assert job.state == ACTIVE
    h.run_for(1500)
    assert job.state == QUEUED
    assert job.additional_deliveries == 1
    assert h.node.get_queue(b"q").additional_deliveries == 1  # the queue's counter too


def test_requeued_job_keeps_ctime_order():
    h = Harness()
    old = add(h, body=b"old", retry=1)
    h.node.get_jobs([b"q"], 1)
    h.clock.advance(10)
    add(h, body=b"new")
    h.run_for(1500)
    assert old.state == QUEUED
    assert [j.body for j in h.node.get_jobs([b"q"], 2)] == [b"old", b"new"]


def test_delayed_job_is_queued_after_its_delay():
    h = Harness()
    job = add(h, delay=2)
    assert job.state == ACTIVE
    h.run_for(1900)
    assert job.state == ACTIVE
    h.run_for(200)
    assert job.state == QUEUED
    assert job.additional_deliveries == 0


def test_retry_zero_job_is_delivered_at_most_once():
    h = Harness()
    job = add(h, retry=0)
    assert job.id[36:] == b"05a0"
    h.node.get_jobs([b"q"], 1)
    h.run_for(5000)
    assert job.state == ACTIVE
    assert h.node.requeue_jobs([job.id], nack=True) == 0


def test_job_expires_at_its_ttl():
    h = Harness()
    job = add(h, ttl=3)
    h.run_for(2000)
    assert h.node.jobs.get(job.id) is job
    h.run_for(2500)
    assert h.node.jobs.get(job.id) is None
    assert len(h.node.queues.get(b"q").jobs) == 0


def test_ack_deletes_single_copy_job_at_once():
    h = Harness()
    job = add(h)
    assert h.node.ack_jobs([job.id]) == 1
    assert h.node.jobs.get(job.id) is None
    assert h.node.ack_jobs([job.id]) == 0
    assert len(h.node.jobs) == 0


def test_nack_and_enqueue_counters():
    h = Harness()
    job = add(h)
    h.node.get_jobs([b"q"], 1)
    assert h.node.requeue_jobs([job.id], nack=True) == 1
    assert job.nacks == 1 and job.state == QUEUED
    h.node.get_jobs([b"q"], 1)
    assert h.node.requeue_jobs([job.id], nack=False) == 1
    assert job.additional_deliveries == 1
    queue = h.node.get_queue(b"q")
    assert (queue.nacks, queue.additional_deliveries) == (1, 1)  # as the job counts them
    # Queued jobs are not active: nothing to do.
    assert h.node.requeue_jobs([job.id], nack=False) == 0


def test_working_postpones_requeue_and_refuses_after_half_ttl():
    h = Harness()
    job = add(h, retry=10, ttl=100)
    h.node.get_jobs([b"q"], 1)
    h.clock.advance(5000)
    assert h.node.working(job.id) == 10
    assert job.qtime >= h.clock.now + 10_000 - 250
    h.clock.advance(46_000)
    with pytest.raises(DisqueError) as e:
        h.node.working(job.id)
    assert e.value.reply.startswith(b"-TOOLATE")


def test_dequeue_and_delete():
    h = Harness()
    job = add(h)
    assert h.node.dequeue_jobs([job.id]) == 1
    assert job.state == ACTIVE
    assert h.node.dequeue_jobs([job.id]) == 0
    assert h.node.delete_jobs([job.id]) == 1
    assert h.node.jobs.get(job.id) is None


def test_blocked_client_is_served_when_a_job_arrives():
    h = Harness()
    consumer = RecordingClient(7)
    assert h.node.get_jobs([b"q"], 1) == []
    h.node.block_for_jobs(consumer, [b"q", b"q"], 0, False)
    assert len(h.node.queues.get(b"q").blocked) == 1
    job = add(h)
    h.node.serve_blocked_clients()
    assert consumer.replies == [replies.job_entries([job], False)]
    assert consumer.blocked == 0
    assert job.state == ACTIVE


def test_blocked_client_times_out():
    h = Harness()
    consumer = RecordingClient(7)
    h.node.block_for_jobs(consumer, [b"q"], 250, False)
    h.run_for(200)
    assert consumer.replies == []
    h.run_for(200)
    assert consumer.replies == [reply.NULL_ARRAY]


def test_pause_out_holds_blocked_clients_until_cleared():
    h = Harness()
    consumer = RecordingClient(7)
    h.node.pause(b"q", PAUSE_OUT, False)
    h.node.block_for_jobs(consumer, [b"q"], 0, False)
    add(h)
    h.node.serve_blocked_clients()
    assert consumer.replies == []
    h.node.pause(b"q", 0, False)
    h.node.serve_blocked_clients()
    assert len(consumer.replies) == 1


def test_idle_empty_queue_is_evicted_after_300s():
    h = Harness()
    h.node.get_jobs([b"idle"], 1)
    h.run_for(299_000, step=1000)
    assert h.node.queues.get(b"idle") is not None
    h.run_for(2000, step=100)
    assert h.node.queues.get(b"idle") is None


def test_paused_queue_is_never_evicted():
    h = Harness()
    h.node.pause(b"p", PAUSE_IN, False)
    h.run_for(400_000, step=1000)
    assert h.node.queues.get(b"p") is not None


def test_acked_state_is_reported_for_known_jobs():
    h = Harness()
    job = add(h)
    h.node.acknowledge(job)
    assert job.state == ACKED


def test_flush_all_answers_blocked_clients_and_empties_everything():
    h = Harness()
    add(h)
    consumer = RecordingClient(9)
    h.node.block_for_jobs(consumer, [b"other"], 0, False)
    h.node.flush_all()
    assert consumer.replies == [reply.NULL_ARRAY]
    assert len(h.node.jobs) == 0 and len(h.node.queues) == 0
    assert h.node.used_memory == NODE_OVERHEAD


def test_memory_accounting_returns_to_zero():
    h = Harness()
    jobs = [add(h, body=b"x" * 100) for _ in range(50)]
    assert h.node.used_memory > NODE_OVERHEAD + 50 * 100
    h.node.ack_jobs([j.id for j in jobs])
    h.run_for(400_000, step=1000)
    assert h.node.used_memory == NODE_OVERHEAD


def test_reclaim_evicts_delivered_at_most_once_jobs():
    h = Harness()
    jobs = [add(h, retry=0, body=b"x" * 1000) for _ in range(20)]
    h.node.get_jobs([b"q"], 20)
    # A limit that half of the jobs must go to respect.
    h.settings.maxmemory = (h.node.used_memory - 10 * job_cost(jobs[0])) * 100 // 95
    assert h.node.memory_level() == 2
    assert h.node.reclaim_memory()
    assert 0 < len(h.node.jobs) <= 10
