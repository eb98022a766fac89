"""The worker's decisions, driven step by step without threads or sockets."""

from __future__ import annotations

import logging
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disquette.client.dead_letter import DEAD_LETTER_MAGIC, SERVER_REASON, DeadLetter
from disquette.client.errors import (
    JobCancelledError,
    LogFullError,
    StaleClaimError,
    TooLateError,
)
from disquette.client.models import Job, JobInfo
from disquette.worker.core import (
    Ack,
    Delivery,
    Drain,
    Engine,
    JobState,
    KeepAlive,
    Next,
    Retry,
    Returned,
    RunHandler,
    RunningJob,
    Send,
    Settings,
    Steps,
    Wait,
    acks_call,
    dead_letter_reason,
    handed,
)

AT_LEAST_ONCE = "D-aaaaaaaa-" + "x" * 24 + "-05a1"
AT_MOST_ONCE = "D-aaaaaaaa-" + "y" * 24 + "-05a0"


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def job(job_id=AT_LEAST_ONCE, nacks=0, additional=0, body=b"b") -> Job:
    return Job("q", job_id, body, nacks, additional)


def engine(**settings) -> Engine:
    return Engine(Settings(("q",), **settings), Clock(), logging.getLogger("test"))


def handling(e: Engine, fetched: Job, started_at: float = 0.0) -> tuple[Delivery, Steps, Steps]:
    """``fetched`` taken by ``e`` and its handler running: the delivery, its steps and
    its keep-alive's steps (started at ``started_at``, none taken yet)."""
    (d,) = e.fetched([fetched])
    steps = e.process(d)
    next(steps)  # running
    return d, steps, e.keepalive(d, started_at)


def names(step):
    return step.call.args[0] if isinstance(step, Send | Ack) else type(step).__name__


def test_settings_validation():
    with pytest.raises(ValueError):
        Settings(())
    with pytest.raises(ValueError):
        Settings(("q",), concurrency=0)
    with pytest.raises(ValueError):
        Settings(("q",), max_nacks=3)  # a limit needs a dead-letter queue


def test_dead_letter_reasons():
    s = Settings(("q",), dead_letter_queue="dead", max_nacks=2, max_additional_deliveries=1)
    assert dead_letter_reason(job(nacks=2), s) is None
    assert dead_letter_reason(job(nacks=3), s) == "nacks 3 > 2"
    assert dead_letter_reason(job(additional=2), s) == "additional deliveries 2 > 1"
    assert dead_letter_reason(job(nacks=2), s, failed=True) == "nacks 3 > 2"
    assert dead_letter_reason(job(additional=5), s, failed=True) is None
    assert dead_letter_reason(job(nacks=99), Settings(("q",))) is None


@given(st.binary(), st.text(), st.integers(0, 99))
def test_dead_letter_round_trip(body, error, nacks):
    letter = DeadLetter.of(job(body=body, nacks=nacks), "reason", error)
    assert DeadLetter.decode(letter.encode()) == letter


def test_dead_letter_decode_rejects_other_bodies():
    with pytest.raises(ValueError):
        DeadLetter.decode(b"plain body")


def test_keepalive_schedule():
    s = Settings(("q",))
    k = KeepAlive(job(), 10.0, s)
    assert (k.action, k.due) == (Next.SHOW, 10.2)
    info = JobInfo(AT_LEAST_ONCE, "q", "active", 1, 100, 0, 0, 5, 0, 0, (), (), 4000, 100, b"")
    k.shown(info, 11.0)
    assert k.action is Next.WORKING and k.due == pytest.approx(11.0 + 3.2)
    k.worked(5, 20.0)
    assert k.due == 24.0
    k.worked(None, 21.0)
    assert k.due is None
    assert KeepAlive(job(), 0.0, Settings(("q",), retry=10)).due == 8.0
    assert KeepAlive(job(AT_MOST_ONCE), 0.0, s).due is None
    assert KeepAlive(job(), 0.0, Settings(("q",), keepalive=False)).due is None


