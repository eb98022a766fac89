"""CRON: recurring jobs, set and read from any node (beyond Disque).

``CRON SET name queue body (EVERY seconds | SCHEDULE expr) [options]`` writes a
schedule (replacing one of that name); the options are ADDJOB's REPLICATE,
RETRY, TTL, DELAY, MAXLEN, PRIORITY and ASYNC, checked with ADDJOB's rules and
error texts. ``DEL name`` removes it, ``LIST`` and ``GET name`` read them: each
schedule as ``[name, queue, body, "every"|"schedule", seconds|expression,
[option, value, ...], next tick, last tick fired]`` (ticks in Unix seconds; the
last tick is the latest this node knows fired, 0 for none). How ticks fire
and how the table spreads: :mod:`disquette.core.cron`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.commands.args import int_arg
from disquette.commands.jobs import _addjob_args
from disquette.commands.policies import RANGE_ERRORS, save
from disquette.commands.table import command
from disquette.core.cron import (
    MAX_BODY,
    MAX_EVERY,
    MAX_NAME,
    MAX_SCHEDULES,
    OPTIONS,
    Cron,
    expression_error,
)
from disquette.core.errors import DisqueError
from disquette.protocol import reply

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.state.server import ServerState

NAME_LENGTH: Final = reply.err("schedule names must be 1 to 200 bytes long")
QUEUE_LENGTH: Final = reply.err("queue names must be 1 to 1000 bytes long")
BODY_LENGTH: Final = reply.err("the job body of a schedule must be at most 4096 bytes")
TOO_MANY: Final = reply.err("too many schedules (at most 10000)")
EVERY_RANGE: Final = reply.err("EVERY must be a number of seconds between 1 and 4294967296")
_NOT_FOR_CRON: Final = (b"dedup", b"after", b"ifgone", b"group")
_SUBCOMMANDS: Final = (b"set", b"del", b"list", b"get")


def _set(state: ServerState, argv: list[bytes]) -> None:
    """CRON SET name queue body (EVERY seconds | SCHEDULE expr) [options]."""
    name, queue, body, kind, spec = argv[2:7]
    if not 0 < len(name) <= MAX_NAME:
        raise DisqueError(NAME_LENGTH)
    if not 0 < len(queue) <= MAX_NAME * 5:
        raise DisqueError(QUEUE_LENGTH)
    if len(body) > MAX_BODY:
        raise DisqueError(BODY_LENGTH)
    table = state.node.crons
    if len(table) >= MAX_SCHEDULES and table.get(name) is None:
        raise DisqueError(TOO_MANY)
    every, expr = 0, b""
    kind = kind.lower()
    if kind == b"every":
        every = int_arg(spec, EVERY_RANGE)
        if not 0 < every <= MAX_EVERY:
            raise DisqueError(EVERY_RANGE)
    elif kind == b"schedule":
        error = expression_error(spec)
        if error is not None:
            raise DisqueError(reply.err(error))
        expr = spec
    else:
        raise DisqueError(reply.SYNTAX_ERROR)
    rest = argv[7:]
    if any(arg.lower() in _NOT_FOR_CRON for arg in rest):
        raise DisqueError(reply.err("DEDUP, AFTER, IFGONE and GROUP are not options of a schedule"))
    opts = _addjob_args([b"addjob", queue, body, b"0", *rest])  # ADDJOB's checks and errors
    # Not given: 0 for REPLICATE, TTL and MAXLEN, -1 for RETRY, DELAY and PRIORITY.
    given = {"replicate": opts.repl, "retry": opts.retry + 1, "ttl": opts.ttl,
             "delay": opts.delay + 1, "maxlen": opts.maxlen, "priority": opts.priority + 1,
             "async": int(opts.async_)}  # fmt: skip
    options: dict[str, int] = {}
    for option, value in given.items():
        if value > 0:
            options[option] = value - (option in ("retry", "delay", "priority"))
            low, high = OPTIONS[option]
            if not low <= options[option] <= high:
                raise DisqueError(RANGE_ERRORS[option])
    table.set(name, queue, body, every, expr, options)


def _entry(state: ServerState, record: Cron | None) -> bytes:
    """One schedule as LIST and GET show it, nil for none."""
    if record is None:
        return reply.NULL_ARRAY
    table = state.node.crons
    items = []
    for option in OPTIONS:
        if option in record.options:
            items.append(reply.bulk(option.encode()))
            items.append(reply.integer(record.options[option]))
    if record.every:
        kind, spec = reply.bulk(b"every"), reply.integer(record.every)
    else:
        kind, spec = reply.bulk(b"schedule"), reply.bulk(record.expr)
    tick_state = table.states.get(record.name)
    fired = tick_state.fired if tick_state is not None and tick_state.fired > 0 else 0
    return (
        b"*8\r\n"
        + reply.bulk(record.name)
        + reply.bulk(record.queue)
        + reply.bulk(record.body)
        + kind
        + spec
        + b"*%d\r\n%s" % (len(items), b"".join(items))
        + reply.integer(table.next_tick(record) or 0)
        + reply.integer(fired)
    )


@command("cron", -2, "w")
def cron(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    table = state.node.crons
    sub = argv[1].lower()
    if sub == b"set" and len(argv) >= 7:
        state.node.dialect.require(b"cron", "CRON SET")
        _set(state, argv)
        save(state, "schedule")
        return reply.OK
    if sub == b"del" and len(argv) == 3:
        state.node.dialect.require(b"cron", "CRON DEL")
        deleted = table.delete(argv[2])
        if deleted:
            save(state, "schedule")
        return reply.integer(int(deleted))
    if sub == b"list" and len(argv) == 2:
        live = sorted(table.states)
        return b"*%d\r\n%s" % (len(live), b"".join(_entry(state, table.get(n)) for n in live))
    if sub == b"get" and len(argv) == 3:
        return _entry(state, table.get(argv[2]))
    if sub in _SUBCOMMANDS:
        raise DisqueError(reply.SYNTAX_ERROR)
    raise DisqueError(reply.err("Unknown CRON subcommand, try SET, DEL, LIST or GET"))
