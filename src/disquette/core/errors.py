"""The error a core operation raises to answer a client with one of Disque's errors.

Core operations return domain values; when Disque answers with an error
instead, the operation raises :class:`DisqueError` carrying the encoded error
line, and the command dispatcher sends it as the reply.
"""

from __future__ import annotations


class DisqueError(Exception):
    __slots__ = ("reply",)

    def __init__(self, reply: bytes) -> None:
        super().__init__(reply)
        self.reply = reply
