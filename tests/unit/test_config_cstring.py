"""The C conversions and the Redis glob used by the configuration system."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.config.cstring import (
    INT64_MAX,
    INT64_MIN,
    atoi,
    format_memory,
    memtoll,
    sds_repr,
    strict_int,
    strtol_octal,
    strtoll,
    strtoll_full,
    yesnotoi,
)
from disquette.config.glob import stringmatch
from disquette.protocol.inline import split_args


@pytest.mark.parametrize(
    "text, value",
    [
        (b"", 0),
        (b"12", 12),
        (b"  \t12", 12),
        (b"+12", 12),
        (b"-12", -12),
        (b"12abc", 12),
        (b"abc", 0),
        (b"- 1", 0),
        (b"2147483647", 2147483647),
        (b"2147483648", -2147483648),
        (b"4294967296", 0),
        (b"99999999999999999999", -1),  # LONG_MAX cast to int
        (b"-99999999999999999999", 0),  # LONG_MIN cast to int
        (b"1\x002", 1),
    ],
)
def test_atoi(text, value):
    assert atoi(text) == value


def test_strtoll_saturates():
    assert strtoll(b"99999999999999999999") == INT64_MAX
    assert strtoll(b"-99999999999999999999") == INT64_MIN
    assert strtoll(b"0" * 5000 + b"7") == 7
    assert strtoll(b"9" * 5000) == INT64_MAX


@pytest.mark.parametrize(
    "text, value",
    [
        (b"", 0),  # the empty string is 0
        (b"0", 0),
        (b"007", 7),
        (b"+5", 5),
        (b"-5", -5),
        (b" 5", None),
        (b"5 ", None),
        (b"\t5", None),
        (b"-", None),
        (b"+", None),
        (b"5x", None),
        (b"0x10", None),
        (b"1.0", None),
        (b"9223372036854775807", INT64_MAX),
        (b"9223372036854775808", None),
        (b"-9223372036854775808", INT64_MIN),
        (b"-9223372036854775809", None),
        (b"12\x00junk", 12),  # a C string ends at NUL
    ],
)
def test_strict_int(text, value):
    assert strict_int(text) == value


def test_strtoll_full():
    assert strtoll_full(b"") == 0
    assert strtoll_full(b" 5") == 5
    assert strtoll_full(b"\t-5") == -5
    assert strtoll_full(b"5 ") is None
    assert strtoll_full(b"-") is None
    assert strtoll_full(b"99999999999999999999") == INT64_MAX


@pytest.mark.parametrize(
    "text, value, error",
    [
        (b"", 0, False),
        (b"-", 0, False),
        (b"10", 10, False),
        (b"10b", 10, False),
        (b"10k", 10_000, False),
        (b"10KB", 10_240, False),
        (b"10m", 10_000_000, False),
        (b"10mB", 10 << 20, False),
        (b"10G", 10_000_000_000, False),
        (b"10gb", 10 << 30, False),
        (b"-2kb", -2048, False),
        (b"10xb", 10, True),
        (b"10 kb", 10, True),
        (b"+10", 0, True),
        (b"abc", 0, True),
        (b"1" * 128, INT64_MAX, True),
        (b"10gb\x00x", 10 << 30, False),
    ],
)
def test_memtoll(text, value, error):
    assert memtoll(text) == (value, error)


def test_memtoll_wraps_like_c():
    value, error = memtoll(b"9223372036854775807kb")
    assert not error and value == (INT64_MAX * 1024) % 2**64 - 2**64


def test_strtol_octal():
    assert strtol_octal(b"755") == (0o755, False)
    assert strtol_octal(b"8") == (0, False)
    assert strtol_octal(b"7" * 30)[1] is True


def test_yesnotoi():
    assert [yesnotoi(w) for w in (b"yes", b"YES", b"No", b"no", b"y", b"", b"yes\x00x")] == [
        1,
        1,
        0,
        0,
        -1,
        -1,
        1,
    ]


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
        (2**64 - 1, b"-1"),
        (2**64 - 1024, b"-1kb"),
    ],
)
def test_format_memory(value, text):
    assert format_memory(value) == text


def test_sds_repr():
    assert sds_repr(b"") == b'""'
    assert sds_repr(b'a "b" \\ \n\r\t\x07\x08\x00\xff\x7f\'') == (
        b'"a \\"b\\" \\\\ \\n\\r\\t\\a\\b\\x00\\xff\\x7f\'"'
    )


@settings(max_examples=500)
@given(st.binary(max_size=40))
def test_sds_repr_round_trips_through_split_args(value):
    assert split_args(b"x " + sds_repr(value)) == [b"x", value]


@settings(max_examples=300)
@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
def test_format_memory_round_trips_through_memtoll(value):
    assert memtoll(format_memory(value)) == (value, False)


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


@settings(max_examples=1000)
@given(
    st.text(alphabet="ab*?", max_size=8).map(str.encode),
    st.text(alphabet="ab", max_size=8).map(str.encode),
)
def test_stringmatch_agrees_with_fnmatch_without_classes(pattern, string):
    assert stringmatch(pattern, string) == fnmatch.fnmatchcase(string.decode(), pattern.decode())