def test_success_acks():
    e = engine()
    (d,) = e.fetched([job()])
    steps = e.process(d)
    assert isinstance(next(steps), RunHandler)
    assert names(steps.send(None)) == b"ACKJOB"
    with pytest.raises(StopIteration):
        steps.send(1)
    assert e.tracker.idle and e.stats.acked == 1


def test_failure_nacks():
    e = engine()
    (d,) = e.fetched([job()])
    steps = e.process(d)
    next(steps)
    assert names(steps.send(ValueError("boom"))) == b"NACK"
    with pytest.raises(StopIteration):
        steps.send(1)
    assert e.stats.nacked == 1 and e.stats.failed == 1


def test_failure_past_the_limit_goes_to_the_dead_letter_queue_with_the_error():
    e = engine(dead_letter_queue="dead", max_nacks=1)
    (d,) = e.fetched([job(nacks=1)])
    steps = e.process(d)
    next(steps)
    add = steps.send(ValueError("boom"))
    assert add.call.args[:2] == (b"ADDJOB", b"dead")
    letter = DeadLetter.decode(add.call.args[2])
    assert letter.id == AT_LEAST_ONCE and letter.nacks == 1 and "ValueError: boom" in letter.error
    assert names(steps.send("D-new")) == b"ACKJOB"
    with pytest.raises(StopIteration):
        steps.send(1)
    assert e.stats.dead_lettered == 1 and e.tracker.idle


def test_counters_past_the_limit_at_fetch_skip_the_handler():
    e = engine(dead_letter_queue="dead", max_additional_deliveries=0)
    (d,) = e.fetched([job(additional=1)])
    steps = e.process(d)
    assert names(next(steps)) == b"ADDJOB"
    assert names(steps.send("D-new")) == b"ACKJOB"


def test_failed_dead_letter_leaves_the_job_unacked():
    e = engine(dead_letter_queue="dead", max_nacks=0)
    (d,) = e.fetched([job(nacks=1)])
    steps = e.process(d)
    next(steps)
    with pytest.raises(StopIteration):
        steps.send(ConnectionError("down"))
    assert e.stats.dead_lettered == 0 and e.tracker.idle


def test_keepalive_steps_show_then_working_until_refused():
    e = engine()
    _d, _steps, keep = handling(e, job())
    assert next(keep) == Wait(0.2)
    assert names(keep.send(None)) == b"SHOW"
    info = JobInfo(AT_LEAST_ONCE, "q", "active", 1, 100, 0, 0, 5, 0, 0, (), (), 5000, 1, b"")
    assert next_wait(keep.send(info)) == pytest.approx(100.0 + 4.0)
    assert names(keep.send(None)) == b"WORKING"
    assert next_wait(keep.send(5)) == pytest.approx(104.0)
    assert names(keep.send(None)) == b"WORKING"
    with pytest.raises(StopIteration):
        keep.send(TooLateError("TOOLATE Half of job TTL already elapsed"))


def next_wait(step):
    assert isinstance(step, Wait)
    return step.until


def test_keepalive_stops_when_the_job_is_done():
    e = engine(retry=10)
    (d,) = e.fetched([job()])
    keep = e.keepalive(d, 0.0)
    assert next(keep) == Wait(8.0)
    with pytest.raises(StopIteration):
        keep.send(None)  # never started: not running


