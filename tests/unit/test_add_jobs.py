"""Node.add_jobs (a pipelined run of ADDJOBs made in one go) against Node.add_job
(one at a time): two nodes with the same seed and clock must end in exactly the
same state, job by job and slot by slot, wherever the run stops."""

from __future__ import annotations

import pytest

from disquette.core.errors import DisqueError
from disquette.core.job import FIELDS
from tests.unit.core_harness import Harness, RecordingClient


def state_of(h: Harness) -> dict:
    node = h.node
    jobs = {
        job.id: {slot: getattr(job, slot) for slot in FIELDS if slot != "waiter"}
        for job in node.jobs.values()
    }
    queues = {
        queue.name: ([job.id for job in queue.jobs], queue.jobs_in, queue.atime)
        for queue in node.queues.values()
    }
    return {
        "jobs": jobs,
        "queues": queues,
        "used_memory": node.used_memory,
        "last_ctime": node.last_ctime,
        "next_random": node.rng.random(),
    }


def one_by_one(h: Harness, items, repl, retry, ttl, maxlen, priority=-1) -> list[bytes]:
    """What the requests of the run give when each is its own ADDJOB: IDs until the
    first refusal (the run path stops there too and leaves the rest to add_job)."""
    ids = []
    for item in items:
        queue, body = item[:2]
        key = item[2] if len(item) > 2 else None
        try:
            job = h.node.add_job(
                RecordingClient(), queue, body, 0, repl=repl, retry=retry, ttl=ttl,
                maxlen=maxlen, priority=priority, dedup=key,
            )  # fmt: skip
        except DisqueError:
            break
        ids.append(job.id)
    return ids


def compare(
    items, repl=0, retry=-1, ttl=0, maxlen=0, prepare=None, priority=-1, **settings
) -> list[bytes]:
    """``items``: (queue, body) or (queue, body, dedup key) each."""
    a, b = Harness(seed=7, **settings), Harness(seed=7, **settings)
    for h in (a, b):
        if prepare:
            prepare(h)
    expected = one_by_one(a, items, repl, retry, ttl, maxlen, priority)
    run = [item if len(item) > 2 else (*item, None) for item in items]
    got = [job.id for job in b.node.add_jobs(run, repl, retry, ttl, maxlen, priority)]
    assert got == expected
    assert state_of(b) == state_of(a)
    return got


RUN = [(b"q", b"body-%d" % i) for i in range(3000)]  # more than one JobList chunk


@pytest.mark.parametrize(("retry", "ttl"), [(-1, 0), (0, 0), (5, 0), (-1, 60), (30, 120), (-1, 5)])
def test_same_jobs_as_one_by_one(retry, ttl):
    assert len(compare(RUN, retry=retry, ttl=ttl)) == len(RUN)


def test_queues_interleaved_and_existing_jobs_first():
    items = [(b"q%d" % (i % 3), b"x" * i) for i in range(200)]

    def prepare(h):
        for i in range(10):
            h.node.add_job(RecordingClient(), b"q1", b"old-%d" % i, 0)
        h.clock.advance(5)

    assert len(compare(items, prepare=prepare)) == 200


def test_jobs_from_the_future_already_queued():
    # A queue holding a job with a later ctime (a replica from a node whose clock is
    # ahead): the new jobs are inserted one by one before it, not appended.
    def prepare(h):
        h.node.add_job(RecordingClient(), b"q", b"first", 0)
        h.node.last_ctime += 10**12
        h.node.add_job(RecordingClient(), b"q", b"ahead", 0)
        h.node.last_ctime -= 10**12

    assert len(compare(RUN[:100], prepare=prepare)) == 100


def test_stops_at_maxlen():
    assert len(compare(RUN[:50], maxlen=20)) == 20


def test_stops_at_a_paused_queue():
    def prepare(h):
        h.node.create_queue(b"p").paused = 1  # PAUSE_IN

    items = [(b"q", b"a"), (b"q", b"b"), (b"p", b"c"), (b"q", b"d")]
    assert len(compare(items, prepare=prepare)) == 2


