"""Rolling kill -9 restarts of a real cluster under a growing backlog, and their ledger.

The experiment of issue 7 with real processes: ``nodes`` disquette servers
without AOF form a cluster; a producer thread adds REPLICATE 3 jobs faster than
a consumer thread takes and acknowledges them, so a backlog grows. Meanwhile
every node in turn is killed with SIGKILL, stays down until the survivors have
counted it lost and repaired its copies (``repair_nodes_down`` and
``repair_backlog`` in INFO cluster), and is restarted empty in its directory
(same ID, new data generation), until every survivor has seen its new
generation and finished repairing again. Then the producer stops, the consumer
drains the queue, and every acknowledged ADDJOB is looked up among the
deliveries: :class:`Ledger` says what was lost and how many deliveries were
duplicates.

Every wait is a condition with a deadline. The integration test runs one round
with a short node timeout; ``bench/rolling.py`` runs longer ones.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.servers import ServerProcess, wait_for

DEADLINE = 120.0  # seconds, for every condition: generous, for loaded machines
QUEUE = "rolling"


@dataclass
class Ledger:
    """What the clients saw: acknowledged ADDJOBs and deliveries, by job ID."""

    added: set[bytes] = field(default_factory=set)
    add_errors: int = 0
    deliveries: dict[bytes, int] = field(default_factory=dict)
    restarts: int = 0
    copies_lost: int = 0  # INFO cluster repair_copies_lost, over every node's lifetime
    jobs_repaired: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def lost(self) -> set[bytes]:
        return self.added - self.deliveries.keys()

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.deliveries.values())

    def summary(self) -> str:
        return (
            f"{len(self.added)} acknowledged ADDJOBs ({self.add_errors} refused), "
            f"{len(self.lost)} lost, {sum(self.deliveries.values())} deliveries of which "
            f"{self.duplicates} duplicates, {self.restarts} kill -9 restarts; repair found "
            f"{self.copies_lost} copies lost and repaired {self.jobs_repaired} jobs"
        )


class RollingCluster:
    """``size`` nodes in ``base``/n<i>, without AOF (unless ``aof``: for every node, or
    a list, one per node), node timeout ``timeout_ms``, each started with ``env``
    (another release: tests/support/upgrade.py).

    ``command`` runs another server (an original ``disque-server``): it is given no
    ``replica-repair`` directive, which only disquette knows."""

    def __init__(
        self,
        base: Path,
        size: int,
        timeout_ms: int,
        repair: bool,
        command: list[str] | None = None,
        aof: bool | list[bool] = False,
        env: dict[str, str] | None = None,
    ) -> None:
        self.args = ["--cluster-node-timeout", str(timeout_ms)]
        if command is None:
            self.args += ["--replica-repair", "yes" if repair else "no"]
        self.aof = aof if isinstance(aof, list) else [aof] * size
        self.node_args = [[*self.args, "--appendonly", "yes" if a else "no"] for a in self.aof]
        self.command = command
        self.timeout_ms = timeout_ms
        self.repair = repair
        self.dirs = [base / f"n{i}" for i in range(size)]
        self.envs = [env] * size  # what each node runs with now
        self.servers: list[ServerProcess] = []
        for d, args in zip(self.dirs, self.node_args, strict=True):
            d.mkdir(parents=True)
            self.servers.append(ServerProcess(d, args, command=command, env=env))
        self.down: set[int] = set()
        self.lock = threading.Lock()

    def client(self, i: int) -> redis.Redis:
        return self.servers[i].client(socket_timeout=10)

    def counter(self, i: int, name: str) -> int:
        """A field of node ``i``'s INFO cluster."""
        with self.client(i) as c:
            return int(c.info("cluster")[name])

    def live(self) -> list[int]:
        with self.lock:
            return [i for i in range(len(self.servers)) if i not in self.down]

    def start(self) -> None:
        for server in self.servers:
            server.wait_ready()
        with self.client(0) as c:
            for server in self.servers[1:]:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", server.port)
        self.wait_meshed()

    def wait_meshed(self) -> None:
        size = len(self.servers)

        def meshed() -> bool:
            for i in range(size):
                with self.client(i) as c:
                    info = c.execute_command("CLUSTER", "INFO").decode()
                if f"cluster_reachable_nodes:{size - 1}" not in info:
                    return False
            return True

        wait_for(meshed, DEADLINE, interval=0.1, what="a meshed cluster")

    def wait_repaired(self, among: list[int], what: str, down: int = 0) -> None:
        """Until every listed node counts ``down`` nodes lost and has nothing to repair."""

        def repaired() -> bool:
            return all(
                self.counter(i, "repair_nodes_down") == down
                and self.counter(i, "repair_backlog") == 0
                for i in among
            )

        wait_for(repaired, DEADLINE, interval=0.1, what=what)

    def wait_lost(self, i: int, among: list[int]) -> None:
        """Until the listed nodes counted node ``i`` lost and repaired its copies; without
        repair, until they flag it FAIL and the time a repair would have waited passed."""
        if self.repair:
            self.wait_repaired(among, f"node {i} counted lost and repaired", down=1)
            return
        port = b":%d " % self.servers[i].port

        def failed() -> bool:
            for j in among:
                with self.client(j) as c:
                    text = c.execute_command("CLUSTER", "NODES")
                line = next(x for x in text.splitlines() if port in x)
                if b"fail" not in line.split()[2].split(b","):
                    return False
            return True

        wait_for(failed, DEADLINE, interval=0.1, what=f"node {i} flagged FAIL")
        time.sleep(2 * self.timeout_ms / 1000)  # the default replica-repair-delay

    def tally(self, ledger: Ledger, i: int) -> None:
        """Add node ``i``'s repair counters to the ledger (before it dies, or at the end)."""
        ledger.copies_lost += self.counter(i, "repair_copies_lost")
        ledger.jobs_repaired += self.counter(i, "repair_jobs_repaired")

    def kill(self, i: int) -> None:
        with self.lock:
            self.down.add(i)
        server = self.servers[i]
        server.proc.kill()
        server.proc.wait()
        server.stop()

    def restart(self, i: int, env: dict[str, str] | None = None) -> None:
        """Start node ``i`` again in its directory, on its port; ``env``: with another
        release than before (None: the one it ran)."""
        old = self.servers[i]
        if env is not None:
            self.envs[i] = env
        self.servers[i] = ServerProcess(
            self.dirs[i], self.node_args[i], port=old.port, command=self.command, env=self.envs[i]
        )
        self.servers[i].wait_ready()
        with self.lock:
            self.down.discard(i)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def _produce(cluster: RollingCluster, ledger: Ledger, stop: threading.Event, rate: float) -> None:
    rng = random.Random(1)
    sent = 0
    while not stop.is_set():
        i = rng.choice(cluster.live())
        sent += 1
        try:
            with cluster.client(i) as c:
                jid = c.execute_command(
                    "ADDJOB", QUEUE, b"job-%d" % sent, 5000, "REPLICATE", 3, "RETRY", 10
                )
            with ledger.lock:
                ledger.added.add(jid)
        except redis.RedisError:
            with ledger.lock:
                ledger.add_errors += 1  # -NOREPL, or the node died: not acknowledged
        time.sleep(1 / rate)


