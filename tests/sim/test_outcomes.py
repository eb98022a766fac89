"""The outcomes runs: postponed requeues (NACK DELAY, BACKOFF), results (ACKJOB
RESULT), WAITJOB and CANCEL, properties 20 to 23.

``DISQUETTE_SIM_OUTCOMES`` seeds (default 1000, about 30 s on one core; the command
line runs more: ``python -m disquette.sim --seed 1000 --count 5000 --outcomes``) run
producers adding jobs with backoffs (and some that expire), consumers NACKing with
delays, acknowledging with results and working on jobs until -CANCELLED stops them,
a canceller and two waiters on random nodes, under no faults, partitions, crashes or
all of them. The other tests show that each check fails when it should, on hand-made
histories.
"""

from __future__ import annotations

import os

from disquette.sim import properties
from disquette.sim.batch import feature_totals, run_many
from disquette.sim.history import (
    DROPPED,
    HELD,
    NIL,
    Cancel,
    History,
    Nack,
    WaitCall,
    WorkingCall,
)
from disquette.sim.runner import OUTCOME_STATS, config_for_seed, run_seed
from tests.sim.test_simulation import FIRST, failures

OUTCOMES = int(os.environ.get("DISQUETTE_SIM_OUTCOMES", "1000"))


def test_postponed_requeues_results_waits_and_cancellations_keep_their_properties():
    """Properties 20 to 23 over the seed range; the totals printed are the counts the
    runs report (requeues postponed, early deliveries excused, WAITJOB answers by kind,
    cancellations, deliveries after a CANCEL excused)."""
    results = run_many(range(FIRST, FIRST + OUTCOMES), "outcomes", workers=1)
    print(f"\noutcomes over {OUTCOMES} seeds: " + feature_totals(results, OUTCOME_STATS))
    assert all(r.ok for r in results), failures(results)

    def total(name: str) -> int:
        return sum(r.stats[name] for r in results)

    # The runs exercise what they check.
    assert total("nacks_postponed") > OUTCOMES // 2 and total("requeues_postponed") > OUTCOMES
    for kind in ("acked", "cancelled", "unknown", "nil"):
        assert total(f"waitjobs_{kind}") > OUTCOMES // 4, kind
    assert total("waitjobs_gone") and total("waitjobs_with_result") > OUTCOMES // 2
    assert total("cancels_held") > OUTCOMES // 2 and total("workings_cancelled") > OUTCOMES // 10


def test_an_outcomes_seed_replays_the_same_history():
    for seed in (0, 1, 2, 3):  # one of each fault kind
        first, second = run_seed(seed, "outcomes"), run_seed(seed, "outcomes")
        assert first.digest == second.digest and first.stats == second.stats
    assert config_for_seed(7, "outcomes").replay == "--seed 7 --outcomes"


J = b"D-00000000-" + b"j" * 24 + b"-003d"
FAULT = [(1000, 2000)]  # a fault from 1000 to 2000 ms (the margin below: 100)


def delivered(history: History, node: int, time: int, incarnation: int = 1) -> None:
    history.delivered(J, b"j", node, time).incarnation = incarnation


# Property 20 --------------------------------------------------------------------------


def test_a_nacked_job_is_not_delivered_before_its_delay():
    for at, expected in ((3600, []), (3400, [
        f"{J.decode()} delivered by n1 at 3400, 100 ms before the 3000 ms delay of its "
        "NACK on n0 at 500 ended"
    ])):  # fmt: skip
        history = History()
        delivered(history, 0, 10)
        history.nacks.append(Nack(J, 0, 500, 3000, 1, 1))  # (after one delivery)
        delivered(history, 1, at)
        violations, stats = properties.check_postponed(history, [], 100)
        assert violations == expected and stats["nacks_postponed"] == 1


def test_a_later_nack_decides_from_then_on():
    # Found by seed 7687: a consumer holding an earlier delivery NACKed the job again,
    # without a delay, while it was postponed: it was queued at once, rightly.
    history = History()
    delivered(history, 0, 10)
    delivered(history, 0, 20)
    history.nacks.append(Nack(J, 0, 500, 3000, 2, 1))
    history.nacks.append(Nack(J, 0, 530, 0, 2, 1))
    delivered(history, 1, 900)
    violations, stats = properties.check_postponed(history, [], 100)
    assert violations == [] and stats["nacks_postponed"] == 1
    history.nacks[1].time = 1000  # after the delivery
    assert len(properties.check_postponed(history, [], 100)[0]) == 1


def test_an_early_delivery_is_excused_only_elsewhere_and_disturbed():
    for node, incarnation, faults, expected in (
        (1, 1, FAULT, 0),  # another node, a fault meanwhile: excused
        (1, 1, [], 1),  # no fault
        (0, 1, FAULT, 1),  # the node that postponed it
        (0, 2, FAULT, 0),  # that node's next life (a crash took the postponed copy)
    ):
        history = History()
        delivered(history, 0, 10)
        history.nacks.append(Nack(J, 0, 500, 3000, 1, 1))
        delivered(history, node, 2500, incarnation)
        violations, stats = properties.check_postponed(history, faults, 100)
        assert len(violations) == expected, (node, incarnation, faults)
        assert stats["early_deliveries_excused"] == 1 - expected


# Property 21 --------------------------------------------------------------------------


