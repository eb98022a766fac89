"""Cluster bus framing: length-prefixed msgpack frames, decoded strictly.

A frame is a 4-byte big-endian payload length followed by the payload, the
msgpack encoding of ``[sender, port, flags, generation, [message, ...]]``: the
:class:`~disquette.core.messages.Header` once, then every message queued for
that peer in one event-loop iteration. Messages are the core's tuples
(:mod:`disquette.core.messages`); bytes travel as msgpack ``bin``.

Frames come from other machines, so decoding trusts nothing: a payload longer
than :data:`MAX_FRAME_BYTES` is refused from its length prefix alone, and a
decoded frame must match the shape of its message types exactly (types, node
ID syntax, gossip entries, integer ranges) before the core sees it. Anything
else raises :class:`FrameError`, and the shell closes the link. Handlers in
the core can therefore index messages without checking their structure;
what the values mean (a job ID's format, a serialized job) is theirs to check.

The same length prefix carries the three payloads of the ``cluster-secret``
handshake (:mod:`disquette.protocol.bus_auth`) before the first frame.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgpack

from disquette.core import messages as msg
from disquette.core.messages import Header, Message

MAX_FRAME_BYTES: Final = 64 << 20
MAX_GOSSIP_ENTRIES: Final = 0xFFFF  # Disque's 16-bit gossip count
MAX_IP_BYTES: Final = 64
_INT64_MIN, _UINT64_MAX = -(1 << 63), (1 << 64) - 1
_LENGTH: Final = struct.Struct(">I")
_HEX: Final = frozenset(b"0123456789abcdef")
_BYTES_ONLY: Final = {bytes}
_INT_ONLY: Final = {int}


class FrameError(ValueError):
    """A frame (or a handshake payload) that is not what the bus protocol allows."""


# --------------------------------------------------------------------------
# Encoding.

_packer = msgpack.Packer(use_bin_type=True, autoreset=True)


def encode_frame(header: Header, messages: Sequence[Message]) -> bytes:
    """One frame: the header, then the messages (tuples of ints, bytes and sequences)."""
    payload = _packer.pack((header.sender, header.port, header.flags, header.generation, messages))
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


def _is_int(value: Any) -> bool:
    return type(value) is int and _INT64_MIN <= value <= _UINT64_MAX


def _is_bytes(value: Any) -> bool:
    return type(value) is bytes


def is_node_id(value: Any) -> bool:
    """40 lowercase hexadecimal bytes, as node IDs are made."""
    return type(value) is bytes and len(value) == 40 and _HEX.issuperset(value)


def _is_port(value: Any) -> bool:
    return type(value) is int and 0 <= value <= 0xFFFF


def _is_gossip_entry(entry: Any) -> bool:
    return (
        type(entry) is tuple
        and len(entry) == 6
        and is_node_id(entry[0])
        and _is_int(entry[1])
        and _is_int(entry[2])
        and _is_bytes(entry[3])
        and len(entry[3]) <= MAX_IP_BYTES
        and _is_port(entry[4])
        and type(entry[5]) is int
        and 0 <= entry[5] <= 0xFFFF
    )


def _is_gossip(value: Any) -> bool:
    return (
        type(value) is tuple
        and len(value) <= MAX_GOSSIP_ENTRIES
        and all(_is_gossip_entry(e) for e in value)
    )


def _is_node_list(value: Any) -> bool:
    return type(value) is tuple and len(value) <= MAX_GOSSIP_ENTRIES and all(map(is_node_id, value))


def _is_bytes_list(value: Any) -> bool:
    return type(value) is tuple and set(map(type, value)) <= _BYTES_ONLY


def _is_id_number_pairs(value: Any) -> bool:
    """A flat ``job_id, number, job_id, number, ...`` tuple (SETACK, GOTACK)."""
    return (
        type(value) is tuple
        and not len(value) % 2
        and set(map(type, value[::2])) <= _BYTES_ONLY
        and set(map(type, value[1::2])) <= _INT_ONLY
    )


def _is_log_entries(value: Any) -> bool:
    """A flat ``ms, node_id, text, ms, node_id, text, ...`` tuple (PROGRESS)."""
    return (
        type(value) is tuple
        and not len(value) % 3
        and set(map(type, value[::3])) <= _INT_ONLY
        and all(map(is_node_id, value[1::3]))
        and set(map(type, value[2::3])) <= _BYTES_ONLY
    )


def _is_demands(value: Any) -> bool:
    """A flat ``queue, rate, concurrency, held, ...`` tuple (RATEDEMAND)."""
    return (
        type(value) is tuple
        and not len(value) % 4
        and set(map(type, value[::4])) <= _BYTES_ONLY
        and all(type(v) is int for i, v in enumerate(value) if i % 4)
    )


#: The types of every message's elements, its type first (see
#: :mod:`disquette.core.messages`): checked at C speed, all at once. An ``int``
#: is in range by construction (msgpack integers are 64-bit at most).
SHAPES: Final[dict[int, tuple[type, ...]]] = {
    msg.PING: (int, tuple, int),
    msg.PONG: (int, tuple, int, int),
    msg.MEET: (int, tuple, int),
    msg.FAIL: (int, bytes),
    msg.REPLJOB: (int, bytes, int),
    msg.GOTJOB: (int, tuple),
    msg.ENQUEUE: (int, bytes, int),
    msg.QUEUED: (int, bytes, int),
    msg.SETACK: (int, tuple),
    msg.WILLQUEUE: (int, bytes),
    msg.GOTACK: (int, tuple),
    msg.DELJOB: (int, tuple),
    msg.NEEDJOBS: (int, bytes, int),
    msg.YOURJOBS: (int, tuple),
    msg.WORKING: (int, bytes),
    msg.PAUSE: (int, bytes, int),
    msg.HOLDERS: (int, bytes, tuple),
    msg.POLICYDIGEST: (int, int),
    msg.POLICIES: (int, tuple, int),
    msg.DEPQUERY: (int, int, tuple),
    msg.DEPSTATE: (int, int, tuple),
    msg.PROGRESS: (int, bytes, tuple),
    msg.GOTPROGRESS: (int, bytes, int),
    msg.CLAIM: (int, bytes, int),
    msg.CRONDIGEST: (int, int),
    msg.CRONS: (int, tuple, int),
    msg.CRONFIRED: (int, tuple),
    msg.OUTCOME: (int, bytes, int, bytes),
    msg.POSTPONE: (int, bytes, int, int),
    msg.RATEDEMAND: (int, int, tuple),
    msg.ACLDIGEST: (int, int),
    msg.ACLUSERS: (int, tuple, int),
}

#: The elements that need more than their type checked: (index, check) pairs.
CONTENTS: Final[dict[int, tuple[tuple[int, Callable[[Any], bool]], ...]]] = {
    msg.PING: ((1, _is_gossip),),
    msg.PONG: ((1, _is_gossip),),
    msg.MEET: ((1, _is_gossip),),
    msg.FAIL: ((1, is_node_id),),
    msg.GOTJOB: ((1, _is_bytes_list),),
    msg.YOURJOBS: ((1, _is_bytes_list),),
    msg.SETACK: ((1, _is_id_number_pairs),),
    msg.GOTACK: ((1, _is_id_number_pairs),),
    msg.DELJOB: ((1, _is_bytes_list),),
    msg.HOLDERS: ((2, _is_node_list),),
    msg.POLICIES: ((1, _is_bytes_list),),
    msg.DEPQUERY: ((2, _is_bytes_list),),
    msg.DEPSTATE: ((2, _is_id_number_pairs),),
    msg.PROGRESS: ((2, _is_log_entries),),
    msg.CRONS: ((1, _is_bytes_list),),
    msg.CRONFIRED: ((1, _is_id_number_pairs),),
    msg.RATEDEMAND: ((2, _is_demands),),
    msg.ACLUSERS: ((1, _is_bytes_list),),
}


def _malformed(message: Any) -> str:
    """Why ``message`` does not have the shape of its type."""
    if type(message) is not tuple or not message or type(message[0]) is not int:
        return "a message is not an array starting with its type"
    kind = message[0]
    shape = SHAPES.get(kind)
    if shape is None:
        return f"unknown message type {kind}"
    if len(message) != len(shape):
        return f"message type {kind} has {len(message) - 1} fields"
    return f"message type {kind} has a malformed field"


def decode_frame(payload: bytes) -> tuple[Header, tuple[Message, ...]]:
    """The header and messages of one frame payload (raise FrameError)."""
    try:
        frame = msgpack.unpackb(payload, use_list=False, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types on bad input
        raise FrameError(f"undecodable frame ({type(e).__name__})") from None
    if type(frame) is not tuple or len(frame) != 5:
        raise FrameError("a frame is not an array of 5 elements")
    sender, port, flags, generation, messages = frame
    if not is_node_id(sender) or not _is_port(port) or type(flags) is not int:
        raise FrameError("malformed frame header")
    if type(generation) is not int or not 0 <= generation <= _UINT64_MAX:
        raise FrameError("malformed frame header")
    if not 0 <= flags <= 0xFFFF:
        raise FrameError("malformed frame header")
    if type(messages) is not tuple or not messages:
        raise FrameError("a frame carries no messages")
    shapes = SHAPES
    contents = CONTENTS
    for message in messages:
        # One comparison of the element types with the type's shape (the common case);
        # what exactly is wrong is worked out only for a message that fails it.
        if type(message) is not tuple or tuple(map(type, message)) != shapes.get(
            message[0] if message and type(message[0]) is int else -1
        ):
            raise FrameError(_malformed(message))
        kind = message[0]
        if kind in contents and not all(check(message[i]) for i, check in contents[kind]):
            raise FrameError(f"message type {kind} has a malformed field")
    return Header(sender, port, flags, generation), messages
