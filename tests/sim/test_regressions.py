"""Seeds that once failed, kept forever, each with the bug it found.

A seed names a history only for the code that ran it: when the core or the
simulator changes how it consumes randomness, the same seed becomes another
history. So every seed here is replayed as a smoke test, and a core bug also
gets a scenario test that reproduces it directly, which does not depend on
the seed.

Bugs of the simulator itself (its model or its checks) are listed too; the
unit tests in ``test_simulator.py`` pin their fixes.
"""

from __future__ import annotations

import pytest

from disquette.core import messages as msg
from disquette.core import outcome
from disquette.core.job import ACKED, AFTER_FAILED, QUEUED
from disquette.sim import properties
from disquette.sim.clients import SimClient, Workload
from disquette.sim.process import NodeSettings, SimNode
from disquette.sim.runner import SimConfig, Simulation, config_for_seed

# name -> (seed, mode, what it found)
SEEDS: dict[str, tuple[int, str, str]] = {
    "nack_wakes_a_blocked_consumer_before_its_reply": (
        215,
        "normal",
        "simulator: a NACK re-queues the job and wakes a blocked consumer before the "
        "NACK's own reply returns; the permit for the redelivery must be granted when "
        "the consumer decides to NACK, not when the NACK replies",
    ),
    "lost_pong_after_restart_leaves_pfail_forever": (
        709,
        "normal",
        "simulator: the network lost single messages on live connections, which TCP "
        "never does; a restarted node (ping_sent == pong_received, both from "
        "nodes.conf) whose first PONG was lost never pinged again and kept PFAIL. "
        "A lost message now resets its connection, and partitions hold messages",
    ),
    "retry_timer_runs_from_queueing_not_delivery": (
        1010,
        "long",
        "simulator: Disque restarts a job's retry timer when it is queued, not when it "
        "is delivered, so a job that waited in its queue comes back right after a "
        "fetch; the duplicate rule now allows what the retry timer explains",
    ),
    "federated_job_queued_twice": (
        1355,
        "long",
        "simulator (and a Disque design property): a job moved by YOURJOBS is queued "
        "by the importer without QUEUED, and the exporter's retry timer queues its own "
        "copy; both deliver it, which the retry timer explains",
    ),
    "at_most_once_job_reloaded_from_the_aof": (
        123,
        "normal",
        "simulator: a RETRY 0 job reloaded from the AOF comes back active and is never "
        "queued again (reference 12.5); it may stay undelivered until its TTL",
    ),
    "at_most_once_job_lost_in_federation": (
        514,
        "normal",
        "simulator: a node answered NEEDJOBS while its link to the requester was down; "
        "the YOURJOBS was dropped and the RETRY 0 job deleted: at-most-once jobs "
        "promise nothing under faults",
    ),
    "async_job_replicated_externally_lost_with_its_repljobs": (
        5024,
        "long",
        "simulator: an ASYNC job added on a leaving node has no local copy; its "
        "fire-and-forget REPLJOBs were lost with their connections, and with them the "
        "job, without any crash: ASYNC promises no more under faults",
    ),
    "working_does_not_reach_a_federated_copy": (
        8045,
        "long",
        "simulator: WORKING reaches the holders the node knows, and a copy moved by "
        "YOURJOBS is not announced to them; the duplicate rule now trusts WORKING only "
        "when it reached every copy",
    ),
    "orphan_at_most_once_replica_waits_for_its_ttl": (
        8274,
        "long",
        "simulator: a leaving node's at-most-once ADDJOB failed (its GOTJOB was lost) "
        "and the replica, RETRY 0, is never queued nor collected before its TTL; under "
        "faults such copies are allowed to wait",
    ),
    "orphan_at_most_once_replica_after_faults": (
        8169,
        "long",
        "simulator: the same as the previous one, with crashes and partitions",
    ),
    "at_most_once_job_of_a_leaving_node": (
        909,
        "normal",
        "core (Disque's own bug, reference 15): an at-most-once job added by a leaving "
        "node is replicated externally and never queued anywhere. Seeds only show it "
        "with faults (leaving is one), where at-most-once jobs may be lost anyway, so "
        "test_at_most_once_job_added_by_a_leaving_node_is_delivered pins it",
    ),
    "rolling_restart_right_after_the_previous_one": (
        7,
        "rolling",
        "repair (simulator configuration): a node came back empty and the next holder "
        "went down 124 ms later; the copies lost with the first must be repaired while "
        "it is down, so the rolling runs use a repair delay short enough for FAIL "
        "detection plus the delay to fit in an outage",
    ),
    "copies_queued_apart_after_a_move_and_a_repair": (
        13,
        "rolling",
        "core (Disque's design; property 6): a job moved by YOURJOBS to a node whose "
        "exporter then crashed, and repaired onto another, was queued on both, each "
        "unknown to the other; queued copies were silent. Now a queued copy speaks up "
        "after failures, news of a holder spreads (HOLDERS) and the tie-break leaves "
        "one: test_copies_queued_apart_meet_and_one_stays_queued",
    ),
    "copies_queued_apart_one_knowing_the_other": (
        20,
        "rolling",
        "core (property 6): two queued copies where only one node knew the other held "
        "the job; the loser of the tie-break never heard the winner. A queued winner "
        "now answers: test_a_queued_winner_answers_so_the_loser_dequeues",
    ),
    "copies_queued_apart_without_repair": (
        4,
        "rolling-norepair",
        "core (property 6): the same with replica-repair no, where only restarts and "
        "federation leave the holders' lists apart",
    ),
    "dead_lettered_before_any_delivery": (
        5123,
        "features",
        "simulator: max-deliveries counts requeues by the retry timer, so a job queued "
        "on nodes no consumer polled was dead-lettered without ever being delivered from "
        "its queue; property 1 now counts a dead letter delivered (or lost with its last "
        "copy in a crash) as a delivery of its origin",
    ),
    "dedup_retry_finds_the_replica_of_a_crashed_addjob": (
        1251,
        "features",
        "core (design, open): an ADDJOB REPLICATE 3 DEDUP waiting for its copies lost "
        "its node in a crash; the retry on another node found the one replica made and "
        "answered its ID as a successful ADDJOB, with one copy, lost in the next crash. "
        "The simulator now holds a DEDUP hit to the copies it had (dedup_hits_short); "
        "test_a_dedup_hit_acknowledges_a_job_short_of_its_replicas pins it",
    ),
    "dedup_retry_finds_an_unreplicated_copy_after_a_crash": (
        4231,
        "features",
        "core (design, open): the same, under network faults and a leaving node",
    ),
    "dedup_resend_finds_the_orphan_of_a_failed_addjob": (
        4315,
        "features",
        "core (design, open): an ADDJOB REPLICATE 2 DEDUP timed out (-NOREPL) and its "
        "DELJOB to the replica was lost; the retry created a second job, and a later "
        "resend to the replica's node got the orphan's ID, a third answer with one copy",
    ),
    "async_job_crashed_right_after_its_reply": (
        45,
        "rolling",
        "simulator: an ASYNC job's node crashed 2 ms after answering, before its "
        "REPLJOBs left; no repair can save copies that were never made, so a lossless "
        "run still excuses the ASYNC job whose last copy a crash destroyed",
    ),
    "clock_estimate_without_a_sample": (
        6399,
        "skew",
        "core: a node whose clock stepped back while its first PING to a peer was out "
        "discarded the PONG's sample (a negative round trip) but kept the empty estimate "
        "it had made for it, shown as 0 +/- 0 ms (seeds 9803 and 10503 too). A peer is "
        "now measured from its first sample kept: "
        "test_a_discarded_first_sample_leaves_the_peer_unmeasured",
    ),
    "wait_keeps_a_job_released_elsewhere": (
        29,
        "coordination",
        "core (property 5): a job waiting for others stayed in its waits' job lists when "
        "another holder released it (QUEUED), when one dependency failed it while it "
        "waited for others, and when it was deleted while waiting, until the wait's next "
        "query (up to 16 s): deleted jobs kept alive. Dependencies.untrack now takes it "
        "out: test_a_job_released_elsewhere_leaves_no_wait_behind",
    ),
    "failed_job_loses_its_failure_in_the_aof": (
        114,
        "coordination",
        "core: the designated holder failed a job whose dependency expired (IFGONE fail, "
        "DELAY 1: failed at its requeue time), wrote it to the AOF and crashed; the "
        "record kept no AFTER field once the list was empty, so AFTER_FAILED was lost "
        "and the restarted node queued and delivered the failed job. The serializer now "
        "keeps the flag: test_a_job_failed_by_its_dependency_stays_failed_after_a_restart",
    ),
    "progress_log_reloaded_from_the_aof_never_sent": (
        406,
        "coordination",
        "core (property 13): a node wrote a progress entry while a holder was down, then "
        "crashed; the AOF kept the log but not who had still to confirm it, so the "
        "holder never got it. A job reloaded with a log is now sent to its holders: "
        "test_a_progress_log_reloaded_from_the_aof_reaches_the_other_holders",
    ),
    "progress_log_never_sent_to_a_holder_learned_later": (
        383,
        "coordination",
        "core (property 13): an ASYNC job's AOF record names no replica, so after a "
        "restart its node believed it was the only holder and wrote its progress log for "
        "itself; it learned of the other holders later (WILLQUEUE), but a log is sent "
        "when it grows only. Holders learned of now get it: "
        "test_a_holder_learned_after_a_log_grew_is_sent_the_log",
    ),
    "dependency_settled_before_its_evidence_crashed": (
        1899,
        "coordination",
        "simulator (property 11 too strict): n2 expired its copy of a dependency (the "
        "copies' TTLs end up to a second apart), told the watcher n1 it was gone, and "
        "crashed; n1 released the child later, when its last dependency settled, while "
        "n0 still held its copy: the view of each dependency is now taken when the "
        "releasing holder settles it, not at the release "
        "(test_a_dependency_is_judged_as_the_releasing_holder_settled_it)",
    ),
    "claims_of_a_job_requeued_by_two_holders_at_once": (
        4356,
        "coordination",
        "simulator (property 12 too strict; the core's claim docstring overstates): "
        "without faults, both holders' retry timers fired within 2 ms, their WILLQUEUEs "
        "crossed, and each delivered the job to a blocked consumer before the other's "
        "CLAIM arrived: two deliveries with claim 3. A per-job Lamport clock cannot order "
        "deliveries closer than the bus latency; they are now counted as concurrent "
        "(test_deliveries_on_two_nodes_within_the_bus_latency_may_share_a_claim)",
    ),
    "dependency_settled_in_a_previous_life": (
        4419,
        "coordination",
        "simulator (property 11 too strict): n1 failed a child, crashed without an AOF, "
        "got the child back from another holder and released it in its next life (the "
        "only tombstone of the dependency had died with it): settled views are now kept "
        "per life of a node",
    ),
    "dependency_failed_then_lost_in_a_crash": (
        51,
        "coordination",
        "simulator (property 11 too strict): a dependency that failed (its tombstone "
        "kept) and then lost its last copy in a crash was counted as acknowledged, so "
        "its IFGONE fail child, rightly failed, was required to be delivered; failures "
        "are now observed and judged by what the dependencies looked like then",
    ),
    "damaged_record_still_listed_in_its_queue": (
        8,
        "flow",
        "core (property 16): a record found damaged when SHOW read it left the index but "
        "stayed listed in its queue's spilled jobs, so QLEN counted a job the node no "
        "longer held; it now leaves the queue at once "
        "(tests/unit/test_spill.py: test_a_damaged_record_drops_its_job_only_and_is_counted)",
    ),
    "needjobs_from_a_queue_whose_jobs_on_disk_are_damaged": (
        16,
        "flow",
        "core: NEEDJOBS (and GETJOB) fetched from a queue whose next jobs on disk all had "
        "damaged records and popped from an empty list; a fetch now says the queue "
        "turned out empty (tests/unit/test_spill.py: "
        "test_a_queue_whose_jobs_on_disk_are_all_damaged_serves_what_is_left; seed 25 too)",
    ),
    "repair_pass_loads_back_healthy_spilled_jobs": (
        959,
        "flow",
        "core (property 17): a node restarted empty (a new data generation) made every "
        "spilled record's epoch stale, and the repair pass loaded each spilled job back "
        "to examine it, healthy or not; a replica with no repair to make stayed in memory "
        "until the spill sweep's next round, 1.6 s over its level. The pass now judges a "
        "spilled job on its copy read from disk and loads back only one it repairs "
        "(tests/unit/test_repair.py: "
        "test_a_pass_loads_back_only_the_spilled_jobs_this_node_repairs)",
    ),
    "restarted_node_fires_a_tick_its_peers_fired": (
        238,
        "cron",
        "core: a node restarted among peers fired a tick they had fired while its links were "
        "not up (two jobs for one tick, near the crash: counted, not a violation); a node "
        "now holds back its first CATCHUP ms of ticks (tests/unit/test_cron.py: "
        "test_a_node_restarted_among_peers_does_not_fire_what_they_fired_before_its_links, "
        "which reproduces it: the seed's history changed when cron runs began setting "
        "their schedules after the nodes' own hold-back)",
    ),
    "cancellation_lost_with_its_outcome": (
        29,
        "outcomes",
        "core: a CANCEL's OUTCOME was lost with its connection and the GC's SETACK came "
        "later, so the holder acknowledged its copy as if a consumer had and its waiter "
        "heard acked; every SETACK now follows the outcome kept "
        "(test_a_cancellation_whose_outcome_was_lost_reaches_the_holder_with_its_ack; "
        "seed 7: a result lost the same way)",
    ),
    "cancelled_job_moved_to_a_node_that_knew": (
        19,
        "outcomes",
        "core: the only holder of a cancelled job, cut off when it was cancelled, moved "
        "it by YOURJOBS to a node that knew, which queued and delivered it; such a copy "
        "is now acknowledged (test_a_copy_moved_to_a_node_that_knows_it_cancelled_is_"
        "not_queued; seed 75 too)",
    ),
    "postponed_requeue_missed_by_a_new_replica": (
        1242,
        "outcomes",
        "core: a replica made by repair after a NACK DELAY (and a holder cut off then) "
        "queued the job on its own timer, and its QUEUED cut the postponing node's delay "
        "short; that node now answers WILLQUEUE and QUEUED with the delay left "
        "(test_a_postponed_requeue_holds_back_a_holder_that_missed_it)",
    ),
    "postponed_copy_lost_in_a_crash": (
        2651,
        "outcomes",
        "simulator (property 20 too strict): the NACKing node crashed without an AOF and "
        "lost its postponed copy; back, repair gave it a fresh one that requeued on its "
        "own timer. A later life of that node counts as another node",
    ),
    "late_enqueue_after_a_nack_delay": (
        13767,
        "outcomes",
        "core: a duplicated ENQUEUE (a leaving node's handover) arrived after the job was "
        "delivered and NACKed with a DELAY, and queued it at once; an ENQUEUE for a job "
        "postponed here is now ignored "
        "(test_a_late_enqueue_does_not_cut_a_postponed_requeue_short)",
    ),
    "two_postponements_apart": (
        25063,
        "outcomes",
        "core: a POSTPONE with a shorter delay, held by a partition, reached the node that "
        "had NACKed the job later with a longer one, which gave its own delay up and "
        "stopped holding back a repaired replica; both now keep the later end "
        "(test_two_postponements_keep_the_later_end)",
    ),
    "working_elsewhere_during_a_nack_delay": (
        31291,
        "outcomes",
        "core: a WORKING from a holder cut off during a NACK DELAY reached the node that "
        "postponed the job, which gave its delay up for a retry period and queued the "
        "job early; it now only pushes the end later "
        "(test_working_elsewhere_does_not_cut_a_postponed_requeue_short)",
    ),
    "second_nack_without_a_delay": (
        7687,
        "outcomes",
        "simulator (property 20 too strict): a consumer holding an earlier delivery "
        "NACKed the job again, without a delay, while it was postponed; it was queued at "
        "once, as a later NACK decides (test_outcomes.py: test_a_later_nack_decides_from_"
        "then_on)",
    ),
    "postponed_job_moved_back_to_the_postponing_node": (
        4411,
        "outcomes",
        "core: a holder that missed a POSTPONE (and the answer to its QUEUED) moved its "
        "queued copy by YOURJOBS to the node that postponed the job, which queued it "
        "before the delay ended; it now keeps its delay "
        "(test_a_postponed_job_moved_back_by_federation_stays_postponed)",
    ),
    "job_acknowledged_while_its_addjob_waits": (
        4163,
        "outcomes",
        "core (property 5): a job whose ADDJOB waited for its copies was delivered from a "
        "replica and acknowledged on the ADDJOB's node, which deleted it while the "
        "client still pointed at it until its timeout; the ADDJOB now gets the ID "
        "(test_a_job_acknowledged_while_its_addjob_waits_answers_the_addjob)",
    ),
}


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed(name):
    seed, mode, _found = SEEDS[name]
    result = Simulation(config_for_seed(seed, mode)).run()
    assert result.ok, result.report()
    assert not result.stats.get("cron_ticks_duplicated"), result.report()


