"""The cluster-wide view: ask every known node, in parallel, and merge what comes back.

A node that serves the HTTP API (or ``disquette top``) asks each node of its node table
for its OBSERVE view (commands/observe.py) over the client port with the project's
asyncio client, authenticating with this node's ``requirepass``: the nodes of a
cluster are expected to share it (docs/operations.md). Every node is asked at once
and given :data:`TIMEOUT` (1 s) to answer; those that do not (down, partitioned, a
different password) are listed as ``unanswered`` and the merge goes on without them.
The node itself is answered in-process (the same view functions, no connection).

Merging rules (what /api/queues and friends promise):

* a queue's ``len``, ``jobs_in``, ``jobs_out``, ``nacks``, ``additional_deliveries``
  and ``blocked`` are sums over the nodes that have it; ``nodes`` maps each to its
  length; ``age`` is the oldest; ``paused`` is the union of the nodes' pause flags;
* ``sort=name`` pages are exact: each node gives its first ``limit`` names after the
  cursor, and the first ``limit`` names of their union are the cluster's;
* ``sort=len|activity`` ranks the sums of each node's top ``offset + limit`` (exact
  when a queue lives on one node, a close ranking otherwise); the cursor is an offset
  and a ranking goes at most 1000 deep.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from disquette.aio import Client
from disquette.core.membership import HANDSHAKE, NOADDR
from disquette.observe import view

if TYPE_CHECKING:
    from disquette.commands.state import ServerState

#: Seconds a node has to answer.
TIMEOUT: Final = 1.0
PAUSE_BITS: Final = {"none": 0, "in": 1, "out": 2, "all": 3}
PAUSE_NAMES: Final = ("none", "in", "out", "all")
SUMMED: Final = ("len", "jobs_in", "jobs_out", "nacks", "additional_deliveries", "blocked")

Answers = dict[str, Any]  # node id -> its decoded answer (None: a null reply)


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


# --------------------------------------------------------------------------
# Merging.


def merge_queues(answers: Answers) -> dict[bytes, dict[str, Any]]:
    """Queue summaries of several nodes merged by name (module docstring's rules)."""
    merged: dict[bytes, dict[str, Any]] = {}
    for node_id, page in answers.items():
        for summary in page["queues"]:
            key = view.name_bytes(summary["name"]) or b""
            into = merged.get(key)
            if into is None:
                into = merged[key] = {
                    "name": summary["name"],
                    **dict.fromkeys(SUMMED, 0),
                    "nodes": {},
                    "paused": 0,
                    "age": None,
                }
            for field in SUMMED:
                into[field] += summary[field]
            into["nodes"][node_id] = summary["len"]
            into["paused"] |= PAUSE_BITS.get(summary["paused"], 0)
            age = summary["age"]
            if age is not None and (into["age"] is None or age > into["age"]):
                into["age"] = age
    for into in merged.values():
        into["paused"] = PAUSE_NAMES[into["paused"]]
    return merged


def rank_key(sort: str) -> Any:
    if sort == "len":
        return lambda q: (-q["len"], view.name_bytes(q["name"]) or b"")
    return lambda q: (-(q["jobs_in"] + q["jobs_out"]), view.name_bytes(q["name"]) or b"")
