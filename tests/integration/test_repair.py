"""Replica repair with real processes: rolling kill -9 restarts lose no acknowledged job.

Five nodes without AOF, REPLICATE 3, a growing backlog; each node in turn is
killed, repaired around, and restarted empty (:mod:`tests.support.rolling`).
Without repair, every job whose three holders all went down at some point is
lost (Disque lost thousands this way); with it, none may be. Duplicates are
allowed (at-least-once) and reported.
"""

from __future__ import annotations

from tests.support.rolling import rolling_restarts


def test_rolling_kill_restarts_lose_no_acknowledged_job(tmp_path):
    ledger = rolling_restarts(tmp_path, rounds=1, size=5, timeout_ms=1000)
    print("\n" + ledger.summary())
    assert ledger.restarts == 5
    assert len(ledger.added) > 0
    assert not ledger.lost, f"lost {len(ledger.lost)}: {sorted(ledger.lost)[:10]}"
