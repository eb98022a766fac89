"""Connection and server-lifetime commands: AUTH, PING, TIME, SHUTDOWN, BGREWRITEAOF.

AUTH compares passwords in constant time (beyond Disque), so the time a wrong
password takes to reject says nothing about the right one.
"""

from __future__ import annotations

import hmac
import time
from typing import TYPE_CHECKING, Final

from disquette.commands.persistence import REWRITE_IN_PROGRESS, REWRITE_STARTED
from disquette.commands.table import command
from disquette.core.errors import DisqueError
from disquette.protocol import reply

if TYPE_CHECKING:
    from disquette.commands.state import ServerState
    from disquette.core.client import Client

NO_PASSWORD: Final = reply.err("Client sent AUTH, but no password is set")
INVALID_PASSWORD: Final = reply.err("invalid password")
SHUTDOWN_FAILED: Final = reply.err("Errors trying to SHUTDOWN. Check logs.")
REWRITE_STARTED_REPLY: Final = reply.simple(b"Background append only file rewriting started")
REWRITE_IN_PROGRESS_REPLY: Final = reply.err(
    "Background append only file rewriting already in progress"
)
BARE_ERR: Final = b"-ERR\r\n"  # Disque's shared.err, when the rewrite cannot start


@command("auth", 2, "rlF")
def auth(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    password = state.config.requirepass
    if not password:
        return NO_PASSWORD
    if hmac.compare_digest(argv[1], password.encode()):
        client.authenticated = True
        return reply.OK
    client.authenticated = False
    return INVALID_PASSWORD


@command("ping", -1, "rF")
def ping(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    if len(argv) == 1:
        return reply.PONG
    if len(argv) == 2:
        return reply.bulk(argv[1])
    return reply.err("wrong number of arguments for 'ping' command")


@command("time", 1, "rF")
def time_(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    now_us = time.time_ns() // 1000
    return reply.bulk_array([b"%d" % (now_us // 1_000_000), b"%d" % (now_us % 1_000_000)])


@command("shutdown", -1, "arl")
def shutdown(state: ServerState, client: Client, argv: list[bytes]) -> bytes | None:
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() != b"rewrite-aof"):
        raise DisqueError(reply.SYNTAX_ERROR)
    if state.shell is not None and state.shell.shutdown(len(argv) == 2):
        return None  # the process is exiting; Disque sends no reply
    return SHUTDOWN_FAILED


@command("bgrewriteaof", 1, "ar")
def bgrewriteaof(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    """Rewrite the AOF in the background, with the AOF on or off (reference 5.15)."""
    if state.aof is None:
        return BARE_ERR
    result = state.aof.bgrewriteaof()
    if result == REWRITE_STARTED:
        return REWRITE_STARTED_REPLY
    if result == REWRITE_IN_PROGRESS:
        return REWRITE_IN_PROGRESS_REPLY
    return BARE_ERR