def test_stops_at_a_job_that_cannot_fit():
    """A run stops before a job that would take usage past 95 % of maxmemory: add_job
    refuses that one."""
    items = [(b"q", b"a"), (b"q", b"x" * 600_000), (b"q", b"b")]
    assert len(compare(items, maxmemory=800_000)) == 1


def test_stops_where_memory_crosses_three_quarters():
    got = compare(RUN, maxmemory=800_000)
    assert 0 < len(got) < len(RUN)


@pytest.mark.parametrize("repl", [2, 3])
def test_no_run_for_more_than_one_copy(repl):
    h = Harness()
    assert h.node.add_jobs(RUN[:10], repl, -1, 0, 0) == []
    assert len(h.node.jobs) == 0


def test_no_run_when_maxmemory_is_zero():
    h = Harness(maxmemory=0)
    assert h.node.add_jobs(RUN[:10], 0, -1, 0, 0) == []


def test_a_refused_run_takes_at_most_one_request():
    # The requests of a run are produced as the node takes them: a pipeline of
    # requests that each go one by one must not be scanned again for each of them.
    h = Harness()
    h.node.create_queue(b"p").paused = 1  # PAUSE_IN
    for repl, queue, taken in ((2, b"q", 0), (1, b"p", 1)):
        items = iter([(queue, b"x", None)] * 10)
        assert h.node.add_jobs(items, repl, -1, 0, 0) == []
        assert len(list(items)) == 10 - taken


# Beyond Disque: priorities, de-duplication keys and policies in a run.


@pytest.mark.parametrize("priority", [-1, 0, 4, 9])
def test_priorities_as_one_by_one(priority):
    existing = [(b"q", b"old-%d" % i, None) for i in range(3)]

    def prepare(h: Harness) -> None:
        h.node.add_jobs(existing, 0, -1, 0, 0, 2)

    compare(RUN[:700], priority=priority, prepare=prepare)


def test_dedup_keys_as_one_by_one_repeats_included():
    items = [(b"q", b"b%d" % i, b"k%d" % (i % 40)) for i in range(100)]
    items += [(b"other", b"x", b"k1"), (b"q", b"y", None)]
    ids = compare(items)
    assert len(set(ids)) == 40 + 2  # a repeated key gives the first job of its queue


def test_policies_as_one_by_one():
    def prepare(h: Harness) -> None:
        h.node.policies.set(b"fast", b"q*", {"retry": 7, "ttl": 600, "priority": 3})
        h.node.policies.set(b"capped", b"qcap", {"maxlen": 5})
        h.node.policies.set(b"delayed", b"qdelay", {"delay": 5})
        h.node.policies.set(b"copies", b"qthree", {"replicate": 3})

    items = [(b"q1", b"a"), (b"plain", b"b"), (b"q1", b"c")]
    items += [(b"qcap", b"d%d" % i) for i in range(7)]
    compare(items, prepare=prepare)
    # A policy that delays or replicates: the run stops there, add_job goes on.
    h = Harness()
    prepare(h)
    assert h.node.add_jobs([(b"qdelay", b"x", None)], 0, -1, 0, 0) == []
    run = [(b"plain", b"y", None), (b"qthree", b"x", None)]
    assert [job.queue for job in h.node.add_jobs(run, 0, -1, 0, 0)] == [b"plain"]


def test_clients_memory_without_flow_to_disk_keeps_every_job_in_memory():
    """Connected clients' buffers count in the node's memory; with flow to disk off
    (nothing may spill) a run still registers every job in memory (a run once sent
    the jobs behind the queue's head to a spill log that did not exist)."""

    def prepare(h):
        h.node.client_memory = 1 << 20

    got = compare(RUN, prepare=prepare)
    assert len(got) == len(RUN)
