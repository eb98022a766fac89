"""disquette: a distributed, in-memory job queue that speaks Disque's protocol.

The package is split the way the system is: ``core`` decides (sans-I/O state
machines), ``state`` holds the server state and the request pipeline, ``commands``
turns client requests into core calls and replies, ``observe`` shows the node,
``protocol`` reads and writes RESP, ``config`` reads directives, and ``server``
(with ``http``) is the asyncio shell that owns sockets, files and the clock
(docs/architecture.md).
"""

from disquette import build

build.select()  # DISQUETTE_PURE=1: the pure sources, before any other module loads

__version__ = "0.2.0"

#: The version string clients see; disquette answers as Disque 1.0-rc1 does.
DISQUE_VERSION = "1.0-rc1"

from disquette.client import *  # noqa: E402, F403 - the client API: Client, Job, exceptions
from disquette.client import __all__ as _client_all  # noqa: E402
from disquette.worker import DeadLetter, Worker  # noqa: E402

__all__ = [*_client_all, "DISQUE_VERSION", "DeadLetter", "Worker", "__version__"]
