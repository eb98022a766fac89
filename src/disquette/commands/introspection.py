"""Server introspection and administration: INFO, CONFIG, DEBUG, CLIENT, MONITOR,
SLOWLOG, LATENCY and COMMAND (reference sections 5.3-5.14).

The procedures follow Disque's (Redis 3.x's) argument checks and error texts
exactly; what they report comes from :class:`ServerState` (statistics, slow
log, latency monitor, clients), the node, and the configuration package for
CONFIG GET/SET/REWRITE. The INFO text itself is built by
:mod:`disquette.observe.info`; LATENCY GRAPH and DOCTOR by
:mod:`disquette.state.latency`.

Beyond Disque, ``DEBUG CLOCK-SKEW ms`` shifts the node's clock ``ms`` milliseconds
from the host's (negative: behind), 0 putting it back: a hook for tests and drills
that makes one process behave like a node on a machine whose clock is off (see
:mod:`disquette.server.clock` for what moves with it).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from typing import TYPE_CHECKING

from disquette.commands.args import int_arg, parse_int, timeout_arg
from disquette.commands.connection import BAD_CLIENT_NAME, valid_client_name
from disquette.commands.table import command
from disquette.config import (
    ConfigRewriteError,
    ConfigSetError,
    config_get,
    config_rewrite,
    config_set,
)
from disquette.core.client import REPLY_OFF, REPLY_ON, REPLY_SKIP_NEXT, Client
from disquette.core.errors import DisqueError
from disquette.core.job import Job
from disquette.core.queue import Queue
from disquette.observe.info import info_text
from disquette.protocol import reply
from disquette.state.clients import client_info_line, peer_id
from disquette.state.command import Command

if TYPE_CHECKING:
    from disquette.state.server import ServerState


def _text(data: bytes) -> str:
    """Client bytes as ``str`` that encode back to the same bytes."""
    return data.decode("utf-8", "surrogateescape")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


# ----------------------------------------------------------------------
# INFO


@command("info", -1, "rl")
def info(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    if len(argv) > 2:
        raise DisqueError(reply.SYNTAX_ERROR)
    section = argv[1].decode("latin-1") if len(argv) == 2 else "default"
    return reply.bulk(info_text(state, section))


# ----------------------------------------------------------------------
# CONFIG

CONFIG_USAGE = reply.err("CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")
_CONFIG_ARITY = {b"get": 3, b"set": 4, b"resetstat": 2, b"rewrite": 2}


@command("config", -2, "ar")
def config(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    sub = argv[1].lower()
    arity = _CONFIG_ARITY.get(sub)
    if arity is None:
        return CONFIG_USAGE
    if len(argv) != arity:
        return reply.err(b"Wrong number of arguments for CONFIG " + argv[1])
    if sub == b"get":
        pairs = config_get(state.config, argv[2])
        return reply.bulk_array([item for pair in pairs for item in pair])
    if sub == b"set":
        try:
            config_set(state.config, argv[2], argv[3])
        except ConfigSetError as e:
            return reply.err(e.to_bytes())
        if argv[2].lower() == b"maxmemory":
            state.node.reclaim_memory()
        return reply.OK
    if sub == b"resetstat":
        reset_stats(state)
        return reply.OK
    try:
        config_rewrite(state.config)
    except ConfigRewriteError as e:
        return reply.err(e.to_bytes())
    return reply.OK


def reset_stats(state: ServerState) -> None:
    """CONFIG RESETSTAT: the server counters and every command's calls and time."""
    state.stats.reset()
    for cmd in state.commands.values():
        cmd.calls = 0
        cmd.usec = 0


# ----------------------------------------------------------------------
# DEBUG

RESTART_FAILED = reply.err("failed to restart the server. Check server logs.")
MAX_CLOCK_SKEW_MS = 86_400_000  # a day, either way
BAD_CLOCK_SKEW = reply.err(
    f"clock skew must be an integer of ms from -{MAX_CLOCK_SKEW_MS} to {MAX_CLOCK_SKEW_MS}"
)
NO_CLOCK = reply.err("no clock to skew: DEBUG CLOCK-SKEW needs a server process")
_STRTOD_PREFIX = re.compile(
    rb"\s*[+-]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)", re.IGNORECASE
)


