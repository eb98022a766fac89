#!/usr/bin/env python3
"""What grows with the cluster: the simulator's clusters of 10, 30 and 100 nodes.

Usage (see bench/README.md)::

    python bench/cluster_size.py [--sizes 10,30,100] [--rest 10] [--timeout 15000]
                                 [--seed 1] [--json FILE]

Each size is a fresh cluster in the deterministic simulator (src/disquette/sim): the
core of every node exactly as the server runs it, over a simulated network with
latency, in virtual time. The first node meets every other (``disquette cluster
create``'s way) and gossip completes the mesh; then, per size:

* **at rest**: bus messages and frame bytes per second over ``--rest`` virtual seconds
  with no client at all (PING/PONG and their gossip), for the whole cluster and per
  node;
* **failure detection**: a node crashes; the virtual time until every other node flags
  it ``fail`` (PFAIL after ``cluster-node-timeout``, then a majority's reports, then the
  FAIL broadcast);
* **ADDJOB REPLICATE 3**: the messages and bytes of one synchronous ADDJOB, copies and
  confirmations (the first node's; the at-rest traffic is not counted: only job-level
  message types);
* **ACKJOB's GC**: the messages and bytes from one ACKJOB until no node holds the job,
  and how long that takes;
* **memory per known node**: the size of the first node's membership table (every
  row, its fail reports, clock estimate and what it speaks; objects shared by rows
  counted once) divided by the nodes it knows, in this process's build.

The numbers are the simulator's: its frames are the real bus encoding, one message a
frame (the server coalesces a turn's messages to a peer into one frame, so it sends
fewer, larger frames). Timings are virtual time, independent of the machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import types
from typing import Any

from disquette import build
from disquette.core import messages as msg
from disquette.core.membership import FAIL
from disquette.sim.clients import Workload
from disquette.sim.process import NodeSettings
from disquette.sim.properties import check_membership
from disquette.sim.runner import SimConfig, Simulation

#: Message types that are membership and dialect traffic, not a job's.
MEMBERSHIP = frozenset({msg.PING, msg.PONG, msg.MEET, msg.FAIL, msg.VERSION, msg.ADDRESS})
STEP_MS = 100
JOIN_LIMIT_MS = 600_000


def totals(sim: Simulation, only_jobs: bool = False) -> tuple[int, int]:
    """Messages and bytes delivered so far (only job-level types when asked)."""
    rows = [v for k, v in sim.network.by_type.items() if not (only_jobs and k in MEMBERSHIP)]
    return sum(r[0] for r in rows), sum(r[1] for r in rows)


def run_until(sim: Simulation, condition: Any, limit_ms: int) -> int:
    """Run virtual time until ``condition()``; the virtual ms it took."""
    start = sim.loop.now
    while not condition():
        if sim.loop.now - start > limit_ms:
            raise RuntimeError(f"not reached within {limit_ms} virtual ms")
        sim.loop.run_until(sim.loop.now + STEP_MS)
    return sim.loop.now - start


def deep_size(root: object) -> int:
    """Bytes of ``root`` and everything it references (each object once; classes,
    functions and modules left out)."""
    seen: set[int] = set()
    stack = [root]
    size = 0
    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        size += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return size


def measure(n: int, rest_s: int, timeout: int, seed: int) -> dict[str, float]:
    wall = time.perf_counter()
    sim = Simulation(
        SimConfig(seed=seed, nodes=n, workload=Workload(producers=0, consumers=0),
                  settings=NodeSettings(node_timeout=timeout))
    )  # fmt: skip
    first = sim.processes[0]
    for p in sim.processes:
        p.start()
    for p in sim.processes[1:]:
        sim.admin(first, [b"CLUSTER", b"MEET", p.ip, b"%d" % p.port])
    join_ms = run_until(sim, lambda: not check_membership(sim.processes), JOIN_LIMIT_MS)
    sim.loop.run_until(sim.loop.now + 5000)  # (the first round of pings after the join)
    m0, b0 = totals(sim)
    sim.loop.run_until(sim.loop.now + rest_s * 1000)
    m1, b1 = totals(sim)
    rest_msgs, rest_bytes = (m1 - m0) / rest_s, (b1 - b0) / rest_s
    # One synchronous ADDJOB REPLICATE 3, then its ACKJOB and the GC of every copy.
    j0 = totals(sim, only_jobs=True)
    job = sim.admin(first, [b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3"])
    assert isinstance(job, bytes) and job.startswith(b"D-"), job
    sim.loop.run_until(sim.loop.now + 1000)
    j1 = totals(sim, only_jobs=True)
    sim.admin(first, [b"ACKJOB", job])
    gc_ms = run_until(sim, lambda: all(p.copy(job) is None for p in sim.processes), 120_000)
    sim.loop.run_until(sim.loop.now + 1000)
    j2 = totals(sim, only_jobs=True)
    table = first.node.cluster.nodes if first.node is not None else {}
    memory = deep_size(table) / len(table)
    # A node crashes: how long until every other flags it FAIL.
    victim = sim.processes[-1]
    sim.crash(victim)
    detect_ms = run_until(
        sim,
        lambda: all(
            p.node.cluster.nodes[victim.node_id].flags & FAIL
            for p in sim.processes[:-1]
            if p.node is not None
        ),
        20 * timeout,
    )
    return {
        "nodes": n,
        "join_ms": join_ms,
        "rest_msgs_s": rest_msgs,
        "rest_bytes_s": rest_bytes,
        "rest_msgs_s_node": rest_msgs / n,
        "rest_bytes_s_node": rest_bytes / n,
        "detect_ms": detect_ms,
        "addjob_msgs": j1[0] - j0[0],
        "addjob_bytes": j1[1] - j0[1],
        "ack_gc_msgs": j2[0] - j1[0],
        "ack_gc_bytes": j2[1] - j1[1],
        "ack_gc_ms": gc_ms,
        "memory_per_node": memory,
        "wall_s": time.perf_counter() - wall,
    }


COLUMNS = (
    ("nodes", "nodes", "{:.0f}"),
    ("join_ms", "mesh formed (ms)", "{:,.0f}"),
    ("rest_msgs_s", "at rest msg/s", "{:,.0f}"),
    ("rest_bytes_s", "at rest B/s", "{:,.0f}"),
    ("rest_msgs_s_node", "msg/s per node", "{:,.1f}"),
    ("rest_bytes_s_node", "B/s per node", "{:,.0f}"),
    ("detect_ms", "FAIL everywhere (ms)", "{:,.0f}"),
    ("addjob_msgs", "ADDJOB R3 msgs", "{:.0f}"),
    ("addjob_bytes", "ADDJOB R3 B", "{:,.0f}"),
    ("ack_gc_msgs", "ACKJOB GC msgs", "{:.0f}"),
    ("ack_gc_bytes", "ACKJOB GC B", "{:,.0f}"),
    ("ack_gc_ms", "ACKJOB GC (ms)", "{:,.0f}"),
    ("memory_per_node", "table B per node", "{:,.0f}"),
)


def table_text(rows: list[dict[str, float]]) -> str:
    head = "| " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---:" for _ in COLUMNS) + "|"
    body = [
        "| " + " | ".join(fmt.format(row[key]) for key, _, fmt in COLUMNS) + " |" for row in rows
    ]
    return "\n".join([head, rule, *body])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,30,100", help="cluster sizes (comma-separated)")
    parser.add_argument("--rest", type=int, default=10, help="virtual seconds at rest")
    parser.add_argument("--timeout", type=int, default=15000, help="cluster-node-timeout (ms)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    print(f"disquette simulator ({build.current()} build), cluster-node-timeout "
          f"{args.timeout} ms, seed {args.seed}, {args.rest} s at rest")  # fmt: skip
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        rows.append(measure(n, args.rest, args.timeout, args.seed))
        print(f"  {n} nodes: {rows[-1]['wall_s']:.1f} s of wall time", file=sys.stderr)
    print(table_text(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
