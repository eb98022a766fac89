"""The features runs' machinery: fault windows, the checks of properties 7 to 9, the
policy administrator, and a features seed's determinism.

The seed ranges themselves run in ``test_simulation.py``; these tests show that each
check fails when it should, on hand-made histories and on a small cluster.
"""

from __future__ import annotations

import random

from disquette.sim import properties
from disquette.sim.clients import Workload
from disquette.sim.faults import Fault, FaultPlan, FaultSchedule
from disquette.sim.history import FIRST, RESEND, RETRY, DedupAttempt, History
from disquette.sim.runner import SimConfig, Simulation, config_for_seed, run_seed

MARGIN = 100


def test_disturbances_pair_each_fault_with_its_end_and_close_open_ones_at_the_window():
    schedule = FaultSchedule(
        [
            Fault(0, "net", (0.01, 0.0, 0.0)),
            Fault(100, "crash", (1,)),
            Fault(200, "partition", ((0,), (1, 2))),
            Fault(250, "break"),
            Fault(300, "restart", (1,)),
            Fault(400, "heal"),
            Fault(500, "leave", (2,)),
            Fault(600, "crash", (0,)),
        ],
        1000,
    )
    assert schedule.disturbances() == [
        (0, 1000),
        (100, 300),
        (200, 400),
        (250, 250),
        (500, 1000),
        (600, 1000),
    ]
    empty = FaultSchedule.generate(random.Random(1), FaultPlan(), 3, 1000)
    assert empty.disturbances() == []


def dead_lettered(history: History, origin: bytes, *made: int) -> None:
    """``origin`` (body b"b", issued at 0) delivered at 10, with dead letters made at
    each of ``made``."""
    history.add_issued(b"b", 0, retry=1, delay=0)
    history.delivered(origin, b"b", 0, 10)
    for i, created in enumerate(made):
        history.dead_letter(b"DL%d" % i, origin, created, b"b")


def test_two_dead_letters_of_a_job_need_a_fault_in_its_life():
    history = History()
    dead_lettered(history, b"J", 50, 60)
    violations, stats = properties.check_dead_letters(history, [], MARGIN)
    assert len(violations) == 1 and "2 dead letters of J" in violations[0]
    # A partition that ended within the margin before the job was added excuses them.
    violations, stats = properties.check_dead_letters(history, [(-150, -50)], MARGIN)
    assert violations == [] and stats["dead_letters_extra"] == 1
    violations, _ = properties.check_dead_letters(history, [(-500, -200)], MARGIN)
    assert len(violations) == 1  # long before it: no excuse
    violations, _ = properties.check_dead_letters(history, [(70, 80)], MARGIN)
    assert len(violations) == 1  # after the last dead letter: no excuse


def test_a_dead_lettered_job_is_not_delivered_again_after_its_dead_letter():
    history = History()
    dead_lettered(history, b"J", 50)
    history.delivered(b"J", b"b", 1, 50 + properties.INFLIGHT_MS)  # in flight
    assert properties.check_dead_letters(history, [], MARGIN)[0] == []
    history.delivered(b"J", b"b", 1, 51 + properties.INFLIGHT_MS)
    violations, stats = properties.check_dead_letters(history, [], MARGIN)
    assert len(violations) == 1 and "after its dead letter" in violations[0]
    violations, stats = properties.check_dead_letters(history, [(100, 100)], MARGIN)
    assert violations == [] and stats["delivered_after_dead_letter"] == 1


def test_a_job_leaves_by_an_ack_or_a_dead_letter():
    history = History()
    history.add_issued(b"b", 0, retry=1, delay=0)
    history.delivered(b"J", b"b", 0, 10)
    violations, _ = properties.check_dead_letters(history, [], MARGIN)
    assert violations == ["J gone without an ack nor a dead letter, without faults"]
    assert properties.check_dead_letters(history, [(5000, 5000)], MARGIN)[0] == []
    history.ack_confirmed(b"J", 20)
    assert properties.check_dead_letters(history, [], MARGIN)[0] == []


def test_a_dead_letter_names_its_origin_and_keeps_its_body():
    history = History()
    dead_lettered(history, b"J", 50)
    history.dead_letter(b"DLX", b"?", 60, b"b")
    history.dead_letter(b"DLY", b"J", 70, b"other")
    violations, _ = properties.check_dead_letters(history, [(0, 1000)], MARGIN)
    assert sorted(violations) == [
        "dead letter DLX names no origin",
        "dead letter DLY of J has another body",
    ]


