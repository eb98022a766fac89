"""Rolling upgrades of real nodes under load, the short form (tests/support/upgrade.py).

From the previous release (disquette 0.1.0, built from the git history) to this one,
five nodes with and without AOF, stopped with SHUTDOWN and kill -9, then one node
back to 0.1.0 (reading this release's files); and from this one to the next,
rehearsed. Every step links again, no acknowledged job is lost,
duplicates stay under 1 % of the acknowledged jobs, clients see no error but the
reconnects of the node being replaced, the policy set before keeps applying, the
schedule keeps firing once per tick, and no bus link is ever closed on a frame.
``bench/upgrade.py`` runs the long form and prints the targets' table with the link
times, which are measured there, never asserted.
"""

from __future__ import annotations

from tests.support.upgrade import Report, Upgrade, next_release, previous_release, this_release


def check(report: Report, size: int) -> None:
    ledger = report.ledger
    assert ledger.added, "no job was acknowledged"
    assert not ledger.lost, f"{len(ledger.lost)} acknowledged jobs lost"
    assert report.duplicates_pct <= 1.0, f"{ledger.duplicates} duplicates"
    assert not report.errors, report.errors[:5]
    assert len(report.steps) == size and all(step.policy_ok for step in report.steps)
    assert not report.ticks_missed, f"ticks missed: {report.ticks_missed}, nodes: {report.cron}"
    assert len(report.ticks_doubled) <= 2, f"ticks fired twice: {report.ticks_doubled}"
    assert report.frames_rejected == 0


#: Which nodes keep an AOF: with the stops in alternation (SHUTDOWN, kill -9, ...), one
#: short run replaces a node in each of the four ways.
AOF = [True, True, False, False, True]


def test_rolling_upgrade_from_the_previous_release(tmp_path):
    before = previous_release(tmp_path / "previous")
    report = Upgrade(tmp_path / "cluster", before, this_release(), aof=AOF, back=True).run()
    check(report, 6)
    assert report.steps[-1].release == "0.1.0"  # node 0 back: it read this release's files
    # A new node's CLUSTER NODES at the first step: each old peer as 0.1.0, protocol 1.
    assert "release=0.1.0 bus=1" in report.steps[0].versions


def test_rolling_upgrade_to_the_next_release_rehearsed(tmp_path):
    # Three nodes (the five of the bench's long form would double the time).
    report = Upgrade(tmp_path, this_release(), next_release(), aof=AOF[1:4], size=3).run()
    check(report, 3)
    assert report.skipped_seen > 0  # the older nodes skipped the newer one's probes
