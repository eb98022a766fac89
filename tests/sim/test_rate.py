"""The rate runs (sim/ratesim.py): property 18's check on hand-made measures, a seed's
determinism (on both builds), the seeds that catch a broken slot rule, and the seed
range (``DISQUETTE_SIM_RATE`` seeds, 1000 by default) with the worst overshoot
measured by fault kind."""

from __future__ import annotations

import os
from collections import defaultdict

from disquette.sim import properties
from disquette.sim.batch import run_many
from disquette.sim.runner import run_seed, schedule_kind
from tests.sim.test_builds import first_line

RATE = int(os.environ.get("DISQUETTE_SIM_RATE", "1000"))
FIRST = int(os.environ.get("DISQUETTE_SIM_FIRST", "0"))


def test_the_busiest_second_slides():
    assert properties.busiest_second([]) == 0
    assert properties.busiest_second([0, 500, 999, 1000, 1999]) == 3
    assert properties.busiest_second([0, 1000, 2000]) == 1


def test_the_limits_check_fails_past_its_bounds():
    steady = [i * 100 for i in range(50)]  # 10 a second
    assert properties.check_limits(steady, 3, rate=10, concurrency=3, nodes=3, faults=0) == []
    burst = steady + [5] * 5  # 15 in the first second: bound 10 + 1 + 3
    [violation] = properties.check_limits(burst, 3, rate=10, concurrency=3, nodes=3, faults=0)
    assert "15 jobs of rate 10" in violation
    [violation] = properties.check_limits(steady, 4, rate=10, concurrency=3, nodes=3, faults=0)
    assert "4 jobs of concurrency 3" in violation
    # Under faults: n times the rate bound, (n + crashes) times the concurrency.
    assert properties.check_limits(burst, 12, rate=10, concurrency=3, nodes=3, faults=2) == []


def test_a_rate_seed_replays_the_same_history():
    a, b = run_seed(7, "rate"), run_seed(7, "rate")
    assert a.digest == b.digest and a.stats == b.stats and a.ok


# Seeds without faults that fail when the concurrency rule is broken on purpose (no
# excess subtracted, or ``held`` announced as the jobs out without holding to it):
# they run whatever the seed count.
SLOT_RULE_SEEDS = (156, 188, 232, 372)


def test_the_seeds_that_catch_a_broken_slot_rule_pass():
    for seed in SLOT_RULE_SEEDS:
        result = run_seed(seed, "rate")
        assert schedule_kind(seed, "rate") == "none" and result.ok, result.report()


def test_a_rate_seed_has_the_same_history_on_both_builds():
    assert schedule_kind(3, "rate") == "mixed"
    assert first_line("3", ("--rate",), pure=True) == first_line("3", ("--rate",), pure=False)


def test_limits_hold_within_their_bounds_over_the_seed_range():
    results = run_many(range(FIRST, FIRST + RATE), "rate")
    failed = [r for r in results if not r.ok]
    worst: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in results:
        ratios = worst[schedule_kind(r.seed, "rate")]
        ratios[0] = max(ratios[0], r.stats["rate_busiest_second"] / r.stats["rate"])
        ratios[1] = max(ratios[1], r.stats["concurrency_peak"] / r.stats["concurrency"])
    print(f"\nrate runs over {RATE} seeds, worst measured / limit (rate, concurrency) by kind:")
    for kind, (rate, conc) in sorted(worst.items()):
        print(f"  {kind:9} {rate:.2f} {conc:.2f}")
    assert not failed, "\n\n".join(r.report() for r in failed[:3])
    assert sum(r.stats["rate_delivered"] for r in results) > RATE * 5  # the limits bound
    assert worst["none"][1] == 1.0  # concurrency reached, never passed, without faults
