"""QPOLICY: queue policies, set and read from any node (beyond Disque).

``QPOLICY SET name pattern option value ...`` writes a policy (replacing one of
that name), ``DEL name`` removes it, ``LIST``, ``GET name`` and ``MATCH queue``
read them. Values are checked with ADDJOB's rules and error texts where ADDJOB
has the option. What a policy does and how the table spreads over the cluster:
:mod:`disquette.core.policy`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.commands.args import int_arg
from disquette.commands.jobs import (
    DELAY_NEGATIVE,
    MAXLEN_POSITIVE,
    PRIORITY_RANGE,
    REPLICATE_RANGE,
    RETRY_NEGATIVE,
    TTL_POSITIVE,
)
from disquette.commands.table import command
from disquette.core.errors import DisqueError
from disquette.core.node import RETRY_ZERO_REPLICATE, check_job_options
from disquette.core.policy import CHOICES, MAX_NAME, OPTIONS, Policy, option_error
from disquette.protocol import reply

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.state.server import ServerState

#: The error for a value out of an option's range: ADDJOB's text where it has one.
RANGE_ERRORS: Final = {
    "replicate": REPLICATE_RANGE,
    "retry": RETRY_NEGATIVE,
    "ttl": TTL_POSITIVE,
    "delay": DELAY_NEGATIVE,
    "maxlen": MAXLEN_POSITIVE,
    "priority": PRIORITY_RANGE,
    "deadletter": reply.err("deadletter must be a queue name of 1 to 1024 bytes"),
    "max-nacks": reply.err("max-nacks must be a positive number"),
    "max-deliveries": reply.err("max-deliveries must be a positive number"),
    "backoff": reply.err("backoff must be fixed or exponential"),
    "backoff-base": reply.err("backoff-base must be a positive number"),
    "backoff-cap": reply.err("backoff-cap must be a positive number"),
    "overflow": reply.err("overflow must be refuse or drop-oldest"),
    "rate": reply.err("rate must be a positive number"),
    "concurrency": reply.err("concurrency must be a positive number"),
    "group-rate": reply.err("group-rate must be a positive number"),
    "group-concurrency": reply.err("group-concurrency must be a positive number"),
}
NAME_LENGTH: Final = reply.err("policy names and patterns must be 1 to 1024 bytes long")
_SUBCOMMANDS: Final = (b"set", b"del", b"list", b"get", b"match")


def _options(argv: list[bytes]) -> dict[str, int | bytes]:
    """The option/value pairs of QPOLICY SET, checked one by one, then together."""
    if len(argv) % 2:
        raise DisqueError(reply.SYNTAX_ERROR)
    options: dict[str, int | bytes] = {}
    for i in range(0, len(argv), 2):
        name = argv[i].lower().decode("utf-8", "replace")
        if name not in OPTIONS:
            raise DisqueError(reply.err(f"Unknown policy option '{name}'"))
        value: int | bytes = argv[i + 1]
        if name in CHOICES:
            value = argv[i + 1].lower()
        elif OPTIONS[name] is not None:
            value = int_arg(argv[i + 1], RANGE_ERRORS[name])
        if option_error(name, value) is not None:
            raise DisqueError(RANGE_ERRORS[name])
        options[name] = value
    repl, retry = _number(options, "replicate", 0), _number(options, "retry", -1)
    if retry == 0 and not repl:  # ADDJOB's default would then be more than one copy
        raise DisqueError(RETRY_ZERO_REPLICATE)
    check_job_options(repl, retry, _number(options, "delay", -1), _number(options, "ttl", 0))
    return options


def _number(options: dict[str, int | bytes], name: str, default: int) -> int:
    value = options.get(name, default)
    return value if isinstance(value, int) else default


def _entry(policy: Policy | None) -> bytes:
    """``[name, pattern, [option, value, ...]]``, nil for no policy."""
    if policy is None:
        return reply.NULL_ARRAY
    items = []
    for name in OPTIONS:
        value = policy.options.get(name)
        if value is not None:
            items.append(reply.bulk(name.encode()))
            items.append(reply.bulk(value) if isinstance(value, bytes) else reply.integer(value))
    return (
        b"*3\r\n"
        + reply.bulk(policy.name)
        + reply.bulk(policy.pattern)
        + b"*%d\r\n%s" % (len(items), b"".join(items))
    )


def save(state: ServerState, what: str = "policy") -> None:
    """Write nodes.conf before answering: the record (a policy, a schedule) is kept if
    this node stops now."""
    try:
        state.node.cluster.save_config()
    except OSError as e:
        raise DisqueError(reply.err(f"{what} applied but not saved in nodes.conf: {e}")) from e


@command("qpolicy", -2, "w")
def qpolicy(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    table = state.node.policies
    sub = argv[1].lower()
    if sub == b"set" and len(argv) >= 4:
        name, pattern = argv[2], argv[3]
        if not 0 < len(name) <= MAX_NAME or not 0 < len(pattern) <= MAX_NAME:
            raise DisqueError(NAME_LENGTH)
        options = _options(argv[4:])
        dialect = state.node.dialect
        dialect.require(b"policies", "QPOLICY SET")
        if "rate" in options or "concurrency" in options:
            dialect.require(b"rate-limits", "A rate or concurrency limit")
        if "group-rate" in options or "group-concurrency" in options:
            dialect.require(b"groups", "A group-rate or group-concurrency limit")
        table.set(name, pattern, options)
        save(state)
        return reply.OK
    if sub == b"del" and len(argv) == 3:
        state.node.dialect.require(b"policies", "QPOLICY DEL")
        deleted = table.delete(argv[2])
        if deleted:
            save(state)
        return reply.integer(int(deleted))
    if sub == b"list" and len(argv) == 2:
        return b"*%d\r\n%s" % (len(table), b"".join(_entry(p) for p in table.active))
    if sub == b"get" and len(argv) == 3:
        return _entry(table.get(argv[2]))
    if sub == b"match" and len(argv) == 3:
        return _entry(table.for_queue(argv[2]))
    if sub in _SUBCOMMANDS:
        raise DisqueError(reply.SYNTAX_ERROR)
    raise DisqueError(reply.err("Unknown QPOLICY subcommand, try SET, DEL, LIST, GET or MATCH"))
