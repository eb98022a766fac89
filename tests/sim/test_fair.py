"""The fair runs (sim/fairsim.py): the share strict turns give, a seed's determinism,
and the seed range (``DISQUETTE_SIM_FAIR`` seeds, 200 by default) with the light
groups' shares and the per-group limits under faults, the worst measured by kind."""

from __future__ import annotations

import os
from collections import defaultdict

from disquette.sim.batch import run_many
from disquette.sim.fairsim import HEAVY, turn_share
from disquette.sim.runner import run_seed, schedule_kind

FAIR = int(os.environ.get("DISQUETTE_SIM_FAIR", "200"))
FIRST = int(os.environ.get("DISQUETTE_SIM_FIRST", "0"))


def test_the_turn_share_puts_the_heavy_group_first_in_every_round():
    counts = {HEAVY: 100, b"a": 2, b"b": 1}
    assert [turn_share(counts, n) for n in range(8)] == [0, 0, 1, 2, 2, 3, 3, 3]
    assert turn_share({HEAVY: 5}, 5) == 0 and turn_share({b"a": 3}, 10) == 3


def test_a_fair_seed_replays_the_same_history():
    a, b = run_seed(5, "fair"), run_seed(5, "fair")
    assert a.digest == b.digest and a.stats == b.stats and a.ok


def test_shares_and_group_limits_hold_over_the_seed_range():
    results = run_many(range(FIRST, FIRST + FAIR), "fair")
    failed = [r for r in results if not r.ok]
    worst: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for r in results:
        stats = r.stats
        kind = worst[schedule_kind(r.seed, "fair")]
        kind[0] = max(kind[0], stats["rate_busiest_second"] / stats["rate"])
        kind[1] = max(kind[1], stats["concurrency_peak"] / stats["concurrency"])
        kind[2] += stats["fair_light_delivered"]
        kind[3] += stats["fair_light_share"]
    print(f"\nfair runs over {FAIR} seeds, by kind: worst group rate and concurrency / limit,")
    print("light jobs handed out in the first second / their share under strict turns:")
    for kind, (rate, conc, light, share) in sorted(worst.items()):
        print(f"  {kind:9} {rate:.2f} {conc:.2f} {int(light)} / {int(share)}")
    assert not failed, "\n\n".join(r.report() for r in failed[:3])
    assert worst["none"][1] == 1.0  # a group's concurrency reached, never passed
    assert worst["none"][2] >= worst["none"][3] > FAIR  # shares were judged, and held
