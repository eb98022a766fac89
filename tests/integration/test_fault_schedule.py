"""Kill -9 under a tight load with real processes: nothing lost, few duplicates.

A short version of issue 18's schedule (tests/support/faults.py): five nodes without
AOF and a 100 ms node timeout, ten clients adding and consuming with 100 ms timeouts,
a node killed with SIGKILL every 5 seconds and restarted when the next one dies (the
last one twice), then a drain of every node at once. Every acknowledged ADDJOB must be
delivered. Duplicates are allowed (at-least-once) but were 16-23 % of the acknowledged
adds before bus links stopped being recycled under load; the bound here is looser than
the issue's 2 % target so that a slow machine does not fail it, and tight enough to
catch that regression. ``bench/faults.py`` runs the full schedule.
"""

from __future__ import annotations

from tests.support.faults import FaultSchedule, run_schedule

SHORT = FaultSchedule(faults_s=30.0, period_s=5.0, heal_s=5.0)


def test_kill_restarts_under_load_lose_nothing_and_duplicate_little(tmp_path):
    assert SHORT.kills_at() == [(5.0, 0), (10.0, 1), (15.0, 2), (20.0, 3), (25.0, 3)]
    ledger = run_schedule(tmp_path, SHORT)
    print("\n" + ledger.summary())
    assert ledger.kills == 5
    assert len(ledger.added) > 1000
    assert not ledger.lost, f"lost {len(ledger.lost)}: {sorted(ledger.lost)[:10]}"
    assert ledger.duplicated <= 0.05 * len(ledger.added), ledger.summary()
