"""observe/failed.py without processes: dead letters of the worker's and of a policy's,
read as failed jobs; its filters, ages, cursors and ID checks."""

from __future__ import annotations

import pytest

from disquette.client.dead_letter import DEAD_LETTER_MAGIC, DeadLetter
from disquette.client.models import Job, JobInfo
from disquette.observe import failed, pages
from disquette.tasks import Message, encode

ID = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
ORIGIN = "D-00000000-BBBBBBBBBBBBBBBBBBBBBBBB-05a1"
NOW = 1_800_000_000_000  # ms


def shown(body: bytes, queue: str = "dead", age_s: int = 60, **fields) -> JobInfo:
    """A dead letter's SHOW, made ``age_s`` seconds before NOW."""
    return JobInfo(
        id=ID, queue=queue, state="queued", repl=3, ttl=86400,
        ctime=(NOW - age_s * 1000) * failed.CTIME_UNIT, delay=0, retry=300, nacks=0,
        additional_deliveries=0, nodes_delivered=(), nodes_confirmed=(),
        next_requeue_within=None, next_awake_within=None, body=body, **fields,
    )  # fmt: skip


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_a_workers_dead_letter_of_a_task(encoding):
    body = encode(Message("billing.charge", (42,), {"currency": "EUR"}), encoding)
    original = Job("billing", ORIGIN, body, nacks=3, additional_deliveries=1)
    letter = DeadLetter.of(original, "nacks 4 > 3", "Traceback ...\nRuntimeError: no").encode()
    job = failed.FailedJob.of(shown(letter), ["n1", "n2"])
    assert (job.kind, job.origin_queue, job.origin_id) == ("worker", "billing", ORIGIN)
    assert (job.nacks, job.additional_deliveries, job.reason) == (3, 1, "nacks 4 > 3")
    assert job.error == "Traceback ...\nRuntimeError: no" and job.body == body
    assert job.task == "billing.charge" and job.nodes == ("n1", "n2")


def test_a_policys_dead_letter_and_one_of_unknown_origin():
    info = shown(b"order 7", origin_id=ORIGIN, origin_queue="orders", origin_nacks=2,
                 origin_additional_deliveries=0)  # fmt: skip
    job = failed.FailedJob.of(info)
    assert (job.kind, job.origin_queue, job.nacks) == ("policy", "orders", 2)
    assert job.reason == "queue policy"
    assert job.task is None and job.error is None and job.body == b"order 7"
    plain = failed.FailedJob.of(shown(DEAD_LETTER_MAGIC + b"not json\nbody"))
    assert (plain.kind, plain.origin_queue, plain.reason) == ("unknown", None, "unknown origin")


@pytest.mark.parametrize(
    "body",
    [b"", b"plain text", b'{"v": 2, "task": "x"}', b'{"v": 1}', b'{"v": 1, "task": ""}',
     b"\x91\x01", b"\xc1", b'["v", 1]'],
)  # fmt: skip
def test_what_is_no_task_message(body):
    assert failed.task_of(body) is None


def test_filters_select_by_origin_task_error_and_age():
    policy = failed.FailedJob.of(shown(b"x", age_s=30, origin_id=ORIGIN, origin_queue="orders"))
    letter = DeadLetter.of(Job("mail", ORIGIN, encode(Message("mail.send"))), "rejected: bad",
                           "ValueError: Bad Address")  # fmt: skip
    worker = failed.FailedJob.of(shown(letter.encode(), age_s=7200))

    def chosen(**params) -> list[str]:
        return [j.kind for j in failed.Filter.parse(params).select([policy, worker], NOW)]

    assert chosen() == ["policy", "worker"]
    assert chosen(queue="orders") == ["policy"] and chosen(task="mail.send") == ["worker"]
    assert chosen(error="bad address") == ["worker"] and chosen(error="QUEUE POLICY") == ["policy"]
    assert chosen(min_age="1h") == ["worker"] and chosen(max_age=60) == ["policy"]
    assert chosen(min_age="10s", max_age="2h") == ["policy", "worker"]
    assert failed.Filter.parse({"dlq": ["a", "a", "~b64~_w=="]}).dead_letter_queues == (
        "a", b"\xff".decode("utf-8", "surrogateescape"),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("params", "complaint"),
    [
        ({"min_age": "soon"}, "min_age must be a duration"),
        ({"max_age": -1}, "max_age must be a duration of 0 seconds or more"),
        ({"max_age": True}, "max_age must be a duration"),
        ({"min_age": "2h", "max_age": "1h"}, "above max_age"),
        ({"dlq": 5}, "dlq must be a queue name"),
        ({"task": ["x"]}, "task must be a string"),
        ({"queue": "~b64~a"}, "malformed ~b64~"),
    ],
)
def test_bad_filters_say_why(params, complaint):
    with pytest.raises(ValueError, match=complaint):
        failed.Filter.parse(params)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("1.5m", 90), (" 2H ", 7200), ("1d", 86400), (0, 0)]
)
def test_ages(text, seconds):
    assert failed.age_seconds(text, "age") == seconds


def test_cursors_and_ids():
    job = failed.FailedJob.of(shown(b"x"))
    assert pages.parse_cursor(job.cursor()) == job.sort_key()
    assert pages.parse_cursor(None) is None
    for bad in ("bogus", "12", ":D-1", "x:D-1"):
        with pytest.raises(ValueError, match="malformed cursor"):
            pages.parse_cursor(bad)
    assert failed.check_ids([ID, ID]) == [ID]
    for ids, complaint in (([], "non-empty"), ("D-", "non-empty"), (["D-1"], "BADID"),
                           ([ID] * 1001, "at most 1000")):  # fmt: skip
        with pytest.raises(ValueError, match=complaint):
            failed.check_ids(ids)