def strtod(value: bytes) -> float:
    """C ``strtod`` as Disque uses it: the longest numeric prefix, 0 if there is none."""
    match = _STRTOD_PREFIX.match(value)
    return float(match.group()) if match else 0.0


def sleep_seconds(value: bytes) -> float:
    """DEBUG SLEEP's duration: C converts to whole microseconds, and a negative
    or unrepresentable (inf, nan, huge) count makes nanosleep return at once."""
    usec = strtod(value) * 1_000_000
    if not 0 <= usec < 2**63:  # also false for nan
        return 0.0
    return int(usec) / 1_000_000


def struct_sizes() -> bytes:
    """DEBUG STRUCTSIZE: the sizes of disquette's per-job, per-queue, per-client records."""
    bits = 64 if sys.maxsize > 2**32 else 32
    job = sys.getsizeof(Job(b"", None, None))
    queue = sys.getsizeof(Queue(b"", 0))
    client = sys.getsizeof(Client(0, b"", 0))
    return b"bits:%d job:%d queue:%d client:%d" % (bits, job, queue, client)


def _log(state: ServerState, message: str) -> None:
    log = getattr(state.shell, "log", None)
    if log is not None:
        log.warning(message)
    else:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def _crash(state: ServerState, sig: int, message: str) -> None:
    """Die the way Disque does: a log line, then killed by ``sig`` (abort as a fallback)."""
    _log(state, message)
    try:
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    finally:
        os.abort()


def _clock_skew(state: ServerState, value: bytes) -> bytes:
    """DEBUG CLOCK-SKEW ms: shift the node's clock (beyond Disque)."""
    skew = parse_int(value)
    if skew is None or abs(skew) > MAX_CLOCK_SKEW_MS:
        return BAD_CLOCK_SKEW
    if state.shell is None:
        return NO_CLOCK
    state.shell.set_clock_skew(skew)
    return reply.OK


def _unknown_debug(argv: list[bytes]) -> bytes:
    return reply.err(
        b"Unknown DEBUG subcommand or wrong number of arguments for '" + argv[1] + b"'"
    )


@command("debug", -2, "a")
def debug(state: ServerState, client: Client, argv: list[bytes]) -> bytes | None:
    sub = argv[1].lower()
    n = len(argv)
    if sub == b"segfault":
        _crash(state, signal.SIGSEGV, "Disque crashed by signal: 11 (DEBUG SEGFAULT)")
    elif sub == b"oom":
        # Disque asks its allocator for ULONG_MAX bytes; the OOM handler prints and aborts.
        sys.stderr.write("zmalloc: Out of memory trying to allocate 18446744073709551615 bytes\n")
        sys.stderr.flush()
        _crash(state, signal.SIGABRT, "Out of memory (DEBUG OOM)")
    elif sub == b"assert":
        _crash(
            state,
            signal.SIGSEGV,
            "=== ASSERTION FAILED ===\n==> debug: '1 == 2' is not true (DEBUG ASSERT)",
        )
    elif sub == b"flushall":
        state.node.flush_all()
        return reply.OK
    elif sub == b"loadaof":
        # Flush the AOF, empty the data set, load the file again; a bare -ERR
        # when nothing could be loaded (an empty or, beyond Disque, which exits,
        # a missing file).
        if state.aof is None:
            state.node.flush_all()
            return b"-ERR\r\n"
        return reply.OK if state.aof.loadaof() else b"-ERR\r\n"
    elif sub == b"sleep" and n == 3:
        seconds = sleep_seconds(argv[2])
        if state.shell is not None:
            state.shell.sleep(seconds)
        else:
            time.sleep(seconds)
        return reply.OK
    elif sub == b"error" and n == 3:
        return reply.error(argv[2])
    elif sub == b"structsize" and n == 2:
        return reply.bulk(struct_sizes())
    elif sub == b"clock-skew" and n == 3:
        return _clock_skew(state, argv[2])
    elif sub in (b"restart", b"crash-and-recover"):
        delay = 0
        if n >= 3:
            delay = max(0, int_arg(argv[2]))
        if state.shell is not None and state.shell.restart(delay, rewrite_config=sub == b"restart"):
            return None  # the process is being replaced: no reply, as in Disque
        return RESTART_FAILED
    return _unknown_debug(argv)


