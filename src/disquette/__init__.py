"""disquette: a distributed, in-memory job queue that speaks Disque's protocol.

The package is split the way the system is: ``core`` decides (sans-I/O state
machines), ``state`` holds the server state and the request pipeline, ``commands``
turns client requests into core calls and replies, ``observe`` shows the node,
``protocol`` reads and writes RESP, ``config`` reads directives, and ``server``
(with ``http``) is the asyncio shell that owns sockets, files and the clock
(docs/architecture.md).
"""

from typing import TYPE_CHECKING

from disquette import build

build.select()  # DISQUETTE_PURE=1: the pure sources, before any other module loads

__version__ = "0.2.0"

#: The version string clients see; disquette answers as Disque 1.0-rc1 does.
DISQUE_VERSION = "1.0-rc1"

if TYPE_CHECKING:  # (what __getattr__ below gives, for the type checkers)
    from disquette.client import *  # noqa: F403
    from disquette.worker import DeadLetter as DeadLetter
    from disquette.worker import Worker as Worker


def __getattr__(name: str) -> object:
    """The client API (:mod:`disquette.client`'s names, Worker, DeadLetter), imported at
    first use and kept here after it: a node's process (``disquette.server``) never
    loads the client."""
    import importlib

    from disquette.client import __all__ as client_names

    if name == "__all__":
        return [*client_names, "DISQUE_VERSION", "DeadLetter", "Worker", "__version__"]
    if name in ("Worker", "DeadLetter"):
        source = "disquette.worker"
    elif name in client_names:
        source = "disquette.client"
    else:
        raise AttributeError(f"module 'disquette' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value
