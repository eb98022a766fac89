"""The C string helpers and the Redis glob used by the configuration system."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.config import values
from disquette.config.cstring import INT64_MAX, INT64_MIN, format_memory, sds_repr
from disquette.config.glob import stringmatch
from disquette.protocol.inline import split_args
from tests.support.fuzz import examples


@pytest.mark.parametrize(
    "value, text",
    [
        (0, b"0"),
        (1, b"1"),
        (1023, b"1023"),
        (1024, b"1kb"),
        (1536, b"1536"),
        (2048 * 1024, b"2mb"),
        (1 << 30, b"1gb"),
        (3 << 30, b"3gb"),
        (1000, b"1000"),
        (-1024, b"-1kb"),
    ],
)
def test_format_memory(value, text):
    assert format_memory(value) == text


def test_sds_repr():
    assert sds_repr(b"") == b'""'
    assert sds_repr(b'a "b" \\ \n\r\t\x07\x08\x00\xff\x7f\'') == (
        b'"a \\"b\\" \\\\ \\n\\r\\t\\a\\b\\x00\\xff\\x7f\'"'
    )


@settings(max_examples=examples(500))
@given(st.binary(max_size=40))
def test_sds_repr_round_trips_through_split_args(value):
    assert split_args(b"x " + sds_repr(value)) == [b"x", value]


@settings(max_examples=examples(300))
@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
def test_format_memory_round_trips_through_the_size_parser(value):
    assert values.size(format_memory(value), None) == value


# ---------------------------------------------------------------- glob


@pytest.mark.parametrize(
    "pattern, string, expected",
    [
        (b"*", b"port", True),
        (b"", b"port", False),
        (b"", b"", True),
        (b"port", b"port", True),
        (b"Port", b"port", False),  # case-sensitive
        (b"po?t", b"port", True),
        (b"po??t", b"port", False),
        (b"p*t", b"port", True),
        (b"p**t", b"port", True),
        (b"*t", b"port", True),
        (b"port*", b"port", True),
        (b"port**", b"port", True),
        (b"port?", b"port", False),
        (b"*a*b", b"xaxb", True),
        (b"[mp]ort", b"port", True),
        (b"[mp]ort", b"sort", False),
        (b"[^p]ort", b"port", False),
        (b"[^p]ort", b"sort", True),
        (b"[!p]ort", b"port", True),  # '!' is a plain character, not a negation
        (b"[!p]ort", b"!ort", True),
        (b"[a-z]ort", b"port", True),
        (b"[z-a]ort", b"port", True),  # reversed ranges work
        (b"[0-9]ort", b"port", False),
        (b"[\\]]", b"]", True),
        (b"[\\p]ort", b"port", True),
        (b"\\*", b"*", True),
        (b"\\*", b"x", False),
        (b"p\\ort", b"port", True),
        (b"port\\", b"port", False),
        (b"port\\", b"port\\", True),
        (b"po[r", b"por", True),  # unterminated class ends with the pattern
        (b"po[r", b"port", False),
        (b"[a-]", b"_", True),  # range 'a'..']' (swapped)
        (b"[a-]", b"b", False),
        (b"[]", b"x", False),
        (b"[^]", b"x", True),
        (b"[\\", b"x", False),
        (b"a[", b"a", False),
    ],
)
def test_stringmatch(pattern, string, expected):
    assert stringmatch(pattern, string) is expected


def test_stringmatch_nocase():
    assert stringmatch(b"PORT", b"port", nocase=True)
    assert stringmatch(b"[O-P]ort", b"port", nocase=True)


def test_stringmatch_many_stars_is_fast():
    assert not stringmatch(b"*a" * 40 + b"b", b"a" * 60)


@settings(max_examples=examples(1000))
@given(
    st.text(alphabet="ab*?", max_size=8).map(str.encode),
    st.text(alphabet="ab", max_size=8).map(str.encode),
)
def test_stringmatch_agrees_with_fnmatch_without_classes(pattern, string):
    assert stringmatch(pattern, string) == fnmatch.fnmatchcase(string.decode(), pattern.decode())