def test_shutdown_nacks_pending_then_waits_then_nacks_running():
    e = engine(concurrency=3, grace_period=5)
    ids = [f"D-aaaaaaaa-{i:024d}-05a1" for i in range(3)]
    running, finished, pending = e.fetched([job(i) for i in ids])
    runs = [e.process(running), e.process(finished)]
    for steps in runs:
        next(steps)
    shutdown = e.shutdown()
    nack_pending = next(shutdown)
    assert nack_pending.call.args == (b"NACK", ids[2].encode())
    assert pending.state is JobState.ABANDONED
    assert shutdown.send(1) == Drain(105.0)
    assert names(runs[1].send(None)) == b"ACKJOB"  # one finishes within the grace period
    nack_running = shutdown.send(None)
    assert nack_running.call.args == (b"NACK", ids[0].encode())
    with pytest.raises(StopIteration):
        shutdown.send(1)
    with pytest.raises(StopIteration):
        runs[0].send(None)  # its handler returns late: no ACK
    assert e.stats.nacked == 2
    assert e.fetch_call() is None


def test_a_job_fetched_after_the_stop_is_given_back():
    e = engine()
    shutdown = e.shutdown(hurry=True)
    next(shutdown, None)
    (late,) = e.fetched([job()])
    steps = e.process(late)
    assert next(steps).call.args == (b"NACK", AT_LEAST_ONCE.encode())
    with pytest.raises(StopIteration):
        steps.send(1)
    assert e.tracker.idle


def test_fetch_asks_for_free_slots_with_counters_until_stopping():
    e = engine(concurrency=4, poll_timeout=0.5)
    e.fetched([job()])
    args = e.fetch_call().args
    assert args == (b"GETJOB", b"TIMEOUT", b"500", b"COUNT", b"3", b"WITHCOUNTERS", b"FROM", b"q")
    assert e.fetch_call(1).args == (b"GETJOB", b"TIMEOUT", b"500", b"WITHCOUNTERS", b"FROM", b"q")
    e.fetched([job("D-aaaaaaaa-" + "z" * 24 + "-05a1") for _ in range(3)])
    assert e.fetch_call() is None  # every slot busy
    e.tracker.stop()
    assert e.fetch_call(1) is None


def test_fetch_failures_are_logged_once_until_it_works(caplog):
    e = engine()
    with caplog.at_level(logging.DEBUG, logger="test"):
        e.fetch_failed(OSError("down"))
        e.fetch_failed(OSError("still down"))
        e.fetched([])
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.DEBUG, logging.INFO]
    assert "GETJOB works again" in caplog.text


# ---------------------------------------------------------------------- dead-letter queues

ORIGIN = "D-bbbbbbbb-" + "o" * 24 + "-05a1"


def show_of_dead_letter(**fields) -> JobInfo:
    return JobInfo(
        AT_LEAST_ONCE, "dead", "active", 1, 100, 0, 0, 5, 0, 0, (), (), 5000, None, b"b", **fields
    )


def test_a_worker_of_dead_letters_decodes_its_own_format_without_show():
    e = engine(dead_letters=True)
    original = DeadLetter.of(job(ORIGIN, nacks=4, body=b"payload"), "nacks 4 > 3", "trace")
    fetched = Job("dead", AT_LEAST_ONCE, original.encode(), 0, 0)
    (d,) = e.fetched([fetched])
    steps = e.process(d)
    run = next(steps)
    assert isinstance(run, RunHandler) and run.argument == original
    assert run.argument.job == fetched and run.argument.body == b"payload"
    assert names(steps.send(None)) == b"ACKJOB"


def test_a_worker_of_dead_letters_reads_a_policy_dead_letter_origin_with_show():
    e = engine(dead_letters=True)
    fetched = Job("dead", AT_LEAST_ONCE, b"payload", 0, 0)
    (d,) = e.fetched([fetched])
    steps = e.process(d)
    show = next(steps)
    assert show.call.args == (b"SHOW", AT_LEAST_ONCE.encode())
    info = show_of_dead_letter(
        origin_id=ORIGIN, origin_queue="emails", origin_nacks=6, origin_additional_deliveries=1
    )
    run = steps.send(info)
    letter = run.argument
    assert (letter.queue, letter.id, letter.nacks, letter.additional_deliveries) == (
        "emails", ORIGIN, 6, 1,
    )  # fmt: skip
    assert letter.reason == SERVER_REASON and letter.body == b"payload" and letter.job == fetched
    assert names(steps.send(None)) == b"ACKJOB"


