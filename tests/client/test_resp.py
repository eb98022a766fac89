"""The reply parsers and the command encoder, with property tests.

Any reply, cut at any byte boundaries, must parse to the same value with
hiredis (what the clients use) and with the pure-Python typed parser (what
disquette-cli uses); and any command the client encodes must be read back
unchanged by the server's own request reader.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.client.errors import LeavingError, ProtocolError, ResponseError, error_from_reply
from disquette.client.resp import (
    Status,
    TypedParser,
    encode_command,
    from_bytes,
    make_parser,
    to_bytes,
)
from disquette.protocol.reader import RequestReader
from tests.support.fuzz import examples

line_text = st.binary(max_size=20).filter(lambda b: b"\r" not in b and b"\n" not in b)
error_text = st.builds(
    lambda code, rest: code + (" " + rest if rest else ""),
    st.sampled_from(["ERR", "NOREPL", "LEAVING", "PAUSED", "BADID", "WHATEVER"]),
    st.text(alphabet="abcdefghij .'", max_size=20),
)
scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.binary(max_size=40),  # may contain CRLF: bulk strings are length-prefixed
    st.builds(Status, line_text),
    st.builds(error_from_reply, error_text),
    st.none(),
)
replies = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5), max_leaves=20)


def wire(value: Any, null_array: bool = False) -> bytes:
    """The RESP2 bytes of a reply value."""
    if isinstance(value, ResponseError):
        return b"-" + str(value).encode() + b"\r\n"
    if isinstance(value, Status):
        return b"+" + value + b"\r\n"
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    if isinstance(value, int):
        return b":%d\r\n" % value
    if value is None:
        return b"*-1\r\n" if null_array else b"$-1\r\n"
    return b"*%d\r\n" % len(value) + b"".join(wire(v) for v in value)


def normal(value: Any) -> Any:
    """Comparable form: errors by class and text, statuses as plain bytes."""
    if isinstance(value, ResponseError):
        return (type(value), str(value))
    if isinstance(value, list):
        return [normal(v) for v in value]
    if isinstance(value, bytes):
        return bytes(value)
    return value


def parse_in_pieces(parser: Any, data: bytes, cuts: list[int]) -> list[Any]:
    out = []
    last = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        parser.feed(data[last:cut])
        last = cut
        while (reply := parser.gets()) is not False:
            out.append(reply)
    return out


@settings(max_examples=examples(300))
@given(st.lists(replies, min_size=1, max_size=4), st.data())
def test_any_reply_split_anywhere_parses_the_same(values, data):
    stream = b"".join(wire(v) for v in values)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    expected = [normal(v) for v in values]
    assert [normal(r) for r in parse_in_pieces(make_parser(), stream, cuts)] == expected
    assert [normal(r) for r in parse_in_pieces(TypedParser(), stream, cuts)] == expected


@given(replies)
def test_one_byte_at_a_time(value):
    stream = wire(value)
    cuts = list(range(len(stream)))
    assert [normal(r) for r in parse_in_pieces(make_parser(), stream, cuts)] == [normal(value)]
    assert [normal(r) for r in parse_in_pieces(TypedParser(), stream, cuts)] == [normal(value)]


def test_typed_parser_tells_status_from_bulk():
    parser = TypedParser()
    parser.feed(b"+OK\r\n$2\r\nOK\r\n")
    status, bulk = parser.gets(), parser.gets()
    assert isinstance(status, Status) and status == b"OK"
    assert not isinstance(bulk, Status) and bulk == b"OK"


def test_null_array_and_null_bulk_are_none():
    for parser in (make_parser(), TypedParser()):
        parser.feed(b"*-1\r\n$-1\r\n*0\r\n")
        assert [parser.gets(), parser.gets(), parser.gets()] == [None, None, []]


def test_error_replies_become_exceptions_named_after_their_code():
    for parser in (make_parser(), TypedParser()):
        parser.feed(b"-LEAVING This node is leaving the cluster\r\n")
        error = parser.gets()
        assert isinstance(error, LeavingError)
        assert (error.code, error.message) == ("LEAVING", "This node is leaving the cluster")


@pytest.mark.parametrize("junk", [b"?what\r\n", b":12x\r\n"])
def test_protocol_errors(junk):
    for parser in (make_parser(), TypedParser()):
        parser.feed(junk)
        with pytest.raises(ProtocolError):
            parser.gets()


args_strategy = st.lists(st.binary(max_size=30), min_size=1, max_size=6)


@settings(max_examples=examples(300))
@given(st.lists(args_strategy, min_size=1, max_size=4), st.data())
def test_encoded_commands_read_back_by_the_server_reader(commands, data):
    stream = b"".join(encode_command(args) for args in commands)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(stream)), max_size=6))))
    reader = RequestReader()
    got = []
    last = 0
    for cut in [*cuts, len(stream)]:
        got += reader.feed(stream[last:cut])
        last = cut
    assert got == commands


@given(st.binary())
def test_binary_names_round_trip_through_str(name):
    assert to_bytes(from_bytes(name)) == name


def test_to_bytes():
    assert to_bytes(b"x") == b"x"
    assert to_bytes("é") == "é".encode()
    assert to_bytes(42) == b"42"
    assert to_bytes(bytearray(b"ab")) == b"ab"
    for bad in (True, 1.5, None):
        with pytest.raises(TypeError):
            to_bytes(bad)


@pytest.mark.parametrize("count", [1, 2, 63, 64, 100])
@pytest.mark.parametrize("size", [0, 1, 1023, 1024, 5000])
def test_encoding_is_the_same_either_side_of_the_header_tables(count, size):
    """Counts and lengths the tables hold, and those past them (formatted)."""
    args = [bytes([65 + i % 26]) * size for i in range(count)]
    expected = b"*%d\r\n" % count + b"".join(b"$%d\r\n%s\r\n" % (size, a) for a in args)
    assert encode_command(args) == expected
    assert RequestReader().feed(expected) == [args]
