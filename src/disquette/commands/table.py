"""The command table: Disque's 32 commands (and disquette's own) with their arity and flags.

Each command module registers its procedures with :func:`command`; the table
maps lower-case names (after ``rename-command``) to :class:`Command` entries
that also carry the per-command statistics INFO commandstats reports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from disquette.commands.state import ServerState
    from disquette.core.client import Client

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


SPECS: Final[dict[str, tuple[int, str, Proc, RunProc | None, int | None]]] = {}


def command(
    name: str,
    arity: int,
    flags: str,
    run: RunProc | None = None,
    disque_arity: int | None = None,
) -> Callable[[Proc], Proc]:
    """Register ``proc`` as the implementation of ``name`` (and ``run`` for runs of it).
    ``disque_arity``: what COMMAND shows for a Disque command that disquette lets take
    more arguments (Disque's table stays as Disque clients know it)."""

    def register(proc: Proc) -> Proc:
        SPECS[name] = (arity, flags, proc, run, disque_arity)
        return proc

    return register


def build_table(renames: dict[str, str] | None = None) -> dict[bytes, Command]:
    """A fresh table (fresh statistics), with ``rename-command`` applied."""
    _load_modules()
    table: dict[bytes, Command] = {}
    renames = renames or {}
    for name, (arity, flags, proc, run, shown) in SPECS.items():
        new_name = renames.get(name, name)
        if new_name:
            # rename-command names are already lower-cased; keep any byte as given.
            key = new_name.encode("utf-8", "surrogateescape")
            table[key] = Command(name, arity, flags, proc, run, shown)
    return table


def _load_modules() -> Any:
    # Importing the command modules registers their procedures.
    from disquette.commands import (  # noqa: F401
        acl,
        cluster,
        connection,
        cron,
        introspection,
        jobs,
        observe,
        policies,
        queues,
    )
