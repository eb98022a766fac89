"""Sans-I/O reader of client requests: bytes in, argv lists out.

This is the server's hot path, so it is written for CPython speed first. It
reproduces Disque's request parsing (Redis 3.x ``processInputBuffer``): a
request starting with ``*`` is multi-bulk, anything else is an inline line;
the protocol errors and their exact texts are Disque's.

Disque looks at its query buffer after each ``read()``, so a few of its checks
depend on how the bytes happened to be cut. This reader instead gives the
result Disque would give if the bytes arrived one at a time, whatever the
cuts: feeding a stream in any pieces returns the same requests and the same
error. Concretely:

* a line (inline request, ``*<count>``, ``$<len>``) is "too big" once more
  than 64 KiB of it has arrived without its terminator (``\\n`` for inline,
  ``\\r`` for the others), even if the terminator comes later in the same feed;
* ``*<count>`` and ``$<len>`` lines end at their first ``\\r`` and the byte
  after it is skipped unread, as is the two-byte trailer of a bulk body;
* an inline line ending in a bare ``\\n`` is consumed up to that ``\\n``
  (Disque also eats the next byte when it is already in the buffer);
* a request larger than ``max_query_buffer`` bytes makes the reader give up
  (``ProtocolError(None)``: close without a reply) as soon as its byte number
  ``max_query_buffer + 1`` arrives, as Disque checks the buffer before parsing.
  Unlike Disque, the bulk arguments already parsed of an unfinished request
  count too, so the reader never holds more than that limit plus one feed.

How it is fast: when a feed starts at a request boundary (the usual case), a
scanner walks the multi-bulk requests byte by byte, compiled to C in the
compiled build (it is a loop over integers, which mypyc turns into plain C),
slicing each argument out once; it takes a request only in its canonical form
(``*<n>\r\n``, then ``$<len>\r\n<body>\r\n`` per argument, integers without
leading zeros, lines within the line limit), where the general parser would give
the same. Anything else (inline requests, odd framing, errors, an unfinished
request) falls back, from the first request that did not fit, to a general
parser that walks the bytes with ``find`` and start offsets. Between feeds an
unfinished line waits in a ``bytearray`` (never rescanned) and an unfinished
bulk body in a list of chunks joined once, so a 100 MB argument arriving in
64 KiB pieces costs linear time.
"""

from __future__ import annotations

from typing import Final

from disquette.protocol.inline import UnbalancedQuotes, split_args

__all__ = ["ProtocolError", "RequestReader"]

_LINE_MAX: Final = 64 * 1024  # longest line without its terminator (INLINE_MAX_SIZE)
_MBULK_MAX: Final = 1024 * 1024  # largest multi-bulk count
_BULK_MAX: Final = 512 * 1024 * 1024  # largest bulk length
_LL_MIN: Final = -(1 << 63)
_LL_MAX: Final = (1 << 63) - 1

# Reader modes: where the next byte belongs.
_IDLE: Final = 0  # start of a request
_INLINE: Final = 1  # inside an inline line
_COUNT: Final = 2  # inside the "*<count>" line
_HEADER: Final = 3  # inside a "$<len>" line
_BODY: Final = 4  # inside a bulk body (or its two trailing bytes)


class ProtocolError:
    """A protocol error: the last thing a reader returns before it goes dead.

    ``reply`` is the complete error line to send before closing the
    connection, or ``None`` to close it without a reply (query buffer limit).
    """

    __slots__ = ("reply",)

    def __init__(self, reply: bytes | None) -> None:
        self.reply = reply

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProtocolError) and other.reply == self.reply

    def __hash__(self) -> int:
        return hash(self.reply)

    def __repr__(self) -> str:
        return f"ProtocolError({self.reply!r})"


_TOO_BIG_INLINE: Final = b"-ERR Protocol error: too big inline request\r\n"
_UNBALANCED: Final = b"-ERR Protocol error: unbalanced quotes in request\r\n"
_TOO_BIG_MBULK: Final = b"-ERR Protocol error: too big mbulk count string\r\n"
_BAD_MBULK: Final = b"-ERR Protocol error: invalid multibulk length\r\n"
_TOO_BIG_BULK: Final = b"-ERR Protocol error: too big bulk count string\r\n"
_BAD_BULK: Final = b"-ERR Protocol error: invalid bulk length\r\n"