def quiet_cluster(nodes: int, appendonly: bool = False) -> Simulation:
    """A formed cluster with no clients and no faults, for scenario tests."""
    settings = NodeSettings(appendonly=appendonly)
    workload = Workload(producers=0, consumers=0)
    sim = Simulation(SimConfig(seed=1, nodes=nodes, workload=workload, settings=settings))
    for p in sim.processes:
        p.start()
    sim.join()
    assert not sim.violations
    return sim


def test_at_most_once_job_added_by_a_leaving_node_is_delivered():
    # Found by seed 909: Disque never queued such a job anywhere (reference 15); the
    # replica that receives ENQUEUE now queues it once.
    sim = quiet_cluster(2)
    leaving, other = sim.processes
    assert sim.admin(leaving, [b"CLUSTER", b"LEAVING", b"yes"]) == b"OK"
    sim.loop.run_until(sim.loop.now + 2000)  # the flag reaches the other node
    job_id = sim.admin(leaving, [b"ADDJOB", b"q", b"x", b"0", b"REPLICATE", b"1", b"RETRY", b"0"])
    sim.loop.run_until(sim.loop.now + 1000)
    assert isinstance(job_id, bytes)
    reply = sim.admin(other, [b"GETJOB", b"NOHANG", b"FROM", b"q"])
    assert reply == [[b"q", job_id, b"x"]]


