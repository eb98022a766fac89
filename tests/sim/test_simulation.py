"""Many seeds of the deterministic simulator, each checked against the cluster's properties.

The normal run covers ``DISQUETTE_SIM_SEEDS`` seeds (default 1000): small
clusters, short fault windows and small workloads, spread over every fault
kind (none, network, partition, crash, mixed: the seed modulo 5),
``DISQUETTE_SIM_ROLLING`` (default 1000) runs of rolling crash-restarts with
replica repair, which must lose no acknowledged job, ``DISQUETTE_SIM_FEDERATION``
(default 1000) runs with producers and consumers on different nodes, the first
``DISQUETTE_SIM_NOREPAIR`` (default 100) of the same runs without it, which must
lose some (or the rolling runs would prove nothing), and ``DISQUETTE_SIM_FEATURES``
(default 500) runs of queue policies, dead letters and de-duplicated ADDJOBs. Set
``DISQUETTE_SIM_LONG=1`` for bigger clusters, longer windows and heavier
workloads, and the counts for more of them, e.g.::

    DISQUETTE_SIM_LONG=1 DISQUETTE_SIM_SEEDS=5000 pytest tests/sim/test_simulation.py

``DISQUETTE_SIM_FIRST`` moves the range (to hunt with fresh seeds). A failure
prints each failing seed's report: its faults, violations, the last events and
the command that replays it. Every seed found failing becomes a named test in
``test_regressions.py``.
"""

from __future__ import annotations

import os
from collections import Counter

from disquette.sim.batch import feature_totals, run_many
from disquette.sim.runner import FEDERATION_KINDS, KINDS, Result, schedule_kind

SEEDS = int(os.environ.get("DISQUETTE_SIM_SEEDS", "1000"))
ROLLING = int(os.environ.get("DISQUETTE_SIM_ROLLING", "1000"))
FEDERATION = int(os.environ.get("DISQUETTE_SIM_FEDERATION", "1000"))
NOREPAIR = int(os.environ.get("DISQUETTE_SIM_NOREPAIR", "100"))
FEATURES = int(os.environ.get("DISQUETTE_SIM_FEATURES", "500"))
FIRST = int(os.environ.get("DISQUETTE_SIM_FIRST", "0"))
LONG = os.environ.get("DISQUETTE_SIM_LONG", "") not in ("", "0")


def failures(results: list[Result]) -> str:
    failed = [r for r in results if not r.ok]
    return f"{len(failed)} of {len(results)} seeds failed: {[r.seed for r in failed]}\n\n" + (
        "\n\n".join(r.report() for r in failed[:5])
    )


def test_every_seed_keeps_the_properties():
    results = run_many(range(FIRST, FIRST + SEEDS), "long" if LONG else "normal")
    duplicates: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    for r in results:
        kind = schedule_kind(r.seed, "normal")
        runs[kind] += 1
        duplicates[kind] += r.duplicates
    print(
        f"\nduplicate deliveries by fault kind over {SEEDS} seeds: "
        + ", ".join(f"{k} {duplicates[k]} in {runs[k]} runs" for k in KINDS)
    )
    assert all(r.ok for r in results), failures(results)


def test_rolling_crash_restarts_lose_no_job_with_repair():
    """Every node restarted in turn, without persistence, never two at once: replica
    repair keeps every acknowledged job alive (the runs are lossless)."""
    results = run_many(range(FIRST, FIRST + ROLLING), "rolling")
    lost = sum(r.stats["lost_unexcused"] for r in results)
    added = sum(r.stats["added"] for r in results)
    print(
        f"\nrolling restarts, repair on: {lost} of {added} acknowledged jobs lost in {ROLLING} runs"
    )
    assert all(r.ok for r in results), failures(results)
    assert lost == 0


def test_rolling_crash_restarts_lose_jobs_without_repair():
    """The same schedules with replica-repair no (Disque's behaviour) lose jobs: those
    whose every holder went down. Property 1 excuses them; the other properties hold."""
    results = run_many(range(FIRST, FIRST + NOREPAIR), "rolling-norepair")
    lost = sum(r.stats["lost_unexcused"] for r in results)
    added = sum(r.stats["added"] for r in results)
    print(
        f"\nrolling restarts, repair off: {lost} of {added} acknowledged jobs lost "
        f"in {NOREPAIR} runs"
    )
    assert all(r.ok for r in results), failures(results)
    assert lost > 0


def test_federated_consumers_keep_the_properties():
    """Producers on node 0, consumers on the others: every job consumed travelled by
    NEEDJOBS/YOURJOBS and its ack was collected across nodes, in batches, under
    partitions and crashes. No acknowledged job is lost (beyond those property 1
    excuses: every holder crashed without an AOF) and every job is delivered."""
    results = run_many(range(FIRST, FIRST + FEDERATION), "federation")
    duplicates: Counter[str] = Counter()
    for r in results:
        duplicates[schedule_kind(r.seed, "federation")] += r.duplicates
    delivered = sum(r.stats["delivered"] for r in results)
    print(
        f"\nfederation over {FEDERATION} seeds: {delivered} deliveries; duplicates by fault "
        "kind: " + ", ".join(f"{k} {duplicates[k]}" for k in FEDERATION_KINDS)
    )
    assert all(r.ok for r in results), failures(results)


def test_policies_dead_letters_and_dedup_keep_their_properties():
    """An administrator writes queue policies on random nodes (some at once on two
    nodes, some deleted) while poison jobs are NACKed until dead-lettered, the
    dead-letter queue is consumed and ADDJOBs carry DEDUP keys and are sent again,
    under no faults, partitions, crashes or all of them. Properties 7 to 9: the
    policy tables converge to the last writes, a job has one dead letter and is not
    delivered after it unless faults explain it, and an ADDJOB sent again to a node
    holding a copy gets that copy's ID. The totals printed are the counts the runs
    report (extra dead letters excused, ADDJOBs sent again and what they found)."""
    results = run_many(range(FIRST, FIRST + FEATURES), "features")
    totals = feature_totals(results)
    print(f"\nfeatures over {FEATURES} seeds: {totals}")
    assert all(r.ok for r in results), failures(results)
    made = sum(r.stats["dead_letters"] for r in results)
    found = sum(r.stats["dedup_resend_found"] + r.stats["dedup_retry_found"] for r in results)
    assert made > FEATURES and found > FEATURES // 10  # the runs exercise what they check