def test_a_dead_letter_of_unknown_origin_still_reaches_the_handler():
    e = engine(dead_letters=True)
    (d,) = e.fetched([job(body=b"just a job")])
    steps = e.process(d)
    next(steps)
    letter = steps.send(show_of_dead_letter()).argument  # plain Disque: no origin fields
    assert letter.queue is None and letter.id is None and letter.reason == "unknown origin"
    assert letter.body == b"just a job"


def test_a_dead_letter_whose_show_fails_is_nacked_without_running_the_handler():
    e = engine(dead_letters=True)
    (d,) = e.fetched([job(body=b"payload")])
    steps = e.process(d)
    next(steps)
    assert steps.send(ConnectionError("down")).call.args == (b"NACK", AT_LEAST_ONCE.encode())
    with pytest.raises(StopIteration):
        steps.send(1)
    assert e.tracker.idle and e.stats.failed == 0


def test_dead_letters_carry_the_original_id_as_dedup_key_when_the_servers_take_it():
    for dedup, tail in ((True, (b"DEDUP", AT_LEAST_ONCE.encode())), (False, None)):
        e = engine(dead_letter_queue="dead", max_nacks=0, dedup=dedup)
        (d,) = e.fetched([job(nacks=1)])
        add = next(e.process(d)).call
        assert add.args[:2] == (b"ADDJOB", b"dead")
        assert (add.args[-2:] == tail) if tail else b"DEDUP" not in add.args


def test_dead_letter_decode_rejects_malformed_headers():
    with pytest.raises(ValueError):
        DeadLetter.decode(DEAD_LETTER_MAGIC + b'{"queue": "q"}\nbody')
    with pytest.raises(ValueError):
        DeadLetter.decode(DEAD_LETTER_MAGIC + b"[1]\nbody")


def test_a_dead_letter_abandoned_by_the_shutdown_during_its_show_is_not_handled():
    e = engine(dead_letters=True)
    (d,) = e.fetched([job(body=b"payload")])
    steps = e.process(d)
    next(steps)  # SHOW
    shutdown = e.shutdown(hurry=True)
    assert next(shutdown).call.args == (b"NACK", AT_LEAST_ONCE.encode())  # running: NACKed
    with pytest.raises(StopIteration):
        steps.send(show_of_dead_letter())


# ---------------------------------------------------------------------- progress and claims


def stale(claim: int = 1, now: int = 2) -> StaleClaimError:
    return StaleClaimError(
        f"STALECLAIM Job {AT_LEAST_ONCE} was delivered again since claim {claim} (now {now})"
    )


def claimed(claim: int = 1) -> Job:
    return Job("q", AT_LEAST_ONCE, b"b", 0, 0, claim)


def test_with_claims_the_fetch_asks_for_them_and_every_command_sends_the_jobs():
    e = engine(claims=True)
    assert e.fetch_call().args[-3:] == (b"WITHCLAIM", b"FROM", b"q")
    assert b"WITHCLAIM" not in engine().fetch_call().args
    (d,) = e.fetched([claimed(4)])
    steps = e.process(d)
    next(steps)
    ack = steps.send(None)
    assert ack.call.args == (b"ACKJOB", AT_LEAST_ONCE.encode(), b"CLAIM", b"4")
    assert e.progress_call(d, "half").args == (
        b"WORKING", AT_LEAST_ONCE.encode(), b"CLAIM", b"4", b"half",
    )  # fmt: skip
    (d,) = e.fetched([claimed(5)])
    steps = e.process(d)
    next(steps)
    nack = steps.send(ValueError("boom"))
    assert nack.call.args == (b"NACK", AT_LEAST_ONCE.encode(), b"CLAIM", b"5")