def test_a_dedup_hit_answers_a_job_short_of_its_replicas():
    # The documented limit (docs/queues.md; seeds 1251, 4231, 4315): n0 waits for its
    # third copy (n2 is cut off) and crashes: n1 holds the only replica. The retry on
    # n1 is answered with that job's ID, although the job has one live copy where the
    # retry asked for three (a fresh ADDJOB could not get three: two nodes are up).
    sim = quiet_cluster(3)
    n0, n1, n2 = sim.processes
    sim.network.partition([[0, 1], [2]])
    argv = [b"ADDJOB", b"q", b"x", b"5000", b"REPLICATE", b"3", b"DEDUP", b"k"]
    client = SimClient(n0, "p", lambda _client, _value: None)
    n0.connect_client(client, lambda: None)
    assert n0.execute(client, argv) is None  # waiting for its copies
    sim.loop.run_until(sim.loop.now + 50)
    sim.crash(n0)
    sim.network.heal()
    sim.loop.run_until(sim.loop.now + 500)
    reply = sim.admin(n1, argv)
    copies = sum(
        1
        for p in (n1, n2)
        if p.node is not None
        and (job := p.node.jobs.get(reply if isinstance(reply, bytes) else b"")) is not None
        and job.state != ACKED
    )
    assert isinstance(reply, bytes) and copies == 1, (reply, copies)


