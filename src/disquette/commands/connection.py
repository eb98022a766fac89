"""Connection and server-lifetime commands: AUTH, PING, TIME, SHUTDOWN, BGREWRITEAOF,
and the RESP3 handshake ``HELLO <protover>``.

AUTH compares passwords in constant time (beyond Disque), so the time a wrong
password takes to reject says nothing about the right one. ``AUTH username
password`` (Redis 6's) opens a user of state/access.py; one-argument AUTH is
``default``'s password, which ``requirepass`` sets, with Disque's replies.

``HELLO <protover> [AUTH username password] [SETNAME name]`` is modern Redis's
handshake (beyond Disque, which only knows bare HELLO, its cluster greeting:
commands/cluster.py sends anything with arguments here). redis-py 8 opens every
connection with ``HELLO 3``, so it is accepted as Redis accepts it, with Redis's
errors: protover 2 or 3, AUTH for any user, checked as AUTH checks it (and, as
Redis's passwordless default user does, ``default`` accepted whatever the
password when it has ``nopass``: no ``requirepass``), SETNAME as
CLIENT SETNAME. The reply is Redis's greeting map (a flat array for protover 2):
``mode`` says ``standalone`` because a client needs no slot routing here, every
node taking every command. After ``HELLO 3`` the connection's null replies are
RESP3's ``_`` and SHOW's reply is a map (:func:`disquette.protocol.reply.resp3`);
``HELLO 2`` goes back to plain RESP2.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

from disquette.commands.args import parse_int
from disquette.commands.table import command
from disquette.core.errors import DisqueError
from disquette.protocol import reply
from disquette.state import access
from disquette.state.persistence import REWRITE_IN_PROGRESS, REWRITE_STARTED

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.state.server import ServerState

NO_PASSWORD: Final = reply.err("Client sent AUTH, but no password is set")
INVALID_PASSWORD: Final = reply.err("invalid password")
SHUTDOWN_FAILED: Final = reply.err("Errors trying to SHUTDOWN. Check logs.")
REWRITE_STARTED_REPLY: Final = reply.simple(b"Background append only file rewriting started")
REWRITE_IN_PROGRESS_REPLY: Final = reply.err(
    "Background append only file rewriting already in progress"
)
BARE_ERR: Final = b"-ERR\r\n"  # Disque's shared.err, when the rewrite cannot start


NOT_A_PROTOVER: Final = reply.err("Protocol version is not an integer or out of range")
NOPROTO: Final = reply.error("NOPROTO unsupported protocol version")
HELLO_NOAUTH: Final = reply.error(
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
    "select the RESP protocol version at the same time"
)
BAD_CLIENT_NAME: Final = reply.err(
    "Client names cannot contain spaces, newlines or special characters."
)
DEFAULT_USER: Final = b"default"


def valid_client_name(name: bytes) -> bool:
    """CLIENT SETNAME's rule: printable ASCII, no spaces."""
    return all(0x21 <= c <= 0x7E for c in name)


@command("auth", -2, "rlF", disque_arity=2)
def auth(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    """``AUTH password`` (``default``'s, Disque's replies) or ``AUTH username password``
    (Redis 6's, beyond Disque: state/access.py)."""
    if len(argv) == 3:
        authenticated = access.authenticate(state, client, argv[1], argv[2])
        return reply.OK if authenticated else access.WRONGPASS
    if len(argv) != 2:
        raise DisqueError(reply.SYNTAX_ERROR)
    default = access.lookup(state, DEFAULT_USER)
    if default is not None and default.enabled and default.nopass:
        return NO_PASSWORD
    if access.authenticate(state, client, DEFAULT_USER, argv[1]):
        return reply.OK
    client.authenticated = False
    return INVALID_PASSWORD


def hello_protocol(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    """``HELLO <protover> [AUTH username password] [SETNAME name]`` (Redis's hello
    command, in its order of checks)."""
    protover = parse_int(argv[1])
    if protover is None or b"%d" % protover != argv[1]:  # Redis's string2ll: canonical
        raise DisqueError(NOT_A_PROTOVER)
    if protover not in (2, 3):
        raise DisqueError(NOPROTO)
    credentials: tuple[bytes, bytes] | None = None
    name: bytes | None = None
    i = 2
    while i < len(argv):
        option = argv[i].lower()
        more = len(argv) - 1 - i
        if option == b"auth" and more >= 2:
            credentials = (argv[i + 1], argv[i + 2])
            i += 3
        elif option == b"setname" and more >= 1:
            name = argv[i + 1]
            if not valid_client_name(name):
                raise DisqueError(BAD_CLIENT_NAME)
            i += 2
        else:
            text = argv[i].decode("utf-8", "replace")
            raise DisqueError(reply.err(f"Syntax error in HELLO option '{text}'"))
    if credentials is not None and not access.authenticate(state, client, *credentials):
        raise DisqueError(access.WRONGPASS)
    if not client.authenticated and access.auth_required(state):
        raise DisqueError(HELLO_NOAUTH)
    if name is not None:
        client.name = name or None
    client.resp3 = protover == 3
    return greeting(state, client, protover)


def greeting(state: ServerState, client: Client, protover: int) -> bytes:
    """Redis's HELLO map: a RESP3 map for protover 3, a flat array for 2."""
    header = b"%%%d\r\n" % 7 if protover == 3 else b"*%d\r\n" % 14
    return b"".join(
        [
            header,
            reply.bulk(b"server"), reply.bulk(b"disquette"),
            reply.bulk(b"version"), reply.bulk(state.version.encode()),
            reply.bulk(b"proto"), reply.integer(protover),
            reply.bulk(b"id"), reply.integer(client.id),
            reply.bulk(b"mode"), reply.bulk(b"standalone"),
            reply.bulk(b"role"), reply.bulk(b"master"),
            reply.bulk(b"modules"), reply.EMPTY_ARRAY,
        ]
    )  # fmt: skip


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
