"""RESP2 reply encoding, and the little of RESP3 a ``HELLO 3`` connection gets.

Replies are built as ``bytes`` close to where they are decided and joined once
per event-loop iteration by the server shell. Constant replies are encoded once
here; the helpers are plain functions because they sit on the hot path.

Commands write RESP2. A connection that asked for RESP3 with ``HELLO 3`` (beyond
Disque: redis-py 8 does it by default) gets its null replies as RESP3's null
(:func:`resp3`, applied where a reply leaves the pipeline, only for such
connections), and the replies that are maps by nature (HELLO's, SHOW's) as RESP3
maps, written by their commands.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

OK: Final = b"+OK\r\n"
PONG: Final = b"+PONG\r\n"
NULL_BULK: Final = b"$-1\r\n"
NULL_ARRAY: Final = b"*-1\r\n"
NULL: Final = b"_\r\n"  # RESP3's null
EMPTY_ARRAY: Final = b"*0\r\n"
ZERO: Final = b":0\r\n"
ONE: Final = b":1\r\n"

_SMALL_INTS: Final = [b":%d\r\n" % i for i in range(1024)]


def resp3(response: bytes) -> bytes:
    """``response`` as a RESP3 connection gets it: a RESP2 null reply becomes RESP3's."""
    if response in (NULL_BULK, NULL_ARRAY):
        return NULL
    return response


def simple(text: bytes) -> bytes:
    """A status reply, ``+text``."""
    return b"+" + text + b"\r\n"


def error(text: str | bytes) -> bytes:
    """A coded error sent as it is (``text`` carries its own code, e.g. ``BADID ...``).

    Carriage returns and newlines become spaces, so an error is always one line.
    """
    if isinstance(text, str):
        text = text.encode()
    return b"-" + text.replace(b"\r", b" ").replace(b"\n", b" ") + b"\r\n"


def err(text: str | bytes) -> bytes:
    """A generic error: Disque always prefixes these with ``ERR``."""
    if isinstance(text, str):
        text = text.encode()
    return error(b"ERR " + text)


def integer(n: int) -> bytes:
    if 0 <= n < 1024:
        return _SMALL_INTS[n]
    return b":%d\r\n" % n


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def bulk_or_null(data: bytes | None) -> bytes:
    return NULL_BULK if data is None else b"$%d\r\n%s\r\n" % (len(data), data)


def array(items: Iterable[bytes]) -> bytes:
    """An array of already-encoded elements."""
    items = list(items)
    return b"*%d\r\n%s" % (len(items), b"".join(items))


def bulk_array(items: Iterable[bytes]) -> bytes:
    """An array of bulk strings."""
    items = list(items)
    return b"*%d\r\n%s" % (len(items), b"".join([b"$%d\r\n%s\r\n" % (len(x), x) for x in items]))


# Errors used in many places, in Disque's words.
SYNTAX_ERROR: Final = err("syntax error")
NOT_AN_INTEGER: Final[bytes] = err("value is not an integer or out of range")
BADID: Final = error("BADID Invalid Job ID format.")
NOAUTH: Final = error("NOAUTH Authentication required.")
LOADING: Final = error("LOADING Disque is loading the dataset in memory")
OOM: Final = error("OOM command not allowed when used memory > 'maxmemory'.")
LEAVING: Final = error(
    "LEAVING This node is leaving the cluster, please connect to a different one"
)
