"""A workflow's record (client/workflow_record.py) and the state computed from its jobs'
states (client/workflow_state.py), without a cluster: the record's round trip, what
it refuses, its TTL; a job's state from its WAITJOB outcome; the workflow's overall
state, counts, percent and result."""

from __future__ import annotations

import json

import pytest

from disquette.client.models import JobOutcome
from disquette.client.workflow_record import (
    AFTERLIFE,
    DEFAULT_JOB_TTL,
    Job,
    Record,
    RecordError,
    Step,
    record_ttl,
)
from disquette.client.workflow_state import JobState, Reading, _finished_state

CHORD = Record(
    "chord", 1_000, ["D-m1", "D-m2"], ["resize", "resize"], ["D-j1"],
    [Step("D-cb", "album", "callback", "call")], "summer", "call", "D-wf",
)  # fmt: skip


def test_a_record_round_trips_and_lists_its_jobs_in_order():
    body = CHORD.encode()
    assert json.loads(body)["tasks"] == ["resize", "album"]  # each task named once
    assert Record.decode(body, "D-wf") == CHORD
    assert [(j.id, j.role, j.task) for j in CHORD.jobs()] == [
        ("D-m1", "member", "resize"), ("D-m2", "member", "resize"), ("D-j1", "join", None),
        ("D-cb", "callback", "album"),
    ]  # fmt: skip
    assert CHORD.size == 4


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"v": 2}',
        b'{"v": 1}',
        CHORD.encode().replace(b'"created":1000', b'"created":"x"'),
    ],
)
def test_anything_else_is_refused(body):
    with pytest.raises(RecordError):
        Record.decode(body)


def test_the_record_outlives_its_longest_job():
    assert record_ttl([None]) == DEFAULT_JOB_TTL + AFTERLIFE
    assert record_ttl([60, 3 * DEFAULT_JOB_TTL, None]) == 3 * DEFAULT_JOB_TTL + AFTERLIFE


@pytest.mark.parametrize(
    ("role", "outcome", "state"),
    [
        ("member", JobOutcome("acked", b"4"), "succeeded"),
        ("member", JobOutcome("acked", b"null"), "succeeded"),
        ("member", JobOutcome("acked", None), "failed"),  # acknowledged without a result
        ("join", JobOutcome("acked", None), "succeeded"),  # a join never has one
        ("callback", JobOutcome("cancelled"), "cancelled"),
        ("member", JobOutcome("gone"), "gone"),
        ("member", JobOutcome("unknown"), "forgotten"),
        ("member", None, "forgotten"),  # (WAITJOB timed out: nothing kept here)
    ],
)
def test_a_finished_jobs_state_comes_from_its_outcome(role, outcome, state):
    assert _finished_state(Job("D-x", role, None), outcome, "forgotten").state == state


def reading(*states: str, result: str | None = None) -> Reading:
    jobs = list(CHORD.jobs())
    found = [JobState(job, state) for job, state in zip(jobs, states, strict=True)]
    found[-1] = JobState(jobs[-1], states[-1], result)
    return Reading(CHORD, found, [])


def test_the_overall_state_counts_and_result():
    running = reading("succeeded", "queued", "waiting", "waiting")
    assert running.state == "running" and running.result is None
    summary = running.summary(3_500)
    assert summary["done"] == 1 and summary["percent"] == 25 and summary["age"] == 2
    assert summary["counts"]["queued"] == 1 and summary["counts"]["waiting"] == 2
    done = reading("succeeded", "succeeded", "succeeded", "succeeded", result='["a", 2]')
    assert done.state == "succeeded" and done.result == ["a", 2]
    assert done.summary(0)["percent"] == 100 and done.summary(0)["result"] == ["a", 2]
    failed = reading("succeeded", "failed", "succeeded", "succeeded", result="1")
    assert failed.state == "failed" and failed.result == 1  # (on_failure="call")
    assert failed.summary(0)["failed"] == ["D-m2"]
    assert reading("cancelled", "failed", "gone", "gone").state == "cancelled"
    assert reading("succeeded", "unknown", "succeeded", "succeeded").state == "unknown"
