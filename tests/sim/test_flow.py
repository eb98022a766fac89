"""The flow-to-disk runs: jobs spilled to a simulated disk and loaded back, under
disk faults, properties 14 to 17.

``DISQUETTE_SIM_FLOW`` seeds (default 1000, about 45 s on two cores; the command
line runs more: ``python -m disquette.sim --seed 0 --count 5000 --flow-to-disk``)
run two to four nodes spilling every job past a level of a few jobs in memory, with a backlog that
builds and drains, priorities, long retries and delays, NACKs and an inspector
(QPEEK, SHOW, JSCAN), under any fault schedule plus write failures, corrupted
records and spill logs torn at crashes. The other tests show that each check fails
when it should, on hand-made histories and on a small cluster.
"""

from __future__ import annotations

import os

from disquette.sim import properties
from disquette.sim.batch import feature_totals, run_many
from disquette.sim.clients import Workload
from disquette.sim.history import History
from disquette.sim.process import SPILL_OFF, NodeSettings, SimNode, SpillSettings
from disquette.sim.runner import SimConfig, Simulation, config_for_seed, run_seed
from tests.sim.test_simulation import FIRST, failures

FLOW = int(os.environ.get("DISQUETTE_SIM_FLOW", "1000"))


def test_flow_to_disk_keeps_the_properties():
    """Properties 1 to 6 and 14 to 17 over the seed range; the totals printed are the
    counts the runs report (jobs spilled and loaded back, read-ahead, damaged records
    read, compactions, write failures, corruptions and the jobs they cost, memory
    checks, jobs the inspector read from disk)."""
    results = run_many(range(FIRST, FIRST + FLOW), "flow")
    print(f"\nflow to disk over {FLOW} seeds: {feature_totals(results, properties.FLOW_STATS)}")
    assert all(r.ok for r in results), failures(results)

    def total(name: str) -> int:
        return sum(r.stats[name] for r in results)

    # The runs exercise what they check.
    assert total("jobs_spilled") > 20 * FLOW and total("jobs_loaded") > 20 * FLOW
    assert total("readahead_batches") > FLOW and total("spill_compactions") > FLOW // 10
    assert total("records_corrupted") > FLOW // 2 and total("spill_read_errors") > FLOW // 4
    assert total("spill_write_failures") > FLOW // 2 and total("memory_checks") > 50 * FLOW
    assert min(total("qpeek_jobs"), total("show_jobs"), total("jscan_jobs")) > FLOW


def test_a_flow_seed_replays_the_same_history():
    for seed in (0, 1, 2, 3, 4):  # one of each fault kind
        first, second = run_seed(seed, "flow"), run_seed(seed, "flow")
        assert first.digest == second.digest and first.stats == second.stats
    assert config_for_seed(7, "flow").replay == "--seed 7 --flow-to-disk"


def test_a_job_loaded_back_between_two_ticks_is_a_new_stay_in_memory():
    """Seed 959: a replica spilled at 1759 ms, loaded back at 1800 by the repair scan (a
    holder had restarted empty), spilled again at the sweep's next round; property
    17's watch, which saw the job in memory at every tick, had counted from 1100."""
    result = run_seed(959, "flow")
    assert result.ok, failures([result])


# Properties 14 and 15 on hand-made histories ----------------------------------------


def test_a_body_must_be_the_one_its_job_was_added_with():
    history = History()
    history.add_issued(b"one", 0, retry=1, delay=0)
    history.add_issued(b"two", 0, retry=1, delay=0)
    assert history.note_body(b"A", b"one", "ADDJOB on n0", 1)
    assert history.note_body(b"A", b"one", "GETJOB on n1", 2)
    assert properties.check_bodies(history) == []
    assert not history.note_body(b"A", b"two", "GETJOB on n1", 3)  # another body
    assert not history.note_body(b"B", b"one", "SHOW on n0", 4)  # another job's body
    assert not history.note_body(b"C", b"three", "QPEEK on n2", 5)  # never sent
    violations = properties.check_bodies(history)
    assert len(violations) == 3
    assert "its body is b'one'" in violations[0]
    assert "that body is A's" in violations[1]
    assert "no ADDJOB sent that body" in violations[2]


