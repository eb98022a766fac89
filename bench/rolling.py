#!/usr/bin/env python3
"""Rolling kill -9 restarts of a five-node cluster without AOF: acknowledged jobs lost.

Usage (from the repository, with the project's virtualenv)::

    .venv/bin/python bench/rolling.py [--rounds 3] [--size 5] [--timeout 1000]
                                      [--add-rate 100] [--ack-rate 40] [--no-repair]

The experiment of tests/integration/test_repair.py (tests/support/rolling.py), for
longer: REPLICATE 3 jobs added faster than they are consumed (a growing backlog), each
node in turn killed with SIGKILL, kept down until its copies were repaired (or, with
``--no-repair``, until it was flagged FAIL and twice the node timeout passed), then
restarted empty; ``--rounds`` passes over the nodes, then a drain. Prints the ledger:
acknowledged ADDJOBs, how many were never delivered, duplicates, and what repair did.
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

from tests.support.rolling import rolling_restarts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="passes over the nodes")
    parser.add_argument("--size", type=int, default=5, help="nodes")
    parser.add_argument("--timeout", type=int, default=1000, help="cluster-node-timeout, ms")
    parser.add_argument("--add-rate", type=float, default=100.0, help="ADDJOBs a second")
    parser.add_argument("--ack-rate", type=float, default=40.0, help="jobs consumed a second")
    parser.add_argument("--no-repair", action="store_true", help="replica-repair no (Disque)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-rolling-") as base:
        ledger = rolling_restarts(
            Path(base),
            rounds=args.rounds,
            size=args.size,
            timeout_ms=args.timeout,
            add_rate=args.add_rate,
            ack_rate=args.ack_rate,
            repair=not args.no_repair,
        )
    print(f"{cm.command_line()}\n{ledger.summary()} in {time.monotonic() - started:.0f} s")
    return 1 if ledger.lost else 0


if __name__ == "__main__":
    sys.exit(main())
