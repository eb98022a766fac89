"""Replay one seed, or hunt through a range of them.

    python -m disquette.sim --seed N [--nodes 5]
                            [--long | --rolling [--no-repair] | --federation | --features
                             | --skew | --coordination | --flow-to-disk | --rate | --fair
                             | --cron | --outcomes | --upgrade | --upgrade-next] [--verbose]
    python -m disquette.sim --seed N --count 1000
                            [--long | --rolling [--no-repair] | --federation | --features
                             | --skew | --coordination | --flow-to-disk | --rate | --fair
                             | --cron | --outcomes | --upgrade | --upgrade-next]

One seed prints its report (and, with ``--verbose``, every event as it
happens); a range runs in worker processes and prints the failing seeds, and
for ``--features`` the totals of the dead-letter and de-duplication counts (for
``--coordination``, those of dependencies, claims and progress logs; for
``--flow-to-disk``, jobs spilled and loaded back, disk faults and inspections; for
``--cron``, the ticks with no job and with two; for ``--outcomes``, postponed
requeues, WAITJOB answers by kind, cancellations and what was excused). The
process re-executes itself with ``PYTHONHASHSEED=0`` first, so histories match
the ones the test suite ran (see :mod:`disquette.sim.batch`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

from disquette.sim.batch import HASHSEED, feature_totals, run_many
from disquette.sim.properties import CRON_STATS, FLOW_STATS
from disquette.sim.runner import (
    COORDINATION_STATS,
    FEATURE_STATS,
    OUTCOME_STATS,
    run_seed,
    schedule_kind,
)

#: The modes' flags (none: the normal runs), each with its mode and its help.
MODE_FLAGS = (
    ("--long", "long", "the longer, bigger runs"),
    ("--rolling", "rolling", "rolling crash-restarts"),
    ("--federation", "federation", "producers and consumers on different nodes"),
    ("--features", "features", "queue policies, dead letters and de-duplicated ADDJOBs"),
    ("--skew", "skew", "nodes' clocks set off, and their estimates checked"),
    ("--coordination", "coordination", "jobs waiting for others (AFTER), claims and progress logs"),
    (
        "--flow-to-disk",
        "flow",
        "jobs spilled to a simulated disk and loaded back, under disk faults",
    ),
    ("--rate", "rate", "consumers on every node under rate and concurrency limits"),
    ("--fair", "fair", "group-fair queues: light groups' shares, per-group limits"),
    ("--cron", "cron", "recurring jobs: one job per tick"),
    ("--outcomes", "outcomes", "NACK DELAY and backoffs, ACKJOB RESULT, WAITJOB and CANCEL"),
    ("--upgrade", "upgrade", "rolling restarts from the previous release"),
    ("--upgrade-next", "upgrade-next", "rolling restarts to the next, rehearsed"),
)
#: The counts a range of seeds sums up in the modes that report some: a label, the names.
TOTALS = {
    "features": ("features", FEATURE_STATS),
    "coordination": ("coordination", COORDINATION_STATS),
    "flow": ("flow-to-disk", FLOW_STATS),
    "cron": ("cron", CRON_STATS),
    "outcomes": ("outcomes", OUTCOME_STATS),
}


def main(argv: list[str]) -> int:
    if os.environ.get("PYTHONHASHSEED") != HASHSEED:
        env = dict(os.environ, PYTHONHASHSEED=HASHSEED)
        os.execve(sys.executable, [sys.executable, "-m", "disquette.sim", *argv], env)
    parser = argparse.ArgumentParser(prog="python -m disquette.sim", description=__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=1, help="run seeds seed..seed+count-1")
    parser.add_argument("--nodes", type=int, help="override the cluster size of the seed")
    modes = parser.add_mutually_exclusive_group()
    for flag, mode, what in MODE_FLAGS:
        modes.add_argument(flag, action="store_const", dest="mode", const=mode, help=what)
    parser.add_argument(
        "--no-repair", action="store_true", help="rolling runs with replica-repair no"
    )
    parser.add_argument("--verbose", action="store_true", help="print every event")
    parser.set_defaults(mode="normal")
    args = parser.parse_args(argv)
    mode = args.mode
    if mode == "rolling" and args.no_repair:
        mode = "rolling-norepair"
    if args.count == 1:
        echo = print if args.verbose else None
        result = run_seed(args.seed, mode, args.nodes, echo=echo)
        print(result.report())
        return 0 if result.ok else 1
    start = time.perf_counter()
    results = run_many(range(args.seed, args.seed + args.count), mode)
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(r.report(trace_lines=20), end="\n\n")
    duplicates: Counter[str] = Counter()
    for r in results:
        duplicates[schedule_kind(r.seed, mode)] += r.duplicates
    lost = sum(r.stats["lost"] for r in results)
    retried = sum(r.stats["lost_retried"] for r in results)
    print(
        f"{len(results)} seeds, {len(failed)} failed, {time.perf_counter() - start:.1f} s; "
        f"duplicates by schedule kind: {dict(duplicates)}; acknowledged jobs lost: {lost} "
        f"({retried} of them at least once)"
    )
    if mode in TOTALS:
        label, names = TOTALS[mode]
        print(f"{label} totals: " + feature_totals(results, names))
    if failed:
        print("failing seeds: " + " ".join(str(r.seed) for r in failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
