"""RESP2 for the client side: encoding commands and parsing replies.

Requests are always multi-bulk. Arguments may be ``bytes``, ``str`` (UTF-8;
lone surrogates from ``surrogateescape`` round-trip binary queue names) or
``int``.

Two reply parsers share one interface, ``feed(data)`` then ``gets()`` until it
returns ``False`` (not enough data yet):

* :func:`make_parser` returns hiredis' C parser, used by the clients. An error
  reply comes back as an exception instance (never raised), so a pipeline keeps
  its place in the stream.
* :class:`TypedParser` is a pure-Python parser that also tells a status reply
  (``+OK``, returned as :class:`Status`) from a bulk string, which hiredis does
  not. ``disquette-cli`` needs that to print replies the way redis-cli does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol

import hiredis

from disquette.client.errors import ProtocolError, error_from_reply

Arg = bytes | str | int


def to_bytes(value: Arg) -> bytes:
    """One command argument as bytes."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, int) and not isinstance(value, bool):
        return b"%d" % value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"command arguments must be bytes, str or int, not {type(value).__name__}")


def from_bytes(value: bytes) -> str:
    """A name (queue, node ID...) as text; binary names survive via ``surrogateescape``."""
    return value.decode("utf-8", "surrogateescape")


# Headers of the common sizes, made once: formatting them per argument was most of
# what encoding a request cost (bulk sends encode hundreds of thousands a second).
_COUNT_LINES: Final = [b"*%d\r\n" % n for n in range(64)]
_BULK_HEADERS: Final = [b"$%d\r\n" % n for n in range(1024)]


def encode_command(args: Sequence[bytes]) -> bytes:
    """One request in multi-bulk form; ``args`` are already bytes."""
    n = len(args)
    if 0 < n < 64:
        try:
            return (
                _COUNT_LINES[n] + b"\r\n".join([_BULK_HEADERS[len(a)] + a for a in args]) + b"\r\n"
            )
        except IndexError:  # an argument of 1 KiB or more
            pass
    return b"*%d\r\n" % n + b"".join([b"$%d\r\n%s\r\n" % (len(a), a) for a in args])


class Parser(Protocol):
    def feed(self, data: bytes) -> None: ...

    def gets(self) -> Any: ...


def make_parser() -> Parser:
    """hiredis' reply parser, with error replies mapped to the client's exception classes."""
    return hiredis.Reader(replyError=error_from_reply, protocolError=ProtocolError)


class Status(bytes):
    """A status reply (``+OK``) as opposed to a bulk string, from :class:`TypedParser`."""

    __slots__ = ()


class TypedParser:
    """An incremental RESP2 parser that keeps status replies apart from bulk strings."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def gets(self) -> Any:
        """The next complete reply, or ``False`` when more data is needed."""
        try:
            value, end = self._parse(0)
        except _Incomplete:
            return False
        del self._buf[:end]
        return value

    def _line(self, pos: int) -> tuple[bytes, int]:
        end = self._buf.find(b"\r\n", pos)
        if end < 0:
            raise _Incomplete
        return bytes(self._buf[pos:end]), end + 2

    def _parse(self, pos: int) -> tuple[Any, int]:
        line, pos = self._line(pos)
        if not line:
            raise ProtocolError("empty reply line")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return Status(rest), pos
        if kind == b"-":
            return error_from_reply(rest.decode("utf-8", "replace")), pos
        if kind == b":":
            return _integer(rest), pos
        if kind == b"$":
            size = _integer(rest)
            if size < 0:
                return None, pos
            if len(self._buf) < pos + size + 2:
                raise _Incomplete
            if self._buf[pos + size : pos + size + 2] != b"\r\n":
                raise ProtocolError("bulk string not terminated by CRLF")
            return bytes(self._buf[pos : pos + size]), pos + size + 2
        if kind == b"*":
            count = _integer(rest)
            if count < 0:
                return None, pos
            items = []
            for _ in range(count):
                item, pos = self._parse(pos)
                items.append(item)
            return items, pos
        raise ProtocolError(f"Protocol error, got {kind!r} as reply type byte")


class _Incomplete(Exception):
    """Internal: the buffer ends before the reply does."""


def _integer(text: bytes) -> int:
    try:
        return int(text)
    except ValueError:
        raise ProtocolError(f"invalid integer {text!r} in reply") from None
