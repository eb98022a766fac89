"""The cluster-wide view: ask every known node, in parallel, and merge what comes back.

A node that serves the HTTP API (or ``disquette top``) asks each node of its node table
for its OBSERVE view (commands/observe.py) over the client port with the project's
asyncio client, authenticating with this node's ``requirepass``: the nodes of a
cluster are expected to share it (docs/operations.md). A request of the HTTP port
made as an ACL user (commands/acl.py, users are cluster-wide) is gathered
:meth:`~Gatherer.as_user`: the peers are asked with that user's name and password,
and this node answers through the OBSERVE command run as that user, so that every
node shows the user only what it may read. Every node is asked at once
and given :data:`TIMEOUT` (1 s) to answer; those that do not (down, partitioned, a
different password) are listed as ``unanswered`` and the merge goes on without them.
The node itself is answered in-process (the same view functions, no connection).
The merging rules are observe/merge.py's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import hiredis

from disquette.aio import Client
from disquette.client.errors import ResponseError
from disquette.core.client import Client as CoreClient
from disquette.core.membership import HANDSHAKE, NOADDR
from disquette.observe.merge import TIMEOUT, Answers

if TYPE_CHECKING:
    from disquette.state.server import ServerState


#: The clients kept for users' requests (one per user and password).
MAX_USER_CLIENTS = 32


class Gatherer:
    """Asks the cluster's nodes (the local node in-process) and merges their views."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._client: Client | None = None
        self._password: str | None = None
        self._users: dict[tuple[bytes, bytes], Client] = {}  # shared with as_user's
        #: The user asked as (None: this node's requirepass) and its permissions
        #: (None: every one).
        self.credentials: tuple[bytes, bytes] | None = None
        self.restriction: Any = None

    def as_user(self, username: bytes, password: bytes, restriction: Any) -> Gatherer:
        """The gatherer of one request made as ``username`` (clients are shared)."""
        other = Gatherer.__new__(Gatherer)
        other.__dict__.update(self.__dict__)
        other.credentials = (username, password)
        other.restriction = restriction
        return other

    def peers(self) -> dict[str, str]:
        """Every other node with an address: ``{id: "ip:port"}``."""
        node = self.state.node
        return {
            row.id.decode(): f"{row.ip.decode()}:{row.port}"
            for row in node.cluster.nodes.values()
            if row.id != node.myself and row.ip and not row.flags & (HANDSHAKE | NOADDR)
        }

    def own_address(self) -> str:
        """Where this node's client port answers a connection from this host."""
        config = self.state.config
        bind = config.bind
        host = bind[0] if bind and bind[0] not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"[{host}]:{config.port}" if ":" in host else f"{host}:{config.port}"

    def client(self) -> Client:
        """The asyncio client the peers are asked with (made again when the password
        changes)."""
        if self.credentials is not None:
            return self._user_client(*self.credentials)
        password = self.state.config.requirepass
        if self._client is None or password != self._password:
            self._client = Client(  # (every call names its node: the seed is a formality)
                self.own_address(),
                password=password,
                connect_timeout=TIMEOUT,
                socket_timeout=TIMEOUT,
            )
            self._password = password
        return self._client

    def _user_client(self, username: bytes, password: bytes) -> Client:
        client = self._users.get((username, password))
        if client is None:
            if len(self._users) >= MAX_USER_CLIENTS:
                oldest = next(iter(self._users))
                asyncio.get_running_loop().create_task(self._users.pop(oldest).close())
            client = self._users[(username, password)] = Client(
                self.own_address(),
                username=username.decode("utf-8", "surrogateescape"),
                password=password.decode("utf-8", "surrogateescape"),
                connect_timeout=TIMEOUT,
                socket_timeout=TIMEOUT,
            )
        return client

    def local(self, local: Any, args: Sequence[bytes | str]) -> Any:
        """This node's answer: ``local`` (made by the caller), or for a restricted user
        what ``OBSERVE *args`` run as the user answers (raise ResponseError)."""
        if self.restriction is None or self.credentials is None:
            return local
        client = CoreClient(0, b"http", 0)
        client.authenticated = True
        client.username = self.credentials[0]
        client.acl = self.restriction
        argv = [b"OBSERVE", *(a.encode() if isinstance(a, str) else a for a in args)]
        reader = hiredis.Reader()
        reader.feed(self.state.execute(client, argv) or b"")
        reply = reader.gets()
        if isinstance(reply, hiredis.ReplyError):
            raise ResponseError(str(reply))
        return None if reply is None else json.loads(reply)

    async def command(self, address: str, *args: bytes | str) -> Any:
        """One command on the node at ``address`` (raises on an error reply or timeout)."""
        call = self.client().on_node(address).execute(*args)
        return await asyncio.wait_for(call, TIMEOUT)

    async def ask(
        self, local: Any, *args: bytes | str, only: Sequence[str] | None = None
    ) -> tuple[Answers, list[str]]:
        """``OBSERVE *args`` on every node (or the ``only`` ones): this node's answer is
        ``local`` (made in-process); returns the decoded answers and the unanswered IDs."""
        myself = self.state.node.myself.decode()
        peers = self.peers()
        wanted = [n for n in (only if only is not None else [myself, *peers]) if n != myself]
        replies = await asyncio.gather(
            *(self._observe(peers.get(n), args) for n in wanted), return_exceptions=True
        )
        answers: Answers = {}
        unanswered: list[str] = []
        if only is None or myself in only:
            try:
                answers[myself] = self.local(local, args)
            except ResponseError:  # (the user may not run OBSERVE)
                unanswered.append(myself)
        for node_id, reply in zip(wanted, replies, strict=True):
            if isinstance(reply, BaseException):
                unanswered.append(node_id)
            else:
                answers[node_id] = reply
        return answers, unanswered

    async def _observe(self, address: str | None, args: Sequence[bytes | str]) -> Any:
        if address is None:
            raise LookupError("no address")
        reply = await self.command(address, "OBSERVE", *args)
        return None if reply is None else json.loads(reply)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
        for client in self._users.values():
            await client.close()
        self._users.clear()
