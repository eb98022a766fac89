"""The coordination runs: jobs that wait for others (ADDJOB AFTER), claims (GETJOB
WITHCLAIM, CLAIM n) and progress logs (WORKING text), properties 11 to 13.

``DISQUETTE_SIM_COORDINATION`` seeds (default 300, about 20 s on two cores; the
command line runs more: ``python -m disquette.sim --seed 0 --count 1000
--coordination``) run producers adding chains, fan-ins and fan-outs, some rooted
in a job that expires unacknowledged, and consumers taking jobs with claims and
writing progress logs, under no faults, partitions, crashes or all of them. The
other tests show that each check fails when it should, on hand-made histories and
on small clusters, and pin the core's fan-out of a log to the holders it reaches
only through another holder.
"""

from __future__ import annotations

import functools
import os

from disquette.sim import properties
from disquette.sim.batch import feature_totals, run_many
from disquette.sim.history import (
    ACKED_COPY,
    FORGOTTEN,
    GONE,
    HELD,
    LOST,
    AddedJob,
    Child,
    History,
    ProgressEntry,
    StaleClaim,
)
from disquette.sim.runner import (
    COORDINATION_STATS,
    config_for_seed,
    run_seed,
)
from tests.sim import test_regressions as regressions
from tests.sim.test_simulation import FIRST, failures

COORDINATION = int(os.environ.get("DISQUETTE_SIM_COORDINATION", "300"))


def test_dependencies_claims_and_progress_logs_keep_their_properties():
    """Properties 11 to 13 over the seed range; the totals printed are the counts the
    runs report (children delivered and failed, dependencies excused, claims handed
    out and refused, progress entries and logs compared)."""
    results = run_many(range(FIRST, FIRST + COORDINATION), "coordination")
    print(f"\ncoordination over {COORDINATION} seeds: "
          + feature_totals(results, COORDINATION_STATS))  # fmt: skip
    assert all(r.ok for r in results), failures(results)

    def total(name: str) -> int:
        return sum(r.stats[name] for r in results)

    # The runs exercise what they check.
    assert total("children_delivered") > COORDINATION and total("children_failed") > COORDINATION
    assert total("deps_unacked_at_release") > COORDINATION // 2  # released by IFGONE release
    assert total("claims_delivered") > 10 * COORDINATION and total("claims_refused")
    assert total("progress_logs_checked") > COORDINATION


def test_a_coordination_seed_replays_the_same_history():
    for seed in (0, 1, 2, 3):  # one of each fault kind
        first, second = run_seed(seed, "coordination"), run_seed(seed, "coordination")
        assert first.digest == second.digest and first.stats == second.stats
    assert config_for_seed(7, "coordination").replay == "--seed 7 --coordination"


# Property 11 on hand-made histories -----------------------------------------------------


C = b"D-00000000-" + b"c" * 24 + b"-003d"  # (at-least-once IDs)
P = b"D-00000000-" + b"p" * 24 + b"-003d"


def with_child(history: History, release: bool = False) -> Child:
    """Job C (REPLICATE 1, added on n0, body b"c") waiting for P."""
    history.add_issued(b"c", 0, retry=1, delay=0)
    history.add_acknowledged(AddedJob(C, b"q", 1, False, 0, 0, (0,), False))
    child = Child(C, (P,), release, 0, {P: HELD})
    history.children[C] = child
    return child


def dependency_violations(history: History, faulty: bool = True) -> list[str]:
    return properties.check_dependencies(history, faulty)[0]


def test_a_child_is_released_only_once_its_dependency_was_acknowledged():
    history = History()
    with_child(history)
    history.delivered(C, b"c", 0, 120)
    assert dependency_violations(history) == [f"{C.decode()} delivered at 120, never seen released"]
    history.released(C, 1, 100, False, {P: HELD})
    history.ack_confirmed(P, 100)  # (the ack and the release in one event)
    assert dependency_violations(history) == []
    history.acked[P] = 101
    [violation] = dependency_violations(history)
    assert f"{C.decode()} released on n1 at 100" in violation
    assert f"{P.decode()} settled there at 100 while pending: held" in violation


