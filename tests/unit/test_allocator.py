"""The heap trim after the dataset shrinks: when it happens, and that it is there."""

from __future__ import annotations

import sys

from disquette.server.allocator import TRIM_MIN, TRIM_STEP, Allocator


def test_trims_once_the_dataset_fell_a_step_below_its_peak():
    calls: list[int] = []
    allocator = Allocator(trim=lambda pad: calls.append(pad) or 1)
    assert not allocator.cron(10 * TRIM_STEP)
    assert not allocator.cron(9 * TRIM_STEP + 1)  # less than a step below the peak
    assert allocator.cron(9 * TRIM_STEP)
    assert calls == [0] and allocator.trims == 1
    assert not allocator.cron(8 * TRIM_STEP + 1)  # the peak restarted at the trim
    assert allocator.cron(8 * TRIM_STEP)
    assert not allocator.cron(12 * TRIM_STEP)  # growing again: a new peak
    assert allocator.cron(0)
    assert calls == [0, 0, 0]


def test_the_tail_of_a_drain_is_trimmed():
    calls: list[int] = []
    allocator = Allocator(trim=lambda pad: calls.append(pad) or 1)
    allocator.cron(TRIM_STEP - 2)
    assert not allocator.cron(TRIM_STEP // 2)  # more than half is left
    assert allocator.cron(TRIM_STEP // 2 - 1)
    assert len(calls) == 1
    small = Allocator(trim=lambda pad: calls.append(pad) or 1)
    small.cron(TRIM_MIN + 1)
    assert not small.cron(2)  # nearly all of it freed, yet less than TRIM_MIN
    assert len(calls) == 1


def test_a_steady_dataset_never_trims():
    calls: list[int] = []
    allocator = Allocator(trim=lambda pad: calls.append(pad) or 0)
    for i in range(1000):
        allocator.cron(5 * TRIM_STEP + (i % 7) * (TRIM_STEP // 8))
    assert calls == []


def test_glibc_has_malloc_trim_and_it_runs():
    allocator = Allocator()
    assert allocator.can_trim == sys.platform.startswith("linux")
    if allocator.can_trim:
        allocator.cron(TRIM_STEP)
        assert allocator.cron(0) and allocator.trims == 1
