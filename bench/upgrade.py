#!/usr/bin/env python3
"""Rolling upgrades of five nodes under a steady load: the targets' table of issue 34.

Usage (from the repository, with the project's virtualenv)::

    .venv/bin/python bench/upgrade.py [--from previous|this] [--to this|next]
                                      [--aof yes|no|mixed] [--rounds 1] [--rate 20]
                                      [--pause 10]

The experiment of tests/integration/test_upgrade.py (tests/support/upgrade.py), as
long as asked: five nodes of one release (``previous``: disquette 0.1.0 built from the
git history, commit 48ade79; ``this``: this checkout), a producer and a consumer on
every node (REPLICATE 3 jobs, ``--rate`` ADDJOBs a second each), a schedule every
second and a queue policy; ``--pause`` seconds of that load before each step; each
node in turn stopped (SHUTDOWN and kill -9 in alternation) and started as the other
release (``this``, or ``next``: this checkout rehearsing the next release's bus,
core/dialect.py) in its directory. ``--rounds`` more than 1 goes back and forth (round
2 starts a cluster of the second release and puts it back on the first: a
downgrade). Without arguments it runs the two upgrades of the issue's targets,
previous -> this and this -> next, each with AOF on every node and then off, and
prints one table per run: acknowledged jobs, lost, duplicates,
client errors but the reconnects of the node being replaced, the slowest step's
link time (measured from the node answering PING to every node seeing the mesh, and
the new node knowing every peer's bus version), the schedule's ticks missed and
doubled, whether the policy applied after every step, and the bus frames rejected.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import _common as cm

sys.path.insert(0, str(cm.REPO))

from tests.support.upgrade import (
    Release,
    Report,
    Upgrade,
    next_release,
    previous_release,
    this_release,
)


def print_report(report: Report, seconds: float) -> None:
    aof = "on" if all(report.aof) else "off" if not any(report.aof) else "mixed"
    print(f"\n{report.before} -> {report.after}, AOF {aof}, {seconds:.0f} s")
    print(f"  {'step':<6}{'node':<6}{'stopped with':<14}{'started as':<16}{'stopped in':>11}"
          f"{'started in':>11}{'linked in':>11}{'step took':>11}")  # fmt: skip
    for n, s in enumerate(report.steps, 1):
        print(f"  {n:<6}{s.node:<6}{s.how:<14}{s.release:<16}{s.stop_s:>10.2f}s"
              f"{s.start_s:>10.2f}s{s.link_s:>10.2f}s{s.total_s:>10.1f}s")  # fmt: skip
    width = max(len(name) for name, _ in report.rows())
    for name, value in report.rows():
        print(f"  {name:<{width}}  {value}")
    for error in report.errors[:10]:
        print(f"  error: {error}")
    if report.skipped_seen:
        print(f"  the newer node's probes skipped by the older ones: {report.skipped_seen}")


def failed(report: Report) -> bool:
    return bool(
        report.ledger.lost
        or report.duplicates_pct > 1.0
        or report.errors
        or any(step.link_s > 5.0 for step in report.steps)
        or report.ticks_missed
        or not all(step.policy_ok for step in report.steps)
        or report.frames_rejected
    )


def run(
    base: Path, before: Release, after: Release, aof: str, rounds: int, rate: float, pause: float
) -> bool:
    bad = False
    flags = {"yes": True, "no": False, "mixed": [True, True, False, False, True]}[aof]
    for round_ in range(rounds):
        started = time.monotonic()
        old, new = (before, after) if round_ % 2 == 0 else (after, before)
        folder = base / f"{old.name}-{new.name}-{aof}-{round_}"
        report = Upgrade(folder, old, new, aof=flags, rate=rate, pause=pause).run()
        print_report(report, time.monotonic() - started)
        bad |= failed(report)
    return bad


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="before", choices=["previous", "this"])
    parser.add_argument("--to", dest="after", choices=["this", "next"])
    parser.add_argument("--aof", choices=["yes", "no", "mixed"])
    parser.add_argument("--rounds", type=int, default=1, help="upgrades, back and forth")
    parser.add_argument("--rate", type=float, default=20.0, help="ADDJOBs a second per node")
    parser.add_argument("--pause", type=float, default=10.0, help="seconds of load between steps")
    args = parser.parse_args(argv)
    print(cm.command_line())
    print(cm.describe_background(cm.background_load()))
    with tempfile.TemporaryDirectory(prefix="bench-upgrade-") as tmp:
        base = Path(tmp)
        releases = {"previous": lambda: previous_release(base / "previous"),
                    "this": this_release, "next": next_release}  # fmt: skip
        plans = (
            [(args.before or "previous", args.after or "this")]
            if args.before or args.after
            else [("previous", "this"), ("this", "next")]
        )
        bad = False
        for before, after in plans:
            for aof in [args.aof] if args.aof else ["yes", "no"]:
                bad |= run(
                    base,
                    releases[before](),
                    releases[after](),
                    aof,
                    args.rounds,
                    args.rate,
                    args.pause,
                )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
