"""Client commands: argument parsing, the call into the core, the reply's shape.

One module per family (jobs, queues, cluster, server, introspection); each
command is registered in :mod:`disquette.commands.table` with Disque's arity
and flags, and :mod:`disquette.state.server` runs them in Disque's order.
:func:`new_state` makes a node's server state with the table of these commands.
"""

from __future__ import annotations

from typing import Any

from disquette.commands.table import build_table
from disquette.core.node import Node
from disquette.state.server import ServerState, Shell


def new_state(config: Any, node: Node, shell: Shell | None = None) -> ServerState:
    """A node's server state running this package's commands (a fresh table, with
    ``rename-command`` applied): what both shells and the tests start from."""
    return ServerState(config, node, build_table(config.rename_commands), shell)