def test_a_dedup_key_stays_findable_while_a_job_with_it_is_held():
    # Found by this scenario: Node.delete_job used to drop the index entry of a key
    # while another job held with that key stayed unindexed.
    # n1 holds J1 (key k); J2 is added with the same key on n0, which holds no copy (the
    # documented limit), and replicated to n1, whose index keeps J1. J1 is acknowledged
    # and collected: n1 still holds J2, and an ADDJOB DEDUP k there must answer J2.
    sim = quiet_cluster(3)
    n0, n1, _ = sim.processes
    add = [b"ADDJOB", b"q", b"x", b"0", b"REPLICATE"]
    j1 = sim.admin(n1, [*add, b"1", b"DEDUP", b"k"])
    j2 = sim.admin(n0, [*add, b"3", b"DEDUP", b"k"])
    assert isinstance(j1, bytes) and isinstance(j2, bytes) and j1 != j2
    assert sim.admin(n1, [b"ACKJOB", j1]) == 1
    sim.loop.run_until(sim.loop.now + 3000)
    assert n1.node is not None and [job.id for job in n1.node.jobs.values()] == [j2]
    assert sim.admin(n1, [*add, b"1", b"DEDUP", b"k"]) == j2


def log_texts(sim: Simulation, index: int, job_id: bytes) -> list[bytes]:
    node = sim.processes[index].node
    job = node.jobs.get(job_id) if node is not None else None
    log = job.extra.log if job is not None and job.extra is not None else None
    return [text for _, _, text in log or ()]