def test_a_dependency_is_judged_as_the_releasing_holder_settled_it():
    # Found by seed 1899: n2 expired its copy of P (copies' TTLs end up to a second
    # apart) and told n1, then crashed; n1 released C later, while n0 still held its
    # copy of P. What P looked like when n1 settled it is what counts.
    history = History()
    with_child(history, release=True)
    history.dependencies_settled(C, 1, 100, {P: GONE})
    history.released(C, 1, 200, False, {P: HELD})
    history.delivered(C, b"c", 1, 210)
    assert dependency_violations(history) == []
    history.settled[(C, 1, 1)][P] = (100, HELD)
    assert len(dependency_violations(history)) == 1
    # A node's later life settles afresh (seed 4419: it lost the job in a crash without
    # an AOF, and got it back from another holder).
    history = History()
    with_child(history, release=True)
    history.dependencies_settled(C, 1, 100, {P: HELD}, incarnation=1)
    history.released(C, 1, 200, False, {P: GONE}, incarnation=2)
    history.delivered(C, b"c", 1, 210)
    assert dependency_violations(history) == []


def test_a_gone_dependency_releases_with_ifgone_release_and_fails_otherwise():
    for release, expected in ((True, 0), (False, 1)):
        history = History()
        with_child(history, release)
        history.released(C, 0, 100, False, {P: GONE})
        history.delivered(C, b"c", 0, 110)
        assert len(dependency_violations(history)) == expected
    # Failed: right when P was gone and not acknowledged then, never with IFGONE release.
    for release, acked, expected in ((False, None, 0), (False, 90, 1), (True, None, 1)):
        history = History()
        with_child(history, release)
        if acked is not None:
            history.ack_confirmed(P, acked)
        history.released(C, 0, 100, True, {P: GONE})
        violations, stats = properties.check_dependencies(history, faulty=True)
        assert len(violations) == expected, violations
        assert stats["children_failed"] == 1


def test_a_dependency_no_node_knows_is_excused_and_counted():
    for view, counter in ((LOST, "deps_lost_excused"), (FORGOTTEN, "deps_forgotten_excused")):
        history = History()
        with_child(history)
        history.released(C, 0, 100, False, {P: view})
        history.delivered(C, b"c", 0, 110)
        violations, stats = properties.check_dependencies(history, faulty=True)
        assert violations == [] and stats[counter] == 1
    history = History()
    with_child(history)
    history.released(C, 0, 100, False, {P: ACKED_COPY})  # acked, but by whom?
    history.delivered(C, b"c", 0, 110)
    assert len(dependency_violations(history)) == 1


def test_a_child_no_holder_failed_is_delivered_unless_its_copies_were_lost():
    history = History()
    with_child(history)
    history.ack_confirmed(P, 50)
    [violation] = dependency_violations(history)
    assert violation.startswith(f"never delivered: {C.decode()}") and "IFGONE fail" in violation
    history.copy_destroyed(C, 0, True, 60)  # its only holder crashed
    violations, stats = properties.check_dependencies(history, faulty=True)
    assert violations == [] and stats["children_lost"] == 1
    # (A lossless run excuses no crash.)
    assert len(properties.check_dependencies(history, True, excuse_crashes=False)[0]) == 1


def test_nothing_waits_at_the_end():
    sim = quiet_cluster(2)
    n0, _ = sim.processes
    parent = sim.admin(n0, [b"ADDJOB", b"qx", b"p", b"0", b"REPLICATE", b"1"])
    child = sim.admin(n0, [b"ADDJOB", b"q", b"c", b"0", b"AFTER", parent])
    assert isinstance(child, bytes) and properties.check_waits(sim.processes)
    assert sim.admin(n0, [b"FASTACK", parent]) == 1
    sim.loop.run_until(sim.loop.now + 3000)
    assert properties.check_waits(sim.processes) == []
    assert sim.admin(n0, [b"GETJOB", b"NOHANG", b"FROM", b"q"]) == [[b"q", child, b"c"]]


# Property 12 --------------------------------------------------------------------------


def test_claims_grow_with_every_delivery_without_faults():
    history = History()
    history.add_issued(b"j", 0, retry=1, delay=0)
    for node, time, claim in ((0, 10, 1), (1, 2000, 2), (0, 4000, 2)):
        history.delivered(b"J", b"j", node, time).claim = claim
    violations, stats = properties.check_claims(history, faulty=False, latency=4)
    assert violations == [
        "J delivered by n0 at 4000 with claim 2, after n1 delivered it at 2000 with 2"
    ]
    violations, stats = properties.check_claims(history, faulty=True, latency=4)
    assert violations == [] and stats["claims_repeated"] == 1 and stats["claims_delivered"] == 3


