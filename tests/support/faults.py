"""Issue 18's fault schedule with real processes: kill -9 under a tight load, and its ledger.

Five nodes without AOF and ``cluster-node-timeout 100``; ten client threads,
spread over the nodes, each doing 60 % ADDJOB (REPLICATE 3, RETRY 1, a 100 ms
ms-timeout) and 40 % GETJOB (TIMEOUT 100) followed by ACKJOB. Every period
(10 s) one node is killed with SIGKILL and the node killed a period before is
restarted empty; the last node is killed twice in a row. When the fault window
ends the last victim is restarted (heal), the clients stop, the cluster is
left alone for a while, and then every node is drained in parallel.

A client whose node dies or refuses a connection moves to the next node, as a
user's client would. The ledger keeps, per job, how many times it was
delivered and in which phase each extra delivery came (during the faults, or
in the drain), so the report says what was lost (acknowledged and never
delivered), how many jobs were delivered twice or more, and when.

``FaultSchedule(kills=False)`` runs the same load without faults: the
acknowledged ADDJOBs per second of the two runs are the throughput ratio the
issue asks for. The integration test runs a short schedule;
``bench/faults.py`` runs the full one.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.rolling import DEADLINE, RollingCluster
from tests.support.servers import wait_for

QUEUE = "faults"
FAULTS = "faults"
DRAIN = "drain"


@dataclass(frozen=True)
class FaultSchedule:
    """What the run does; the defaults are the issue's schedule."""

    size: int = 5
    node_timeout_ms: int = 100
    client_timeout_ms: int = 100
    clients: int = 10
    add_share: float = 0.6
    replicate: int = 3
    retry_s: int = 1
    period_s: float = 10.0
    faults_s: float = 100.0
    heal_s: float = 10.0
    kills: bool = True
    repair: bool = True

    def kills_at(self) -> list[tuple[float, int]]:
        """``(seconds into the run, node)`` of each SIGKILL; each victim is restarted
        one period later, when the next one dies. The last node is killed twice."""
        if not self.kills:
            return []
        count = int(self.faults_s // self.period_s) - 1
        victims = [k % self.size for k in range(count)]
        if count >= 2:
            victims[-1] = victims[-2]
        return [((k + 1) * self.period_s, node) for k, node in enumerate(victims)]


@dataclass
class FaultLedger:
    """What the clients saw, by job ID, and when."""

    added: set[bytes] = field(default_factory=set)
    add_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    deliveries: dict[bytes, int] = field(default_factory=dict)
    duplicates_in: collections.Counter[str] = field(default_factory=collections.Counter)
    fault_seconds: float = 0.0  # how long the clients ran
    queued_twice: int = 0  # jobs queued on two nodes or more when the drain began
    kills: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, job_id: bytes) -> None:
        with self.lock:
            self.added.add(job_id)

    def add_refused(self, reason: str) -> None:
        with self.lock:
            self.add_errors[reason] += 1

    def delivered(self, job_ids: list[bytes], phase: str) -> None:
        with self.lock:
            deliveries = self.deliveries
            for job_id in job_ids:
                seen = deliveries.get(job_id, 0)
                deliveries[job_id] = seen + 1
                if seen:
                    self.duplicates_in[phase] += 1

    @property
    def lost(self) -> set[bytes]:
        return self.added - self.deliveries.keys()

    @property
    def duplicated(self) -> int:
        """Jobs delivered more than once (whether their ADDJOB was acknowledged or not)."""
        return sum(1 for n in self.deliveries.values() if n > 1)

    @property
    def adds_per_second(self) -> float:
        return len(self.added) / self.fault_seconds if self.fault_seconds else 0.0

    def row(self) -> dict[str, object]:
        """The report's figures, named."""
        added = len(self.added)
        return {
            "kills": self.kills,
            "acknowledged adds": added,
            "adds/s": round(self.adds_per_second),
            "adds refused": sum(self.add_errors.values()),
            "lost": len(self.lost),
            "queued twice at drain": self.queued_twice,
            "duplicated jobs": self.duplicated,
            "duplicated %": round(100 * self.duplicated / added, 2) if added else 0.0,
            "extra deliveries in faults": self.duplicates_in[FAULTS],
            "extra deliveries in drain": self.duplicates_in[DRAIN],
        }

    def summary(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.row().items())