def _consume(
    cluster: RollingCluster, ledger: Ledger, stop: threading.Event, rate: float, drain: bool
) -> None:
    """Fetch and acknowledge ``rate`` jobs a second (as fast as possible when draining)."""
    rng = random.Random(2)
    while not stop.is_set():
        i = rng.choice(cluster.live())
        try:
            with cluster.client(i) as c:
                got = c.execute_command("GETJOB", "TIMEOUT", 200, "COUNT", 10, "FROM", QUEUE)
                for _queue, jid, _body in got or ():
                    with ledger.lock:
                        ledger.deliveries[jid] = ledger.deliveries.get(jid, 0) + 1
                    c.execute_command("ACKJOB", jid)
                    if not drain:
                        time.sleep(1 / rate)
        except redis.RedisError:
            time.sleep(0.05)  # the node died under us: another one next time


def rolling_restarts(
    base: Path,
    *,
    rounds: int = 1,
    size: int = 5,
    timeout_ms: int = 1000,
    add_rate: float = 100.0,
    ack_rate: float = 40.0,
    repair: bool = True,
) -> Ledger:
    """Run the experiment; return the ledger once every acknowledged job was delivered
    (or the drain's deadline passed: then ``ledger.lost`` names the missing ones)."""
    cluster = RollingCluster(base, size, timeout_ms, repair)
    ledger = Ledger()
    stop_adding = threading.Event()
    stop_consuming = threading.Event()
    threads: list[threading.Thread] = []
    try:
        cluster.start()
        threads = [
            threading.Thread(target=_produce, args=(cluster, ledger, stop_adding, add_rate)),
            threading.Thread(
                target=_consume, args=(cluster, ledger, stop_consuming, ack_rate, False)
            ),
        ]
        for t in threads:
            t.start()
        for _ in range(rounds):
            for i in range(size):
                others = [j for j in range(size) if j != i]
                before = {j: cluster.counter(j, "cluster_generation_changes") for j in others}
                cluster.tally(ledger, i)
                cluster.kill(i)
                cluster.wait_lost(i, others)
                cluster.restart(i)
                ledger.restarts += 1
                wait_for(
                    lambda before=before: all(
                        cluster.counter(j, "cluster_generation_changes") > before[j] for j in before
                    ),
                    DEADLINE,
                    interval=0.1,
                    what=f"node {i}'s new generation seen",
                )
                cluster.wait_meshed()
                if repair:
                    cluster.wait_repaired(list(range(size)), f"repairs after node {i} came back")
        for i in range(size):
            cluster.tally(ledger, i)
        stop_adding.set()
        threads[0].join()
        stop_consuming.set()
        threads[1].join()
        drainer = threading.Thread(
            target=_consume, args=(cluster, ledger, stop_consuming, ack_rate, True)
        )
        stop_consuming.clear()
        drainer.start()
        threads.append(drainer)
        try:
            wait_for(lambda: not ledger.lost, DEADLINE, interval=0.2, what="the drain")
        except AssertionError:
            pass  # reported through ledger.lost
        stop_consuming.set()
        drainer.join()
        return ledger
    finally:
        stop_adding.set()
        stop_consuming.set()
        for t in threads:
            t.join()
        cluster.stop()
