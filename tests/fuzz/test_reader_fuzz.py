"""Property tests of the request reader against a slow, literal model of Disque.

The model is a direct transcription of Redis 3.x ``processInputBuffer`` (inline
and multi-bulk) run with the bytes arriving one at a time, which is the
behaviour the reader promises for any way the stream is cut.
"""

from __future__ import annotations

import re
from itertools import pairwise

from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from disquette.protocol.inline import UnbalancedQuotes, split_args
from disquette.protocol.reader import ProtocolError, RequestReader
from tests.support.fuzz import fuzz_settings

FAST = fuzz_settings(2000, HealthCheck.data_too_large)

# -- the model -----------------------------------------------------------------


def _string2ll(s: bytes) -> int | None:
    if not re.fullmatch(rb"0|-?[1-9][0-9]*", s):
        return None
    v = int(s)
    return v if -(2**63) <= v < 2**63 else None


def _err(text: bytes) -> bytes:
    return b"-ERR " + text + b"\r\n"


def _expected(c: int) -> bytes:
    text = b"Protocol error: expected '$', got '" + bytes([c]) + b"'"
    text = text.split(b"\0")[0]  # C string formatting stops at NUL
    return _err(text.replace(b"\r", b" ").replace(b"\n", b" "))


class Model:
    """Redis' processInputBuffer, run after every single byte."""

    def __init__(self, limit: int, line_max: int) -> None:
        self.limit = limit
        self.line_max = line_max
        self.qb = b""
        self.reqtype = 0  # 0 unknown, 1 inline, 2 multibulk
        self.multibulklen = 0
        self.bulklen = -1
        self.argv: list[bytes] = []
        self.reqbytes = 0  # bytes of the request not yet complete
        self.dead = False

    def push(self, byte: int) -> list:
        """One more byte; return what it completes."""
        if self.dead:
            return []
        self.qb += bytes([byte])
        self.reqbytes += 1
        if self.reqbytes > self.limit:
            self.dead = True
            return [ProtocolError(None)]
        out: list = []
        try:
            self.process(out)
        except _Fail as e:
            self.dead = True
            out.append(ProtocolError(_err(e.args[0])))
        return out

    def reset(self) -> None:
        self.reqtype = 0
        self.multibulklen = 0
        self.bulklen = -1
        self.argv = []
        self.reqbytes = 0

    def process(self, out: list) -> None:
        while self.qb:
            if not self.reqtype:
                self.reqtype = 2 if self.qb[:1] == b"*" else 1
            if self.reqtype == 1:
                if not self.inline(out):
                    return
            elif not self.multibulk(out):
                return

    def inline(self, out: list) -> bool:
        nl = self.qb.find(b"\n")
        if nl < 0:
            if len(self.qb) > self.line_max:
                raise _Fail(b"Protocol error: too big inline request")
            return False
        line = self.qb[:nl]
        if line.endswith(b"\r"):
            line = line[:-1]
        try:
            args = split_args(line)
        except UnbalancedQuotes:
            raise _Fail(b"Protocol error: unbalanced quotes in request") from None
        self.qb = self.qb[nl + 1 :]
        args = [a for a in args if a != b""]
        if args:
            out.append(args)
        self.reset()
        return True

    def count_line(self, too_big: bytes) -> int | None:
        """Where the CR ending the count line at the head of the buffer is, or None while
        that line is not complete (failing with ``too_big`` past the line limit)."""
        r = self.qb.find(b"\r")
        if r < 0:
            if len(self.qb) > self.line_max:
                raise _Fail(too_big)
            return None
        if r > len(self.qb) - 2:
            return None
        return r

    def multibulk(self, out: list) -> bool:
        if self.multibulklen == 0:
            r = self.count_line(b"Protocol error: too big mbulk count string")
            if r is None:
                return False
            ll = _string2ll(self.qb[1:r])
            if ll is None or ll > 1024 * 1024:
                raise _Fail(b"Protocol error: invalid multibulk length")
            self.qb = self.qb[r + 2 :]
            if ll <= 0:
                self.reset()
                return True
            self.multibulklen = ll
        while self.multibulklen:
            if self.bulklen == -1:
                r = self.count_line(b"Protocol error: too big bulk count string")
                if r is None:
                    return False
                if self.qb[0] != ord("$"):
                    raise _FailRaw(self.qb[0])
                ll = _string2ll(self.qb[1:r])
                if ll is None or ll < 0 or ll > 512 * 1024 * 1024:
                    raise _Fail(b"Protocol error: invalid bulk length")
                self.qb = self.qb[r + 2 :]
                self.bulklen = ll
            if len(self.qb) < self.bulklen + 2:
                return False
            self.argv.append(self.qb[: self.bulklen])
            self.qb = self.qb[self.bulklen + 2 :]
            self.bulklen = -1
            self.multibulklen -= 1
        out.append(self.argv)
        self.reset()
        return True


class _Fail(Exception):
    pass


class _FailRaw(_Fail):
    def __init__(self, c: int) -> None:
        super().__init__(_expected(c)[5:-2])


# -- strategies ----------------------------------------------------------------

