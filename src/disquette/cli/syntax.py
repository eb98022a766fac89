"""What ``disquette-cli`` knows of each command: ``help COMMAND`` and tab completion.

One table, :data:`COMMANDS`, gives every command (and every subcommand, as
``"QPOLICY SET"``) its synopsis, a one-line summary and its group, the way
redis-cli's ``help`` prints them. Completion reads the same synopses: the
first word completes to a command name, the second to a subcommand when the
command has some, and later words to the keywords (the upper-case words) of
the synopsis. A command added to the server needs one line here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Syntax:
    """One command or subcommand: ``name`` (``"QPOLICY SET"``), its arguments, what it does."""

    name: str
    arguments: str
    summary: str
    group: str

    @property
    def keywords(self) -> tuple[str, ...]:
        """The option words of the synopsis (``REPLICATE``, ``MAX-NACKS``...), in order."""
        return tuple(dict.fromkeys(re.findall(r"\b[A-Z][A-Z-]*[A-Z]\b", self.arguments)))

    def help(self) -> str:
        """The entry as redis-cli prints ``help COMMAND``."""
        return f"\n  {self.name} {self.arguments}".rstrip() + (
            f"\n  summary: {self.summary}\n  group: {self.group}\n"
        )


_ADDJOB_OPTIONS = (
    "[REPLICATE count] [DELAY sec] [RETRY sec] [TTL sec] [MAXLEN count] [ASYNC] "
    "[PRIORITY 0-9] [DEDUP key] [AFTER id ...] [IFGONE fail|release] "
    "[BACKOFF fixed sec|exponential base-sec cap-sec]"
)
_POLICY_OPTIONS = (
    "[REPLICATE count] [RETRY sec] [TTL sec] [DELAY sec] [MAXLEN count] [PRIORITY 0-9] "
    "[DEADLETTER queue] [MAX-NACKS count] [MAX-DELIVERIES count] "
    "[BACKOFF fixed|exponential] [BACKOFF-BASE sec] [BACKOFF-CAP sec] "
    "[OVERFLOW refuse|drop-oldest] [RATE jobs-per-sec] [CONCURRENCY count]"
)

COMMANDS: tuple[Syntax, ...] = (
    Syntax(
        "ADDJOB",
        f"queue job ms-timeout {_ADDJOB_OPTIONS}",
        "Add a job to a queue; PRIORITY, DEDUP, AFTER (queued once those jobs are acked), "
        "IFGONE and BACKOFF (every requeue postponed) are disquette's",
        "jobs",
    ),
    Syntax(
        "GETJOB",
        "[NOHANG] [TIMEOUT ms] [COUNT count] [WITHCOUNTERS] [WITHCLAIM] [TAG name] "
        "FROM queue [queue ...]",
        "Fetch jobs from the first non-empty queue, blocking until one arrives; "
        "WITHCLAIM (disquette) adds each delivery's claim; TAG (disquette, with NOHANG) "
        "records them under a name, and hands the name's unacknowledged jobs back first",
        "jobs",
    ),
    Syntax(
        "ACKJOB",
        "id [CLAIM n] [RESULT value] [id [CLAIM n] [RESULT value] ...]",
        "Acknowledge jobs as processed; a stale CLAIM (disquette) refuses it all; "
        "RESULT (disquette) is what WAITJOB returns; ACKJOB TAG name (disquette) "
        "acknowledges a delivery tag's jobs",
        "jobs",
    ),
    Syntax("FASTACK", "id [id ...]", "Delete jobs cluster-wide, best effort", "jobs"),
    Syntax(
        "WORKING",
        "id [CLAIM n] [text]",
        "Postpone the job's next requeue; a text (disquette) goes to its progress log; "
        "WORKING TAG name (disquette) postpones a delivery tag's jobs",
        "jobs",
    ),
    Syntax(
        "JOBLOG",
        "id",
        "A job's progress log: [ms-time, node-id, text] entries, oldest first (disquette)",
        "jobs",
    ),
    Syntax(
        "NACK",
        "id [CLAIM n] [id [CLAIM n] ...] [DELAY sec]",
        "Queue jobs again, counting a nack; a stale CLAIM (disquette) refuses it all; "
        "DELAY (disquette) queues them after that many seconds",
        "jobs",
    ),
    Syntax(
        "WAITJOB",
        "id [TIMEOUT ms]",
        "Wait until a job is acknowledged anywhere: [acked|cancelled|gone|unknown, result], "
        "nil on timeout (disquette)",
        "jobs",
    ),
    Syntax(
        "CANCEL",
        "id [id ...]",
        "Cancel jobs: never delivered again, their WORKING refused (disquette)",
        "jobs",
    ),
    Syntax(
        "ENQUEUE",
        "id [id ...]",
        "Queue jobs again, counting a delivery; releases a waiting job (disquette)",
        "jobs",
    ),
    Syntax("DEQUEUE", "id [id ...]", "Take jobs out of their queue", "jobs"),
    Syntax("DELJOB", "id [id ...]", "Delete jobs from this node", "jobs"),
    Syntax("SHOW", "id", "Describe a job", "jobs"),
    Syntax(
        "JSCAN",
        "[cursor] [COUNT count] [BUSYLOOP] [QUEUE queue] [STATE state] [PRIORITY 0-9] "
        "[REPLY id|all]",
        "Iterate over the jobs of this node; PRIORITY and STATE waiting are disquette's",
        "jobs",
    ),
    Syntax("QLEN", "queue", "The number of jobs queued", "queues"),
    Syntax(
        "QSTAT",
        "queue",
        "A queue's statistics (and, with disquette, its policy and this node's part of its "
        "rate and concurrency limits)",
        "queues",
    ),
    Syntax(
        "QPEEK", "queue count", "Queued jobs, without taking them (newest first if < 0)", "queues"
    ),
    Syntax(
        "QSCAN",
        "[cursor] [COUNT count] [BUSYLOOP] [MINLEN len] [MAXLEN len] [IMPORTRATE rate]",
        "Iterate over the queues of this node",
        "queues",
    ),
    Syntax(
        "PAUSE",
        "queue [IN] [OUT] [ALL] [NONE] [STATE] [BCAST]",
        "Stop producers and/or consumers of a queue",
        "queues",
    ),
    Syntax(
        "QPOLICY SET",
        f"name pattern {_POLICY_OPTIONS}",
        "Define or replace a queue policy, cluster-wide; RATE: jobs handed out per second, "
        "CONCURRENCY: jobs handed out and not yet acknowledged (disquette)",
        "policies",
    ),
    Syntax("QPOLICY DEL", "name", "Delete a queue policy (disquette)", "policies"),
    Syntax("QPOLICY LIST", "", "Every queue policy (disquette)", "policies"),
    Syntax("QPOLICY GET", "name", "One queue policy (disquette)", "policies"),
    Syntax("QPOLICY MATCH", "queue", "The policy applied to a queue (disquette)", "policies"),
    Syntax(
        "CRON SET",
        "name queue body (EVERY sec|SCHEDULE expr) [REPLICATE count] [RETRY sec] [TTL sec] "
        "[DELAY sec] [MAXLEN count] [PRIORITY 0-9] [ASYNC]",
        "Define or replace a recurring job, cluster-wide: one job per tick, every sec seconds "
        "or at the times of a cron expression in UTC (disquette)",
        "schedules",
    ),
    Syntax("CRON DEL", "name", "Delete a recurring job (disquette)", "schedules"),
    Syntax(
        "CRON LIST",
        "",
        "Every recurring job: [name, queue, body, every|schedule, sec|expr, [option, value ...], "
        "next tick, last tick fired] (disquette)",
        "schedules",
    ),
    Syntax("CRON GET", "name", "One recurring job, as CRON LIST shows it (disquette)", "schedules"),
    Syntax(
        "HELLO",
        "[protover [AUTH username password] [SETNAME name]]",
        "This node's ID and every node with its priority; with protover 2|3, "
        "Redis's RESP3 handshake (disquette)",
        "cluster",
    ),
    Syntax("CLUSTER MEET", "ip port", "Join the node at ip:port", "cluster"),
    Syntax("CLUSTER NODES", "", "The node table", "cluster"),
    Syntax("CLUSTER CLOCKS", "", "Each other node's clock offset (disquette)", "cluster"),
    Syntax("CLUSTER INFO", "", "The cluster's state", "cluster"),
    Syntax("CLUSTER MYID", "", "This node's ID", "cluster"),
    Syntax("CLUSTER FORGET", "node-id", "Remove a node from the table", "cluster"),
    Syntax("CLUSTER RESET", "[HARD|SOFT]", "Forget every other node", "cluster"),
    Syntax("CLUSTER LEAVING", "[yes|no]", "Whether this node is leaving; set it", "cluster"),
    Syntax("CLUSTER SAVECONFIG", "", "Write nodes.conf", "cluster"),
    Syntax("INFO", "[section]", "Information and statistics", "server"),
    Syntax(
        "OBSERVE NODE", "", "This node's counters and node table, as JSON (disquette)", "server"
    ),
    Syntax(
        "OBSERVE QUEUES",
        "[SORT name|len|activity] [AFTER name] [COUNT count] [PREFIX prefix]",
        "A page of this node's queues, as JSON (disquette)",
        "server",
    ),
    Syntax(
        "OBSERVE JOBS",
        "queue [OFFSET offset] [COUNT count]",
        "A page of a queue's queued jobs here, as JSON (disquette)",
        "server",
    ),
    Syntax("OBSERVE JOB", "id", "One job here, SHOW's fields as JSON (disquette)", "server"),
    Syntax("ACL SETUSER", "username [rule ...]", "Create or change a user (disquette)", "server"),
    Syntax("ACL GETUSER", "username", "A user's rules (disquette)", "server"),
    Syntax("ACL DELUSER", "username [username ...]", "Delete users (disquette)", "server"),
    Syntax("ACL LIST", "", "Every user as ACL SETUSER rules (disquette)", "server"),
    Syntax("ACL USERS", "", "The users' names (disquette)", "server"),
    Syntax("ACL WHOAMI", "", "This connection's user (disquette)", "server"),
    Syntax(
        "ACL CAT", "[category]", "The categories, or a category's commands (disquette)", "server"
    ),
    Syntax("ACL LOG", "[count|RESET]", "Refused commands and logins (disquette)", "server"),
    Syntax("ACL SAVE", "", "Write the users to the aclfile (disquette)", "server"),
    Syntax("ACL LOAD", "", "Read the users from the aclfile (disquette)", "server"),
    Syntax("ACL HELP", "", "ACL's subcommands (disquette)", "server"),
    Syntax("CONFIG GET", "parameter", "Configuration values", "server"),
    Syntax("CONFIG SET", "parameter value", "Change a configuration value", "server"),
    Syntax("CONFIG RESETSTAT", "", "Reset the statistics INFO reports", "server"),
    Syntax("CONFIG REWRITE", "", "Write the configuration back to its file", "server"),
    Syntax("CLIENT LIST", "", "The connected clients", "server"),
    Syntax(
        "CLIENT KILL",
        "[ip:port] [ID id] [TYPE type] [ADDR ip:port] [SKIPME yes|no]",
        "Close client connections",
        "server",
    ),
    Syntax("CLIENT GETNAME", "", "This connection's name", "server"),
    Syntax("CLIENT SETNAME", "name", "Name this connection", "server"),
    Syntax("CLIENT PAUSE", "ms", "Stop serving clients for a while", "server"),
    Syntax("CLIENT REPLY", "ON|OFF|SKIP", "Whether the server replies", "server"),
    Syntax("SLOWLOG GET", "[count]", "The slow log's entries", "server"),
    Syntax("SLOWLOG LEN", "", "The slow log's length", "server"),
    Syntax("SLOWLOG RESET", "", "Empty the slow log", "server"),
    Syntax("LATENCY LATEST", "", "The latest latency samples", "server"),
    Syntax("LATENCY HISTORY", "event", "An event's latency samples", "server"),
    Syntax("LATENCY GRAPH", "event", "An event's latency, as a graph", "server"),
    Syntax("LATENCY DOCTOR", "", "A latency report", "server"),
    Syntax("LATENCY RESET", "[event ...]", "Forget latency samples", "server"),
    Syntax("COMMAND", "[COUNT] [INFO name ...]", "The commands of this node", "server"),
    Syntax("MONITOR", "", "Every command the node receives, as it comes", "server"),
    Syntax("DEBUG", "subcommand [argument ...]", "Debugging commands", "server"),
    Syntax("BGREWRITEAOF", "", "Rewrite the append-only file", "server"),
    Syntax("LOADJOB", "serialized-job", "Load a job (append-only file replay)", "server"),
    Syntax("SHUTDOWN", "[REWRITE-AOF]", "Stop the node", "server"),
    Syntax(
        "AUTH",
        "[username] password",
        "Authenticate this connection (a username: an ACL user, disquette)",
        "connection",
    ),
    Syntax("PING", "[message]", "PONG, or the message", "connection"),
    Syntax("TIME", "", "The server's time", "connection"),
    Syntax("QUIT", "", "Close the connection", "connection"),
)

_BY_NAME = {s.name: s for s in COMMANDS}
#: Command names (first words), and the subcommands of those that have some.
NAMES = tuple(dict.fromkeys(s.name.split()[0] for s in COMMANDS))
SUBCOMMANDS = {
    name: tuple(s.name.split()[1] for s in COMMANDS if s.name.startswith(name + " "))
    for name in NAMES
}


def lookup(words: Iterable[str]) -> list[Syntax]:
    """The entries ``help`` shows for ``words``: a command (all its subcommands) or one."""
    words = [w.upper() for w in words]
    if not words:
        return []
    if len(words) > 1 and f"{words[0]} {words[1]}" in _BY_NAME:
        return [_BY_NAME[f"{words[0]} {words[1]}"]]
    return [s for s in COMMANDS if s.name.split()[0] == words[0]]


def help_text(words: Iterable[str]) -> str:
    """``help`` for a command, or a line saying there is none."""
    words = list(words)
    entries = lookup(words)
    if not entries:
        return f'\n  no help for {" ".join(words)!r}; "help" lists this node\'s commands\n\n'
    return "".join(e.help() for e in entries) + "\n"


def candidates(words: list[str], text: str) -> list[str]:
    """The completions of ``text``, the word being typed after ``words``.

    Matching ignores case; the completions follow the case of what is typed
    (lower-case when ``text`` is, or when it is empty and the command name
    is), else upper-case.
    """
    if not words:
        options: Iterable[str] = NAMES
    else:
        name = words[0].upper()
        subcommands = SUBCOMMANDS.get(name, ())
        if len(words) == 1 and subcommands:
            options = subcommands
        else:
            entries = lookup(words[:2])
            if len(entries) != 1:
                return []
            options = entries[0].keywords
    prefix = text.upper()
    matches = [o for o in options if o.startswith(prefix)]
    typed = text or (words[0] if words else "")
    return [m.lower() for m in matches] if typed.islower() else matches


class Completer:
    """A readline completer over :func:`candidates`; :meth:`install` sets it up."""

    def __init__(self, readline: Any) -> None:
        self._readline = readline
        self._matches: list[str] = []

    def install(self) -> None:
        rl = self._readline
        rl.set_completer(self.complete)
        rl.set_completer_delims(" \t")
        if "libedit" in (rl.__doc__ or ""):  # pragma: no cover - macOS' readline
            rl.parse_and_bind("bind ^I rl_complete")
        else:
            rl.parse_and_bind("tab: complete")

    def complete(self, text: str, state: int) -> str | None:
        """readline's protocol: the ``state``-th completion of ``text``, None after the last."""
        if state == 0:
            before = self._readline.get_line_buffer()[: self._readline.get_begidx()]
            self._matches = [m + " " for m in candidates(before.split(), text)]
        return self._matches[state] if state < len(self._matches) else None
