"""Real multi-node clusters for client tests: N server processes joined with CLUSTER MEET.

Every node runs in its own directory on free ports; :func:`running_cluster`
waits (with a deadline, never a blind sleep) until every node links to every
other one, and stops every process at the end, killed ones included.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import redis

from tests.support.servers import ServerProcess, wait_for

DEADLINE = 60.0


class Cluster:
    def __init__(self, servers: list[ServerProcess]) -> None:
        self.servers = servers
        self.ids: list[str] = []

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.servers]

    def redis(self, i: int) -> redis.Redis:
        return self.servers[i].client()

    def command(self, i: int, *args):
        with contextlib.closing(self.redis(i)) as r:
            return r.execute_command(*args)

    def calls(self, i: int, command: str) -> int:
        """How many times node ``i`` ran ``command`` (INFO commandstats)."""
        with contextlib.closing(self.redis(i)) as r:
            stats = r.info("commandstats")
        return stats.get(f"cmdstat_{command}", {}).get("calls", 0)

    def blocked(self, i: int) -> int:
        """Clients blocked on node ``i`` (GETJOB or synchronous ADDJOB)."""
        with contextlib.closing(self.redis(i)) as r:
            return r.info("clients")["blocked_clients"]

    def meet_all(self) -> None:
        for server in self.servers[1:]:
            self.command(0, "CLUSTER", "MEET", "127.0.0.1", server.port)
        self.wait_meshed()
        self.ids = [self.command(i, "CLUSTER", "MYID").decode() for i in range(len(self.servers))]

    def wait_meshed(self, alive: list[int] | None = None) -> None:
        alive = list(range(len(self.servers))) if alive is None else alive
        wanted = {self.servers[i].port for i in alive}

        def meshed() -> bool:
            for i in alive:
                text = self.command(i, "CLUSTER", "NODES").decode()
                linked = {
                    int(f[1].rsplit(":", 1)[1])
                    for f in (line.split() for line in text.splitlines())
                    if f[-1] == "connected"
                    and not {"fail", "fail?", "handshake"} & set(f[2].split(","))
                }
                if not wanted <= linked:
                    return False
            return True

        wait_for(meshed, DEADLINE, interval=0.05, what="a meshed cluster")

    def kill(self, i: int) -> None:
        self.servers[i].proc.kill()
        self.servers[i].proc.wait()


@contextlib.contextmanager
def running_cluster(base: Path, size: int = 3, meet: bool = True) -> Iterator[Cluster]:
    servers = []
    try:
        for i in range(size):
            d = base / f"node{i}"
            d.mkdir()
            servers.append(ServerProcess(d))
        for server in servers:
            server.wait_ready()
        cluster = Cluster(servers)
        if meet:
            cluster.meet_all()
        yield cluster
    finally:
        for server in servers:
            server.stop()
