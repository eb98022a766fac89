"""The heap trim after the dataset shrinks: when it happens, and that it is there."""

from __future__ import annotations

import sys

from disquette.server.allocator import SETTLE_TICKS, TRIM_MIN, TRIM_STEP, Allocator

MB = 1 << 20


def counting() -> tuple[Allocator, list[int]]:
    calls: list[int] = []
    return Allocator(trim=lambda pad: calls.append(pad) or 1), calls


def test_a_drain_trims_every_step_and_once_at_its_end():
    allocator, calls = counting()
    assert not allocator.cron(100 * MB)
    assert not allocator.cron(90 * MB)
    assert allocator.cron(90 * MB - TRIM_STEP)  # a step gone while shrinking
    assert not allocator.cron(50 * MB)
    assert not allocator.cron(45 * MB)
    assert allocator.cron(45 * MB)  # shrinking stopped: the end of the drain
    assert not allocator.cron(45 * MB)
    assert not allocator.cron(45 * MB + MB // 2)
    assert len(calls) == 2


def test_a_steady_or_wavering_dataset_never_trims():
    allocator, calls = counting()
    for i in range(1000):
        allocator.cron(100 * MB + (i % 7) * (TRIM_MIN // 8))
    allocator.cron(100 * MB)  # below the peak (103 MB) by less than TRIM_MIN, and stays
    allocator.cron(100 * MB)
    assert calls == []


def test_growing_again_starts_a_new_peak():
    allocator, calls = counting()
    allocator.cron(40 * MB)
    allocator.cron(30 * MB)
    assert allocator.cron(30 * MB)  # 10 MB gone, shrinking stopped
    allocator.cron(60 * MB)
    allocator.cron(55 * MB)
    assert allocator.cron(55 * MB)
    assert len(calls) == 2


def test_a_drain_that_pauses_is_trimmed_again_once_settled():
    """The end-of-shrink trim spent at a pause; the rest of the drain, under TRIM_MIN
    by the accounted size, is trimmed once the size has stayed the same a while."""
    allocator, calls = counting()
    allocator.cron(20 * MB)
    allocator.cron(10 * MB)
    assert allocator.cron(10 * MB)  # the pause looks like the end of the drain
    allocator.cron(8 * MB)  # the drain goes on: 2 MB more, under TRIM_MIN
    assert not any(allocator.cron(8 * MB) for _ in range(SETTLE_TICKS - 1))
    assert allocator.cron(8 * MB)  # settled below the last trim
    assert not any(allocator.cron(8 * MB) for _ in range(3 * SETTLE_TICKS))  # once only
    assert len(calls) == 2


def test_a_drain_is_trimmed_once_more_when_its_size_has_settled():
    """What goes after the end-of-shrink trim outside the accounted size (tables,
    reply buffers) is given back once the size has stayed the same a while."""
    allocator, calls = counting()
    allocator.cron(100 * MB)
    allocator.cron(80 * MB)  # less than TRIM_STEP gone: no trim while shrinking
    assert allocator.cron(80 * MB)  # shrinking stopped: the end of the drain
    assert not any(allocator.cron(80 * MB) for _ in range(SETTLE_TICKS - 2))
    assert allocator.cron(80 * MB)  # settled
    assert not any(allocator.cron(80 * MB) for _ in range(3 * SETTLE_TICKS))  # once only
    assert len(calls) == 2


def test_glibc_has_malloc_trim_and_it_runs():
    allocator = Allocator()
    assert allocator.can_trim == sys.platform.startswith("linux")
    if allocator.can_trim:
        allocator.cron(TRIM_STEP)
        assert allocator.cron(0)
