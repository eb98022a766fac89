"""Recurring jobs in the simulator: property 19 (one job per tick cluster-wide) over
``DISQUETTE_SIM_CRON`` seeds (default 1000) of the cron mode, the check itself on
hand-made counts, and a cron seed's determinism.

Runs with no fault must have exactly one job per tick (asserted); runs with faults
report the ticks that had none and those that had two or more, by fault kind, and
only the ticks near a disturbance may (``properties.check_cron``).
"""

from __future__ import annotations

import os
from collections import Counter

from disquette.sim import properties
from disquette.sim.batch import run_many
from disquette.sim.runner import KINDS, run_seed, schedule_kind
from tests.sim.test_simulation import failures

CRON = int(os.environ.get("DISQUETTE_SIM_CRON", "1000"))
FIRST = int(os.environ.get("DISQUETTE_SIM_FIRST", "0"))


def test_every_tick_has_one_job_unless_a_fault_is_near():
    results = run_many(range(FIRST, FIRST + CRON), "cron")
    totals: dict[str, Counter[str]] = {kind: Counter() for kind in KINDS}
    for r in results:
        totals[schedule_kind(r.seed, "cron")].update(
            {k: v for k, v in r.stats.items() if k.startswith("cron_")}
        )
    print(f"\ncron over {CRON} seeds, ticks by fault kind:")
    for kind, t in totals.items():
        print(
            f"  {kind}: {t['cron_ticks']} ticks ({t['cron_ticks_disturbed']} near a fault), "
            f"{t['cron_ticks_missing']} with no job, {t['cron_ticks_duplicated']} with two "
            f"or more; {t['cron_fire_errors']} failed attempts"
        )
    assert all(r.ok for r in results), failures(results)
    clean = totals["none"]
    assert clean["cron_ticks"] > CRON  # the runs exercise what they check
    assert clean["cron_ticks_missing"] == clean["cron_ticks_duplicated"] == 0


def test_the_check_counts_ticks_and_excuses_only_those_near_a_disturbance():
    ticks = {b"s": [10, 11, 12, 20]}
    jobs = {b"cron:s:10": {b"J1"}, b"cron:s:11": {b"J2", b"J3"}, b"cron:s:20": {b"J4"}}
    violations, stats = properties.check_cron(ticks, jobs, [], after=1000)
    assert len(violations) == 2 and "tick 11 of s has 2 jobs" in violations[0]
    assert stats == {"cron_ticks": 4, "cron_ticks_missing": 1, "cron_ticks_duplicated": 1,
                     "cron_ticks_disturbed": 0}  # fmt: skip
    # A partition from 11.5 s to 11.8 s: tick 11 was in flight, 12 within the margin.
    violations, stats = properties.check_cron(ticks, jobs, [(11_500, 11_800)], after=1000)
    assert violations == [] and stats["cron_ticks_disturbed"] == 3
    violations, _ = properties.check_cron(ticks, jobs, [(16_000, 17_000)], after=1000)
    assert len(violations) == 2  # long after it: no excuse


def test_a_cron_seed_replays_the_same_history():
    first, again = run_seed(3, "cron"), run_seed(3, "cron")
    assert first.ok and first.digest == again.digest and first.stats == again.stats