def test_a_progress_report_without_claims_sends_the_bare_working():
    e = engine()
    (d,) = e.fetched([job()])
    assert e.progress_call(d, b"10%").args == (b"WORKING", AT_LEAST_ONCE.encode(), b"10%")


def test_a_stale_ack_is_logged_once_and_the_job_left_alone(caplog):
    e = engine(claims=True)
    (d,) = e.fetched([claimed(1)])
    steps = e.process(d)
    next(steps)
    assert names(steps.send(None)) == b"ACKJOB"
    with caplog.at_level(logging.DEBUG, logger="test"), pytest.raises(StopIteration):
        steps.send(stale(1, 2))
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    text = warning.getMessage()
    assert AT_LEAST_ONCE in text and "ACK refused, claim 1 is stale" in text
    assert "latest is 2" in text and "leaves it to its new holder" in text
    assert e.stats.stale == 1 and e.stats.acked == 0 and e.tracker.idle
    assert "1 stale claims" in e.stats.summary(200.0)


def test_after_a_stale_progress_report_nothing_more_is_sent_for_the_job(caplog):
    e = engine(claims=True)
    d, steps, keep = handling(e, claimed(1))
    assert next(keep) == Wait(0.2)
    with caplog.at_level(logging.WARNING, logger="test"):
        e.progressed(d, stale())
        e.progressed(d, stale())  # the handler tried again: still one warning
    assert len(caplog.records) == 1 and "progress report (WORKING)" in caplog.text
    with pytest.raises(StopIteration):
        keep.send(None)  # no more keep-alive
    with pytest.raises(StopIteration):
        steps.send(stale())  # the handler raised the StaleClaimError: no NACK
    assert e.stats.stale == 1 and e.stats.failed == 0 and e.stats.nacked == 0
    assert e.tracker.idle


def test_a_stale_keepalive_stops_it_and_the_job_is_not_acked():
    e = engine(claims=True, retry=10)
    _d, steps, keep = handling(e, claimed(2))
    assert next(keep) == Wait(8.0)
    working = keep.send(None)
    assert working.call.args == (b"WORKING", AT_LEAST_ONCE.encode(), b"CLAIM", b"2")
    with pytest.raises(StopIteration):
        keep.send(stale(2, 3))
    with pytest.raises(StopIteration):
        steps.send(None)  # the handler returned: no ACK sent
    assert e.stats.stale == 1 and e.stats.acked == 0


def test_a_progress_report_postpones_the_next_keepalive():
    e = engine(retry=10)
    d, _steps, keep = handling(e, job())
    assert next(keep) == Wait(8.0)
    e.clock.now = 105.0
    e.progressed(d, 10)  # WORKING with a text answered: 10 s more
    assert keep.send(None) == Wait(pytest.approx(113.0))  # 80 % of 10 s after the report
    e.clock.now = 113.0
    assert names(keep.send(None)) == b"WORKING"


def test_a_progress_report_replaces_the_show_probe():
    e = engine()
    d, _steps, keep = handling(e, job(), 100.0)
    assert next(keep) == Wait(pytest.approx(100.2))
    e.progressed(d, 5)
    assert keep.send(None) == Wait(pytest.approx(104.0))
    assert names(keep.send(None)) == b"WORKING"  # the retry is known: no SHOW


def test_a_failed_progress_report_changes_nothing():
    e = engine()
    (d,) = e.fetched([job()])
    e.progressed(d, LogFullError("LOGFULL The job's progress log is full (64 entries)"))
    assert d.worked is None and d.stale is None


