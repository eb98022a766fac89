"""Clock skew in the simulator: machines whose clocks are set off virtual time.

``DISQUETTE_SIM_SKEW`` seeds (default 1000) of the skew mode run the normal
workload under every kind of fault schedule plus clock skew episodes, and check
property 10 — each node's estimate of a peer's clock offset holds within its bound
whenever it rests on samples taken while the clocks held still — beside the others.
A hand-made schedule shows the warnings a skewed node causes, and what the skew
hook changes in a simulated process.
"""

from __future__ import annotations

import os

from disquette.sim.batch import run_many
from disquette.sim.faults import Fault, FaultSchedule
from disquette.sim.runner import Simulation, config_for_seed
from tests.sim.test_simulation import FIRST, failures

SKEW = int(os.environ.get("DISQUETTE_SIM_SKEW", "1000"))


def test_skewed_clocks_keep_the_properties_and_the_estimates_hold():
    results = run_many(range(FIRST, FIRST + SKEW), "skew")
    checks = sum(r.stats["clock_checks"] for r in results)
    print(f"\nclock skew over {SKEW} seeds: {checks} estimates checked against the true offsets")
    assert all(r.ok for r in results), failures(results)
    assert all(r.stats["clock_checks"] for r in results)  # every run checked some


def skewed_run(faults: list[Fault]) -> tuple[Simulation, list[str]]:
    """A three-node skew run on ``faults`` instead of its drawn schedule, and 5 s more
    of the idle cluster (a clock stepped back pings its peers late: see
    docs/coordination.md); its trace."""
    lines: list[str] = []
    sim = Simulation(config_for_seed(1, "skew", nodes=3), echo=lines.append)
    sim.schedule = FaultSchedule(faults, sim.config.window)
    result = sim.run()
    assert result.ok, result.report()
    sim.loop.run_until(sim.loop.now + 5000)
    return sim, lines


def test_peers_warn_about_a_skewed_clock_and_notice_it_put_right():
    sim, lines = skewed_run([Fault(500, "skew", (1, 2000)), Fault(3000, "unskew", (1,))])
    n0, n1, n2 = (p.node_id.decode() for p in sim.processes)
    logs = [line.split(" log ", 1)[1].strip() for line in lines if " log " in line]
    warnings = [text for text in logs if "from this node's clock, over" in text]
    notices = [text for text in logs if "is back within clock-skew-warn-ms" in text]
    # n0 and n2 name n1 ahead; n1 names both others behind: a majority names the culprit.
    assert sorted(w.split()[0] + " " + w.split()[4] for w in warnings) == sorted(
        [f"n0 {n1}", f"n2 {n1}", f"n1 {n0}", f"n1 {n2}"]
    )
    assert all("ms (+/- " in w for w in warnings)
    assert len(notices) == 4  # once each, when the clock was put right
    assert sim.clock_checks > 0


def test_a_skew_under_the_threshold_is_measured_without_a_warning():
    sim, lines = skewed_run([Fault(500, "skew", (2, -300))])
    assert not [line for line in lines if "Clock skew" in line]
    n0, n2 = sim.processes[0], sim.processes[2]
    assert n0.node is not None
    estimate = n0.node.cluster.nodes[n2.node_id].clock
    assert estimate is not None and abs(estimate.offset + 300) <= estimate.bound


def test_the_skew_is_the_machines_and_outlives_a_crash():
    sim, _ = skewed_run([Fault(500, "skew", (0, 1500)), Fault(1000, "crash", (0,))])
    process = sim.processes[0]
    assert process.clock_offset == 1500 and process.clock() == sim.loop.now + 1500
    assert process.node is not None and process.node.clock() == process.clock()


def test_debug_clock_skew_sets_the_simulated_machines_clock():
    sim = Simulation(config_for_seed(1, "skew", nodes=1))
    process = sim.processes[0]
    process.start()
    assert sim.admin(process, [b"DEBUG", b"CLOCK-SKEW", b"-250"]) == b"OK"
    assert process.clock_offset == -250
