"""Cluster bus framing: length-prefixed msgpack frames, decoded by the shapes given.

A frame is a 4-byte big-endian payload length followed by the payload, the
msgpack encoding of ``[sender, port, flags, generation, [message, ...]]``: a
header once, then every message queued for that peer in one event-loop
iteration. A message is a tuple whose first element is its type; bytes travel
as msgpack ``bin``. The header's ``flags`` keep the sender's own flags in their
low byte and its bus protocol version in their high byte (:data:`VERSION_SHIFT`):
0 there means version 1, the dialect of the releases that had no version on the
bus and never set those bits (their decoders ignore every flag but LEAVING).

This module knows bytes, not jobs: what each message type looks like is given
by its caller, as a :class:`Codec` built from the types of each message's
elements (``shapes``) and the checks some elements need beyond their type
(``contents``); the core's messages (:mod:`disquette.core.messages`) are one
such table, each release's its own.

Frames come from other machines, so decoding trusts nothing: a payload longer
than :data:`MAX_FRAME_BYTES` is refused from its length prefix alone, and a
decoded message of a known type must match its shape exactly before the core
sees it. Anything else raises :class:`FrameError`, and the shell closes the
link. Handlers can therefore index messages without checking their structure;
what the values mean (a job ID's format, a serialized job) is theirs to check.
One exception keeps a newer release a peer: in a frame whose header announces a
*newer* protocol version than the codec's, a message of an unknown type is
skipped and one with more elements than its shape has its extra elements dropped
(both counted), the elements the codec knows being checked as strictly as ever.
A codec built with ``tolerant=False`` refuses them too, as the releases before
versions did.

The same length prefix carries the three payloads of the ``cluster-secret``
handshake (:mod:`disquette.protocol.bus_auth`) before the first frame.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import msgpack

MAX_FRAME_BYTES: Final = 64 << 20
_UINT64_MAX: Final = (1 << 64) - 1
_LENGTH: Final = struct.Struct(">I")
#: The header's flags: the sender's bus protocol version above this bit (0: version 1).
VERSION_SHIFT: Final = 8
MEMBER_FLAGS: Final = (1 << VERSION_SHIFT) - 1
MAX_VERSION: Final = 0xFF
#: This release's bus protocol, and the oldest one it still speaks (core/dialect.py
#: speaks them; here so that ``--version`` can say them without the core).
PROTOCOL: Final = 2
OLDEST: Final = 1

#: A frame's header: sender ID, client port, flags (version included), data generation.
HeaderFields = tuple[bytes, int, int, int]


class FrameError(ValueError):
    """A frame (or a handshake payload) that is not what the bus protocol allows."""


def version_of(flags: int) -> int:
    """The bus protocol version a header's flags announce (1 when they announce none)."""
    return flags >> VERSION_SHIFT or 1


# --------------------------------------------------------------------------
# Encoding.

_packer = msgpack.Packer(use_bin_type=True, autoreset=True)


def encode_frame(header: Sequence[Any], messages: Sequence[Sequence[Any]]) -> bytes:
    """One frame: the header (sender, port, flags, generation), then the messages
    (tuples of ints, bytes and sequences)."""
    sender, port, flags, generation = header
    payload = _packer.pack((sender, port, flags, generation, messages))
    return _LENGTH.pack(len(payload)) + payload


def encode_payload(payload: bytes) -> bytes:
    """A raw length-prefixed payload (the cluster-secret handshake)."""
    return _LENGTH.pack(len(payload)) + payload


# --------------------------------------------------------------------------
# Splitting a byte stream into payloads.


