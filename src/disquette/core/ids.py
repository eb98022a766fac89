"""Job IDs: generation, validation, and the TTL the ID carries.

A job ID is 40 ASCII bytes, ``D-<node8>-<random24>-<ttl4>``: the first 8 hex
characters of the creating node's ID, 24 base64 characters (144 random bits),
and the job's TTL in minutes as 4 hex digits whose lowest bit says whether the
job is retried (odd) or at-most-once (even). The random part is a capability —
whoever knows the ID can acknowledge the job — so it comes from an
unpredictable source; 18 random bytes base64-encode to exactly 24 characters.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable
from typing import Final

ID_LEN: Final = 40
_POOL_IDS: Final = 512  # random bytes are drawn for this many IDs at a time
_SUFFIX_CACHE: Final = 1024  # distinct (ttl, at-least-once) pairs remembered


def is_valid(job_id: bytes) -> bool:
    """Disque's only check: length 40, ``D`` first, dashes at 1, 10 and 35."""
    return (
        len(job_id) == ID_LEN
        and job_id[0] == 68  # D
        and job_id[1] == 45  # -
        and job_id[10] == 45
        and job_id[35] == 45
    )


def all_valid(job_ids: list[bytes]) -> bool:
    """:func:`is_valid` for every ID, checked at C speed: all 40 bytes long, then the
    ``D`` and the dashes read from their columns of the IDs joined end to end."""
    if len(job_ids) < 4:
        return all(map(is_valid, job_ids))
    if set(map(len, job_ids)) != {ID_LEN}:
        return False
    joined = b"".join(job_ids)
    n = len(job_ids)
    dashes = b"-" * n
    return (
        joined[0::ID_LEN] == b"D" * n
        and joined[1::ID_LEN] == dashes
        and joined[10::ID_LEN] == dashes
        and joined[35::ID_LEN] == dashes
    )


_HEXVAL: Final = {ord(ch): int(ch, 16) for ch in "0123456789abcdefABCDEF"}


def ttl_minutes(job_id: bytes) -> int:
    """The TTL field read back as hex; an invalid character counts as zero."""
    n = 0
    for c in job_id[36:40]:
        n = (n << 4) | _HEXVAL.get(c, 0)
    return n


def is_at_least_once(job_id: bytes) -> bool:
    """Odd TTL field: the job was created with retry > 0."""
    return bool(ttl_minutes(job_id) & 1)


def ttl_field(ttl: int, retry: int) -> bytes:
    minutes = ttl // 60
    if minutes > 65535:
        minutes = 65535
    elif minutes < 0:
        minutes = 1
    minutes = minutes | 1 if retry > 0 else minutes & ~1
    return b"%04x" % minutes


class IdGenerator:
    """Makes job IDs for one node from a source of random bytes.

    ``randbytes(n)`` must be unpredictable in the server (``os.urandom``); the
    simulator passes a seeded source so that runs replay.
    """

    __slots__ = ("_pool", "_pos", "_prefix", "_randbytes", "_suffixes")

    def __init__(self, node_id: bytes, randbytes: Callable[[int], bytes]) -> None:
        self._prefix = b"D-" + node_id[:8] + b"-"
        self._randbytes = randbytes
        self._pool = b""
        self._pos = 0
        # "-<ttl field>" by (ttl, retry > 0): producers use a handful of TTLs.
        self._suffixes: dict[int, bytes] = {}

    def set_node(self, node_id: bytes) -> None:
        self._prefix = b"D-" + node_id[:8] + b"-"

    def new(self, ttl: int, retry: int) -> bytes:
        pos = self._pos
        if pos >= len(self._pool):
            # 18 bytes make 24 base64 characters without padding, so the pool is
            # encoded at once and cut into IDs' random parts.
            self._pool = binascii.b2a_base64(self._randbytes(18 * _POOL_IDS), newline=False)
            pos = 0
        self._pos = pos + 24
        rand = self._pool[pos : pos + 24]
        key = ttl + ttl + (retry > 0)
        suffix = self._suffixes.get(key)
        if suffix is None:
            if len(self._suffixes) >= _SUFFIX_CACHE:
                self._suffixes.clear()
            suffix = self._suffixes[key] = b"-" + ttl_field(ttl, retry)
        return self._prefix + rand + suffix
