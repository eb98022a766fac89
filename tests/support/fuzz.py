"""The Hypothesis settings the fuzz tests share: no deadline, and no too-slow health check.

How long an example takes depends on how loaded the machine is (the tests share it with
other sessions), not on the code under test: a deadline or the too-slow check would fail
at random. A module names how many examples it runs and any other health check its
strategies trip (large data, function-scoped fixtures).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings


def fuzz_settings(max_examples: int, *suppress: HealthCheck, **more: Any) -> settings:
    """``max_examples`` examples, no deadline, ``too_slow`` and ``suppress`` not checked."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, *suppress],
        **more,
    )