def test_a_job_released_elsewhere_leaves_no_wait_behind():
    # Found by seed 29 (coordination). C waits on n0 and n1 for P, which nobody takes.
    # ENQUEUE releases C on n0: n0's wait for P goes with it. C is acknowledged and
    # collected: n1, where it was still waiting, keeps no wait (nor C) either.
    sim = quiet_cluster(2)
    n0, n1 = sim.processes
    parent = sim.admin(n0, [b"ADDJOB", b"qx", b"p", b"0", b"REPLICATE", b"1"])
    add = [b"ADDJOB", b"q", b"c", b"0", b"REPLICATE", b"2", b"RETRY", b"1", b"AFTER", parent]
    child = sim.admin(n0, add)
    sim.loop.run_until(sim.loop.now + 200)
    assert n0.node is not None and n1.node is not None
    assert parent in n0.node.deps.waits and parent in n1.node.deps.waits
    assert sim.admin(n0, [b"ENQUEUE", child]) == 1
    assert parent not in n0.node.deps.waits
    assert sim.admin(n0, [b"GETJOB", b"NOHANG", b"FROM", b"q"]) == [[b"q", child, b"c"]]
    assert sim.admin(n0, [b"ACKJOB", child]) == 1
    sim.loop.run_until(sim.loop.now + 300)
    assert n1.node.jobs.get(child) is None and not n1.node.deps.waits
    assert properties.check_references(sim.processes) == []


def test_a_job_failed_by_its_dependency_stays_failed_after_a_restart():
    # Found by seed 114 (coordination). P expires unacknowledged; C (IFGONE fail, DELAY
    # 5) is failed by its designated holder at its requeue time. The node crashes
    # before that, with the AOF: the reloaded C must still be failed, never queued.
    sim = quiet_cluster(2, appendonly=True)
    n0 = sim.processes[0]
    parent = sim.admin(n0, [b"ADDJOB", b"qx", b"p", b"0", b"REPLICATE", b"1", b"TTL", b"1"])
    add = [b"ADDJOB", b"q", b"c", b"0", b"REPLICATE", b"1", b"RETRY", b"1", b"DELAY", b"5"]
    child = sim.admin(n0, [*add, b"AFTER", parent])
    sim.loop.run_until(sim.loop.now + 2500)
    assert n0.node is not None and n0.node.jobs.get(parent) is None
    job = n0.node.jobs.get(child)
    assert job is not None and not job.waiting and job.extra.after_flags & AFTER_FAILED  # type: ignore[union-attr]
    sim.crash(n0)
    n0.start()
    sim.loop.run_until(sim.loop.now + 10_000)
    assert sim.admin(n0, [b"GETJOB", b"NOHANG", b"FROM", b"q"]) is None
    assert n0.node is not None and n0.node.jobs.get(child) is None