def test_the_shutdown_nacks_claimed_jobs_one_by_one():
    e = engine(claims=True, concurrency=2)
    ids = [f"D-aaaaaaaa-{i:024d}-05a1" for i in range(2)]
    e.fetched([Job("q", i, b"", 0, 0, n + 1) for n, i in enumerate(ids)])
    shutdown = e.shutdown(hurry=True)
    first = next(shutdown)
    assert first.call.args == (b"NACK", ids[0].encode(), b"CLAIM", b"1")
    second = shutdown.send(stale())  # refused: the other one is still NACKed
    assert second.call.args == (b"NACK", ids[1].encode(), b"CLAIM", b"2")
    with pytest.raises(StopIteration):
        shutdown.send(1)
    assert e.stats.nacked == 1 and e.stats.stale == 1


def test_the_handler_gets_a_running_job_with_progress():
    calls = []
    running = RunningJob.of(claimed(3), lambda text: calls.append(text) or 7, threading.Event())
    assert running == RunningJob("q", AT_LEAST_ONCE, b"b", 0, 0, 3)  # the reporter aside
    assert running.claim == 3 and running.progress("x") == 7 and calls == ["x"]
    assert "report" not in repr(running)
    with pytest.raises(RuntimeError, match="handed to a handler by a Worker"):
        RunningJob("q", AT_LEAST_ONCE, b"b").progress("x")
    letter = DeadLetter.of(job(), "reason")
    assert handed(letter, running) == letter and handed(letter, running).job is running
    assert handed(job(), running) is running


# ---------------------------------------------------------------------- issue 24

CANCELLED = JobCancelledError("CANCELLED Job was cancelled")


def test_with_results_the_handlers_value_goes_with_the_ack():
    e = engine(results=True, concurrency=4)
    deliveries = e.fetched([job(f"D-aaaaaaaa-{n:024d}-05a1") for n in range(4)])
    sent = []
    for d, value in zip(deliveries, ("text", b"\x00bytes", None, 42), strict=True):
        steps = e.process(d)
        next(steps)
        sent.append(steps.send(Returned(value)).call.args)
    assert [args[0] for args in sent] == [b"ACKJOB", b"ACKJOB", b"ACKJOB", b"NACK"]
    assert sent[0][2:] == (b"RESULT", b"text") and sent[1][2:] == (b"RESULT", b"\x00bytes")
    assert sent[2][2:] == ()  # None: no result
    assert e.stats.failed == 1  # 42 is no result: the job fails
    without = engine()
    (d,) = without.fetched([job()])
    steps = without.process(d)
    next(steps)
    assert steps.send(Returned("ignored")).call.args == (b"ACKJOB", AT_LEAST_ONCE.encode())


def test_a_result_too_long_fails_the_job():
    e = engine(results=True)
    (d,) = e.fetched([job()])
    steps = e.process(d)
    next(steps)
    assert names(steps.send(Returned(b"x" * 65537))) == b"NACK"
    assert e.stats.failed == 1


def test_retry_nacks_with_its_delay_and_is_no_failure():
    e = engine(concurrency=2)
    first, second = e.fetched([job(), job("D-aaaaaaaa-" + "z" * 24 + "-05a1")])
    steps = e.process(first)
    next(steps)
    nack = steps.send(Retry(delay=2.5))
    assert nack.call.args == (b"NACK", AT_LEAST_ONCE.encode(), b"DELAY", b"3")
    steps = e.process(second)
    next(steps)
    assert steps.send(Retry()).call.args[2:] == ()  # a plain NACK: the backoff applies
    assert e.stats.failed == 0
    with pytest.raises(ValueError):
        Retry(delay=-1)


def test_a_retry_past_the_nack_limit_is_dead_lettered():
    e = engine(dead_letter_queue="dead", max_nacks=1)
    (d,) = e.fetched([job(nacks=1)])
    steps = e.process(d)
    next(steps)
    add = steps.send(Retry(delay=5, reason="the mail server is down"))
    assert add.call.args[:2] == (b"ADDJOB", b"dead")
    letter = DeadLetter.decode(add.call.args[2])
    assert letter.error == "handler asked for a retry in 5s: the mail server is down"