class _Client:
    """One user's client: a connection to one node, moving on when that node fails."""

    def __init__(self, cluster: RollingCluster, schedule: FaultSchedule, index: int) -> None:
        self.cluster = cluster
        self.schedule = schedule
        self.node = index % schedule.size
        self.rng = random.Random(index)
        self.conn: redis.Redis | None = None
        self.name = b"c%d-" % index
        self.sent = 0

    def connection(self) -> redis.Redis:
        if self.conn is None:
            server = self.cluster.servers[self.node]
            self.conn = server.client(socket_timeout=2.0, socket_connect_timeout=0.5)
        return self.conn

    def fail_over(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.node = (self.node + 1) % self.schedule.size
        time.sleep(0.005)

    def step(self, ledger: FaultLedger) -> None:
        schedule = self.schedule
        ms = schedule.client_timeout_ms
        try:
            conn = self.connection()
            if self.rng.random() < schedule.add_share:
                self.sent += 1
                try:
                    job_id = conn.execute_command(
                        "ADDJOB", QUEUE, self.name + b"%d" % self.sent, ms,
                        "REPLICATE", schedule.replicate, "RETRY", schedule.retry_s,
                    )  # fmt: skip
                except redis.ResponseError as e:
                    ledger.add_refused(str(e).split(" ", 1)[0])
                    return
                ledger.add(job_id)
                return
            got = conn.execute_command("GETJOB", "TIMEOUT", ms, "FROM", QUEUE)
            if got:
                ids = [job[1] for job in got]
                ledger.delivered(ids, FAULTS)
                conn.execute_command("ACKJOB", *ids)
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            self.fail_over()  # a dead node, or -LOADING from one still starting

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def _run_clients(clients: list[_Client], ledger: FaultLedger, stop: threading.Event) -> None:
    def loop(client: _Client) -> None:
        try:
            while not stop.is_set():
                client.step(ledger)
        finally:
            client.close()

    threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in clients]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join()


def count_queued_twice(cluster: RollingCluster) -> int:
    """How many jobs are queued on more than one node right now (JSCAN STATE queued).

    The scan goes a thousand jobs at a time: one long BUSYLOOP would stall the node
    past WILLQUEUE's 500 ms, and the other holders would queue its jobs too."""
    seen: collections.Counter[bytes] = collections.Counter()
    for i in range(len(cluster.servers)):
        with cluster.client(i) as conn:
            cursor = b"0"
            while True:
                cursor, ids = conn.execute_command(
                    "JSCAN", cursor, "COUNT", 1000, "STATE", "queued"
                )
                seen.update(ids)
                if cursor == b"0":
                    break
    return sum(1 for n in seen.values() if n > 1)


def _drain(cluster: RollingCluster, ledger: FaultLedger, quiet_s: float) -> None:
    """One consumer per node, all at once, until every acknowledged job was delivered
    and nothing more came for ``quiet_s`` (a requeue waits a retry period)."""
    stop = threading.Event()
    last = [time.monotonic()]

    def consume(i: int) -> None:
        with cluster.client(i) as conn:
            while not stop.is_set():
                try:
                    got = conn.execute_command(
                        "GETJOB", "TIMEOUT", 100, "COUNT", 100, "FROM", QUEUE
                    )
                except redis.RedisError:
                    time.sleep(0.05)
                    continue
                if got:
                    ids = [job[1] for job in got]
                    ledger.delivered(ids, DRAIN)
                    last[0] = time.monotonic()
                    conn.execute_command("ACKJOB", *ids)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(len(cluster.servers))]
    for t in threads:
        t.start()
    try:
        wait_for(
            lambda: not ledger.lost and time.monotonic() - last[0] > quiet_s,
            DEADLINE,
            interval=0.1,
            what="the drain",
        )
    except AssertionError:
        pass  # reported through ledger.lost
    finally:
        stop.set()
        for t in threads:
            t.join()


def run_schedule(
    base: Path, schedule: FaultSchedule, command: list[str] | None = None
) -> FaultLedger:
    """Run ``schedule`` on a fresh cluster in ``base``; return its ledger once drained.
    ``command`` runs another server binary instead of disquette."""
    cluster = RollingCluster(
        base, schedule.size, schedule.node_timeout_ms, schedule.repair, command=command
    )
    ledger = FaultLedger()
    stop = threading.Event()
    runner: threading.Thread | None = None
    try:
        cluster.start()
        clients = [_Client(cluster, schedule, i) for i in range(schedule.clients)]
        runner = threading.Thread(target=_run_clients, args=(clients, ledger, stop))
        started = time.monotonic()
        runner.start()
        down: int | None = None
        for at, victim in schedule.kills_at():
            time.sleep(max(0.0, started + at - time.monotonic()))
            if down is not None:
                cluster.restart(down)
            cluster.kill(victim)
            ledger.kills += 1
            down = victim
        time.sleep(max(0.0, started + schedule.faults_s - time.monotonic()))
        if down is not None:
            cluster.restart(down)
        stop.set()
        runner.join()
        ledger.fault_seconds = time.monotonic() - started
        time.sleep(schedule.heal_s)
        ledger.queued_twice = count_queued_twice(cluster)
        _drain(cluster, ledger, quiet_s=3.0 * schedule.retry_s)
        return ledger
    finally:
        stop.set()
        if runner is not None:
            runner.join()
        cluster.stop()
