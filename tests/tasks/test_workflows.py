"""Workflows of tasks on a real three-node cluster (disquette.tasks.workflow): chains
pass results on, groups gather them, a chord's callback runs once with every result
(through join jobs past 256 members), a failed member fails the workflow or is passed
as None as asked, a batch's callbacks follow Sidekiq's, and cancelling a workflow
cancels its pending jobs. One worker per node, on threads; every wait has a deadline."""

from __future__ import annotations

import threading

import pytest

from disquette import Client
from disquette.tasks import App, Message
from disquette.tasks.workflow import WorkflowError, batch, chain, chord, group
from tests.support.cluster import running_cluster
from tests.support.servers import wait_for

DEADLINE = 180


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("workflows")) as c:
        yield c


class Calls:
    """What the callbacks were called with, from any worker thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, object]] = []

    def add(self, name: str, value: object) -> None:
        with self.lock:
            self.seen.append((name, value))

    def of(self, name: str) -> list[object]:
        with self.lock:
            return [value for n, value in self.seen if n == name]


@pytest.fixture
def tasks(three, running, request):
    """The same tasks on an app per node, a worker on each; the first app's tasks
    (the producer's), and the callbacks' calls."""
    queue = f"wf-{request.node.name}"
    calls = Calls()
    apps = []
    for address in three.addresses:
        app = App(address)

        @app.task(queue=queue, name="add")
        def add(a, b=0):
            return a + b

        @app.task(queue=queue, name="square")
        def square(x):
            if x < 0:
                raise ValueError(f"no square of {x} here")
            return x * x

        @app.task(queue=queue, name="fails", max_retries=0)
        def fails(x):
            raise RuntimeError(f"member {x} fails")

        @app.task(queue=queue, name="later", delay=3600)
        def later(x):
            return x

        @app.task(queue=queue, name="total")
        def total(results, label=""):
            calls.add("total", results)
            return [label, sum(r for r in results if r is not None)]

        @app.task(queue=queue, name="success")
        def success(results):
            calls.add("success", results)

        @app.task(queue=queue, name="complete")
        def complete(results):
            calls.add("complete", results)

        apps.append(app)
        running(app)
    return apps[0].tasks, calls


def test_a_chain_passes_each_result_to_the_next_step(tasks):
    t, _ = tasks
    handle = chain(t["add"].s(1, 2), t["add"].s(10), t["add"].s(b=100)).send()
    assert len(handle.steps) == 2
    assert handle.result(timeout=DEADLINE) == 113
    assert handle.results(timeout=DEADLINE) == [3]  # the first step's own result


def test_a_failed_step_stops_the_chain(tasks):
    t, calls = tasks
    handle = chain(t["add"].s(1), t["fails"].s(), t["total"].s()).send()
    with pytest.raises(WorkflowError):
        handle.result(timeout=DEADLINE)  # the last step was rejected, not run
    assert calls.of("total") == []


def test_a_group_gathers_its_results_in_order(tasks):
    t, _ = tasks
    handle = group(t["square"].s(i) for i in range(50)).send()
    assert handle.results(timeout=DEADLINE) == [i * i for i in range(50)]


@pytest.mark.parametrize("size", [10, 600])
def test_a_chord_calls_back_once_with_every_result(tasks, size):
    t, calls = tasks
    handle = chord((t["square"].s(i) for i in range(size)), t["total"].s(label="sum")).send()
    assert len(handle.joins) == (0 if size <= 256 else 3)  # 600 members: 3 joins of <= 256
    expected = sum(i * i for i in range(size))
    assert handle.result(timeout=DEADLINE) == ["sum", expected]
    assert calls.of("total") == [[i * i for i in range(size)]]  # once, in the members' order


def test_a_failed_member_fails_the_chord_by_default(tasks):
    t, calls = tasks
    members = [t["square"].s(1), t["fails"].s(2), t["square"].s(3)]
    handle = chord(members, t["total"].s()).send()
    with pytest.raises(WorkflowError) as failed:
        handle.result(timeout=DEADLINE)
    assert failed.value.failed == [handle.last]  # the callback, rejected
    assert calls.of("total") == []
    with pytest.raises(WorkflowError) as failed:
        handle.results(timeout=DEADLINE)
    assert failed.value.failed == [handle.members[1]]


def test_a_chord_asked_to_call_anyway_gets_none_for_a_failed_member(tasks):
    t, calls = tasks
    members = [t["square"].s(1), t["fails"].s(2), t["square"].s(3)]
    handle = chord(members, t["total"].s(), on_failure="call").send()
    assert handle.result(timeout=DEADLINE) == ["", 10]
    assert calls.of("total") == [[1, None, 9]]


@pytest.mark.parametrize("failing", [False, True])
def test_a_batch_calls_on_success_only_without_failures_and_on_complete_always(tasks, failing):
    t, calls = tasks
    members = [t["square"].s(2), (t["fails"] if failing else t["square"]).s(3)]
    handle = batch(members, on_success=t["success"].s(), on_complete=t["complete"].s()).send()
    wait_for(lambda: calls.of("complete"), DEADLINE, 0.05, "on_complete")
    on_success, _ = handle.steps
    outcome = handle.client.wait(on_success, timeout=DEADLINE)
    assert outcome is not None and outcome.acked  # run, or left out: finished either way
    assert calls.of("complete") == [[4, None] if failing else [4, 9]]
    assert calls.of("success") == ([] if failing else [[4, 9]])


def test_cancelling_a_workflow_cancels_its_pending_jobs(tasks, three):
    t, calls = tasks
    handle = chord((t["later"].s(i) for i in range(5)), t["total"].s()).send()
    # Five delayed members and the waiting callback (unless it failed with its
    # members first, as IFGONE fail has it: then it is gone).
    assert handle.cancel() >= 5
    with Client(three.addresses[1]) as other:  # read from another node
        for job_id in handle.members:
            outcome = other.wait(job_id, timeout=DEADLINE)
            assert outcome is not None and outcome.cancelled
        outcome = other.wait(handle.last, timeout=DEADLINE)
        assert outcome is not None and outcome.outcome in ("cancelled", "gone")
    assert calls.of("total") == []


def test_a_step_needs_a_signature_of_a_task(tasks):
    t, _ = tasks
    with pytest.raises(TypeError):
        chord([Message("square", (1,))], t["total"].s()).send()
    with pytest.raises(ValueError):
        chord([t["square"].s(1)], t["total"].s(), on_failure="retry")