# ----------------------------------------------------------------------
# CLIENT

CLIENT_USAGE = reply.err(
    "Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME connection-name)"
)
NO_SUCH_CLIENT = reply.err("No such client")
_CLIENT_TYPES = (b"normal",)


def client_list(state: ServerState) -> bytes:
    now_ms = int(time.time() * 1000)
    return b"".join(client_info_line(c, now_ms) + b"\n" for c in list(state.clients.values()))


def _client_kill(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    addr: bytes | None = None
    client_id = 0
    skipme = True
    n = len(argv)
    if n == 3:
        addr = argv[2]
        skipme = False  # the old form can kill the caller too
    elif n > 3:
        i = 2
        while i < n:
            opt = argv[i].lower()
            more = i + 1 < n
            if opt == b"id" and more:
                client_id = int_arg(argv[i + 1])
            elif opt == b"type" and more:
                if argv[i + 1].lower() not in _CLIENT_TYPES:
                    return reply.err(b"Unknown client type '" + argv[i + 1] + b"'")
            elif opt == b"addr" and more:
                addr = argv[i + 1]
            elif opt == b"skipme" and more:
                value = argv[i + 1].lower()
                if value == b"yes":
                    skipme = True
                elif value == b"no":
                    skipme = False
                else:
                    return reply.SYNTAX_ERROR
            else:
                return reply.SYNTAX_ERROR
            i += 2
    else:
        return reply.SYNTAX_ERROR

    killed = 0
    for other in list(state.clients.values()):
        if addr is not None and peer_id(other) != addr:
            continue
        if client_id and other.id != client_id:
            continue
        if other is client:
            if skipme:
                continue
            client.close_after_reply = True  # after this reply is written
        elif state.shell is not None:
            state.shell.close_client(other)
        else:
            state.remove_client(other)
        killed += 1
    if n == 3:
        return reply.OK if killed else NO_SUCH_CLIENT
    return reply.integer(killed)


@command("client", -2, "ar")
def client_(state: ServerState, client: Client, argv: list[bytes]) -> bytes | None:
    sub = argv[1].lower()
    n = len(argv)
    if sub == b"list" and n == 2:
        return reply.bulk(client_list(state))
    if sub == b"reply" and n == 3:
        mode = argv[2].lower()
        if mode == b"on":
            client.reply_mode = REPLY_ON
            return reply.OK
        if mode == b"off":
            client.reply_mode = REPLY_OFF
            return None
        if mode == b"skip":
            if client.reply_mode != REPLY_OFF:
                client.reply_mode = REPLY_SKIP_NEXT
            return None
        return reply.SYNTAX_ERROR
    if sub == b"kill":
        return _client_kill(state, client, argv)
    if sub == b"setname" and n == 3:
        name = argv[2]
        if not name:
            client.name = None
            return reply.OK
        if not valid_client_name(name):
            return BAD_CLIENT_NAME
        client.name = name
        return reply.OK
    if sub == b"getname" and n == 2:
        return reply.bulk_or_null(client.name)
    if sub == b"pause" and n == 3:
        duration = timeout_arg(argv[2])
        pause_clients(state, duration + int(time.time() * 1000) if duration > 0 else 0)
        return reply.OK
    return CLIENT_USAGE


def pause_clients(state: ServerState, end_ms: int) -> None:
    """Redis's pauseClients: a pause only ever extends a pause in progress."""
    now_ms = int(time.time() * 1000)
    current = state.clients_paused_until
    if current < now_ms or end_ms > current:
        state.clients_paused_until = end_ms


# ----------------------------------------------------------------------
# MONITOR


@command("monitor", 1, "ar")
def monitor(state: ServerState, client: Client, argv: list[bytes]) -> bytes | None:
    if client.monitor:
        return None  # a second MONITOR is ignored, without a reply
    client.monitor = True
    state.monitors.append(client)
    return reply.OK


# ----------------------------------------------------------------------
# SLOWLOG

SLOWLOG_USAGE = reply.err("Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.")


@command("slowlog", -2, "r")
def slowlog(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    sub = argv[1].lower()
    n = len(argv)
    log = state.slowlog
    if sub == b"reset" and n == 2:
        log.reset()
        return reply.OK
    if sub == b"len" and n == 2:
        return reply.integer(len(log.entries))
    if sub == b"get" and n in (2, 3):
        count = int_arg(argv[2]) if n == 3 else 10
        entries = list(log.entries) if count < 0 else list(log.entries)[:count]
        return reply.array(
            b"*4\r\n%s%s%s%s"
            % (
                reply.integer(e.id),
                reply.integer(e.time),
                reply.integer(e.duration_us),
                reply.bulk_array(e.args),
            )
            for e in entries
        )
    return SLOWLOG_USAGE


# ----------------------------------------------------------------------
# LATENCY


@command("latency", -2, "arl")
def latency(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    sub = argv[1].lower()
    n = len(argv)
    monitor_ = state.latency
    if sub == b"history" and n == 3:
        entry = monitor_.events.get(_text(argv[2]))
        samples = entry.samples if entry is not None else []
        return reply.array(b"*2\r\n" + reply.integer(t) + reply.integer(ms) for t, ms in samples)
    if sub == b"graph" and n == 3:
        graph = monitor_.graph(_text(argv[2]))
        if graph is None:
            return reply.err(b"No samples available for event '" + argv[2] + b"'")
        return reply.bulk(_bytes(graph))
    if sub == b"latest" and n == 2:
        return reply.array(
            b"*4\r\n"
            + reply.bulk(_bytes(event))
            + reply.integer(entry.samples[-1][0] if entry.samples else 0)
            + reply.integer(entry.samples[-1][1] if entry.samples else 0)
            + reply.integer(entry.max)
            for event, entry in monitor_.events.items()
        )
    if sub == b"doctor" and n == 2:
        config_ = state.config
        report = monitor_.doctor(
            config_.latency_monitor_threshold,
            config_.slowlog_log_slower_than,
            config_.hz,
            config_.appendfsync,
        )
        return reply.bulk(_bytes(report))
    if sub == b"reset":
        return reply.integer(monitor_.reset([_text(a) for a in argv[2:]]))
    return reply.SYNTAX_ERROR


# ----------------------------------------------------------------------
# COMMAND

COMMAND_USAGE = reply.err("Unknown subcommand or wrong number of arguments.")


def command_entry(cmd: Command | None) -> bytes:
    """``[name, arity, [flags...], 0, 0, 0]``, or a null bulk for an unknown command."""
    if cmd is None:
        return reply.NULL_BULK
    flags = cmd.flag_names()
    return b"*6\r\n%s:%d\r\n*%d\r\n%s:0\r\n:0\r\n:0\r\n" % (
        reply.bulk(cmd.name.encode()),
        cmd.shown_arity,
        len(flags),
        b"".join(reply.simple(f.encode()) for f in flags),
    )


@command("command", 0, "rl")
def command_(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    n = len(argv)
    if n == 1:
        return reply.array(command_entry(cmd) for cmd in state.commands.values())
    sub = argv[1].lower()
    if sub == b"info":
        return reply.array(command_entry(state.commands.get(name.lower())) for name in argv[2:])
    if sub == b"count" and n == 2:
        return reply.integer(len(state.commands))
    return COMMAND_USAGE