# On a small cluster whose node 0 spills ------------------------------------------------


def spilling_cluster(level: int = 0) -> tuple[Simulation, SimNode]:
    """Two formed nodes with no clients and no faults, flow to disk on past ``level``
    jobs in memory (windows of one job)."""
    settings = NodeSettings(spill=SpillSettings(level=level, window=1))
    workload = Workload(producers=0, consumers=0)
    sim = Simulation(SimConfig(seed=1, nodes=2, workload=workload, settings=settings))
    for p in sim.processes:
        p.start()
    sim.join()
    assert not sim.violations
    return sim, sim.processes[0]


def add(sim: Simulation, node: SimNode, count: int, *options: bytes) -> list[bytes]:
    ids = []
    for i in range(count):
        argv = [b"ADDJOB", b"q", b"body %d" % i, b"0", b"REPLICATE", b"1", *options]
        job_id = sim.admin(node, argv)
        assert isinstance(job_id, bytes)
        ids.append(job_id)
    sim.loop.run_until(sim.loop.now + 500)  # a few cron ticks: the backlog spills
    return ids


def test_qpeek_out_of_getjob_order_is_a_violation():
    sim, n0 = spilling_cluster()
    ids = add(sim, n0, 6)
    assert n0.node is not None and n0.node.spill.count >= 4  # read from disk, too
    assert properties.peek_out_of_order(n0, ids, reverse=False) is None
    assert properties.peek_out_of_order(n0, ids[::-1], reverse=True) is None
    problem = properties.peek_out_of_order(n0, [ids[1], ids[0], *ids[2:]], reverse=False)
    assert problem is not None and "QPEEK on n0 listed" in problem


def test_a_getjob_that_skips_the_head_on_disk_is_a_violation():
    sim, n0 = spilling_cluster()
    ids = add(sim, n0, 6)
    node = n0.node
    assert node is not None
    queue = node.queues.get(b"q")
    assert queue is not None and queue.spilled is not None
    # Served the head: nothing left comes before it.
    job = node.fetch(queue, node.clock())
    assert job is not None and job.id == ids[0]
    assert properties.served_out_of_order(n0, b"q", job.id) is None
    # A later job, as if the head (on disk) had been skipped.
    late = add(sim, n0, 1)[0]
    assert n0.in_memory(late) is not None and queue.spilled is not None
    problem = properties.served_out_of_order(n0, b"q", late)
    assert problem is not None and "before a job on disk" in problem


def test_the_spill_index_check_finds_a_queued_job_no_queue_lists():
    sim, n0 = spilling_cluster()
    add(sim, n0, 6)
    assert properties.check_spill_index(sim.processes) == []
    node = n0.node
    assert node is not None
    queue = node.queues.get(b"q")
    assert queue is not None and queue.spilled is not None
    level = queue.spilled.top_level()
    queue.spilled.pop_front(level, 1)  # the queue forgets its first job on disk
    violations = properties.check_spill_index(sim.processes)
    assert len(violations) == 1 and "queued on disk but in no queue" in violations[0]


def test_the_memory_watch_finds_a_queue_over_its_window():
    sim, n0 = spilling_cluster(level=1000)  # under its level: nothing spills
    add(sim, n0, 5)
    node = n0.node
    assert node is not None and node.spill.count == 0
    watch = properties.SpillWatch((b"q",))
    watch.after_cron(n0, sim.loop.now)
    assert watch.violations == [] and watch.checks == 0  # under the level: not judged
    n0.spilling = True  # as if over the level, but the core was told otherwise
    assert node.spill.threshold == SPILL_OFF
    watch.after_cron(n0, sim.loop.now)
    assert watch.checks == 1
    assert len(watch.violations) == 1 and "holds 5 jobs of q in memory" in watch.violations[0]
