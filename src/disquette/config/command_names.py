"""The names of Disque's 32 commands: the one list every other table derives from.

``rename-command`` has to know which commands exist while the configuration
is read, before any command module is imported, so the list lives here, at
the bottom of the dependency graph. The command table imports it and should
check that it defines exactly these names (QUIT is not a command: it is
handled before the lookup and cannot be renamed). The order is the one of the
command table in the reference (section 2), which is also Disque's order.
"""

from __future__ import annotations

COMMAND_NAMES: tuple[str, ...] = (
    "auth",
    "ping",
    "info",
    "shutdown",
    "monitor",
    "debug",
    "config",
    "cluster",
    "client",
    "slowlog",
    "time",
    "command",
    "latency",
    "hello",
    "addjob",
    "getjob",
    "ackjob",
    "fastack",
    "deljob",
    "show",
    "loadjob",
    "bgrewriteaof",
    "qlen",
    "qpeek",
    "qstat",
    "qscan",
    "jscan",
    "enqueue",
    "nack",
    "dequeue",
    "working",
    "pause",
)

assert len(COMMAND_NAMES) == len(set(COMMAND_NAMES)) == 32