def test_deliveries_on_two_nodes_within_the_bus_latency_may_share_a_claim():
    # Found by seed 4356: both holders' retry timers fired together (their WILLQUEUEs
    # crossed), and each delivered the job before the other's CLAIM arrived.
    history = History()
    history.add_issued(b"j", 0, retry=1, delay=0)
    for node, time in ((0, 4048), (2, 4050)):
        history.delivered(b"J", b"j", node, time).claim = 3
    violations, stats = properties.check_claims(history, faulty=False, latency=4)
    assert violations == [] and stats["claims_concurrent"] == 1
    history.deliveries[b"J"][1].node = 0  # on one node, never
    assert len(properties.check_claims(history, faulty=False, latency=4)[0]) == 1


def test_a_claim_refused_as_stale_was_superseded():
    history = History()
    history.add_issued(b"j", 0, retry=1, delay=0)
    history.delivered(b"J", b"j", 0, 10).claim = 1
    history.stale_claims.append(StaleClaim(b"J", 1, 1, 100, b"ACKJOB"))
    [violation] = properties.check_claims(history, faulty=True)[0]
    assert violation == "ACKJOB J CLAIM 1 refused by n1 at 100, never superseded"
    history.delivered(b"J", b"j", 2, 90).claim = 2
    assert properties.check_claims(history, faulty=True)[0] == []


#: A formed cluster with no clients, watched as a coordination run is.
quiet_cluster = functools.partial(regressions.quiet_cluster, claim_rate=1.0)


def test_a_claim_that_goes_back_on_a_node_is_seen():
    sim = quiet_cluster(2)
    n0, n1 = sim.processes
    job_id = sim.admin(n0, [b"ADDJOB", b"q", b"j", b"0", b"REPLICATE", b"2", b"RETRY", b"1"])
    [[_, _, _, _, claim]] = sim.admin(n0, [b"GETJOB", b"WITHCLAIM", b"FROM", b"q"])
    assert claim == 1
    sim.history.deliveries[job_id] = []  # (the observer looks at the jobs delivered)
    sim.loop.run_until(sim.loop.now + 100)
    assert sim.claims_seen[1] == {job_id: 1}  # n1 heard of the claim
    assert n1.node is not None
    n1.node.jobs.get(job_id).extra.claim = 0  # type: ignore[union-attr]
    sim.observe(n1)
    assert sim.violations == [f"n1's claim of {job_id.decode()} went back from 1 to 0"]


# Property 13 --------------------------------------------------------------------------


def test_progress_logs_reach_a_holder_through_another_one():
    """n0 writes an entry that only n1 receives (nothing reaches n2) and crashes without
    an AOF: n1 passes it on to n2 once it can. Both logs must then match and hold it."""
    sim = quiet_cluster(3)
    n0, _, n2 = sim.processes
    add = [b"ADDJOB", b"q", b"j", b"0", b"REPLICATE", b"3", b"RETRY", b"30"]
    job_id = sim.admin(n0, add)
    assert isinstance(job_id, bytes)
    assert sim.admin(n0, [b"GETJOB", b"FROM", b"q"]) == [[b"q", job_id, b"j"]]
    sim.network.cut(0, 2)
    sim.network.cut(1, 2)
    assert sim.admin(n0, [b"WORKING", job_id, b"half done"]) == 30
    sim.history.progress.append(ProgressEntry(job_id, b"half done", 0, sim.loop.now))
    sim.loop.run_until(sim.loop.now + 100)
    sim.crash(n0)  # n1 holds the entry: it is not lost
    assert [e.lost for e in sim.history.progress] == [0]
    violations, _ = properties.check_progress(sim.processes, sim.history)
    assert len(violations) == 2  # n2's log differs, and lacks the entry
    sim.network.heal()
    sim.loop.run_until(sim.loop.now + 3000)
    violations, stats = properties.check_progress(sim.processes, sim.history)
    assert violations == [] and stats["progress_logs_checked"] == 1
    assert n2.node is not None and [t for _, _, t in n2.node.jobs.get(job_id).extra.log] == [  # type: ignore[union-attr]
        b"half done"
    ]
    # An entry a crash destroyed everywhere is excused; one that no holder has is not.
    sim.history.progress.append(ProgressEntry(job_id, b"never seen", 1, sim.loop.now))
    assert len(properties.check_progress(sim.processes, sim.history)[0]) == 1
    sim.history.progress[-1].lost = sim.loop.now
    assert properties.check_progress(sim.processes, sim.history)[0] == []
