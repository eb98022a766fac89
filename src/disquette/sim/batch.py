"""Many seeds at once: worker processes with a pinned hash seed.

The core keeps jobs and queues in hash-bucketed tables whose iteration order
follows ``hash()`` of the keys, and Python randomizes ``bytes`` hashes per
process unless ``PYTHONHASHSEED`` is set. A seed therefore replays the same
history only under the same hash seed. :func:`run_many` starts its workers
with ``PYTHONHASHSEED=0`` — the value the command line re-executes itself with
(:mod:`disquette.sim.__main__`) — so any seed a batch reports replays exactly
from the command line. It also spreads the seeds over the machine's cores.
:func:`feature_totals` sums the counts the features runs report (or, given their
names, those the coordination runs report).
"""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from collections.abc import Iterable

from disquette.sim.runner import FEATURE_STATS, Result, run_seed

HASHSEED = "0"
NICENESS = 10  # added to the workers' niceness


def _run(args: tuple[int, str]) -> Result:
    seed, mode = args
    return run_seed(seed, mode)


def run_many(
    seeds: Iterable[int], mode: str = "normal", workers: int | None = None
) -> list[Result]:
    """Run every seed in ``mode`` (see ``config_for_seed``), in ``workers`` processes;
    the results come back in the order of the seeds."""
    jobs = [(seed, mode) for seed in seeds]
    workers = workers or os.cpu_count() or 1
    previous = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = HASHSEED  # read by the spawned interpreters at start-up
    try:
        # Niced: a batch is minutes of CPU on every core, and what runs beside it (a
        # test suite's real nodes and Spark's Python workers, which must connect back
        # within 10 s) should not wait behind it. The histories do not change.
        context = multiprocessing.get_context("spawn")
        with context.Pool(workers, initializer=os.nice, initargs=(NICENESS,)) as pool:
            return pool.map(_run, jobs, chunksize=max(1, len(jobs) // (workers * 8)))
    finally:
        if previous is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = previous


def feature_totals(results: list[Result], names: tuple[str, ...] = FEATURE_STATS) -> str:
    """The features runs' counts (policy writes, dead letters, ADDJOBs sent again and
    what they found), or the counts ``names``, summed over ``results``, as
    ``name=total`` pairs."""
    totals: Counter[str] = Counter()
    for r in results:
        totals.update({k: v for k, v in r.stats.items() if k in names})
    return " ".join(f"{k}={totals[k]}" for k in names)
