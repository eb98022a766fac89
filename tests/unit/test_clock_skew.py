"""Clock offset estimation (core/clock.py) on synthetic round trips, on a virtual clock,
and DEBUG CLOCK-SKEW, the hook that sets a node's clock off, up to the shell.

Each sample is made the way the bus makes one: a PING leaves at virtual time ``s0``
and reads the sender's clock, the peer reads its own at some ``s1`` after that, and
the PONG arrives at ``s2``; each clock is virtual time plus its skew. The estimate's
claim is checked against the true offset: within the bound, whatever the delays.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.commands import new_state
from disquette.config import Config
from disquette.core.clock import RESOLUTION_MS, WINDOW, PeerClock, sample
from tests.support.fuzz import examples
from tests.unit.core_harness import Harness, RecordingClient

START = 1_700_000_000_000


def round_trip(clock: PeerClock, s0: int, out: int, back: int, ours: int, theirs: int) -> bool:
    """One PING leaving at virtual ``s0``, ``out`` ms to the peer, ``back`` ms home."""
    s1 = s0 + out
    return clock.add(s0 + ours, s1 + theirs, s1 + back + ours)


def holds(clock: PeerClock, true_offset: int) -> bool:
    return abs(clock.offset - true_offset) <= clock.bound


def test_one_sample_bounds_the_offset_by_half_the_round_trip():
    s = sample(START, START + 5000 + 7, START + 10)
    assert s is not None and s.rtt == 10
    assert (s.low + s.high) // 2 == 5002  # 5007 - (START + START + 10) / 2
    assert s.high - s.low == 2 * (5 + RESOLUTION_MS)


@pytest.mark.parametrize("skew", [0, 1, -1, 499, 5000, -5000, 123_456])
def test_the_estimate_holds_whatever_the_split_of_the_round_trip(skew):
    rng = random.Random(skew)
    clock = PeerClock()
    t = START
    for _ in range(50):
        out, back = rng.randint(0, 40), rng.randint(0, 40)
        assert round_trip(clock, t, out, back, ours=0, theirs=skew)
        assert holds(clock, skew)
        t += rng.randint(100, 2000)


# One round trip: the ms out, the ms back, and the ms until the next PING.
trips = st.tuples(st.integers(0, 200), st.integers(0, 200), st.integers(1, 5000))
# A stretch of round trips with both clocks held at a skew.
stretches = st.tuples(
    st.integers(-100_000, 100_000),
    st.integers(-100_000, 100_000),
    st.lists(trips, min_size=1, max_size=2 * WINDOW),
)


@settings(max_examples=examples(300))
@given(st.lists(stretches, min_size=1, max_size=4))
def test_the_estimate_holds_once_a_window_follows_the_last_step(stretch_list):
    """Whatever the delays and the steps of either clock, an estimate resting only on
    samples taken since the last step holds the true offset within its bound."""
    clock = PeerClock()
    t = START
    for ours, theirs, round_trips in stretch_list:
        for i, (out, back, pause) in enumerate(round_trips):
            round_trip(clock, t, out, back, ours, theirs)
            if len(clock.samples) <= i + 1:  # every sample is from this stretch
                assert holds(clock, theirs - ours)
            t += out + back + pause


def test_the_estimate_converges_to_the_best_round_trips():
    clock = PeerClock()
    round_trip(clock, START, 30, 30, ours=0, theirs=800)  # 60 ms round trip
    wide = clock.bound
    round_trip(clock, START + 1000, 1, 1, ours=0, theirs=800)  # 2 ms round trip
    assert clock.rtt == 2 and clock.bound == 1 + RESOLUTION_MS < wide
    assert holds(clock, 800)
    round_trip(clock, START + 2000, 50, 10, ours=0, theirs=800)  # slow, lopsided
    assert clock.rtt == 2 and clock.bound <= 1 + RESOLUTION_MS and holds(clock, 800)


def test_samples_that_pin_the_offset_from_both_sides_narrow_it():
    clock = PeerClock()
    # All of the first round trip's time on the way back, all of the second's on the way
    # out: their intervals overlap only around the true offset.
    round_trip(clock, START, 0, 40, ours=0, theirs=300)
    round_trip(clock, START + 1000, 40, 0, ours=0, theirs=300)
    assert clock.bound < 20 + RESOLUTION_MS and holds(clock, 300)


def test_the_best_sample_leaves_the_window_after_a_few_more():
    clock = PeerClock()
    round_trip(clock, START, 1, 1, ours=0, theirs=0)
    for i in range(1, WINDOW):
        round_trip(clock, START + 1000 * i, 20, 20, ours=0, theirs=0)
    assert clock.rtt == 2
    round_trip(clock, START + 1000 * WINDOW, 20, 20, ours=0, theirs=0)
    assert clock.rtt == 40 and holds(clock, 0)


@pytest.mark.parametrize("step", [5000, -5000, 40, -40])
def test_a_step_of_the_peers_clock_is_followed(step):
    clock = PeerClock()
    t = START
    for _ in range(WINDOW):
        round_trip(clock, t, 2, 2, ours=0, theirs=0)
        t += 1000
    # A step wider than the bounds is followed at the next sample; a narrower one within
    # a window of samples (until then the estimate may still lean on the old ones).
    for _ in range(WINDOW):
        round_trip(clock, t, 2, 2, ours=0, theirs=step)
        t += 1000
    assert holds(clock, step) and clock.bound <= 2 + RESOLUTION_MS


def test_a_wide_step_resets_the_window_at_once():
    clock = PeerClock()
    for i in range(WINDOW):
        round_trip(clock, START + 1000 * i, 2, 2, ours=0, theirs=0)
    round_trip(clock, START + 10_000, 2, 2, ours=0, theirs=-2500)
    assert len(clock.samples) == 1 and holds(clock, -2500)


def test_a_step_of_our_own_clock_is_followed_too():
    clock = PeerClock()
    for i in range(WINDOW):
        round_trip(clock, START + 1000 * i, 2, 2, ours=0, theirs=100)
    round_trip(clock, START + 10_000, 2, 2, ours=3000, theirs=100)
    assert holds(clock, 100 - 3000)


def test_a_pong_that_seems_to_come_before_its_ping_is_discarded():
    clock = PeerClock()
    round_trip(clock, START, 2, 2, ours=0, theirs=700)
    # Our clock stepped back 5 s while the PING was out: the round trip reads negative.
    assert not clock.add(START + 1000, START + 1002 + 700, START + 1004 - 5000)
    assert len(clock.samples) == 1 and holds(clock, 700)
    assert sample(START, START, START - 1) is None


def test_the_sample_time_is_the_pong_arrival():
    clock = PeerClock()
    round_trip(clock, START, 3, 4, ours=0, theirs=0)
    assert clock.sampled_at == START + 7


def test_verdicts_need_certainty():
    clock = PeerClock()
    round_trip(clock, START, 10, 10, ours=0, theirs=600)  # 600 +/- 13
    assert clock.certainly_over(500) and not clock.certainly_under(500)
    assert not clock.certainly_over(590) and not clock.certainly_under(590)
    assert clock.certainly_under(700) and not clock.certainly_over(700)
    negative = PeerClock()
    round_trip(negative, START, 10, 10, ours=0, theirs=-600)
    assert negative.certainly_over(500)


# ---------------------------------------------------------------- DEBUG CLOCK-SKEW


class SkewShell:
    """The one part of the shell DEBUG CLOCK-SKEW reaches."""

    def __init__(self) -> None:
        self.skews: list[int] = []

    def set_clock_skew(self, skew_ms: int) -> None:
        self.skews.append(skew_ms)


def debug(shell: SkewShell | None, *argv: bytes) -> bytes | None:
    state = new_state(Config(), Harness().node, shell=shell)  # type: ignore[arg-type]
    client = RecordingClient(1)
    state.add_client(client)
    return state.execute(client, [b"DEBUG", *argv])


def test_debug_clock_skew_sets_the_shells_clock():
    shell = SkewShell()
    for value in (b"5000", b"-5000", b"0", b"+86400000"):
        assert debug(shell, b"CLOCK-SKEW", value) == b"+OK\r\n"
    assert shell.skews == [5000, -5000, 0, 86_400_000]


@pytest.mark.parametrize("value", [b"86400001", b"-86400001", b"1.5", b"ms", b"1 "])
def test_debug_clock_skew_refuses_what_is_not_a_skew(value):
    shell = SkewShell()
    reply = debug(shell, b"clock-skew", value)
    assert reply is not None and reply.startswith(b"-ERR clock skew must be an integer of ms")
    assert shell.skews == []


def test_debug_clock_skew_needs_a_process_and_one_argument():
    assert debug(None, b"CLOCK-SKEW", b"10") == (
        b"-ERR no clock to skew: DEBUG CLOCK-SKEW needs a server process\r\n"
    )
    assert debug(SkewShell(), b"CLOCK-SKEW") == (
        b"-ERR Unknown DEBUG subcommand or wrong number of arguments for 'CLOCK-SKEW'\r\n"
    )


@settings(max_examples=examples(300))
@given(st.binary(max_size=24) | st.integers().map(lambda n: b"%d" % n))
def test_debug_clock_skew_takes_any_argument(value):
    shell = SkewShell()
    reply = debug(shell, b"CLOCK-SKEW", value)
    if reply == b"+OK\r\n":
        [skew] = shell.skews
        assert abs(skew) <= 86_400_000 and int(value or b"0") == skew  # (as strtoll)
    else:
        assert reply is not None and reply.startswith(b"-ERR clock skew must be")
        assert shell.skews == []
