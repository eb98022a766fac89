#!/usr/bin/env python3
"""Client-side throughput: ``add_jobs`` pipelined, and a worker with a no-op handler.

Usage::

    python bench/client.py [--nodes 1,3] [--jobs 50000] [--worker-jobs 20000]
                           [--concurrency 1,8,64] [--window 256] [--body 64]
                           [--workers threads,asyncio] [--json FILE]

For each cluster size a fresh cluster is started (``python -m disquette.server`` per
node, joined with CLUSTER MEET and waited for), then, in this process:

* ``add_job``: one ADDJOB at a time (the unpipelined baseline, ``--jobs``/10 jobs);
* ``add_jobs wN``: ``Client.add_jobs`` with a window of N commands in flight;
* ``worker <kind> cN``: a queue preloaded with ``--worker-jobs`` jobs, consumed by a
  :class:`disquette.Worker` whose handler does nothing, with concurrency N, on threads
  (sync handler) or asyncio tasks (async handler). The clock stops when every job is
  acknowledged.

Jobs use the server's default replication: 1 copy on one node, 3 (synchronous) on
three. Both clients use the same seeded node order, so producer and worker talk to
the same node.

Reported: jobs per second; client CPU per job (this process's user+system time, all
threads); server CPU per job (utime+stime of every node from /proc, so replication
and ACK garbage collection on the other nodes count); and the share of the client in
the total, i.e. where the time goes. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import _common as cm

sys.path.insert(0, str(cm.REPO / "src"))

from disquette import Client, Job, Worker

POLL = 0.01
DEADLINE = 600.0


@dataclass
class Result:
    nodes: int
    scenario: str
    jobs: int
    seconds: float
    client_cpu: float
    server_cpu: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    def row(self) -> str:
        per = 1e6 / self.jobs
        share = self.client_cpu / max(self.client_cpu + self.server_cpu, 1e-9)
        return (
            f"{self.nodes:>5}  {self.scenario:<22} {self.rate:>10,.0f} "
            f"{self.client_cpu * per:>12.1f} {self.server_cpu * per:>12.1f} {share:>8.0%}"
        )


HEADER = (
    f"{'nodes':>5}  {'scenario':<22} {'jobs/s':>10} {'client us/job':>12} "
    f"{'server us/job':>12} {'client %':>8}"
)


def client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Cluster:
    def __init__(self, size: int) -> None:
        self.servers = [cm.Server(cm.disquette_spec(sys.executable)) for _ in range(size)]

    def __enter__(self) -> Cluster:
        try:
            for server in self.servers:
                server.start()
            self._meet()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            server.stop()

    @property
    def seeds(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.servers]

    def cpu(self) -> float:
        return sum(cm.proc_cpu_seconds(s.pid) for s in self.servers)

    def _meet(self) -> None:
        if len(self.servers) == 1:
            return
        with Client(self.seeds[0]).on_node(self.seeds[0]) as first:
            for server in self.servers[1:]:
                first.cluster_meet("127.0.0.1", server.port)
        want = len(self.servers) - 1
        deadline = time.monotonic() + DEADLINE
        with Client(self.seeds) as c:
            while any(
                c.on_node(seed).cluster_info()["cluster_reachable_nodes"] != want
                for seed in self.seeds
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not form")
                time.sleep(POLL)


@contextlib.contextmanager
def measure(cluster: Cluster, out: dict) -> Iterator[None]:
    c0, s0, t0 = client_cpu(), cluster.cpu(), time.perf_counter()
    yield
    out.update(
        seconds=time.perf_counter() - t0,
        client_cpu=client_cpu() - c0,
        server_cpu=cluster.cpu() - s0,
    )


def client(cluster: Cluster) -> Client:
    return Client(cluster.seeds, rng=random.Random(0))


def bench_add_job(cluster: Cluster, jobs: int, body: bytes) -> dict:
    out: dict = {}
    with client(cluster) as c:
        c.ping()
        with measure(cluster, out):
            for _ in range(jobs):
                c.add_job("bench-one", body)
    return out


def bench_add_jobs(cluster: Cluster, jobs: int, body: bytes, window: int) -> dict:
    out: dict = {}
    with client(cluster) as c:
        c.ping()
        with measure(cluster, out):
            c.add_jobs("bench-many", (body for _ in range(jobs)), window=window)
    return out


def noop(job: Job) -> None:
    pass


async def noop_async(job: Job) -> None:
    pass


def bench_worker(cluster: Cluster, kind: str, concurrency: int, jobs: int, body: bytes) -> dict:
    queue = f"bench-worker-{kind}-{concurrency}"
    with client(cluster) as c:
        c.add_jobs(queue, (body for _ in range(jobs)), window=256)
    handler: Callable = noop if kind == "threads" else noop_async
    worker = Worker(
        handler,
        queue,
        seeds=cluster.seeds,
        rng=random.Random(0),
        concurrency=concurrency,
        poll_timeout=0.1,
        keepalive=False,
    )
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    out: dict = {}
    with measure(cluster, out):
        thread.start()
        deadline = time.monotonic() + DEADLINE
        while worker.stats is None or worker.stats.acked < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{queue}: the worker did not finish")
            time.sleep(POLL)
    worker.stop()
    thread.join()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", default="1,3", help="cluster sizes (default 1,3)")
    p.add_argument("--jobs", type=int, default=50_000, help="jobs for add_jobs (default 50000)")
    p.add_argument("--worker-jobs", type=int, default=20_000, help="jobs per worker run")
    p.add_argument("--concurrency", default="1,8,64", help="worker concurrencies")
    p.add_argument("--workers", default="threads,asyncio", help="worker kinds")
    p.add_argument("--window", type=int, default=256, help="add_jobs window (default 256)")
    p.add_argument("--body", type=int, default=64, help="job body bytes (default 64)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    cm.require_hiredis()
    body = b"x" * args.body
    print(cm.command_line())
    print(cm.describe_interpreter(cm.interpreter_info(sys.executable, str(cm.REPO / "src"))))
    print()
    print(HEADER)
    results: list[Result] = []
    for size in (int(n) for n in args.nodes.split(",")):
        with Cluster(size) as cluster:
            runs = [
                ("add_job", args.jobs // 10, lambda: bench_add_job(cluster, args.jobs // 10, body)),
                (
                    f"add_jobs w{args.window}",
                    args.jobs,
                    lambda: bench_add_jobs(cluster, args.jobs, body, args.window),
                ),
            ]
            for kind in args.workers.split(","):
                for n in (int(c) for c in args.concurrency.split(",")):
                    runs.append(
                        (
                            f"worker {kind} c{n}",
                            args.worker_jobs,
                            lambda kind=kind, n=n: bench_worker(
                                cluster, kind, n, args.worker_jobs, body
                            ),
                        )
                    )
            for name, jobs, run in runs:
                result = Result(size, name, jobs, **run())
                results.append(result)
                print(result.row(), flush=True)
    if args.json:
        args.json.write_text(
            json.dumps([{**asdict(r), "rate": r.rate} for r in results], indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