def attempt(why: str, held: tuple[bytes, ...], reply: object, **more: object) -> DedupAttempt:
    fields = {"pending": False, "elsewhere": ()} | more
    return DedupAttempt(b"k", b"q", 0, 0, why, held, reply=reply, **fields)  # type: ignore[arg-type]


def test_a_dedup_addjob_on_a_node_holding_the_key_returns_that_job():
    history = History()
    history.dedup_attempts += [
        attempt(FIRST, (), b"J1"),
        attempt(RETRY, (b"J1",), b"J1"),
        attempt(RESEND, (b"J1",), "TRYAGAIN", pending=True),
        attempt(RESEND, (), b"J2", elsewhere=(b"J1",)),
        attempt(RETRY, (), "NOREPL"),
        attempt(RESEND, (), b"J3"),
    ]
    violations, stats = properties.check_dedup(history)
    assert violations == []
    assert stats["dedup_retry_sent"] == 2 and stats["dedup_retry_found"] == 1
    assert stats["dedup_retry_failed"] == 1
    assert stats["dedup_resend_found"] == 1 and stats["dedup_resend_second"] == 1
    assert stats["dedup_resend_fresh"] == 1 and stats["dedup_keys_split"] == 1
    history.dedup_attempts += [
        attempt(RETRY, (b"J1",), b"J4"),
        attempt(RESEND, (b"J1",), "TRYAGAIN"),  # nothing held was pending
    ]
    violations, _ = properties.check_dedup(history)
    assert len(violations) == 2


def admin_cluster() -> Simulation:
    """A formed three-node cluster with the policy administrator and its first policies."""
    workload = Workload(producers=0, consumers=0, policy_writes=1, deadletter=b"dlq")
    sim = Simulation(SimConfig(seed=3, nodes=3, workload=workload))
    for p in sim.processes:
        p.start()
    sim.join()
    assert sim.policy_admin is not None
    sim.setup_policies(sim.policy_admin)
    assert not sim.violations
    return sim


def test_policies_written_apart_converge_to_the_last_writer():
    sim = admin_cluster()
    admin = sim.policy_admin
    assert admin is not None
    n0, n1, n2 = sim.processes
    sim.network.partition([[0], [1, 2]])
    admin.write(n0, b"dl-b", b"q0", {"max-nacks": 1, "deadletter": b"dlq"})
    admin.write(n1, b"dl-b", b"q?", {"max-nacks": 3, "deadletter": b"dlq"})
    admin.delete(n2, b"dl-a")
    sim.loop.run_until(sim.loop.now + 1000)
    assert not properties.policies_agree(sim.processes)
    assert properties.check_policies(sim.processes, sim.history)
    sim.network.heal()
    sim.loop.run_until(sim.loop.now + 8000)
    assert properties.check_policies(sim.processes, sim.history) == []
    winner = properties.expected_policies(sim.history)[b"dl-b"]
    assert n0.node is not None and n0.node.policies.get(b"dl-b").pattern == winner.pattern
    assert n0.node.policies.get(b"dl-a") is None  # the tombstone won everywhere
    # A table that differs from what the writes imply is reported.
    n2.node.policies.records.pop(b"dl-b")  # type: ignore[union-attr]
    violations = properties.check_policies(sim.processes, sim.history)
    assert any(v.startswith("n2 holds policy dl-b None") for v in violations)


def test_a_features_seed_replays_the_same_history():
    for seed in (0, 1, 2, 3):  # one of each fault kind
        first, second = run_seed(seed, "features"), run_seed(seed, "features")
        assert first.digest == second.digest and first.stats == second.stats
    assert config_for_seed(7, "features").replay == "--seed 7 --features"


def test_a_nack_past_the_bounds_must_not_leave_the_job_queued():
    history = History()
    dead_lettered(history, b"J")
    history.nack_overruns.append((b"J", 2, 30))
    violations, stats = properties.check_dead_letters(history, [], MARGIN)
    assert violations == [
        "a NACK on n2 at 30 took J past its policy's bounds and left it queued, without faults",
        "J gone without an ack nor a dead letter, without faults",
    ]
    violations, stats = properties.check_dead_letters(history, [(20, 20)], MARGIN)
    assert violations == [] and stats["nacks_past_bounds_queued"] == 1