class FrameReader:
    """Cuts the bytes of one connection into payloads, refusing oversized ones early.

    ``limit`` may change between payloads (the handshake's are small).
    """

    __slots__ = ("_buffer", "_pos", "limit")

    def __init__(self, limit: int = MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._pos = 0
        self.limit = limit

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next_payload(self) -> bytes | None:
        """The next complete payload, or None until more bytes arrive (FrameError if
        its length prefix is over the limit)."""
        buffer = self._buffer
        pos = self._pos
        if len(buffer) - pos >= 4:
            (length,) = _LENGTH.unpack_from(buffer, pos)
            if length > self.limit:
                raise FrameError(f"frame of {length} bytes exceeds the {self.limit} bytes limit")
            end = pos + 4 + length
            if end <= len(buffer):
                self._pos = end
                return bytes(buffer[pos + 4 : end])
        if pos:
            del buffer[:pos]
            self._pos = 0
        return None


# --------------------------------------------------------------------------
# Decoding and validation.

_HEX: Final = frozenset(b"0123456789abcdef")


def is_node_id(value: Any) -> bool:
    """40 lowercase hexadecimal bytes, as node IDs are made."""
    return type(value) is bytes and len(value) == 40 and _HEX.issuperset(value)


def is_port(value: Any) -> bool:
    return type(value) is int and 0 <= value <= 0xFFFF


#: (index, check) pairs: the elements of a message that need more than their type checked.
Contents = tuple[tuple[int, Callable[[Any], bool]], ...]


class Codec:
    """The message types one node reads, and what it did with those it could not.

    ``shapes`` gives the types of every message's elements, its type first (an
    ``int`` is in range by construction: msgpack integers are 64-bit at most);
    ``contents`` the checks of the elements that need more. ``version`` is the bus
    protocol version these shapes are; with ``tolerant`` (every versioned release),
    frames from a newer version may carry unknown types and longer messages, which
    are skipped or cut (``skipped`` and ``trimmed`` count them). The counters are
    the node's (INFO cluster).
    """

    __slots__ = ("contents", "shapes", "skipped", "tolerant", "trimmed", "version")

    def __init__(
        self,
        shapes: Mapping[int, tuple[type, ...]],
        contents: Mapping[int, Contents],
        version: int,
        tolerant: bool = True,
    ) -> None:
        self.shapes: dict[int, tuple[type, ...]] = dict(shapes)
        self.contents: dict[int, Contents] = dict(contents)
        self.version = version
        self.tolerant = tolerant
        self.skipped = 0  # messages of a type this node does not know, from newer peers
        self.trimmed = 0  # messages from newer peers whose extra elements were dropped

    def known(self, message: Any) -> bool:
        """Whether ``message`` has exactly the shape of its type."""
        if type(message) is not tuple or not message or type(message[0]) is not int:
            return False
        kind = message[0]
        if tuple(map(type, message)) != self.shapes.get(kind):
            return False
        checks = self.contents.get(kind)
        return checks is None or all(check(message[i]) for i, check in checks)

    def malformed(self, message: Any) -> str:
        """Why ``message`` does not have the shape of its type."""
        if type(message) is not tuple or not message or type(message[0]) is not int:
            return "a message is not an array starting with its type"
        kind = message[0]
        shape = self.shapes.get(kind)
        if shape is None:
            return f"unknown message type {kind}"
        if len(message) != len(shape):
            return f"message type {kind} has {len(message) - 1} fields"
        return f"message type {kind} has a malformed field"

    def from_newer(self, message: Any) -> Any:
        """A message that failed its shape, in a frame of a newer version: None to skip
        it (unknown type), the message cut to its shape (extra elements), or raise."""
        if type(message) is tuple and message and type(message[0]) is int:
            shape = self.shapes.get(message[0])
            if shape is None:
                self.skipped += 1
                return None
            if len(message) > len(shape) and self.known(message[: len(shape)]):
                self.trimmed += 1
                return message[: len(shape)]
        raise FrameError(self.malformed(message))


def decode_frame(payload: bytes, codec: Codec) -> tuple[HeaderFields, tuple[Any, ...]]:
    """The header and messages of one frame payload, by ``codec``'s shapes (raise
    FrameError). Messages a newer peer may send and ``codec`` does not know are left
    out (see :class:`Codec`): the messages returned may be fewer, or none."""
    try:
        frame = msgpack.unpackb(payload, use_list=False, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types on bad input
        raise FrameError(f"undecodable frame ({type(e).__name__})") from None
    if type(frame) is not tuple or len(frame) != 5:
        raise FrameError("a frame is not an array of 5 elements")
    sender, port, flags, generation, messages = frame
    if not is_node_id(sender) or not is_port(port) or type(flags) is not int:
        raise FrameError("malformed frame header")
    if type(generation) is not int or not 0 <= generation <= _UINT64_MAX:
        raise FrameError("malformed frame header")
    if not 0 <= flags <= 0xFFFF:
        raise FrameError("malformed frame header")
    if type(messages) is not tuple or not messages:
        raise FrameError("a frame carries no messages")
    shapes = codec.shapes
    contents = codec.contents
    kept: list[Any] | None = None  # the messages, once one is left out or cut
    for index, message in enumerate(messages):
        # One comparison of the element types with the type's shape (the common case);
        # what exactly is wrong is worked out only for a message that fails it.
        if type(message) is not tuple or tuple(map(type, message)) != shapes.get(
            message[0] if message and type(message[0]) is int else -1
        ):
            if not codec.tolerant or version_of(flags) <= codec.version:
                raise FrameError(codec.malformed(message))
            if kept is None:
                kept = list(messages[:index])
            cut = codec.from_newer(message)
            if cut is not None:
                kept.append(cut)
            continue
        kind = message[0]
        if kind in contents and not all(check(message[i]) for i, check in contents[kind]):
            raise FrameError(f"message type {kind} has a malformed field")
        if kept is not None:
            kept.append(message)
    return (sender, port, flags, generation), messages if kept is None else tuple(kept)
