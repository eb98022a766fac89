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


def one_by_one(h: Harness, items, repl, retry, ttl, maxlen) -> list[bytes]:
    """What the requests of the run give when each is its own ADDJOB: IDs until the
    first refusal (the run path stops there too and leaves the rest to add_job)."""
    ids = []
    for queue, body in items:
        try:
            job = h.node.add_job(
                RecordingClient(), queue, body, 0, repl=repl, retry=retry, ttl=ttl, maxlen=maxlen
            )
        except DisqueError:
            break
        ids.append(job.id)
    return ids


def compare(items, repl=0, retry=-1, ttl=0, maxlen=0, prepare=None, **settings) -> list[bytes]:
    a, b = Harness(seed=7, **settings), Harness(seed=7, **settings)
    for h in (a, b):
        if prepare:
            prepare(h)
    expected = one_by_one(a, items, repl, retry, ttl, maxlen)
    got = [job.id for job in b.node.add_jobs(items, repl, retry, ttl, maxlen)]
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
        items = iter([(queue, b"x")] * 10)
        assert h.node.add_jobs(items, repl, -1, 0, 0) == []
        assert len(list(items)) == 10 - taken
