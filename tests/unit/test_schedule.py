"""The job scheduler: due order, rescheduling, cancellation, and that nothing it
no longer needs stays referenced (checked against a model with hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.core.job import Job
from disquette.core.schedule import RESOLUTION, STALE_SLACK, Schedule
from tests.support.fuzz import examples


def job(n: int) -> Job:
    return Job(b"D-%038d" % n, b"q", b"body")


def test_due_returns_ripe_jobs_and_takes_them_out():
    s = Schedule()
    a, b, c = job(1), job(2), job(3)
    s.add(a, 1000)
    s.add(b, 1005)
    s.add(c, 2000)
    assert s.next_awake() == 1000
    assert s.due(1003, 100) == [a]  # b shares a's bucket but is 2 ms ahead
    assert a.awake == 0 and b.awake == 1005
    assert s.due(1005, 100) == [b]
    assert s.due(1999, 100) == []
    assert len(s) == 1 and c.awake == 2000


def test_due_respects_the_limit_and_keeps_the_rest():
    s = Schedule()
    jobs = [job(i) for i in range(10)]
    for i, j in enumerate(jobs):
        s.add(j, 1000 + i * RESOLUTION)
    first = s.due(5000, 4)
    assert len(first) == 4 and len(s) == 6
    rest = s.due(5000, 100)
    assert {id(j) for j in first + rest} == {id(j) for j in jobs}
    assert len(s) == 0


def test_reschedule_moves_the_job_instead_of_copying_it():
    s = Schedule()
    a = job(1)
    s.add(a, 1000)
    s.add(a, 50_000)
    s.add(a, 50_003)  # same bucket
    assert list(s.entries()) == [(50_000, a)]
    assert s.due(49_999, 10) == []
    assert s.due(50_003, 10) == [a]


def test_cancel_lets_go_of_the_job_at_once():
    s = Schedule()
    a, b = job(1), job(2)
    s.add(a, 300_000)
    s.add(b, 300_000)
    s.cancel(a)
    s.cancel(a)  # twice: nothing happens
    assert a.awake == 0
    assert list(s.entries()) == [(300_000, b)]
    s.cancel(b)
    assert list(s.entries()) == [] and len(s) == 0


def test_add_all_schedules_new_jobs_at_their_awake_time():
    s = Schedule()
    jobs = [job(i) for i in range(3)]
    for i, j in enumerate(jobs):
        j.awake = 1000 + i
    s.add_all(jobs)
    assert len(s) == 3
    assert s.due(1002, 10) and len(s) == 0


def test_heap_stays_proportional_to_what_is_scheduled():
    """A steady add-then-cancel load (a job acknowledged long before its retry) must
    not leave one stale heap key per emptied bucket."""
    s = Schedule()
    keeper = job(0)
    s.add(keeper, 10**9)
    for i in range(10_000):
        j = job(i + 1)
        s.add(j, 300_000 + i * RESOLUTION)
        s.cancel(j)
    assert len(s) == 1
    assert len(s._keys) <= 2 * len(s._buckets) + STALE_SLACK + 1
    assert s.due(10**9, 10) == [keeper]


ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "cancel", "due"]),
        st.integers(0, 15),  # which job
        st.integers(0, 400),  # ms (awake for add, advance for due)
        st.integers(1, 6),  # limit for due
    ),
    max_size=200,
)


@settings(max_examples=examples(300))
@given(ops)
def test_schedule_matches_a_model(operations):
    """Against a dict of job -> awake time: ``due`` returns only ripe jobs, the
    earliest buckets first; every job is scheduled at most once; ``next_awake``
    is never later than the earliest job; cancelled jobs are gone."""
    s = Schedule()
    jobs = [job(i) for i in range(16)]
    model: dict[int, int] = {}
    now = 1000
    for op, which, ms, limit in operations:
        j = jobs[which]
        if op == "add":
            s.add(j, now + ms)
            model[which] = now + ms
        elif op == "cancel":
            s.cancel(j)
            model.pop(which, None)
        else:
            now += ms
            got = s.due(now, limit)
            ripe = {i for i, awake in model.items() if awake <= now}
            got_ids = [jobs.index(g) for g in got]
            assert len(set(got_ids)) == len(got_ids)
            assert set(got_ids) <= ripe
            assert len(got) == min(limit, len(ripe))
            if ripe - set(got_ids):  # what was left is not in an earlier bucket
                left = min(model[i] for i in ripe - set(got_ids)) // RESOLUTION
                assert all(model[i] // RESOLUTION <= left for i in got_ids)
            for i in got_ids:
                del model[i]
                assert jobs[i].awake == 0
        entries = list(s.entries())
        assert sorted(jobs.index(e) for _, e in entries) == sorted(model)
        for bucket_ms, e in entries:
            assert bucket_ms == e.awake // RESOLUTION * RESOLUTION
        for i, j in enumerate(jobs):
            assert j.awake == model.get(i, 0)
        if model:
            nxt = s.next_awake()
            assert nxt is not None
            assert nxt <= min(model.values()) // RESOLUTION * RESOLUTION
