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

How it is fast: when a feed starts at a request boundary (the usual case),
``bytes.split(b"\\r\\n")`` cuts the whole feed in C and each multi-bulk
request becomes one list slice; it is accepted only if every ``$<len>`` header
is canonical and matches the length of the part after it, which proves that
the split landed exactly on the frame boundaries. Anything else (an argument
containing ``\\r\\n``, inline requests, odd framing, errors, an unfinished
request) falls back, from the first request that did not fit, to a general
parser that walks the bytes with ``find`` and start offsets. Between feeds an
unfinished line waits in a ``bytearray`` (never rescanned) and an unfinished
bulk body in a list of chunks joined once, so a 100 MB argument arriving in
64 KiB pieces costs linear time.
"""

from __future__ import annotations

from itertools import chain
from typing import Final

from disquette.protocol.inline import UnbalancedQuotes, split_args

__all__ = ["ProtocolError", "RequestReader"]

_LINE_MAX: Final = 64 * 1024  # longest line without its terminator (INLINE_MAX_SIZE)
_MBULK_MAX: Final = 1024 * 1024  # largest multi-bulk count
_BULK_MAX: Final = 512 * 1024 * 1024  # largest bulk length
_LL_MIN: Final = -(1 << 63)
_LL_MAX: Final = (1 << 63) - 1

# Canonical "*<n>" and "$<n>" header lines, for the split fast path.
_COUNTS: Final[dict[bytes, int]] = {b"*%d" % n: n for n in range(1, 4097)}
_HEADERS: Final[list[bytes]] = [b"$%d" % n for n in range(16384)]
_HEADER_OF: Final = _HEADERS.__getitem__
_chain = chain.from_iterable

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
        # At a request boundary: try the split fast path, first for the most
        # common feed of all, exactly one multi-bulk request.
        parts = data.split(b"\r\n")
        last = len(parts) - 1
        n = _COUNTS.get(parts[0])
        if n is not None and last == n + n + 1 and not parts[last]:
            argv = parts[2:last:2]
            try:
                if parts[1:last:2] == [*map(_HEADER_OF, map(len, argv))]:
                    return [argv]
            except IndexError:  # an argument longer than the header table
                pass
        return self._feed_parts(data, parts)

    def _feed_parts(self, data: bytes, parts: list[bytes]) -> list:
        """The fast path for a feed of several requests, split at CRLF."""
        last = len(parts) - 1
        counts = _COUNTS
        out: list = []
        headers: list[bytes] = []
        i = 0
        while i < last:
            n = counts.get(parts[i])
            if n is None:
                break
            j = i + n + n + 1  # first part of the next request
            if j > last:
                break  # unfinished, or the last body is not followed by CRLF
            out.append(parts[i + 2 : j : 2])
            headers += parts[i + 1 : j : 2]
            i = j
        # Check all the "$<len>" headers at once; if one is wrong (an argument
        # holds a CRLF), redo the requests one by one to find the first bad one.
        try:
            ok = headers == [*map(_HEADER_OF, map(len, _chain(out)))]
        except IndexError:
            ok = False
        if not ok:
            good = out
            out = []
            i = 0
            for argv in good:
                j = i + len(argv) * 2 + 1
                try:
                    if parts[i + 1 : j : 2] != [*map(_HEADER_OF, map(len, argv))]:
                        break
                except IndexError:
                    break
                out.append(argv)
                i = j
        if i == last and not parts[i]:
            return out
        # Where part i starts, counted from the nearer end (usually the end:
        # what is left is a request cut short by the end of the feed).
        if i + i < last:
            pos = sum(map(len, parts[:i])) + 2 * i
        else:
            pos = len(data) - sum(map(len, parts[i:])) - 2 * (last - i)
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
