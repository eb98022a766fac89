"""Unit tests of the sans-I/O request reader (Disque's request parsing)."""

from __future__ import annotations

import pytest

from disquette.protocol.reader import ProtocolError, RequestReader

KIB64 = 64 * 1024


def err(text: bytes) -> ProtocolError:
    return ProtocolError(b"-ERR Protocol error: " + text + b"\r\n")


TOO_BIG_INLINE = err(b"too big inline request")
UNBALANCED = err(b"unbalanced quotes in request")
TOO_BIG_MBULK = err(b"too big mbulk count string")
BAD_MBULK = err(b"invalid multibulk length")
TOO_BIG_BULK = err(b"too big bulk count string")
BAD_BULK = err(b"invalid bulk length")


def mb(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def feed_pieces(pieces: list[bytes], limit: int = 1 << 30) -> tuple[list, RequestReader]:
    reader = RequestReader(limit)
    out: list = []
    for piece in pieces:
        out.extend(reader.feed(piece))
    return out, reader


def check(data: bytes, expected: list, limit: int = 1 << 30, buffered: int = 0) -> None:
    """``data`` gives ``expected`` whole, byte by byte and cut anywhere in two or three."""
    n = len(data)
    ways = [[data], [data[i : i + 1] for i in range(n)]]
    if n <= 1000:
        cuts = range(n + 1)
    else:  # big data: cut near both ends and at a few places in between
        cuts = sorted({*range(6), *range(n - 5, n + 1), *range(0, n, n // 20)})
    ways += [[data[:i], data[i:]] for i in cuts]
    step = max(1, n // 12)
    ways += [[data[:i], data[i:j], data[j:]] for i in range(0, n, step) for j in range(i, n, step)]
    ways.append([data[i : i + 4096] for i in range(0, n, 4096)])
    for pieces in ways:
        out, reader = feed_pieces(pieces, limit)
        assert out == expected, pieces
        assert reader.buffered == (0 if out and isinstance(out[-1], ProtocolError) else buffered)


# -- the value type ---------------------------------------------------------------


def test_protocol_error_is_a_value() -> None:
    e = ProtocolError(b"-ERR x\r\n")
    assert e.reply == b"-ERR x\r\n"
    assert not isinstance(e, BaseException)
    assert e == ProtocolError(b"-ERR x\r\n") and e != ProtocolError(None)
    with pytest.raises(AttributeError):
        e.other = 1  # type: ignore[attr-defined]


# -- multi-bulk ---------------------------------------------------------------------


def test_single_request() -> None:
    check(mb(b"ADDJOB", b"q", b"x" * 64, b"0"), [[b"ADDJOB", b"q", b"x" * 64, b"0"]])


def test_binary_arguments_with_crlf() -> None:
    args = [b"a\r\nb", b"\r\n", b"$3\r\n", b"*1\r\n", b"", b"\0\xff"]
    check(mb(*args), [args])
    check(mb(b"x") + mb(*args) + mb(b"y"), [[b"x"], args, [b"y"]])


def test_pipeline() -> None:
    reqs = [[b"PING"], [b"ADDJOB", b"q", b"body", b"0"], [b"GETJOB", b"FROM", b"q"]] * 6
    check(b"".join(mb(*r) for r in reqs), reqs)


def test_argument_longer_than_fast_path_table() -> None:
    big = bytes(range(256)) * 100  # 25600 bytes, with CRLF inside
    check(mb(b"SET", big), [[b"SET", big]])
    out, _ = feed_pieces([mb(b"a") + mb(b"x" * 20000) + mb(b"b")])
    assert out == [[b"a"], [b"x" * 20000], [b"b"]]


def test_empty_multibulk_is_ignored() -> None:
    check(b"*0\r\n*-1\r\n*-9223372036854775808\r\n" + mb(b"PING"), [[b"PING"]])


def test_count_and_header_end_at_cr_and_skip_one_byte() -> None:
    # Disque finds the first CR and skips the byte after it without looking.
    check(b"*1\rX$4\r\nPING\r\n", [[b"PING"]])
    check(b"*1\r\n$4\rXPING\r\n", [[b"PING"]])


def test_body_trailer_is_skipped_unread() -> None:
    check(b"*1\r\n$4\r\nPINGxy" + mb(b"A"), [[b"PING"], [b"A"]])


def test_unfinished_request_is_buffered() -> None:
    data = mb(b"ADDJOB", b"q", b"body")
    for i in range(1, len(data)):
        out, reader = feed_pieces([data[:i]])
        assert out == [] and reader.buffered == i
        assert reader.feed(data[i:]) == [[b"ADDJOB", b"q", b"body"]]
        assert reader.buffered == 0


def test_largest_count_and_bulk_length_are_accepted() -> None:
    check(b"*1048576\r\n", [], buffered=10)
    check(b"*1\r\n$536870912\r\nabc", [], buffered=19)


@pytest.mark.parametrize(
    "count",
    [
        b"x",
        b"",
        b"1048577",
        b"01",
        b"00",
        b"+1",
        b" 1",
        b"1 ",
        b"-0",
        b"-",
        b"1x",
        b"-9223372036854775809",
        b"9223372036854775808",
        b"99999999999999999999999",
    ],
)
def test_invalid_multibulk_length(count: bytes) -> None:
    check(b"*" + count + b"\r\n", [BAD_MBULK])


def test_too_big_mbulk_count_string() -> None:
    check(b"*" + b"1" * (KIB64 - 1), [], buffered=KIB64)
    assert feed_pieces([b"*" + b"1" * KIB64])[0] == [TOO_BIG_MBULK]
    # The same once the CR is there: more than 64 KiB came without it.
    assert feed_pieces([b"*" + b"1" * KIB64 + b"\r\n"])[0] == [TOO_BIG_MBULK]
    # At exactly 64 KiB before the CR the line is read (and is not a number).
    assert feed_pieces([b"*" + b"1" * (KIB64 - 1) + b"\r\n"])[0] == [BAD_MBULK]
    pieces = [b"*", b"1" * 40000, b"1" * 25535, b"1"]
    assert feed_pieces(pieces)[0] == [TOO_BIG_MBULK]


@pytest.mark.parametrize(
    ("first", "reply"),
    [
        (b"X", b"-ERR Protocol error: expected '$', got 'X'\r\n"),
        (b":", b"-ERR Protocol error: expected '$', got ':'\r\n"),
        (b"*", b"-ERR Protocol error: expected '$', got '*'\r\n"),
        (b"\xff", b"-ERR Protocol error: expected '$', got '\xff'\r\n"),
        (b"\n", b"-ERR Protocol error: expected '$', got ' '\r\n"),
        # Formatted into a C string: a NUL ends the message there.
        (b"\0", b"-ERR Protocol error: expected '$', got '\r\n"),
    ],
)
def test_expected_dollar(first: bytes, reply: bytes) -> None:
    check(
        mb(b"ok") + b"*2\r\n$1\r\na\r\n" + first + b"3\r\nabc\r\n", [[b"ok"], ProtocolError(reply)]
    )


def test_expected_dollar_got_cr() -> None:
    check(b"*1\r\n\r\n", [ProtocolError(b"-ERR Protocol error: expected '$', got ' '\r\n")])


def test_expected_dollar_waits_for_the_line() -> None:
    check(b"*1\r\nX3", [], buffered=6)
    # Without a CR within 64 KiB, the line is too big before its first byte is looked at.
    out, _ = feed_pieces([b"*1\r\nX" + b"y" * KIB64])
    assert out == [TOO_BIG_BULK]


@pytest.mark.parametrize(
    "length",
    [b"-1", b"x", b"", b"536870913", b"01", b"+1", b" 1", b"1 ", b"-0", b"99999999999999999999"],
)
def test_invalid_bulk_length(length: bytes) -> None:
    check(b"*1\r\n$" + length + b"\r\n", [BAD_BULK])


def test_header_errors_do_not_wait_for_the_body() -> None:
    reader = RequestReader()
    assert reader.feed(b"*2\r\n$3\r\nSET\r\n$600000000\r\n") == [BAD_BULK]


def test_too_big_bulk_count_string() -> None:
    head = mb(b"x") + b"*2\r\n$1\r\na\r\n"
    check(head + b"$" + b"1" * (KIB64 - 1), [[b"x"]], buffered=len(head) - 11 + KIB64)
    assert feed_pieces([head + b"$" + b"1" * KIB64])[0] == [[b"x"], TOO_BIG_BULK]
    assert feed_pieces([head + b"$" + b"1" * KIB64 + b"\r\n"])[0] == [[b"x"], TOO_BIG_BULK]
    assert feed_pieces([head + b"$" + b"1" * (KIB64 - 1) + b"\r\n"])[0] == [[b"x"], BAD_BULK]


def test_big_bulk_in_chunks() -> None:
    body = bytes(range(256)) * (20 * 4096)  # 20 MiB
    data = mb(b"ADDJOB", b"q", body, b"0") + mb(b"PING")
    reader = RequestReader()
    out: list = []
    chunk = 64 * 1024
    for i in range(0, len(data), chunk):
        out.extend(reader.feed(data[i : i + chunk]))
        if not out:
            assert reader.buffered == min(i + chunk, len(data))
    assert out == [[b"ADDJOB", b"q", body, b"0"], [b"PING"]]
    assert reader.buffered == 0


# -- inline ---------------------------------------------------------------------------


def test_inline_basic() -> None:
    check(b"PING\r\nSET a b\nGET  a\t \r\n", [[b"PING"], [b"SET", b"a", b"b"], [b"GET", b"a"]])


def test_inline_double_quote_escapes() -> None:
    line = b'SET k "a\\nb\\r\\t\\b\\a\\\\\\"\\x41\\x4a\\xzz\\q" x\r\n'
    check(line, [[b"SET", b"k", b'a\nb\r\t\x08\x07\\"AJxzzq', b"x"]])


def test_inline_single_quotes() -> None:
    check(b"SET k 'it\\'s a \\n \"b\"'\r\n", [[b"SET", b"k", b'it\'s a \\n "b"']])


def test_inline_quotes_inside_a_word() -> None:
    check(b'a"b c"d\r\n', [UNBALANCED])
    check(b'a"b c" d\r\n', [[b"ab c", b"d"]])


@pytest.mark.parametrize(
    "line", [b'SET a "b', b"SET a 'b", b'"a"b', b"'a'b", b'"a""b"', b'"\\"', b"'a\\'"]
)
def test_inline_unbalanced_quotes(line: bytes) -> None:
    check(b"PING\r\n" + line + b"\r\nPING\r\n", [[b"PING"], UNBALANCED])


def test_inline_empty_arguments_are_dropped() -> None:
    check(b"SET \"\" x ''\r\n", [[b"SET", b"x"]])
    check(b"\"\" ''\r\n", [])


def test_inline_empty_lines_are_ignored() -> None:
    check(b"\r\n\n   \r\n\t\n" + b"PING\r\n", [[b"PING"]])


def test_inline_cr_only_stripped_before_newline() -> None:
    check(b"PI\rNG\r\n", [[b"PI", b"NG"]])
    check(b"PING\r\r\n", [[b"PING"]])


def test_inline_vertical_tab_stays_in_an_argument() -> None:
    # sdssplitargs ends an unquoted argument only at space, tab, CR, LF or NUL.
    check(b"a\x0bb \x0bc\x0c\r\n", [[b"a\x0bb", b"c\x0c"]])


def test_too_big_inline_request() -> None:
    check(b"x" * KIB64, [], buffered=KIB64)
    assert feed_pieces([b"x" * (KIB64 + 1)])[0] == [TOO_BIG_INLINE]
    assert feed_pieces([b"x" * KIB64 + b"\r\n"])[0] == [TOO_BIG_INLINE]
    assert feed_pieces([b"x" * (KIB64 - 1) + b"\r\n"])[0] == [[b"x" * (KIB64 - 1)]]
    pieces = [b"PING\r\n", b"x" * 30000, b"x" * 30000, b"x" * 5537]
    assert feed_pieces(pieces)[0] == [[b"PING"], TOO_BIG_INLINE]


def test_inline_byte_by_byte_long_line_is_linear() -> None:
    # 60 KiB fed a byte at a time must not be quadratic (no timing assertion:
    # a quadratic reader would simply make this test very slow).
    line = b"x" * 60000
    reader = RequestReader()
    for i in range(len(line)):
        assert reader.feed(line[i : i + 1]) == []
    assert reader.feed(b"\n") == [[line]]


# -- mixtures, errors, limits ---------------------------------------------------------


def test_inline_and_multibulk_mixed() -> None:
    data = b"PING\r\n" + mb(b"SET", b"a\r\nb") + b"GET a\n" + b"*0\r\n" + mb(b"QUIT")
    check(data, [[b"PING"], [b"SET", b"a\r\nb"], [b"GET", b"a"], [b"QUIT"]])


def test_good_requests_come_before_the_error() -> None:
    data = mb(b"A") + b"B\r\n" + mb(b"C") + b"*x\r\n" + mb(b"D")
    check(data, [[b"A"], [b"B"], [b"C"], BAD_MBULK])


def test_dead_after_error() -> None:
    reader = RequestReader()
    assert reader.feed(b"PING\r\n*1\r\n$x\r\n") == [[b"PING"], BAD_BULK]
    assert reader.feed(mb(b"PING")) == []
    assert reader.feed(b"PING\r\n") == []
    assert reader.buffered == 0


def test_empty_feed() -> None:
    reader = RequestReader()
    assert reader.feed(b"") == []
    assert reader.feed(b"*1\r") == []
    assert reader.feed(b"") == []
    assert reader.feed(b"\n$1\r\na\r\n") == [[b"a"]]


def test_query_buffer_limit() -> None:
    req = mb(b"PING", b"x" * 10)  # 31 bytes
    size = len(req)
    check(req * 3, [[b"PING", b"x" * 10]] * 3, limit=size)
    # Many requests in one feed larger than the limit are fine: it is per request.
    check(req * 5 + req[:10], [[b"PING", b"x" * 10]] * 5, limit=size, buffered=10)
    # One byte more than the limit and the connection is dropped without a reply.
    big = mb(b"PING", b"x" * 11)
    check(req + big + req, [[b"PING", b"x" * 10], ProtocolError(None)], limit=size)
    check(req + big[:size], [[b"PING", b"x" * 10]], limit=size, buffered=size)
    check(req + big[: size + 1], [[b"PING", b"x" * 10], ProtocolError(None)], limit=size)
    # Inline requests too.
    check(b"PING\r\n" + b"x" * 30 + b"\r\n", [[b"PING"], ProtocolError(None)], limit=20)
    # The limit wins over an error detected on the same byte.
    check(b"*1\r\nX\r\n", [ProtocolError(None)], limit=6)
    check(b"*1\r\nX\r\n", [err(b"expected '$', got 'X'")], limit=7)


def test_query_buffer_limit_counts_parsed_arguments() -> None:
    # The arguments already read of an unfinished request count.
    reader = RequestReader(100)
    assert reader.feed(b"*3\r\n" + b"$40\r\n" + b"a" * 40 + b"\r\n") == []
    assert reader.buffered == 51
    assert reader.feed(b"$40\r\n" + b"b" * 40 + b"\r\n") == []
    assert reader.buffered == 98
    assert reader.feed(b"$1\r\n") == [ProtocolError(None)]
    assert reader.buffered == 0
