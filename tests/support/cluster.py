"""Real multi-node clusters for tests: N server processes joined with CLUSTER MEET.

One helper for every test that needs a cluster of real processes (the client
tests and the cluster integration tests). Every node runs in its own directory
(``base/n<i>``) on free ports; :meth:`Cluster.meet_all` joins them from node 0
and waits (with a deadline, never a blind sleep) until every node links to
every other one and counts them reachable; every process is stopped at the end,
killed ones included.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import redis

from tests.support.servers import ServerProcess, wait_for

DEADLINE = 60.0  # seconds; generous, for loaded machines


def pairs(items: list) -> dict:
    """A flat [name, value, ...] reply as a dict keyed by str names."""
    it = iter(items)
    return {name.decode(): value for name, value in zip(it, it, strict=True)}


def sees_mesh(cluster_nodes: str, cluster_info: str, wanted: set[int]) -> bool:
    """Whether a node (by its CLUSTER NODES and CLUSTER INFO) links to every port in
    ``wanted`` (its own included), none failing or in handshake, and counts the others
    reachable: the list ADDJOB's REPLICATE checks is recomputed every 100 ms, so a link
    alone does not make a node ready to replicate."""
    linked = {
        int(f[1].rsplit(":", 1)[1])
        for f in (line.split() for line in cluster_nodes.splitlines())
        if f[5] == "connected" and not {"fail", "fail?", "handshake"} & set(f[2].split(","))
    }
    return wanted <= linked and f"cluster_reachable_nodes:{len(wanted) - 1}" in cluster_info


class Cluster:
    """N disquette processes, started by :meth:`start` and joined by :meth:`meet_all`."""

    def __init__(
        self, base: Path, size: int, args: list[str] | None = None, http: bool = False
    ) -> None:
        self.args = args or []
        self.http = http  # every node with its HTTP port (ServerProcess.http_url)
        self.dirs = [base / f"n{i}" for i in range(size)]
        self.servers: list[ServerProcess] = []
        self.clients: list[redis.Redis] = []
        self.ids: list[bytes] = []

    def start(self, meet: bool = True) -> Cluster:
        """Start every node, wait until each answers; join them unless ``meet`` is False.
        On failure :meth:`stop` still stops the nodes started so far."""
        for d in self.dirs:
            d.mkdir()
            self.servers.append(ServerProcess(d, self.args, http=self.http))
        for server in self.servers:
            server.wait_ready()
        self.clients = [server.client() for server in self.servers]
        if meet:
            self.meet_all()
        return self

    def meet_all(self) -> None:
        """CLUSTER MEET every node from node 0, wait for the full mesh, learn the IDs."""
        for server in self.servers[1:]:
            self.clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", server.port)
        self.wait_meshed()
        self.ids = [c.execute_command("CLUSTER", "MYID") for c in self.clients]

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.servers]

    def wait_meshed(self, indexes: Iterable[int] | None = None) -> None:
        """Until each listed node (default: all) links to every other listed node, none
        failing, and counts them reachable."""
        listed = list(range(len(self.servers)) if indexes is None else indexes)
        wanted = {self.servers[i].port for i in listed}

        def meshed() -> bool:
            return all(
                sees_mesh(
                    self.clients[i].execute_command("CLUSTER", "NODES").decode(),
                    self.clients[i].execute_command("CLUSTER", "INFO").decode(),
                    wanted,
                )
                for i in listed
            )

        wait_for(meshed, DEADLINE, interval=0.05, what="a meshed cluster")

    def command(self, i: int, *args: Any) -> Any:
        return self.clients[i].execute_command(*args)

    def calls(self, i: int, command: str) -> int:
        """How many times node ``i`` ran ``command`` (INFO commandstats)."""
        stats = self.clients[i].info("commandstats")
        return stats.get(f"cmdstat_{command}", {}).get("calls", 0)

    def blocked(self, i: int) -> int:
        """Clients blocked on node ``i`` (GETJOB or synchronous ADDJOB)."""
        return self.clients[i].info("clients")["blocked_clients"]

    def show(self, i: int, job_id: bytes) -> dict | None:
        reply = self.clients[i].execute_command("SHOW", job_id)
        return None if reply is None else pairs(reply)

    def holders(self, job_id: bytes, among: Iterable[int] | None = None) -> list[int]:
        indexes = range(len(self.servers)) if among is None else among
        return [i for i in indexes if self.show(i, job_id) is not None]

    def acked_or_gone(self, job_id: bytes, among: Iterable[int]) -> bool:
        """Every listed node has the job acknowledged, or no longer has it."""
        return all(
            (self.show(i, job_id) or {"state": b"acked"})["state"] == b"acked" for i in among
        )

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``."""
        server = self.servers[i]
        server.proc.kill()
        server.proc.wait()
        server.stop()
        self.clients[i].close()

    def restart(self, i: int) -> None:
        """Start node ``i`` again in its directory (nodes.conf, and AOF when enabled)."""
        old = self.servers[i]
        self.servers[i] = ServerProcess(
            self.dirs[i], self.args, port=old.port, http=old.http_port or False
        )
        self.servers[i].wait_ready()
        self.clients[i] = self.servers[i].client()

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        for server in self.servers:
            server.stop()


@contextlib.contextmanager
def running_cluster(
    base: Path,
    size: int = 3,
    args: list[str] | None = None,
    meet: bool = True,
    http: bool = False,
) -> Iterator[Cluster]:
    """A started cluster of ``size`` nodes (joined unless ``meet`` is False; each with its
    HTTP port when ``http``), stopped at the end whatever happens."""
    c = Cluster(base, size, args, http)
    try:
        yield c.start(meet)
    finally:
        c.stop()
