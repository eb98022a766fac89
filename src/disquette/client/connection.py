"""The state of one client connection, without the socket.

Like h11, this class never touches the network. The I/O shell (sync or
asyncio) gives it the bytes it read and writes the bytes it returns:

    conn = Connection(password="secret")
    sock.sendall(conn.start())           # AUTH, CLIENT SETNAME, HELLO, pipelined
    while not conn.ready:
        conn.receive(sock.recv(65536))   # the handshake replies are consumed here
    sock.sendall(conn.send([(b"QLEN", b"q")]))
    replies = conn.receive(sock.recv(65536))   # -> [0]

States: ``NEW`` -> ``HANDSHAKE`` -> ``READY`` -> ``CLOSED``. Replies come back
in the order the commands were sent; every reply is accounted for (a reply
nobody asked for is a protocol error, and :meth:`close` says how many were
still owed). Error replies are returned as exception instances so one failed
command in a pipeline does not hide the replies after it; a failed handshake
raises (:class:`AuthError` for a refused password, the server's error
otherwise, e.g. :class:`LoadingError`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

from disquette.client.errors import AuthError, ProtocolError, ResponseError
from disquette.client.models import Hello
from disquette.client.resp import Parser, encode_command, make_parser


class State(enum.Enum):
    NEW = "new"
    HANDSHAKE = "handshake"
    READY = "ready"
    CLOSED = "closed"


class Connection:
    """One connection's protocol state: handshake, replies owed, parser."""

    __slots__ = ("_handshake", "_parser", "hello", "owed", "state", "streaming")

    def __init__(
        self,
        *,
        password: str | None = None,
        client_name: str | None = None,
        hello: bool = True,
        parser: Parser | None = None,
        username: str | None = None,
    ) -> None:
        self._parser = parser if parser is not None else make_parser()
        self._handshake: list[tuple[bytes, ...]] = []
        if password is not None:
            user = (username.encode(),) if username is not None else ()
            self._handshake.append((b"AUTH", *user, password.encode()))
        if client_name:
            self._handshake.append((b"CLIENT", b"SETNAME", client_name.encode()))
        if hello:
            self._handshake.append((b"HELLO",))
        self.state = State.NEW
        #: Replies the server still owes for commands sent with :meth:`send`.
        self.owed = 0
        #: The HELLO reply of the handshake, if one was requested.
        self.hello: Hello | None = None
        #: Accept replies nobody asked for (after MONITOR the server streams them).
        self.streaming = False

    @property
    def ready(self) -> bool:
        return self.state is State.READY

    def start(self) -> bytes:
        """The handshake to write first (may be empty: then the connection is ready at once)."""
        if self.state is not State.NEW:
            raise RuntimeError(f"start() on a {self.state.value} connection")
        self.state = State.HANDSHAKE if self._handshake else State.READY
        return b"".join(encode_command(args) for args in self._handshake)

    def send(self, commands: Iterable[Sequence[bytes]]) -> bytes:
        """The bytes for ``commands``; their replies will come out of :meth:`receive`."""
        if self.state is not State.READY:
            raise RuntimeError(f"send() on a {self.state.value} connection")
        out = [encode_command(args) for args in commands]
        self.owed += len(out)
        return b"".join(out)

    def send_encoded(self, data: bytes, count: int) -> bytes:
        """Like :meth:`send`, for ``count`` commands the caller already encoded as ``data``.

        For hot paths that encode many similar commands faster than argument by
        argument (the Spark sink's ADDJOBs); their replies come out of :meth:`receive`.
        """
        if self.state is not State.READY:
            raise RuntimeError(f"send() on a {self.state.value} connection")
        self.owed += count
        return data

    def receive(self, data: bytes) -> list[Any]:
        """Feed bytes read from the socket; return the complete replies, in order."""
        if self.state is State.CLOSED:
            raise RuntimeError("receive() on a closed connection")
        self._parser.feed(data)
        replies: list[Any] = []
        gets = self._parser.gets
        while True:
            try:
                reply = gets()
            except ProtocolError:
                self.state = State.CLOSED
                raise
            if reply is False:
                return replies
            if self.state is State.HANDSHAKE:
                self._handshake_reply(reply)
            elif self.owed:
                self.owed -= 1
                replies.append(reply)
            elif self.streaming:
                replies.append(reply)
            else:
                self.state = State.CLOSED
                raise ProtocolError(f"unexpected reply {reply!r}: no command is waiting for one")

    def close(self) -> int:
        """Mark the connection closed; return how many replies were lost with it."""
        lost, self.owed = self.owed, 0
        self.state = State.CLOSED
        return lost

    def _handshake_reply(self, reply: Any) -> None:
        args = self._handshake.pop(0)
        if isinstance(reply, ResponseError):
            self.state = State.CLOSED
            if args[0] == b"AUTH" and not isinstance(reply, AuthError):
                raise AuthError(str(reply))
            raise reply
        if args[0] == b"HELLO":
            self.hello = Hello.from_reply(reply)
        if not self._handshake:
            self.state = State.READY
