"""JobList with priorities: served by priority, then ctime, against a model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.core.job import PRIORITY_SHIFT, Job
from disquette.core.joblist import JobList


def job(n: int, priority: int = 0, ctime: int | None = None) -> Job:
    made = Job(b"D-%038d" % n, b"q", b"body", ctime=n if ctime is None else ctime)
    made.flags = priority << PRIORITY_SHIFT
    return made


def test_a_list_without_priorities_stays_one_level():
    jobs = JobList()
    for n in range(5):
        jobs.add(job(n))
    assert not jobs.has_levels
    assert [j.ctime for j in jobs] == [0, 1, 2, 3, 4]


def test_higher_priorities_are_served_first_then_ctime_order():
    jobs = JobList()
    made = [job(1), job(2, 5), job(3), job(4, 9), job(5, 5)]
    for j in made:
        jobs.add(j)
    assert jobs.has_levels and len(jobs) == 5
    assert [j.ctime for j in jobs] == [4, 2, 5, 1, 3]
    assert [j.ctime for j in jobs.reversed()] == [3, 1, 5, 2, 4]
    assert jobs.first() is made[3]
    assert jobs.remove(made[1]) and not jobs.remove(made[1])
    assert [jobs.pop_first().ctime for _ in range(4)] == [4, 5, 1, 3]
    assert len(jobs) == 0 and jobs.first() is None


def test_new_jobs_in_bulk_join_level_zero_of_a_leveled_list():
    jobs = JobList()
    jobs.add(job(1, 3))
    jobs.extend([job(2), job(3)])
    assert [j.ctime for j in jobs] == [1, 2, 3] and len(jobs) == 3
    jobs.extend([job(4, 2), job(5, 2)], priority=2)
    assert [j.ctime for j in jobs] == [1, 4, 5, 2, 3] and len(jobs) == 5
    # Jobs that do not all sort after their level's go one by one, in that level.
    jobs.extend([job(0, 2), job(6, 2)], priority=2)
    assert [j.ctime for j in jobs] == [1, 0, 4, 5, 6, 2, 3] and len(jobs) == 7
    assert [j.ctime for j in jobs.reversed()] == [3, 2, 6, 5, 4, 0, 1]


operations = st.lists(
    st.tuples(st.sampled_from(["add", "pop", "remove"]), st.integers(0, 9), st.integers(0, 50)),
    max_size=200,
)


@settings(max_examples=300)
@given(operations)
def test_matches_a_sorted_model(ops):
    jobs = JobList()
    model: list[Job] = []
    serial = 0
    for op, priority, ctime in ops:
        if op == "add":
            serial += 1
            made = job(serial, priority, ctime)
            jobs.add(made)
            model.append(made)
        elif op == "pop" and model:
            model.sort(key=lambda j: (-j.priority, j.ctime, j.id))
            assert jobs.pop_first() is model.pop(0)
        elif op == "remove" and model:
            target = model.pop(ctime % len(model))
            assert jobs.remove(target)
        model.sort(key=lambda j: (-j.priority, j.ctime, j.id))
        assert list(jobs) == model and len(jobs) == len(model)


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 2)), max_size=1500),
    st.integers(0, 1600),
    st.integers(0, 600),
)
def test_a_page_is_a_slice_of_the_serving_order(entries, offset, count):
    jobs = JobList()
    for n, (ctime, priority) in enumerate(entries):
        jobs.add(job(n, priority, ctime))
    assert jobs.page(offset, count) == list(jobs)[offset : offset + count]
