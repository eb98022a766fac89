#!/usr/bin/env python3
"""Fair shares: what GETJOB+ACKJOB costs on a queue whose jobs have groups (ADDJOB GROUP).

Usage::

    python bench/groups.py [--jobs 50000] [--groups 1,100,10000] [--counts 1,100]
                           [--arrivals mixed,batched] [--repeat 3] [--pure] [--json FILE]

One node (the compiled build; ``--pure``: the pure one). For each variant a fresh
server gets ``--jobs`` jobs in one queue, pipelined: without a group (``plain``, the
queue's structures and hot path as before groups existed) or spread evenly over 1,
100 and 10,000 groups, the tenants' jobs arriving ``mixed`` (job i of group i mod G,
as when tenants add at the same time) or ``batched`` (each group's jobs added
together: turns then serve jobs far apart in memory, which the drain pays in cache
misses). Then the queue is drained: ``GETJOB NOHANG COUNT n`` and one
ACKJOB per reply, for each ``n`` of ``--counts`` (COUNT 1: one job per GETJOB, each
its own round trip; COUNT 100: a reply spreads over 100 groups in turn). The table
gives the server's CPU per job taken and the jobs taken per second, best of
``--repeat`` (variants interleaved), and the rate against the plain queue's (the
target: 0.8 or more with 10,000 groups).

Dependencies: the standard library and ``hiredis``; Linux only (as run.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as cm
from _common import Server, disquette_spec, encode, make_body, run_description

BODY = make_body(64)
QUEUE = "fair"


def preload(client: cm.BlockingClient, jobs: int, groups: int, arrival: str) -> None:
    """``jobs`` jobs in the queue: without a group (``groups`` 0), or spread over them."""
    if not groups:
        client.pipeline_repeat(encode("ADDJOB", QUEUE, BODY, "0"), jobs)
        return
    requests = [encode("ADDJOB", QUEUE, BODY, "0", "GROUP", f"tenant-{g}") for g in range(groups)]
    if arrival == "batched":
        for g, request in enumerate(requests):
            count = jobs // groups + (g < jobs % groups)
            client.pipeline_repeat(request, count, batch=max(1, min(count, 1000)))
        return
    for start in range(0, jobs, 1000):
        batch = range(start, min(jobs, start + 1000))
        client.sock.sendall(b"".join(requests[i % groups] for i in batch))
        for _ in batch:
            reply = client.read_reply()
            if not isinstance(reply, bytes):
                raise cm.ServerError(f"ADDJOB replied {reply!r}")


def measure(
    spec: cm.ServerSpec, jobs: int, groups: int, arrival: str, count: int
) -> tuple[float, float]:
    """(server CPU µs per job taken, jobs taken per second) of one drain."""
    with Server(spec) as server, server.client() as client:
        preload(client, jobs, groups, arrival)
        cpu0 = cm.proc_cpu_seconds(server.pid)
        start = time.perf_counter()
        taken = cm.drain(client, QUEUE, count)
        elapsed = time.perf_counter() - start
        if taken != jobs:
            raise RuntimeError(f"{groups} groups: {taken} of {jobs} jobs taken")
        return (cm.proc_cpu_seconds(server.pid) - cpu0) / jobs * 1e6, jobs / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--groups", default="1,100,10000")
    parser.add_argument("--counts", default="1,100")
    parser.add_argument("--arrivals", default="mixed,batched")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pure", action="store_true", help="the pure build")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    header, meta = run_description("disquette fair shares (groups)", sys.executable)
    print("\n".join(header))
    spec = disquette_spec(sys.executable, pure=args.pure)
    arrivals = args.arrivals.split(",")
    variants = [(0, "-")] + [(int(g), a) for g in args.groups.split(",") for a in arrivals]
    counts = list(map(int, args.counts.split(",")))
    best: dict[tuple[int, str, int], tuple[float, float]] = {}
    for _ in range(args.repeat):
        for count in counts:
            for groups, arrival in variants:  # interleaved: machine drifts hit all alike
                cpu, rate = measure(spec, args.jobs, groups, arrival, count)
                old = best.get((groups, arrival, count))
                best[(groups, arrival, count)] = (
                    (cpu, rate) if old is None else (min(old[0], cpu), max(old[1], rate))
                )
    print(f"\n{spec.name}, one node, {args.jobs} jobs taken, best of {args.repeat}")
    print(f"{'groups':>8}{'arrival':>9}{'COUNT':>7}{'µs CPU/job':>12}{'jobs/s':>10}{'x plain':>9}")
    for count in counts:
        plain_rate = best[(0, "-", count)][1]
        for groups, arrival in variants:
            cpu, rate = best[(groups, arrival, count)]
            name = f"{groups:,}" if groups else "plain"
            print(f"{name:>8}{arrival:>9}{count:>7}{cpu:>12.2f}{rate:>10.0f}"
                  f"{rate / plain_rate:>9.2f}")  # fmt: skip
    if args.json:
        results: dict[str, Any] = {
            "meta": meta,
            "results": [
                {"groups": g, "arrival": a, "count": c, "cpu_us_per_job": cpu, "jobs_per_s": rate}
                for (g, a, c), (cpu, rate) in best.items()
            ],
        }
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
