#!/usr/bin/env python3
"""Kill -9 under a tight load (issue 18's schedule): lost jobs, duplicates, throughput.

Usage (from the repository, with the project's virtualenv)::

    .venv/bin/python bench/faults.py [--seconds 100] [--period 10] [--heal 10]
                                     [--repeat 1] [--no-repair] [--other PATH]

Five nodes without AOF, ``cluster-node-timeout 100``, ten client threads doing 60 %
ADDJOB (REPLICATE 3, RETRY 1, 100 ms timeout) and 40 % GETJOB (TIMEOUT 100) + ACKJOB;
every ``--period`` seconds one node is killed with SIGKILL and the previous victim
restarted empty, the last node twice in a row; after ``--seconds``, heal, wait
``--heal`` seconds and drain every node at once (tests/support/faults.py). Each round
runs the schedule with faults and then without (same load, no kill), and the table
gives, per run: acknowledged ADDJOBs and their rate while the clients ran, jobs lost,
jobs delivered twice or more, and the extra deliveries during the faults and during
the drain. The last line is the throughput ratio faults / no faults (medians).

``--other`` runs the same rounds against another server binary (an original
``disque-server``), given no ``replica-repair`` directive.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import _common as cm

sys.path.insert(0, str(cm.REPO))

from tests.support.faults import FaultLedger, FaultSchedule, run_schedule


def _table(rows: list[tuple[str, FaultLedger]]) -> str:
    columns = list(rows[0][1].row())
    lines = ["| run | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, ledger in rows:
        values = ledger.row()
        lines.append(f"| {name} | " + " | ".join(f"{values[c]:,}" for c in columns) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=100.0, help="fault window, s")
    parser.add_argument("--period", type=float, default=10.0, help="between kills, s")
    parser.add_argument("--heal", type=float, default=10.0, help="healed, before the drain, s")
    parser.add_argument("--repeat", type=int, default=1, help="rounds (medians)")
    parser.add_argument("--no-repair", action="store_true", help="replica-repair no (Disque)")
    parser.add_argument("--other", metavar="PATH", help="another server binary")
    args = parser.parse_args(argv)
    command = [args.other] if args.other else None
    rows: list[tuple[str, FaultLedger]] = []
    rates: dict[bool, list[float]] = {True: [], False: []}
    for round_no in range(1, args.repeat + 1):
        for kills in (True, False):
            schedule = FaultSchedule(
                faults_s=args.seconds,
                period_s=args.period,
                heal_s=args.heal,
                kills=kills,
                repair=not args.no_repair,
            )
            with tempfile.TemporaryDirectory(prefix="bench-faults-") as base:
                ledger = run_schedule(Path(base), schedule, command=command)
            name = f"{'faults' if kills else 'no faults'} #{round_no}"
            print(f"{name}: {ledger.summary()}", flush=True)
            rows.append((name, ledger))
            rates[kills].append(ledger.adds_per_second)
    print(f"\n{cm.command_line()}\n\n{_table(rows)}\n")
    ratio = statistics.median(rates[True]) / statistics.median(rates[False])
    print(f"acknowledged adds per second, faults / no faults: {ratio:.2f}x")
    return 1 if any(ledger.lost for _, ledger in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
