"""Names: CLUSTER MEET with a DNS name, and ``cluster-seeds`` (beyond Disque).

The core meets IP addresses only (its handshakes are keyed by address, and it does
no I/O). Names are resolved here, in the event loop's resolver (a thread: a slow DNS
server never stalls the node), and every address a name gives is met.

``cluster-seeds host:port[@bus-port] ...`` says where the cluster is: every
:data:`PERIOD_S` the node resolves each seed again (a Kubernetes headless service's
name gives the addresses of its ready pods, and a rescheduled pod's new one) and meets
every address that is neither a node it knows at that address nor itself. Once the
node is meshed there is nothing left to meet, so the rounds cost one lookup per seed;
a node whose peers all moved finds them again through the names. A seed that does not
resolve is logged once, until it resolves again. CONFIG SET cluster-seeds takes effect
at the next round.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Any, Final

from disquette.config.values import Seed, seed
from disquette.core.membership import NOADDR, normalize_ip

if TYPE_CHECKING:
    from disquette.core.node import Node
    from disquette.server.log import Log

#: Seconds between two rounds of resolving the seeds.
PERIOD_S: Final = 2.0


class Seeds:
    """Resolves names and meets what they name, for CLUSTER MEET and cluster-seeds."""

    def __init__(self, node: Node, config: Any, log: Log) -> None:
        self.node = node
        self.config = config
        self.log = log
        self._task: asyncio.Task[None] | None = None
        self._failing: set[str] = set()  # seeds whose lookup failed last time (logged)
        self._pending: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._rounds())

    def close(self) -> None:
        for task in (self._task, *self._pending):
            if task is not None:
                task.cancel()

    def meet(self, host: bytes, port: int, bus_port: int) -> None:
        """CLUSTER MEET by name: resolve it in the background, then meet each address."""
        task = asyncio.get_running_loop().create_task(
            self._meet(Seed(host.decode("ascii", "replace"), port, bus_port), quiet=False)
        )
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _rounds(self) -> None:
        while True:
            for text in list(self.config.cluster_seeds):
                await self._meet(seed(text.encode()), quiet=True)
            await asyncio.sleep(PERIOD_S)

    async def _meet(self, target: Seed, quiet: bool) -> None:
        name = f"{target.host}:{target.port}"
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                target.host, target.port, type=socket.SOCK_STREAM
            )
        except (OSError, UnicodeError) as e:
            if not quiet or name not in self._failing:
                self.log.warning(f"Can't resolve {name} to meet it: {e}")
            self._failing.add(name)
            return
        if name in self._failing:
            self._failing.discard(name)
            self.log.notice(f"{name} resolves again")
        for ip in dict.fromkeys(str(info[4][0]).encode() for info in infos):
            if quiet and self._known(ip, target.port):
                continue
            try:
                if self.node.cluster.start_handshake(ip, target.port, target.bus_port):
                    self.log.verbose(f"Meeting {ip.decode()}:{target.port} (from {name})")
            except ValueError:
                self.log.warning(f"{name} resolves to {ip.decode()}: not a node address")

    def _known(self, ip: bytes, port: int) -> bool:
        """Whether ip:port is this node or a node it knows there (or is meeting)."""
        cluster = self.node.cluster
        norm = normalize_ip(ip)
        me = cluster.myself
        if port in (me.port, self.node.port) and (norm == me.ip or norm in self._own_ips()):
            return True
        return any(
            n.ip == norm and n.port == port and not n.flags & NOADDR
            for n in cluster.nodes.values()
            if n is not me
        )

    def _own_ips(self) -> set[bytes]:
        """The addresses this node binds (its own name resolves to them)."""
        return {ip for ip in (normalize_ip(a.encode()) for a in self.config.bind) if ip is not None}