def test_a_progress_log_reloaded_from_the_aof_reaches_the_other_holders():
    # Found by seed 406 (coordination). n0 writes an entry while n1 is down, and
    # crashes; both come back from their AOFs: n0 must send n1 the log it kept.
    sim = quiet_cluster(2, appendonly=True)
    n0, n1 = sim.processes
    job_id = sim.admin(n0, [b"ADDJOB", b"q", b"j", b"0", b"REPLICATE", b"2", b"RETRY", b"30"])
    assert sim.admin(n0, [b"GETJOB", b"FROM", b"q"]) == [[b"q", job_id, b"j"]]
    sim.crash(n1)
    assert sim.admin(n0, [b"WORKING", job_id, b"step 1"]) == 30
    sim.loop.run_until(sim.loop.now + 100)
    sim.crash(n0)
    n0.start()
    n1.start()
    sim.loop.run_until(sim.loop.now + 5000)
    assert log_texts(sim, 0, job_id) == log_texts(sim, 1, job_id) == [b"step 1"]


def test_a_holder_learned_after_a_log_grew_is_sent_the_log():
    # Found by seed 383 (coordination). An ASYNC job's AOF record is written before its
    # replica is made: reloaded, n0 believes it is the only holder and writes its log
    # for itself. n1's copy comes up for requeue and says so (WILLQUEUE): n0 learns
    # of it, and must send it the log.
    sim = quiet_cluster(2, appendonly=True)
    n0, n1 = sim.processes
    add = [b"ADDJOB", b"q", b"j", b"0", b"REPLICATE", b"2", b"RETRY", b"3", b"ASYNC"]
    job_id = sim.admin(n0, add)
    sim.loop.run_until(sim.loop.now + 50)
    sim.crash(n0)
    n0.start()
    assert n0.node is not None and n0.node.jobs.get(job_id).nodes_delivered == (n0.node_id,)  # type: ignore[union-attr]
    assert sim.admin(n0, [b"ENQUEUE", job_id]) == 1
    assert sim.admin(n0, [b"GETJOB", b"FROM", b"q"]) == [[b"q", job_id, b"j"]]
    assert sim.admin(n0, [b"WORKING", job_id, b"step 1"]) == 3
    sim.loop.run_until(sim.loop.now + 6000)
    assert n1.node is not None and n1.node_id in n0.node.jobs.get(job_id).nodes_delivered  # type: ignore[union-attr]
    assert log_texts(sim, 1, job_id) == [b"step 1"]


def cut_off(sim: Simulation, groups: list[list[int]]) -> None:
    """Partition the cluster and break every connection: what is sent across is lost
    (messages held on an open connection would arrive after the heal)."""
    sim.network.partition(groups)
    for conn in list(sim.network.connections.values()):
        sim.network.break_link(conn)


def test_a_cancellation_whose_outcome_was_lost_reaches_the_holder_with_its_ack():
    # Found by seed 29 (outcomes). n0 cancels J while cut off from n1: its OUTCOME is
    # lost, and the GC's SETACK reaches n1 later. n1 acknowledged its copy as if a
    # consumer had, so a WAITJOB there heard "acked"; the outcome now goes before
    # every SETACK, so the holder knows what the acknowledgement was.
    sim = quiet_cluster(2)
    n0, n1 = sim.processes
    job_id = sim.admin(n0, [b"ADDJOB", b"q", b"x", b"0", b"REPLICATE", b"2", b"RETRY", b"30"])
    seen: list[tuple[bool, bool]] = []  # n1 after each of its events: (acked, cancelled)

    def observe(process: SimNode) -> None:
        node = process.node
        job = node.jobs.get(job_id) if node is not None else None
        if node is not None and job is not None:
            seen.append((job.state == ACKED, node.outcomes.is_cancelled(job_id)))

    n1.observer = observe
    cut_off(sim, [[0], [1]])
    assert sim.admin(n0, [b"CANCEL", job_id]) == 1
    sim.loop.run_until(sim.loop.now + 500)
    sim.network.heal()
    sim.loop.run_until(sim.loop.now + 5000)
    assert (True, True) in seen and (True, False) not in seen
    assert n1.node is not None and n1.node.jobs.get(job_id) is None


