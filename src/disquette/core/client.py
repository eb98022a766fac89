"""A connected client as the node sees it: session state and blocking state.

The server shell subclasses :class:`Client` for real connections (and the
simulator for virtual ones) and implements :meth:`deliver`, through which the
core answers a client it had blocked (GETJOB waiting for jobs, ADDJOB waiting
for replication) and releases it to process its next request, and :meth:`gone`,
which the core asks before it hands a job to a blocked client: a connection can
end (reset, say) a moment before the shell hears of it, and a job handed to it
then would wait for its retry.
"""

from __future__ import annotations

from typing import Any, Final

from mypy_extensions import mypyc_attr

BLOCK_NONE: Final = 0
BLOCK_GETJOB: Final = 1
BLOCK_ADDJOB: Final = 2
BLOCK_WAITJOB: Final = 3  # beyond Disque (core/outcome.py)

REPLY_ON: Final = 0
REPLY_OFF: Final = 1
REPLY_SKIP_NEXT: Final = 2  # CLIENT REPLY SKIP: suppress the next command's reply
REPLY_SKIP: Final = 3  # the command being executed now has its reply suppressed


@mypyc_attr(allow_interpreted_subclasses=True)  # the simulator's and the tests' clients
class Client:
    __slots__ = (
        "acl",
        "addr",
        "authenticated",
        "block_deadline",
        "block_job",
        "block_queues",
        "block_shape",
        "blocked",
        "close_after_reply",
        "ctime",
        "id",
        "last_command",
        "last_interaction",
        "monitor",
        "name",
        "reply_mode",
        "resp3",
        "unix_socket",
        "username",
    )

    def __init__(self, client_id: int, addr: bytes, now_ms: int) -> None:
        self.id = client_id
        self.addr = addr  # b"ip:port", or the socket path for unix sockets
        self.unix_socket = False
        self.ctime = now_ms
        self.last_interaction = now_ms
        self.name: bytes | None = None
        self.authenticated = False
        self.username = b"default"  # ACL WHOAMI (core/acl.py)
        # The user's permissions when they are checked (state/access.py); None, the
        # common case, for a user that may do everything.
        self.acl: Any = None
        self.reply_mode = REPLY_ON
        self.resp3 = False  # HELLO 3 (beyond Disque): nulls as RESP3's _, SHOW as a map
        self.monitor = False
        self.close_after_reply = False
        self.last_command = b"NULL"
        self.blocked = BLOCK_NONE
        self.block_deadline = 0  # absolute ms, 0 = forever
        self.block_queues: list[Any] = []
        self.block_shape = 0  # how a blocked GETJOB shows its jobs (replies.WITH_*)
        self.block_job: Any = None

    def deliver(self, reply: bytes) -> None:
        """Send ``reply`` to a client the core had blocked; it is unblocked already."""
        raise NotImplementedError

    def gone(self) -> bool:
        """Whether the client's connection has ended, heard of or not: a shell that
        finds out here forgets the client at once (as if it had disconnected), so that
        nothing is handed to it."""
        return False

    def push(self, data: bytes) -> None:
        """Write ``data`` outside of any request (MONITOR lines)."""
        raise NotImplementedError