def waited(history: History, kind: str, at: int, result: bytes | None = None, **kw) -> WaitCall:
    call = WaitCall(J, 0, 1, kw.pop("sent", 100), kw.pop("timeout", 0), at, kind, result, **kw)
    history.waits.append(call)
    return call


def wait_violations(history: History, beyond_tcp: bool = False) -> list[str]:
    return properties.check_waitjobs(history, beyond_tcp)[0]


def test_waitjob_answers_acked_only_after_an_ack_with_its_result():
    history = History()
    waited(history, "acked", 500, b"r")
    [violation] = wait_violations(history)
    assert violation.endswith("answered acked at 500: no ACKJOB of it answered before")
    history.ack_result(J, 500, b"other")
    [violation] = wait_violations(history)
    assert "result b'r', its ACKJOBs gave [b'other']" in violation
    history.ack_result(J, 400, b"r")
    assert wait_violations(history) == []
    waited(history, "acked", 600)  # nil: no ACKJOB without a result
    assert len(wait_violations(history)) == 1
    history.ack_result(J, 450, None)  # a FASTACK
    assert wait_violations(history) == []


def test_waitjob_answers_cancelled_gone_unknown_and_nil_only_when_true():
    history = History()
    waited(history, "cancelled", 500)
    waited(history, "gone", 500)
    waited(history, "unknown", 500, view=HELD)
    waited(history, NIL, 500)  # no timeout
    waited(history, NIL, 500, timeout=1000)  # sent at 100: before its timeout
    waited(history, DROPPED, 500)
    waited(history, "bad reply 'x'", 500)
    violations, stats = properties.check_waitjobs(history, False)
    assert [v.split(": ", 1)[1] for v in violations] == [
        "no CANCEL of it answered before",
        "not added to expire",
        "the job is held",
        "nil without a timeout",
        "nil before its timeout",
        "not an answer WAITJOB gives",
    ]
    assert stats["waitjobs_dropped"] == 1 and stats["waitjobs_nil"] == 2
    history = History()
    history.cancelled(Cancel(J, 1, 400, 1, 1, 0))
    history.doomed[J] = 450
    waited(history, "cancelled", 500)
    waited(history, "gone", 500)
    waited(history, "unknown", 500, view="forgotten")
    waited(history, NIL, 1100, timeout=1000)
    assert wait_violations(history) == []
    history.doomed[J] = 600  # its TTL not over yet
    assert len(wait_violations(history)) == 1


def test_a_bare_answer_is_excused_only_when_messages_overtake_others():
    """A job cancelled (or acknowledged with a result) answered as a bare ack says
    (gone, or acked without the result): its OUTCOME was overtaken, which a network
    that duplicates or reorders messages does and TCP never does."""
    history = History()
    history.cancelled(Cancel(J, 1, 400, 1, 1, 0))
    waited(history, "gone", 500)
    waited(history, "acked", 500)
    assert len(wait_violations(history)) == 2
    violations, stats = properties.check_waitjobs(history, True)
    assert violations == [] and stats["waitjobs_overtaken_excused"] == 2
    waited(history, "acked", 300)  # before the CANCEL: never
    assert len(wait_violations(history, True)) == 1


# Properties 22 and 23 -----------------------------------------------------------------


def cancel_violations(history: History, faults: list[tuple[int, int]]) -> list[str]:
    return properties.check_cancels(history, faults, 100)[0]


def test_a_cancelled_job_is_not_delivered_again():
    history = History()
    delivered(history, 0, 10)
    history.cancelled(Cancel(J, 1, 500, 1, 1, 1))
    delivered(history, 2, 550)  # in flight: n2 had not heard yet
    violations, stats = properties.check_cancels(history, [], 100)
    assert violations == [] and stats["delivered_after_cancel_in_flight"] == 1
    delivered(history, 2, 1500)
    assert cancel_violations(history, []) == [
        f"{J.decode()} delivered by n2 at 1500, after its CANCEL on n1 was answered at "
        "500, without faults"
    ]
    violations, stats = properties.check_cancels(history, FAULT, 100)
    assert violations == [] and stats["delivered_after_cancel_excused"] == 1
    history.cancel_known[(J, 2, 1)] = 520  # n2 knew: never, faults or not
    assert len(cancel_violations(history, FAULT)) == 2


def test_working_fails_where_the_cancellation_is_known():
    history = History()
    history.cancelled(Cancel(J, 1, 500, 1, 1, 0))
    history.workings += [WorkingCall(J, 0, 1, 600, False), WorkingCall(J, 1, 1, 600, True)]
    violations, stats = properties.check_cancels(history, [], 100)
    assert violations == [] and stats["workings_cancelled"] == 1
    history.workings.append(WorkingCall(J, 1, 1, 700, False))
    [violation] = cancel_violations(history, [])
    assert violation.endswith("answered on n1 at 700, which knew it cancelled since 500")
    history.workings[-1].incarnation = 2  # a later life: it lost what it knew
    assert cancel_violations(history, []) == []


def test_every_waitjob_is_answered():
    history = History()
    waited(history, "", 0)
    assert properties.check_waits_answered(history) == [
        f"WAITJOB {J.decode()} on n0 sent at 100 never answered"
    ]
    history.waits[0].kind = DROPPED
    assert properties.check_waits_answered(history) == []