def _expected_dollar(byte: int) -> bytes:
    # Disque formats this with "%c" into a C string: a NUL byte ends the text
    # there, and a CR or LF is turned into a space like in every error.
    if byte == 0:
        return b"-ERR Protocol error: expected '$', got '\r\n"
    if byte in (10, 13):
        byte = 32
    return b"-ERR Protocol error: expected '$', got '%c'\r\n" % byte


def _string2ll(s: bytes) -> int | None:
    """Redis' ``string2ll``: an optional '-', digits, no leading zero, 64 bits."""
    if len(s) > 20:  # longer than any 64-bit integer (and int() refuses huge strings)
        return None
    if s.isdigit():
        if s[0] == 48 and len(s) > 1:
            return None
        v = int(s)
        return v if v <= _LL_MAX else None
    if s[:1] == b"-" and s[1:].isdigit() and s[1] != 48:
        v = -int(s[1:])
        return v if v >= _LL_MIN else None
    return None


def _scan(d: bytes, line_max: int, out: list) -> int:
    """The fast path: append the canonical multi-bulk requests at the start of ``d``
    to ``out``; return where the first other one (or an unfinished one) starts."""
    n = len(d)
    pos = 0
    while pos < n:
        if d[pos] != 42:  # '*'
            return pos
        count, i = _header(d, pos + 1, _MBULK_MAX)
        if count <= 0 or i - 2 - pos > line_max:  # (a count of 0: not for this path)
            return pos
        argv: list[bytes] = []
        while count:
            if i >= n or d[i] != 36:  # '$'
                return pos
            length, body = _header(d, i + 1, _BULK_MAX)
            if length < 0 or body - 2 - i > line_max:
                return pos
            end = body + length
            if end + 2 > n or d[end] != 13 or d[end + 1] != 10:
                return pos
            argv.append(d[body:end])
            i = end + 2
            count -= 1
        out.append(argv)
        pos = i
    return pos


def _header(d: bytes, i: int, limit: int) -> tuple[int, int]:
    """The number of a canonical ``*<count>`` or ``$<len>`` line, its digits from
    ``d[i]`` (no sign, no leading zero, at most ``limit``) up to its CRLF: the number
    and where the CRLF ends, or ``(-1, 0)`` for anything else (or not all there)."""
    n = len(d)
    if i >= n:
        return -1, 0
    c = d[i]
    if c < 48 or c > 57:
        return -1, 0
    value = c - 48
    i += 1
    if value:
        while i < n:
            c = d[i]
            if c < 48 or c > 57:
                break
            value = value * 10 + c - 48
            if value > limit:
                return -1, 0
            i += 1
    if i + 1 >= n or d[i] != 13 or d[i + 1] != 10:
        return -1, 0
    return value, i + 2


def _inline_args(line: bytes) -> list[bytes]:
    """The arguments of an inline line (without its newline); empty ones dropped."""
    if line[-1:] == b"\r":
        line = line[:-1]
    args = split_args(line)  # raises UnbalancedQuotes
    if b"" in args:
        args = [a for a in args if a]
    return args