def test_a_copy_moved_to_a_node_that_knows_it_cancelled_is_not_queued():
    # Found by seed 19 (outcomes). n1 holds the only copy of J and never heard of its
    # cancellation; n0 did. NEEDJOBS from n0 makes n1 move J there (YOURJOBS): n0
    # queued and delivered it. It now acknowledges it instead, and its GC tells n1.
    sim = quiet_cluster(2)
    n0, n1 = sim.processes
    job_id = sim.admin(n1, [b"ADDJOB", b"q", b"x", b"0", b"REPLICATE", b"1", b"RETRY", b"30"])
    assert isinstance(job_id, bytes) and n0.node is not None and n1.node is not None
    n0.node.outcomes.record(job_id, outcome.CANCELLED, None)  # (its OUTCOME to n1 was lost)
    assert sim.admin(n0, [b"GETJOB", b"TIMEOUT", b"500", b"FROM", b"q"]) is None
    sim.loop.run_until(sim.loop.now + 5000)
    assert n0.node.jobs.get(job_id) is None and n1.node.jobs.get(job_id) is None
    assert n1.node.outcomes.is_cancelled(job_id)


def taken_on_n0(sim: Simulation, retry: bytes) -> bytes:
    """Job x (REPLICATE 2, RETRY ``retry``) added and delivered on n0 of two nodes."""
    n0 = sim.processes[0]
    job_id = sim.admin(n0, [b"ADDJOB", b"q", b"x", b"0", b"REPLICATE", b"2", b"RETRY", retry])
    assert isinstance(job_id, bytes)
    assert sim.admin(n0, [b"GETJOB", b"FROM", b"q"]) == [[b"q", job_id, b"x"]]
    return job_id


def taken_on_both(sim: Simulation) -> bytes:
    """Job x (REPLICATE 2, RETRY 1) delivered on n0, then on n1 (ENQUEUE there)."""
    n1 = sim.processes[1]
    job_id = taken_on_n0(sim, b"1")
    assert sim.admin(n1, [b"ENQUEUE", job_id]) == 1
    assert sim.admin(n1, [b"GETJOB", b"NOHANG", b"FROM", b"q"]) == [[b"q", job_id, b"x"]]
    return job_id


def nack_for_8s(sim: Simulation, job_id: bytes) -> int:
    """NACK job x on n0 with DELAY 8: when."""
    nacked = sim.loop.now
    assert sim.admin(sim.processes[0], [b"NACK", job_id, b"DELAY", b"8"]) == 1
    return nacked


def queued_nowhere_until(sim: Simulation, job_id: bytes, until: int) -> None:
    """No node holds the job queued, looked at every 250 ms until ``until``."""
    while sim.loop.now < until:
        sim.loop.run_until(sim.loop.now + 250)
        for p in sim.processes:
            assert p.node is not None and p.node.jobs.get(job_id).state != QUEUED  # type: ignore[union-attr]


def delivered_after_the_delay(sim: Simulation, job_id: bytes, nacked: int) -> None:
    """Job x, NACKed with DELAY 8 at ``nacked``, is delivered again once it ends (and
    a retry period, for a holder that heard of it late)."""
    sim.loop.run_until(nacked + 11_000)
    got = [sim.admin(p, [b"GETJOB", b"NOHANG", b"FROM", b"q"]) for p in sim.processes]
    assert [[b"q", job_id, b"x"]] in got


def test_a_postponed_requeue_holds_back_a_holder_that_missed_it():
    # Found by seed 1242 (outcomes). n0 postpones J by NACK DELAY while n1 is cut off:
    # n1's retry timer queued its copy long before the delay ended (and, on n0, the
    # QUEUED that followed cut the delay short). n0 now answers n1's WILLQUEUE with
    # the delay left, and keeps its own.
    sim = quiet_cluster(2)
    job_id = taken_on_n0(sim, b"1")
    cut_off(sim, [[0], [1]])
    nacked = nack_for_8s(sim, job_id)
    sim.loop.run_until(sim.loop.now + 300)
    sim.network.heal()
    queued_nowhere_until(sim, job_id, nacked + 7500)  # (n1's timer comes due meanwhile)
    delivered_after_the_delay(sim, job_id, nacked)


def test_a_postponed_job_moved_back_by_federation_stays_postponed():
    # Found by seed 4411 (outcomes). n1 missed n0's POSTPONE and queued its copy (here:
    # ENQUEUE), and NEEDJOBS from n0 made n1 move that copy to n0 (YOURJOBS) before
    # n0's answer (the delay left) reached n1: n0, the postponing node itself, queued
    # and delivered it long before the delay ended. It now keeps its delay.
    sim = quiet_cluster(2)
    n0, n1 = sim.processes
    job_id = taken_on_n0(sim, b"30")
    nacked = nack_for_8s(sim, job_id)
    sim.loop.run_until(nacked + 100)
    assert sim.admin(n1, [b"ENQUEUE", job_id]) == 1
    assert sim.admin(n0, [b"GETJOB", b"TIMEOUT", b"1000", b"FROM", b"q"]) is None
    assert n0.node is not None and n0.node.jobs.get(job_id).state != QUEUED  # type: ignore[union-attr]
    delivered_after_the_delay(sim, job_id, nacked)


