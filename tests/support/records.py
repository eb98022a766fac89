"""Checks shared by the tables whose records nodes gossip and save (crons, policies).

Each table has a ``decode`` taking a record from a peer or a file and giving None for
one it must not trust: these helpers tell whether a field list is refused and make the
test that random bytes never make it raise.
"""

from __future__ import annotations

from collections.abc import Callable

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fuzz import examples

Decode = Callable[[bytes], object]


def refused(decode: Decode, fields: tuple[object, ...]) -> bool:
    """Whether ``decode`` gives None for ``fields`` packed as a record is."""
    return decode(msgpack.packb(fields, use_bin_type=True)) is None


def garbage_never_crashes(decode: Decode) -> Callable[[], None]:
    """A test giving ``decode`` random bytes: it may refuse them, never raise."""

    @settings(max_examples=examples(2000))
    @given(st.binary(max_size=200))
    def test(data: bytes) -> None:
        decode(data)

    return test
