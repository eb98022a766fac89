"""The cluster-wide view: ask every known node, in parallel, and merge what comes back.

A node that serves the HTTP API (or ``disquette top``) asks each node of its node table
for its OBSERVE view (commands/observe.py) over the client port with the project's
asyncio client, authenticating with this node's ``requirepass``: the nodes of a
cluster are expected to share it (docs/operations.md). Every node is asked at once
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

from disquette.aio import Client
from disquette.core.membership import HANDSHAKE, NOADDR
from disquette.observe.merge import TIMEOUT, Answers

if TYPE_CHECKING:
    from disquette.commands.state import ServerState


class Gatherer:
    """Asks the cluster's nodes (the local node in-process) and merges their views."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._client: Client | None = None
        self._password: str | None = None

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
            answers[myself] = local
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
