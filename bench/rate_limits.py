#!/usr/bin/env python3
"""Rate and concurrency limits: how close a three-node cluster keeps to them, and what
they cost.

Usage::

    python bench/rate_limits.py [--duration 10] [--rates 10,100,1000]
                                [--concurrency 1,5,20] [--jobs 100000] [--repeat 3]
                                [--pure] [--json FILE]

Part 1, a real three-node cluster (the compiled build; ``--pure``: the pure one): for
each target, a fresh queue with a policy ``rate L`` (or ``concurrency C``), a backlog
spread over the nodes, and consumers on every node. Rate: one connection per node
loops ``GETJOB NOHANG COUNT 10`` and acknowledges what it got; every job handed out
is timed as its reply arrives. Concurrency: C connections per node (four at least) take one
job at a time (blocking GETJOB), hold it 5 to 50 ms, and acknowledge it on a random node;
the jobs held are counted as they come and go. The table gives, after a warm-up of
three seconds (the first shares take up to two epochs), the rate delivered, the
busiest sliding second against the target (and the bound of
:mod:`disquette.core.ratelimit`: ``L + ceil(L/10) + 3``), and the peak of jobs held
against the concurrency target.

Part 2, one node, what a limit costs: ``--jobs`` jobs added, then taken back with
``GETJOB NOHANG COUNT 100`` and one ``ACKJOB`` per batch, the server's CPU per job of
the take phase, best of ``--repeat``, for a queue without policy (``plain``), while a
limited policy exists for another queue (``limit-elsewhere``: the cost when not
used), and for a queue whose policy sets a rate and a concurrency too high to bind
(``limited``: the cost when used).

Dependencies: the standard library and ``hiredis``; Linux only (as run.py).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as cm
from _common import Server, disquette_spec, encode, make_body, run_description
from cluster import Cluster

WARMUP = 3.0  # s before measuring: the first shares take effect within two epochs
BODY = make_body(64)


def busiest_second(times: list[float]) -> int:
    times = sorted(times)
    worst = start = 0
    for end, t in enumerate(times):
        while t - times[start] >= 1.0:
            start += 1
        worst = max(worst, end - start + 1)
    return worst


def preload(cluster: Cluster, queue: str, jobs: int) -> None:
    request = encode("ADDJOB", queue, BODY, "0", "REPLICATE", "1", "RETRY", "300")
    for i, node in enumerate(cluster.nodes):
        with node.client() as c:
            c.pipeline_repeat(request, jobs // 3 + (i < jobs % 3), batch=500)


def set_policy(cluster: Cluster, queue: str, *options: str | int) -> None:
    with cluster.nodes[0].client() as c:
        c.call("QPOLICY", "SET", queue, queue, *options)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with cluster.nodes[2].client() as c:
            if c.call("QPOLICY", "GET", queue):
                return
        time.sleep(0.05)
    raise RuntimeError("the policy did not reach every node")


def measure_rate(cluster: Cluster, rate: int, duration: float) -> dict[str, float]:
    queue = f"rate{rate}"
    set_policy(cluster, queue, "rate", rate)
    preload(cluster, queue, int(rate * (duration + WARMUP) * 1.5) + 100)
    times: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + WARMUP + duration

    def consume(node: cm.Server) -> None:
        with node.client() as c:
            while time.monotonic() < stop:
                got = c.call("GETJOB", "NOHANG", "COUNT", 10, "FROM", queue)
                if got:
                    now = time.monotonic()
                    with lock:
                        times.extend([now] * len(got))
                    c.call("ACKJOB", *[job[1] for job in got])
                else:
                    time.sleep(0.002)

    _run_threads([threading.Thread(target=consume, args=(n,)) for n in cluster.nodes])
    start = stop - duration
    measured = [t for t in times if t >= start]
    worst = busiest_second(measured)
    return {
        "target": rate,
        "delivered_per_s": len(measured) / duration,
        "busiest_second": worst,
        "bound": rate + -(-rate // 10) + len(cluster.nodes),
        "overshoot": worst / rate,
    }


def measure_concurrency(cluster: Cluster, concurrency: int, duration: float) -> dict[str, float]:
    queue = f"conc{concurrency}"
    set_policy(cluster, queue, "concurrency", concurrency)
    preload(cluster, queue, 20_000)
    state = {"held": 0, "peak": 0, "done": 0}
    lock = threading.Lock()
    stop = time.monotonic() + WARMUP + duration
    measuring = time.monotonic() + WARMUP

    def consume(node: cm.Server, seed: int) -> None:
        rng = random.Random(seed)
        clients = [n.client() for n in cluster.nodes]
        try:
            with node.client() as c:
                while time.monotonic() < stop:
                    got = c.call("GETJOB", "TIMEOUT", 200, "FROM", queue)
                    if not got:
                        continue
                    with lock:
                        state["held"] += 1
                        if time.monotonic() >= measuring:
                            state["peak"] = max(state["peak"], state["held"])
                    time.sleep(rng.uniform(0.005, 0.05))
                    with lock:
                        state["held"] -= 1  # returned as the ACKJOB goes
                        state["done"] += 1
                    rng.choice(clients).call("ACKJOB", got[0][1])
        finally:
            for client in clients:
                client.close()

    per_node = max(4, concurrency)  # more consumers than slots: the limit binds
    threads = [
        threading.Thread(target=consume, args=(n, i * 1000 + k))
        for i, n in enumerate(cluster.nodes)
        for k in range(per_node)
    ]
    _run_threads(threads)
    return {
        "target": concurrency,
        "peak_held": state["peak"],
        "jobs_per_s": state["done"] / (duration + WARMUP),
        "overshoot": state["peak"] / concurrency,
    }


def _run_threads(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join()


COST_VARIANTS: dict[str, tuple[tuple[Any, ...], ...]] = {
    "plain": (),
    "limit-elsewhere": (("QPOLICY", "SET", "p", "other", "rate", 100, "concurrency", 10),),
    "limited": (("QPOLICY", "SET", "p", "q", "rate", 1 << 30, "concurrency", 1 << 30),),
}


def measure_cost(spec: cm.ServerSpec, variant: str, jobs: int) -> float:
    """Server CPU µs per job taken (GETJOB COUNT 100 + ACKJOB per batch)."""
    with Server(spec) as server, server.client() as client:
        for command in COST_VARIANTS[variant]:
            client.call(*command)
        client.pipeline_repeat(encode("ADDJOB", "q", BODY, "0"), jobs)
        time.sleep(2.2)  # the first announcement takes effect (a limited queue)
        cpu0 = cm.proc_cpu_seconds(server.pid)
        taken = cm.drain(client, "q")
        if taken != jobs:
            raise RuntimeError(f"{variant}: {taken} of {jobs} jobs taken")
        return (cm.proc_cpu_seconds(server.pid) - cpu0) / jobs * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rates", default="10,100,1000")
    parser.add_argument("--concurrency", default="1,5,20")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pure", action="store_true", help="the pure build")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    header, meta = run_description("disquette rate and concurrency limits", sys.executable)
    print("\n".join(header))
    spec = disquette_spec(sys.executable, pure=args.pure)
    results: dict[str, Any] = {"meta": meta, "rate": [], "concurrency": [], "cost": {}}
    cluster = Cluster(spec, 3)
    cluster.start()
    try:
        for rate in map(int, args.rates.split(",")):
            results["rate"].append(measure_rate(cluster, rate, args.duration))
        for conc in map(int, args.concurrency.split(",")):
            results["concurrency"].append(measure_concurrency(cluster, conc, args.duration))
    finally:
        cluster.stop()
    print(f"\n{spec.name}, three nodes, consumers on all, {args.duration:.0f} s measured")
    print(f"{'rate':>8}{'delivered/s':>13}{'busiest 1 s':>13}{'bound':>8}{'x rate':>8}")
    for r in results["rate"]:
        print(f"{r['target']:>8}{r['delivered_per_s']:>13.1f}{r['busiest_second']:>13}"
              f"{r['bound']:>8}{r['overshoot']:>8.2f}")  # fmt: skip
    print(f"{'concurrency':>12}{'peak held':>11}{'x target':>10}{'jobs/s':>9}")
    for r in results["concurrency"]:
        print(f"{r['target']:>12}{r['peak_held']:>11}{r['overshoot']:>10.2f}"
              f"{r['jobs_per_s']:>9.1f}")  # fmt: skip
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for variant in COST_VARIANTS:  # interleaved: drifts of the machine hit all alike
            cost = measure_cost(spec, variant, args.jobs)
            best[variant] = min(best.get(variant, cost), cost)
    results["cost"] = best
    print(f"\none node, {args.jobs} jobs taken (GETJOB COUNT 100 + ACKJOB), best of "
          f"{args.repeat}")  # fmt: skip
    print(f"{'variant':<18}{'µs CPU/job':>12}{'x plain':>9}")
    for variant, cost in best.items():
        print(f"{variant:<18}{cost:>12.2f}{cost / best['plain']:>9.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
