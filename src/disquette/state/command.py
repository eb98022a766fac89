"""A command as the pipeline runs it: its procedures, arity, flags and statistics.

The table of them is built by :func:`disquette.commands.table.build_table` from the
procedures each command module registers; :class:`~disquette.state.server.ServerState`
is given that table and runs its entries in Disque's order. An entry also carries the
per-command statistics INFO commandstats reports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.state.server import ServerState

Proc = Callable[["ServerState", "Client", list[bytes]], "bytes | None"]
# A run procedure executes in one go the leading requests of a pipeline that are
# the command, from a given index (see ServerState.execute_run): it returns how
# many it executed and their replies, all together.
RunProc = Callable[["ServerState", "Client", list[list[bytes]], int], tuple[int, bytes]]
NO_RUN: Final = (0, b"")

# Flag letters, as in Disque's table: w write, r read-only, m deny when OOM,
# a admin, l allowed while loading, F fast.
FLAG_NAMES: Final = (
    ("w", "write"),
    ("r", "readonly"),
    ("m", "denyoom"),
    ("a", "admin"),
    ("R", "random"),
    ("l", "loading"),
    ("S", "skip_monitor"),
    ("F", "fast"),
)


class Command:
    __slots__ = (
        "arity",
        "calls",
        "denyoom",
        "fast",
        "flags",
        "loading",
        "name",
        "name_bytes",
        "proc",
        "run",
        "shown_arity",
        "usec",
        "write",
    )

    def __init__(
        self,
        name: str,
        arity: int,
        flags: str,
        proc: Proc,
        run: RunProc | None = None,
        shown_arity: int | None = None,
    ) -> None:
        self.name = name
        self.name_bytes = name.encode()  # CLIENT LIST's cmd=, set on every call
        self.arity = arity
        # What COMMAND says: Disque's arity for a command whose syntax disquette extends.
        self.shown_arity = arity if shown_arity is None else shown_arity
        self.flags = flags
        self.proc = proc
        self.run = run
        self.write = "w" in flags
        self.denyoom = "m" in flags
        self.loading = "l" in flags
        self.fast = "F" in flags
        self.calls = 0
        self.usec = 0

    def flag_names(self) -> list[str]:
        return [name for letter, name in FLAG_NAMES if letter in self.flags]