def test_a_job_acknowledged_while_its_addjob_waits_answers_the_addjob():
    # Found by seed 4163 (outcomes). n1's ADDJOB REPLICATE 3 waits for n2 (cut off);
    # n0's copy comes up for requeue, is delivered and acknowledged on n1: n1 deleted
    # the job while the ADDJOB's client still pointed at it (until its timeout). The
    # ADDJOB now gets the ID, as when a SETACK confirms a copy.
    sim = quiet_cluster(3)
    n0, n1, _ = sim.processes
    cut_off(sim, [[0, 1], [2]])
    sim.loop.run_until(sim.loop.now + 300)
    answers: list[object] = []
    producer = SimClient(n1, "p", lambda _client, value: answers.append(value))
    n1.connect_client(producer, lambda: None)
    add = [b"ADDJOB", b"q", b"x", b"20000", b"REPLICATE", b"3", b"RETRY", b"1"]
    assert n1.execute(producer, add) is None
    sim.loop.run_until(sim.loop.now + 2000)  # n0's copy is queued by its retry timer
    [[_, job_id, _]] = sim.admin(n0, [b"GETJOB", b"NOHANG", b"FROM", b"q"])
    assert sim.admin(n1, [b"ACKJOB", job_id]) == 1
    assert answers == [job_id] and producer.block_job is None
    sim.network.heal()
    sim.loop.run_until(sim.loop.now + 5000)
    assert n1.node is not None and n1.node.jobs.get(job_id) is None
    assert properties.check_references(sim.processes) == []


def test_a_late_enqueue_does_not_cut_a_postponed_requeue_short():
    # Found by seed 13767 (outcomes). A leaving node handed its job over with ENQUEUE,
    # which the network duplicated; the job was delivered and NACKed with a DELAY, and
    # the second ENQUEUE queued it at once. An ENQUEUE for a job postponed here is
    # late (the handover came before the delivery): it is ignored.
    sim = quiet_cluster(2)
    n0, n1 = sim.processes
    job_id = taken_on_n0(sim, b"30")
    nacked = nack_for_8s(sim, job_id)
    node = n0.node
    assert node is not None
    node.message_handlers[msg.ENQUEUE](node, n1.node_id, (msg.ENQUEUE, job_id, 0))
    assert node.jobs.get(job_id).state != QUEUED  # type: ignore[union-attr]
    assert sim.admin(n0, [b"GETJOB", b"NOHANG", b"FROM", b"q"]) is None
    delivered_after_the_delay(sim, job_id, nacked)


def test_two_postponements_keep_the_later_end():
    # Found by seed 25063 (outcomes). The job was delivered on n0 and n1; n1 NACKed it
    # with a short DELAY, n0 later with a long one, and n1's POSTPONE, held by a
    # partition, reached n0 after its own NACK: n0 gave up its delay for n1's shorter
    # one, stopped holding back the other holders, and a copy came back early. n0 now
    # keeps the later end.
    sim = quiet_cluster(2)
    n1 = sim.processes[1]
    job_id = taken_on_both(sim)
    sim.network.partition([[0], [1]])  # (messages held, delivered at the heal)
    assert sim.admin(n1, [b"NACK", job_id, b"DELAY", b"1"]) == 1
    nacked = nack_for_8s(sim, job_id)
    sim.loop.run_until(nacked + 300)
    sim.network.heal()
    queued_nowhere_until(sim, job_id, nacked + 7500)
    delivered_after_the_delay(sim, job_id, nacked)


def test_working_elsewhere_does_not_cut_a_postponed_requeue_short():
    # Found by seed 31291 (outcomes). n0 NACKed the job with a DELAY while a consumer
    # on n1 (which had delivered it too, cut off) worked on it: its WORKING reached
    # n0, which gave its delay up for a retry period from then, and queued the job
    # early. A WORKING now only pushes a postponed requeue's end later.
    sim = quiet_cluster(2)
    n1 = sim.processes[1]
    job_id = taken_on_both(sim)
    nacked = nack_for_8s(sim, job_id)
    sim.loop.run_until(nacked + 100)
    assert sim.admin(n1, [b"WORKING", job_id]) == 1
    queued_nowhere_until(sim, job_id, nacked + 7500)
    delivered_after_the_delay(sim, job_id, nacked)
