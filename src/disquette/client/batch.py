"""A batch of commands sent on one connection with a bounded number in flight.

Pipelining is what makes a client fast (one round trip for many commands) and
what makes it dangerous (a huge pipeline fills both sides' buffers). A
:class:`Batch` takes its commands lazily from any iterable and never has more
than ``window`` replies outstanding; the I/O shell loops::

    while not batch.done:
        while commands := batch.outgoing(batch.chunk):   # until the window is full
            write(conn.send(c.args for c in commands))
        if batch.waiting: batch.received(conn.receive(read()))

Sent half a window at a time (:attr:`Batch.chunk`), a long pipeline keeps both
sides busy: the node runs the first half while the client encodes the second, then
the client encodes the next while the node runs that one, where a whole window
written at once would leave the node idle while the client encodes it.

A single command is a batch of one. Results line up with the commands sent:
the decoded reply, or an exception instance for an error reply, a reply that
could not be decoded, or a reply lost with the connection.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from disquette.client.errors import ProtocolError, ReplyLostError, ResponseError

if TYPE_CHECKING:
    from disquette.client.commands import Command


class Batch:
    """Commands in flight on one connection, and their results so far."""

    __slots__ = (
        "_count",
        "_in_flight",
        "_source",
        "_stopped",
        "chunk",
        "failed",
        "lost_cause",
        "node",
        "results",
        "sink",
        "stop_on_error",
        "window",
    )

    def __init__(
        self,
        commands: Iterable[Command[Any]],
        window: int = 1,
        *,
        stop_on_error: bool = False,
        sink: Callable[[Any], None] | None = None,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self._source = iter(commands)
        self._in_flight: deque[Command[Any]] = deque()
        self._stopped = False
        self.window = window
        #: The most commands a shell sends at once: half the window (see the module doc).
        self.chunk = max(1, window // 2)
        self.stop_on_error = stop_on_error
        self.results: list[Any] = []
        #: Called with each result instead of keeping it in ``results`` (long streams).
        self.sink = sink
        #: ``host:port`` of the node the batch ran on (set by the plan that runs it).
        self.node = ""
        #: Why the connection broke during the batch, if it did.
        self.lost_cause: BaseException | None = None
        #: The commands that failed, with their place among the results (to resend some).
        self.failed: list[tuple[int, Command[Any]]] = []
        self._count = 0

    @property
    def done(self) -> bool:
        return self._stopped and not self._in_flight

    @property
    def waiting(self) -> bool:
        """True while replies are outstanding."""
        return bool(self._in_flight)

    def outgoing(self, limit: int | None = None) -> list[Command[Any]]:
        """The next commands to send: as many as the window allows (at most ``limit``),
        maybe none."""
        if self._stopped:
            return []
        room = self.window - len(self._in_flight)
        if limit is not None and limit < room:
            room = limit
        taken = list(itertools.islice(self._source, room))
        if len(taken) < room:
            self._stopped = True
        self._in_flight.extend(taken)
        return taken

    def received(self, replies: list[Any]) -> None:
        """Record replies, in order, for the oldest commands in flight."""
        for reply in replies:
            command = self._in_flight.popleft()
            result: Any
            if isinstance(reply, ResponseError):
                reply.node = self.node
                result = reply
            else:
                try:
                    result = command.decode(reply)
                except Exception as exc:
                    result = ProtocolError(f"unexpected reply to {command.name}: {reply!r} ({exc})")
            if isinstance(result, BaseException):
                self.failed.append((self._count, command))
                if self.stop_on_error:
                    self._stopped = True
            self._record(result)

    def lost(self, cause: BaseException) -> None:
        """The connection broke: every command in flight gets a :class:`ReplyLostError`."""
        self.lost_cause = cause
        for command in self._in_flight:
            self.failed.append((self._count, command))
            self._record(ReplyLostError(command.name, self.node, cause))
        self._in_flight.clear()
        self._stopped = True

    def _record(self, result: Any) -> None:
        self._count += 1
        if self.sink is None:
            self.results.append(result)
        else:
            self.sink(result)

    def read_timeout(self, socket_timeout: float | None) -> float | None:
        """How long a read may wait: the socket timeout plus what the server may block for."""
        if socket_timeout is None:
            return None
        block = max((c.block for c in self._in_flight if c.block is not None), default=0.0)
        return None if math.isinf(block) else socket_timeout + block
