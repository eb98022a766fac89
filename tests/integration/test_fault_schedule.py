"""Kill -9 under a tight load with real processes: nothing lost.

A short version of issue 18's schedule (tests/support/faults.py): five nodes without
AOF and a 100 ms node timeout, ten clients adding and consuming with 100 ms timeouts,
a node killed with SIGKILL every 5 seconds and restarted when the next one dies (the
last one twice), then a drain of every node at once. Every acknowledged ADDJOB must be
delivered. Duplicates are allowed (at-least-once) and printed, not asserted: with
RETRY 1 their number follows how fast the consumers keep up on the machine (a job not
acknowledged within a second is queued by its other holders too), so it is a figure
for ``bench/faults.py``, which runs the full schedule and reports it (16-23 % of the
acknowledged adds when bus links were recycled under load, under 2 % since).
"""

from __future__ import annotations

from tests.support.faults import FaultSchedule, run_schedule

SHORT = FaultSchedule(faults_s=30.0, period_s=5.0, heal_s=5.0)


def test_kill_restarts_under_load_lose_nothing(tmp_path):
    assert SHORT.kills_at() == [(5.0, 0), (10.0, 1), (15.0, 2), (20.0, 3), (25.0, 3)]
    ledger = run_schedule(tmp_path, SHORT)
    print("\n" + ledger.summary())
    assert ledger.kills == 5
    assert len(ledger.added) > 1000
    assert not ledger.lost, f"lost {len(ledger.lost)}: {sorted(ledger.lost)[:10]}"
