"""The parsers of the kinds of value (config/values.py): what each reads, what it
refuses and how it says so, with hypothesis against a model of each grammar."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.config import values
from disquette.config.cstring import INT64_MAX, INT64_MIN
from disquette.config.values import Refused
from tests.support.fuzz import examples


def refusal(parse, *args) -> Refused:
    with pytest.raises(Refused) as info:
        parse(*args)
    return info.value


@pytest.mark.parametrize(
    ("text", "value"),
    [(b"0", 0), (b"12", 12), (b"+12", 12), (b"-12", -12), (b"007", 7), (b"12\x00junk", 12),
     (b"9223372036854775807", INT64_MAX), (b"-9223372036854775808", INT64_MIN)],
)  # fmt: skip
def test_integer_reads(text, value):
    assert values.integer(text) == value


@pytest.mark.parametrize(
    "text",
    [b"", b" 5", b"5 ", b"77abc", b"abc", b"-", b"+", b"1.0", b"0x10", b"1_000", b"5k",
     b"\x005", b"9223372036854775808", b"1" * 40],
)  # fmt: skip
def test_integer_refuses(text):
    assert not refusal(values.integer, text).readable or text.isdigit()


def test_integer_range_is_readable_and_says_the_range():
    e = refusal(values.integer, b"99999", 0, 65535)
    assert e.readable
    assert e.explain("port", "Invalid port") == (
        "Invalid port: port '99999' is out of range; accepted: a whole number from 0 to 65535"
    )
    e = refusal(values.integer, b"77abc", 0, 65535)
    assert not e.readable
    assert e.explain("port", "Invalid port") == (
        "port '77abc' is not a whole number; accepted: a whole number from 0 to 65535"
    )
    assert "of 1 or more" in refusal(values.integer, b"0", 1).accepted


@pytest.mark.parametrize(
    ("text", "value"),
    [(b"0", 0), (b"100", 100), (b"1b", 1), (b"1B", 1), (b"1k", 1000), (b"1K", 1000),
     (b"1kb", 1024), (b"1kB", 1024), (b"2m", 2_000_000), (b"2mb", 2 << 20), (b"2Mb", 2 << 20),
     (b"2MB", 2 << 20), (b"3g", 3_000_000_000), (b"3gb", 3 << 30), (b"3GB", 3 << 30),
     (b"007mb", 7 << 20), (b"10gb\x00x", 10 << 30)],
)  # fmt: skip
def test_size_reads_disques_units(text, value):
    assert values.size(text) == value


@pytest.mark.parametrize(
    "text",
    [b"100MBs", b"100xyz", b"1.5gb", b"10 kb", b"", b"mb", b"1tb", b"1kib", b"-1gb", b"1e3",
     b"1gb ", b"99999999999gb"],
)  # fmt: skip
def test_size_refuses(text):
    e = refusal(values.size, text)
    assert "k (1000), kb (1024), m, mb, g or gb" in e.accepted


def test_size_message_for_the_issue():
    e = refusal(values.size, b"100MBs", 1)
    assert e.explain("maxmemory", "You need to specify a memory limit greater than zero") == (
        "maxmemory '100MBs' is not a size; accepted: a number of bytes, or a number with a "
        "unit: k (1000), kb (1024), m, mb, g or gb, in any case (such as 100mb), above 0"
    )
    e = refusal(values.size, b"0", 1)
    assert e.explain("maxmemory", "You need to specify a memory limit greater than zero") == (
        "You need to specify a memory limit greater than zero: maxmemory '0' is out of range; "
        "accepted: a number of bytes, or a number with a unit: k (1000), kb (1024), m, mb, g or "
        "gb, in any case (such as 100mb), above 0"
    )
    assert refusal(values.size, b"64mb", 1, 63 << 20).accepted.endswith("from 1 to 63mb")


@pytest.mark.parametrize(
    ("text", "unit", "value"),
    [(b"15000", "ms", 15000), (b"15s", "ms", 15000), (b"5000ms", "ms", 5000),
     (b"2m", "ms", 120_000), (b"1h", "s", 3600), (b"1d", "s", 86400), (b"250MS", "ms", 250),
     (b"1ms", "us", 1000), (b"10", "us", 10), (b"3000ms", "s", 3), (b"-1", "us", -1)],
)  # fmt: skip
def test_duration_reads_a_number_of_its_unit_or_a_number_with_a_unit(text, unit, value):
    assert values.duration(text, unit, None) == value


@pytest.mark.parametrize(
    ("text", "unit", "problem"),
    [(b"1ms", "s", "is not a whole number of seconds"), (b"1500ms", "s", "of seconds"),
     (b"5 s", "ms", "is not a duration"), (b"5sec", "ms", "is not a duration"),
     (b"", "s", "is not a duration"), (b"1.5s", "ms", "is not a duration"),
     (b"-1", "ms", "is out of range")],
)  # fmt: skip
def test_duration_refuses(text, unit, problem):
    e = refusal(values.duration, text, unit)
    assert problem in e.problem
    assert "us, ms, s, m (minutes), h or d" in e.accepted


@pytest.mark.parametrize(("text", "value"), [(b"yes", True), (b"YES", True), (b"No", False)])
def test_boolean(text, value):
    assert values.boolean(text) is value


@pytest.mark.parametrize("text", [b"true", b"1", b"", b"y", b"on"])
def test_boolean_refuses_all_but_yes_and_no(text):
    e = refusal(values.boolean, text)
    assert e.readable and e.accepted == "yes or no"


def test_choice():
    assert values.choice(b"WARNING", ("notice", "warning")) == "warning"
    e = refusal(values.choice, b"loud", ("notice", "warning"))
    assert e.explain("loglevel") == (
        "loglevel 'loud' is not one of the choices; accepted: notice, warning"
    )


# ---------------------------------------------------------------- models

MODEL_NUMBER = re.compile(r"([+-]?)([0-9]+)([a-zA-Z]*)")
UNIT_WORDS = ["", "b", "k", "kb", "m", "mb", "g", "gb", "K", "MB", "Gb", "s", "ms", "us", "h", "d"]
UNIT_WORDS += ["x", "mbs", "tb", "kib", "sec", "min"]


@settings(max_examples=examples(500))
@given(
    st.sampled_from(["", "+", "-"]),
    st.integers(0, 10**12),
    st.sampled_from(UNIT_WORDS),
)
def test_size_agrees_with_its_model(sign, number, unit):
    text = f"{sign}{number}{unit}".encode()
    units = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 10**6, "mb": 1 << 20, "g": 10**9,
             "gb": 1 << 30}  # fmt: skip
    expected = None
    if unit.lower() in units:
        expected = (-number if sign == "-" else number) * units[unit.lower()]
        if not 0 <= expected <= INT64_MAX:
            expected = None
    try:
        assert values.size(text) == expected
    except Refused:
        assert expected is None


@settings(max_examples=examples(500))
@given(st.integers(0, 10**9), st.sampled_from(UNIT_WORDS), st.sampled_from(["us", "ms", "s"]))
def test_duration_agrees_with_its_model(number, unit, directive_unit):
    text = f"{number}{unit}".encode()
    micros = {"us": 1, "ms": 1000, "s": 10**6, "m": 60 * 10**6, "h": 3600 * 10**6,
              "d": 86400 * 10**6}  # fmt: skip
    expected = None
    given_unit = unit.lower() or directive_unit
    if given_unit in micros:
        total = number * micros[given_unit]
        if total % micros[directive_unit] == 0 and total // micros[directive_unit] <= INT64_MAX:
            expected = total // micros[directive_unit]
    try:
        assert values.duration(text, directive_unit) == expected
    except Refused:
        assert expected is None


@settings(max_examples=examples(1000))
@given(st.binary(max_size=12), st.integers(-5, 5), st.integers(-5, 5))
def test_random_bytes_only_ever_read_or_refused(raw, lo, hi):
    for parse in (
        lambda: values.integer(raw, lo, lo + abs(hi)),
        lambda: values.size(raw, None, None),
        lambda: values.duration(raw, "ms", None),
        lambda: values.boolean(raw),
        lambda: values.choice(raw, ("a", "b")),
    ):
        try:
            parse()
        except Refused as e:
            assert e.explain("name").startswith("name '")


@pytest.mark.parametrize(
    ("text", "seed"),
    [(b"disquette-0.disquette:7711", ("disquette-0.disquette", 7711, 0)),
     (b"10.0.0.1:7711@17000", ("10.0.0.1", 7711, 17000)),
     (b"[fe80::1]:7711", ("fe80::1", 7711, 0)),
     (b"localhost:1", ("localhost", 1, 0))],
)  # fmt: skip
def test_seed_reads(text, seed):
    assert values.seed(text) == seed


@pytest.mark.parametrize(
    "text", [b"", b"host", b"host:", b":7711", b"host:0", b"host:65536", b"host:1@", b"host:1@x",
             b"bad name:1", b"-host:1", b"host:+1", b"[::1:1"],
)  # fmt: skip
def test_seed_refuses(text):
    assert "accepted: host:port or host:port@bus-port" in str(refusal(values.seed, text))


@settings(max_examples=examples(300))
@given(st.binary(max_size=40))
def test_seed_reads_or_refuses_anything(raw):
    try:
        seed = values.seed(raw)
    except Refused:
        return
    assert 0 < seed.port <= 65535 and 0 <= seed.bus_port <= 65535 and seed.host


def test_ip_address_is_canonical_or_refused():
    assert values.ip_address(b"10.0.0.1") == "10.0.0.1"
    assert values.ip_address(b"FE80:0::1") == "fe80::1"
    assert values.ip_address(b"") == ""
    assert "is not an IP address" in str(refusal(values.ip_address, b"pod.local"))