TRICKY = [b"\r\n", b"\r", b"\n", b"*", b"$", b"0", b"1", b"-", b" ", b'"', b"'", b"\\", b"\0"]
binary_arg = st.one_of(
    st.binary(max_size=40),
    st.lists(st.sampled_from([*TRICKY, b"a", b"xyz"]), max_size=12).map(b"".join),
)


def encode(argv: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


@st.composite
def cuts(draw: st.DrawFn, data: bytes) -> list[bytes]:
    points = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in pairwise(bounds)]


def feed_all(reader: RequestReader, pieces: list[bytes]) -> list:
    out: list = []
    for piece in pieces:
        out.extend(reader.feed(piece))
    return out


# -- (1) round trip --------------------------------------------------------------


@FAST
@given(st.data(), st.lists(st.lists(binary_arg, min_size=1, max_size=6), max_size=8))
def test_round_trip(data: st.DataObject, requests: list[list[bytes]]) -> None:
    stream = b"".join(encode(argv) for argv in requests)
    pieces = data.draw(cuts(stream))
    reader = RequestReader()
    assert feed_all(reader, pieces) == requests
    assert reader.buffered == 0


# -- (2) garbage never raises --------------------------------------------------


garbage = st.one_of(
    st.binary(max_size=200),
    st.lists(
        st.sampled_from([*TRICKY, b"a", b"*1\r\n", b"$3\r\n", b"*-1", b"$-1", b"9" * 5000]),
        max_size=40,
    ).map(b"".join),
)


@FAST
@given(st.data(), garbage, st.sampled_from([1 << 30, 1, 7, 30]))
def test_garbage_never_raises(data: st.DataObject, stream: bytes, limit: int) -> None:
    pieces = data.draw(cuts(stream))
    reader = RequestReader(limit)
    out: list = []
    for piece in pieces:
        if out and isinstance(out[-1], ProtocolError):
            assert reader.feed(piece) == []
            continue
        got = reader.feed(piece)
        assert isinstance(got, list)
        out.extend(got)
        assert 0 <= reader.buffered <= limit
    for i, item in enumerate(out):
        if isinstance(item, ProtocolError):
            assert i == len(out) - 1
            assert item.reply is None or (
                item.reply.startswith(b"-ERR Protocol error: ") and item.reply.endswith(b"\r\n")
            )
        else:
            assert type(item) is list and item
            assert all(type(a) is bytes for a in item)


# -- (3) the reader agrees with the model --------------------------------------


def _frame() -> st.SearchStrategy[bytes]:
    digits = st.sampled_from([b"0", b"1", b"2", b"3", b"01", b"-1", b"-0", b"+1", b" 1", b"", b"x"])
    return st.one_of(
        st.lists(binary_arg, min_size=1, max_size=4).map(encode),  # valid multibulk
        st.lists(binary_arg, min_size=1, max_size=3).map(lambda a: encode(a)[:-1]),  # cut short
        st.sampled_from([b"*0\r\n", b"*-1\r\n", b"*-5\r\n", b"*-0\r\n", b"*\r\n", b"*1\rx"]),
        st.tuples(digits, digits).map(lambda t: b"*" + t[0] + b"\r\n$" + t[1] + b"\r\nabc\r\n"),
        st.tuples(st.sampled_from([b"$", b"#", b"\0", b"\r", b"\n", b"\xff"]), binary_arg).map(
            lambda t: b"*1\r\n" + t[0] + b"%d\r\n%s\r\n" % (len(t[1]), t[1])
        ),
        st.lists(binary_arg, min_size=1, max_size=3).map(  # trailer bytes are not checked
            lambda a: encode(a)[:-2] + b"zz"
        ),
        st.lists(st.sampled_from([b"a", b"bc", b" ", b"\t", b'"x y"', b"'q'", b'""', b'"\\x41"']))
        .map(b" ".join)
        .flatmap(lambda line: st.sampled_from([line + b"\r\n", line + b"\n", line])),
        st.sampled_from([b'"open\r\n', b"'x'y\r\n", b'"a"b\n', b"\r\n", b"\n", b"  \n"]),
        st.binary(min_size=1, max_size=30),  # long lines and runs without terminators
        st.sampled_from([b"*" + b"1" * 25 + b"\r\n", b"*1\r\n$" + b"9" * 25 + b"\r\n"]),
        st.binary(max_size=4).map(lambda b: b"x" * 20 + b),
    )


@FAST
@given(
    st.data(),
    st.lists(_frame(), max_size=6).map(b"".join),
    st.sampled_from([1 << 30, 1, 5, 12, 40, 100]),
    st.sampled_from([8, 16, 20]),
)
def test_matches_model(data: st.DataObject, stream: bytes, limit: int, lmax: int) -> None:
    model = Model(limit, lmax)
    expected: list[list] = []  # per byte: what that byte completes
    held: list[int] = []  # per byte: model's unfinished request size after it
    for byte in stream:
        expected.append(model.push(byte))
        held.append(0 if model.dead else model.reqbytes)
    pieces = data.draw(cuts(stream))
    reader = RequestReader(limit, lmax)
    pos = 0
    for piece in pieces:
        got = reader.feed(piece)
        want = [x for per_byte in expected[pos : pos + len(piece)] for x in per_byte]
        assert got == want, (piece, pos)
        pos += len(piece)
        if piece:
            assert reader.buffered == held[pos - 1]