def test_a_cancelled_keepalive_tells_the_handler_and_nothing_is_settled(caplog):
    e = engine(retry=10)
    d, steps, keep = handling(e, job())
    told = threading.Event()
    d.on_cancel = told.set
    next(keep)
    assert names(keep.send(None)) == b"WORKING"
    with caplog.at_level(logging.INFO), pytest.raises(StopIteration):
        keep.send(CANCELLED)
    assert told.is_set() and "was cancelled" in caplog.text
    with pytest.raises(StopIteration):
        steps.send(Returned(None))  # the handler returned: no ACK
    assert e.stats.cancelled == 1 and e.stats.acked == 0 and e.tracker.idle
    assert "1 cancelled" in e.stats.summary(e.clock())


def test_a_cancelled_progress_report_and_a_shutdown_nack_nothing():
    e = engine(concurrency=2)
    first, second = e.fetched([job(), job("D-aaaaaaaa-" + "z" * 24 + "-05a1")])
    handlers = [e.process(first), e.process(second)]
    for steps in handlers:
        next(steps)
    e.progressed(first, CANCELLED)
    assert first.cancelled and first.settled_elsewhere
    shutdown = e.shutdown(hurry=True)
    nack = next(shutdown)
    assert nack.call.args == (b"NACK", second.job.id.encode())  # the cancelled one is not
    with pytest.raises(StopIteration):
        shutdown.send(1)


def test_a_heartbeat_bounds_the_time_between_keepalives():
    s = Settings(("q",), retry=60, heartbeat=2)
    keep = KeepAlive(job(), 0.0, s)
    assert keep.due == 2.0
    keep.worked(60, 10.0)
    assert keep.due == 12.0
    keep.worked(1, 10.0)
    assert keep.due == pytest.approx(10.8)  # 80 % of the retry, when sooner
    with pytest.raises(ValueError):
        Settings(("q",), heartbeat=0)
    with pytest.raises(ValueError):
        Settings(("q",), heartbeat=1, keepalive=False)


def test_a_job_show_does_not_know_gets_a_working_at_once_which_may_say_cancelled():
    e = engine()
    d, _steps, keep = handling(e, job())
    next(keep)
    assert names(keep.send(None)) == b"SHOW"
    assert next_wait(keep.send(None)) == 100.0  # unknown: WORKING now, not never
    assert names(keep.send(None)) == b"WORKING"
    with pytest.raises(StopIteration):
        keep.send(CANCELLED)
    assert d.cancelled
    acked = JobInfo(AT_LEAST_ONCE, "q", "acked", 1, 100, 0, 0, 5, 0, 0, (), (), None, None, b"")
    k = KeepAlive(job(), 10.0, Settings(("q",)))
    k.shown(acked, 11.0)
    assert k.due == 11.0


def test_a_fetch_behind_acks_fills_their_slots_too_and_keepalives_start_late():
    e = engine(concurrency=2, poll_timeout=0.5)
    a, b = e.fetched([job(), job("D-aaaaaaaa-" + "z" * 24 + "-05a1")])
    assert e.fetch_call() is None
    runs = [e.process(a), e.process(b)]
    for steps in runs:
        next(steps)
    assert e.keepalives_due(e.clock() - 1) == []  # started just now: no keep-alive yet
    due = e.keepalives_due(e.clock())
    assert [delivery for delivery, _ in due] == [a, b]
    assert isinstance(next(due[0][1]), Wait) and e.keepalives_due(e.clock()) == []  # once
    acks = [steps.send(None) for steps in runs]
    assert all(type(ack) is Ack and ack.batchable for ack in acks)
    assert acks_call(acks).args[0] == b"ACKJOB" and len(acks_call(acks).args) == 3
    assert b"2" in e.fetch_call(nohang=True, acking=2).args  # COUNT 2, behind the ACKJOB
    e.tracker.stop()
    assert e.fetch_call(acking=2) is None