class RequestReader:
    """Turns the bytes read from one client into requests (lists of ``bytes``).

    ``feed(data)`` returns every request completed by ``data``, in order,
    possibly followed by one :class:`ProtocolError`; after that error the
    reader is dead and returns ``[]``. Requests that are empty (``*0``,
    ``*-1``, blank inline lines) are consumed and not returned.
    """

    __slots__ = (
        "_argv",
        "_buf",
        "_bulklen",
        "_chunks",
        "_got",
        "_held",
        "_left",
        "_line_max",
        "_max",
        "_mode",
    )

    def __init__(self, max_query_buffer: int = 1 << 30, line_max: int = _LINE_MAX) -> None:
        self._max = max_query_buffer
        self._line_max = line_max  # the fuzz tests shrink it
        # Bytes received for the unfinished request, 0 when at a request
        # boundary, -1 once dead: the hot path tests just this.
        self._held = 0
        self._mode = _IDLE
        self._buf = bytearray()  # unfinished line (modes _INLINE, _COUNT, _HEADER)
        self._chunks: list[bytes] = []  # unfinished bulk body (mode _BODY)
        self._got = 0  # bytes in _chunks
        self._argv: list[bytes] = []  # arguments of the unfinished multi-bulk request
        self._left = 0  # arguments still to come in that request
        self._bulklen = 0  # length of the body being read (mode _BODY)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a request."""
        return self._held if self._held > 0 else 0

    def feed(self, data: bytes) -> list:
        """Parse ``data``; return the requests it completes (see the class doc)."""
        if self._held or len(data) > self._max:
            return self._feed_slow(data)
        out: list = []
        pos = _scan(data, self._line_max, out)
        if pos < len(data):
            self._parse(data, pos, out, False)
        return out

    # -- the general path ----------------------------------------------------

    def _feed_slow(self, data: bytes) -> list:
        if self._held < 0 or not data:
            return []
        out: list = []
        if self._held + len(data) > self._max:
            # Feed in pieces that cannot take the unfinished request over the
            # limit; once it holds exactly the limit, one more byte is too many.
            start = 0
            end = len(data)
            while start < end:
                room = self._max - self._held
                if room <= 0:
                    self._die(out, None)
                    break
                self._feed_unlimited(data[start : start + room], out)
                if self._held < 0:
                    break
                start += room
            return out
        self._feed_unlimited(data, out)
        return out

    def _feed_unlimited(self, data: bytes, out: list) -> None:
        """Parse ``data``, which cannot take any request over the size limit."""
        if self._held:
            pos = self._resume(data, out)
            if pos < 0 or pos == len(data):
                return
            if self._mode != _IDLE:
                # The line that was waiting is done; go on with its request.
                pos = self._parse(data, pos, out, True)
                if pos < 0 or pos == len(data):
                    return
            data = data[pos:]
        out.extend(self.feed(data))

    def _die(self, out: list, reply: bytes | None) -> int:
        out.append(ProtocolError(reply))
        self._held = -1
        self._mode = _IDLE
        self._buf = bytearray()
        self._chunks = []
        self._argv = []
        return -1

    def _resume(self, data: bytes, out: list) -> int:
        """Finish the waiting line or body with ``data``.

        Returns where the rest of ``data`` starts, or -1 if it was all used up
        (or the reader died).
        """
        mode = self._mode
        n = len(data)
        if mode == _BODY:
            chunks = self._chunks
            got = self._got
            need = self._bulklen + 2 - got
            if n < need:
                chunks.append(data)
                self._got = got + n
                self._held += n
                return -1
            body_missing = self._bulklen - got
            if body_missing > 0:
                chunks.append(data[:body_missing])
            arg = b"".join(chunks)
            if len(arg) > self._bulklen:  # the first trailing byte was there already
                arg = arg[: self._bulklen]
            self._chunks = []
            self._got = 0
            self._held += need
            self._end_arg(arg, out)
            return need

        buf = self._buf
        have = len(buf)
        if mode == _INLINE:
            p = data.find(b"\n", 0, self._line_max + 1 - have)
            if p < 0:
                if have + n > self._line_max:
                    return self._die(out, _TOO_BIG_INLINE)
                buf += data
                self._held += n
                return -1
            line = bytes(buf) + data[:p]
            self._buf = bytearray()
            try:
                args = _inline_args(line)
            except UnbalancedQuotes:
                return self._die(out, _UNBALANCED)
            if args:
                out.append(args)
            self._held = 0
            self._mode = _IDLE
            return p + 1

        # "*<count>" or "$<len>": ends at its first CR, plus one byte.
        if not have:
            return 0  # between two arguments: nothing waiting
        if buf[-1] == 13:
            line = bytes(buf[:-1])
            pos = 1
        else:
            r = data.find(b"\r", 0, self._line_max + 1 - have)
            if r < 0 or r + 1 >= n:
                if r < 0 and have + n > self._line_max:
                    return self._die(out, _TOO_BIG_MBULK if mode == _COUNT else _TOO_BIG_BULK)
                buf += data
                self._held += n
                return -1
            line = bytes(buf) + data[:r]
            pos = r + 2
        self._buf = bytearray()
        self._held += pos
        if mode == _COUNT:
            count = _string2ll(line[1:])
            if count is None or count > _MBULK_MAX:
                return self._die(out, _BAD_MBULK)
            if count <= 0:
                self._held = 0
                self._mode = _IDLE
            else:
                self._argv = []
                self._left = count
                self._mode = _HEADER
            return pos
        first = line[0] if line else 13  # an empty line starts with its CR
        if first != 36:
            return self._die(out, _expected_dollar(first))
        bulklen = _string2ll(line[1:])
        if bulklen is None or bulklen < 0 or bulklen > _BULK_MAX:
            return self._die(out, _BAD_BULK)
        self._bulklen = bulklen
        self._mode = _BODY
        return pos

    def _end_arg(self, arg: bytes, out: list) -> None:
        argv = self._argv
        argv.append(arg)
        self._left -= 1
        if self._left:
            self._mode = _HEADER
        else:
            out.append(argv)
            self._argv = []
            self._held = 0
            self._mode = _IDLE

    def _parse(self, d: bytes, pos: int, out: list, one: bool) -> int:
        """Parse ``d`` from ``pos``, which is at a line or body boundary.

        With ``one``, stop after finishing the current request. Returns where
        parsing stopped, or -1 if ``d`` was used up (what is left is saved) or
        the reader died.
        """
        n = len(d)
        mode = self._mode
        # Where the current request started, in d's coordinates (it may have
        # started in an earlier feed).
        start = pos - self._held
        argv = self._argv
        left = self._left
        bulklen = self._bulklen
        find = d.find
        line_max = self._line_max
        while pos < n:
            if mode == _IDLE:
                if one:
                    self._mode = _IDLE
                    self._held = 0
                    return pos
                start = pos
                if d[pos] == 42:  # '*'
                    r = find(b"\r", pos, pos + line_max + 1)
                    if r < 0 or r + 1 >= n:
                        if r < 0 and n - pos > line_max:
                            return self._die(out, _TOO_BIG_MBULK)
                        return self._save_line(d, pos, start, _COUNT)
                    count = _string2ll(d[pos + 1 : r])
                    if count is None or count > _MBULK_MAX:
                        return self._die(out, _BAD_MBULK)
                    pos = r + 2
                    if count > 0:
                        argv = []
                        left = count
                        mode = _HEADER
                else:
                    p = find(b"\n", pos, pos + line_max + 1)
                    if p < 0:
                        if n - pos > line_max:
                            return self._die(out, _TOO_BIG_INLINE)
                        return self._save_line(d, pos, start, _INLINE)
                    try:
                        args = _inline_args(d[pos:p])
                    except UnbalancedQuotes:
                        return self._die(out, _UNBALANCED)
                    if args:
                        out.append(args)
                    pos = p + 1
            elif mode == _HEADER:
                r = find(b"\r", pos, pos + line_max + 1)
                if r < 0 or r + 1 >= n:
                    if r < 0 and n - pos > line_max:
                        return self._die(out, _TOO_BIG_BULK)
                    self._argv = argv
                    self._left = left
                    return self._save_line(d, pos, start, _HEADER)
                if d[pos] != 36:  # '$'
                    return self._die(out, _expected_dollar(d[pos]))
                parsed = _string2ll(d[pos + 1 : r])
                if parsed is None or parsed < 0 or parsed > _BULK_MAX:
                    return self._die(out, _BAD_BULK)
                bulklen = parsed
                pos = r + 2
                mode = _BODY
            else:  # _BODY
                end = pos + bulklen
                if end + 2 > n:
                    break  # unfinished: saved below
                argv.append(d[pos:end])
                pos = end + 2
                left -= 1
                if left:
                    mode = _HEADER
                else:
                    out.append(argv)
                    mode = _IDLE
        self._argv = argv
        self._left = left
        self._mode = mode
        if mode == _IDLE:
            self._held = 0
        else:
            self._held = n - start
            if mode == _BODY:
                self._bulklen = bulklen
                self._chunks = [d[pos:]] if pos < n else []
                self._got = n - pos
        return -1

    def _save_line(self, d: bytes, pos: int, start: int, mode: int) -> int:
        self._buf = bytearray(d[pos:])
        self._mode = mode
        self._held = len(d) - start
        return -1
