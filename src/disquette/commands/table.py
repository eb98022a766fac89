"""The command table: Disque's 32 commands (and disquette's own) with their arity and flags.

Each command module registers its procedures with :func:`command`; the table
maps lower-case names (after ``rename-command``) to
:class:`~disquette.state.command.Command` entries that also carry the per-command
statistics INFO commandstats reports. :func:`disquette.commands.new_state` gives a
node's state its table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from disquette.state.command import Command, Proc, RunProc

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
