"""The Hypothesis settings of every test: no deadline, and no too-slow health check.

How long an example takes depends on how loaded the machine is (the tests share it with
other sessions), not on the code under test: a deadline or the too-slow check would fail
at random (timing belongs in bench/). tests/conftest.py loads :data:`PROFILE` for every
test; a module names how many examples it runs, and :func:`fuzz_settings` any other
health check its strategies trip (large data, function-scoped fixtures), which replaces
the profile's list, so ``too_slow`` is named again there.

A module's counts are the deep run's; ``DISQUETTE_FUZZ_SCALE`` (a fraction, 1 when
unset) scales every one of them through :func:`examples`: ``make test`` runs a quarter
of them, ``make test-deep`` all (the Makefile says why).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings

PROFILE = "disquette"
settings.register_profile(PROFILE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SCALE = float(os.environ.get("DISQUETTE_FUZZ_SCALE", "1"))


def examples(count: int) -> int:
    """A module's ``count`` of examples, scaled by ``DISQUETTE_FUZZ_SCALE`` (at least 10)."""
    return max(10, round(count * SCALE)) if SCALE < 1 else count


def fuzz_settings(max_examples: int, *suppress: HealthCheck, **more: Any) -> settings:
    """``max_examples`` examples, no deadline, ``too_slow`` and ``suppress`` not checked."""
    return settings(
        max_examples=examples(max_examples),
        suppress_health_check=[HealthCheck.too_slow, *suppress],
        **more,
    )
