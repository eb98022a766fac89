#!/usr/bin/env python3
"""Three-node benchmark: what replication, acknowledgement and federation cost a cluster.

Usage (see bench/README.md)::

    python bench/cluster.py [--duration 5] [--warmup 1] [--connections 50] [--repeat 3]
                            [--nodes 3] [--other /path/to/disque-server] [--json FILE]

For every server (disquette, each ``--other`` binary) and every scenario, a *fresh*
cluster is started: ``--nodes`` servers on free loopback ports (bound to 127.0.0.1, each
in its own temporary directory and session), joined with ``CLUSTER MEET`` from the
first node (the joining code of ``disquette.tools.local_cluster``, which works for an
original ``disque-server`` too) and waited for until every node sees every other one
connected. The generator connections are spread round-robin over the nodes (all of
them, or the nodes a scenario names), so every node is an entry point, as in a real
deployment behind a client that spreads its connections.

The load generator, preloading, repetitions/medians, CPU and latency accounting and
the table are ``bench/run.py``'s (imported, not copied); this script adds the
cluster target, the scenarios, the bus counters and the ratios.

Bus traffic: ``INFO cluster`` on disquette gives messages, frames and bytes sent; an
original Disque only reports messages (``CLUSTER INFO cluster_stats_messages_sent``),
each of which it writes alone. The counters are summed over the nodes at the start
and the end of the measured window; their deltas per op are shown (for the ADDJOB
scenarios an op is a replicated job; for the cycles the job was replicated by the
preload and the window's traffic is what acknowledging and deleting its copies
costs).

Dependencies: Python standard library and ``hiredis``. Linux only (/proc, epoll, fork).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from typing import Any

import _common as cm
import run as rb
from _common import encode


def _load_local_cluster() -> Any:
    """``disquette.tools.local_cluster`` loaded from its file: the joining code without
    importing the disquette package (whose dependencies the benchmark does not need)."""
    path = cm.REPO / "src" / "disquette" / "tools" / "local_cluster.py"
    spec = importlib.util.spec_from_file_location("_local_cluster", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


local_cluster = _load_local_cluster()

# =========================================================================== scenarios

ADD_R1 = "addjob-r1"
ADD_R3 = "addjob-r3"
CYCLE_R1 = "cycle-r1"
CYCLE_R3 = "cycle-r3"

# (numerator, denominator, target): throughput ratios within one cluster and run.
# Original Disque measures 0.42 and 0.55 for the two targets.
RATIOS: tuple[tuple[str, str, float | None], ...] = (
    (ADD_R3, ADD_R1, 0.5),
    (CYCLE_R3, CYCLE_R1, 0.65),
    ("addjob-r3-async", ADD_R1, None),
    ("cycle-r3-fastack", CYCLE_R1, None),
    ("federation", CYCLE_R1, None),
)


def build_scenarios(body: bytes) -> list[rb.Scenario]:
    """The cluster scenarios; queue ``q`` everywhere."""

    def add(replicate: int, *more: str) -> bytes:
        return encode("ADDJOB", "q", body, "0", "REPLICATE", str(replicate), *more)

    def preloaded(name: str, role: rb.Role, replicate: int, description: str) -> rb.Scenario:
        # The R3 cycles are sized from the R1 cycle rate measured earlier in the run
        # (they consume about as fast), not from the slower R3 ADDJOB rate.
        size_from = ADD_R1 if replicate == 1 else CYCLE_R1
        depth = 1000 if replicate == 1 else 64  # see Preload.depth
        preload = rb.Preload(add(replicate), size_from=size_from, depth=depth)
        return rb.Scenario(
            name, "cluster", (role,), description, preload=preload, dry_check=("QLEN", "q")
        )

    getjob = encode("GETJOB", "FROM", "q")
    return [
        rb.Scenario(
            ADD_R1,
            "cluster",
            (rb.Role("add", add(1)),),
            "ADDJOB q <body> 0 REPLICATE 1 on every node: no bus traffic, the baseline",
        ),
        rb.Scenario(
            ADD_R3,
            "cluster",
            (rb.Role("add", add(3)),),
            "ADDJOB q <body> 0 REPLICATE 3 on every node: each job is copied to the two "
            "other nodes (REPLJOB/GOTJOB) before the reply",
        ),
        rb.Scenario(
            "addjob-r3-async",
            "cluster",
            (rb.Role("add", add(3, "ASYNC")),),
            "ADDJOB q <body> 0 REPLICATE 3 ASYNC: replies at once, copies in the background",
        ),
        preloaded(
            CYCLE_R1,
            rb.cycle_role("get+ack", getjob, "ACKJOB"),
            1,
            "GETJOB FROM q + ACKJOB on queues preloaded with REPLICATE 1 jobs on every node; "
            "op = cycle",
        ),
        preloaded(
            CYCLE_R3,
            rb.cycle_role("get+ack", getjob, "ACKJOB"),
            3,
            "GETJOB FROM q + ACKJOB on queues preloaded with REPLICATE 3 jobs on every node "
            "(SETACK/GOTACK/DELJOB with the copies); op = cycle",
        ),
        preloaded(
            "cycle-r3-fastack",
            rb.cycle_role("get+fastack", encode("GETJOB", "NOHANG", "FROM", "q"), "FASTACK"),
            3,
            "GETJOB NOHANG FROM q + FASTACK on REPLICATE 3 preloads (best-effort DELJOB "
            "broadcast); op = cycle",
        ),
        rb.Scenario(
            "federation",
            "cluster",
            (
                rb.Role("produce", add(1), nodes=(0,), counted=False),
                rb.cycle_role(
                    "consume",
                    encode("GETJOB", "TIMEOUT", "100", "FROM", "q"),
                    "ACKJOB",
                    nodes=(1,),
                ),
            ),
            "half the connections ADDJOB REPLICATE 1 on node 0, half GETJOB TIMEOUT 100 + "
            "ACKJOB on node 1 only: every job consumed travels by NEEDJOBS/YOURJOBS; "
            "op = a cycle on node 1",
        ),
    ]


# =========================================================================== cluster


class Cluster:
    """``size`` servers of one spec, started, joined and stopped together."""

    def __init__(self, spec: cm.ServerSpec, size: int, join_timeout: float = 30.0) -> None:
        self.spec = spec
        self.size = size
        self.nodes: list[cm.Server] = []
        self.join_timeout = join_timeout

    def start(self) -> None:
        try:
            for _ in range(self.size):
                # One at a time: a started node holds its port when the next one picks.
                self.nodes.append(cm.Server(self.spec))
                self.nodes[-1].start()
            procs = {n.port: n.proc for n in self.nodes}
            ports = [n.port for n in self.nodes]
            host = self.nodes[0].host
            if not local_cluster.join(ports, self.join_timeout, procs, host):
                tails = "\n".join(f"  node {n.port}:\n{n.log_tail(5)}" for n in self.nodes)
                raise cm.ServerStartError(
                    f"{len(self.nodes)} {self.spec.name} nodes did not form a full mesh "
                    f"within {self.join_timeout:.0f}s\n{tails}"
                )
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def version(self) -> str:
        return self.nodes[0].version()


def bus_counters(node: cm.Server) -> dict[str, int]:
    """Bus messages, frames and bytes sent by one node (what the server reports)."""
    out: dict[str, int] = {}
    try:
        with node.client() as c:
            text = c.call("INFO", "cluster")
            if b"cluster_stats_messages_sent" not in text:
                text = c.call("CLUSTER", "INFO")  # an original Disque: messages only
    except (OSError, cm.ServerError):
        return out
    fields = {
        "cluster_stats_messages_sent": "messages",
        "cluster_bus_frames_sent": "frames",
        "cluster_bus_bytes_sent": "bytes",
    }
    for line in text.decode(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key in fields and value.strip().isdigit():
            out[fields[key]] = int(value)
    return out


class ClusterBench(rb.Bench):
    """:class:`run.Bench` on clusters: one fresh cluster per scenario run."""

    preload_connections = 8  # a REPLICATE 3 ADDJOB blocks its connection until copied
    default_rate = 20_000.0  # when --scenarios left out the one a preload is sized from

    def __init__(self, args: argparse.Namespace, scenarios: list[rb.Scenario]) -> None:
        super().__init__(args, scenarios)
        self.size = args.nodes

    def runs_on(self, spec: cm.ServerSpec, sc: rb.Scenario) -> bool:
        return spec.family == "disque"

    def make_target(self, spec: cm.ServerSpec) -> Cluster:
        return Cluster(spec, self.size)

    def counters(self, target: Any) -> dict[str, int]:
        total: dict[str, int] = {}
        per_node = [bus_counters(n) for n in target.nodes]
        for key in ("messages", "frames", "bytes"):
            if all(key in c for c in per_node):
                total[key] = sum(c[key] for c in per_node)
        return total

    def run_scenario(self, target: Any, sc: rb.Scenario, res: rb.Result) -> None:
        super().run_scenario(target, sc, res)
        if sc.name == "federation":
            with target.nodes[0].client() as c:
                left = c.call("QLEN", "q")
            res.notes.append(f"{left:,} jobs left on node 0")
            if not res.ops:
                res.notes.append("no job travelled to node 1")


def per_op(key: str, spec: str) -> Any:
    """A table cell: counter delta ``key`` per op ("-" when the server has no such
    counter)."""

    def cell(r: rb.Result) -> str:
        if key not in r.counters or not r.ops:
            return "-"
        return format(r.counters[key] / r.ops, spec)

    return cell


BUS_COLUMNS = (
    ("bus msg/op", 10, per_op("messages", ".2f")),
    ("frames/op", 9, per_op("frames", ".3f")),
    ("bytes/op", 8, per_op("bytes", ".0f")),
)


def compute_ratios(results: list[rb.Result], servers: Sequence[str]) -> list[dict[str, Any]]:
    """For every server: the within-cluster ratios (targets for disquette); then
    disquette / other for every scenario."""
    by = {(r.server, r.scenario): r for r in results if not r.failed}
    out = []
    for server in servers:
        for num, den, target in RATIOS:
            t = target if server == "disquette" else None
            out.append(rb.ratio_entry(by, (server, num), (server, den), t))
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    for other in servers:
        if other != "disquette" and "disquette" in servers:
            for sc in scenarios:
                out.append(rb.ratio_entry(by, ("disquette", sc), (other, sc), None))
    return out


# =========================================================================== main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = rb.common_parser(__doc__)
    ap.add_argument("--nodes", type=int, default=3, help="nodes per cluster (at least 3)")
    args = ap.parse_args(argv)
    rb.check_common_args(ap, args)
    if args.nodes < 3:
        ap.error("--nodes must be at least 3 (the scenarios use REPLICATE 3)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit status 0, 1 if any scenario failed, 130 if interrupted."""
    cm.require_hiredis()
    args = parse_args(argv)
    body = (b"0123456789abcdef" * (args.body_size // 16 + 1))[: args.body_size]
    scenarios = rb.select_scenarios(args, build_scenarios(body))
    # Every node binds loopback only: its client port and its bus port (port + 10000).
    specs = rb.select_servers(
        args, rb.disque_specs(args, ["--bind", "127.0.0.1"], floor="free-replicas")
    )
    if not specs:
        sys.exit("bench: no server to run")
    header = rb.make_header(
        f"disquette cluster benchmark ({args.nodes} nodes)",
        args,
        specs,
        f"connections spread over the nodes; fresh {args.nodes}-node cluster per scenario",
    )
    print("\n".join(header.lines), flush=True)

    bench = ClusterBench(args, scenarios)
    interrupted = rb.run_bench(bench, specs)
    results = bench.results(specs)
    rb.print_servers(bench, specs, header)
    print()
    print(rb.format_table(results, BUS_COLUMNS))
    print()
    print("ops/s, latency: per request for ADDJOB, per GETJOB+ACK cycle for the cycles, per")
    print("consumed job for federation (its producers are in the notes). srv us/op and srv cpu")
    print("sum all nodes' CPU; gen = generator processes; irq = interrupt/softirq time (the")
    print("kernel's loopback TCP work); other = any other process; mach = whole machine busy.")
    print("bus msg/op, frames/op, bytes/op: bus messages, frames and bytes sent by all nodes")
    print("in the window per op (INFO cluster; '-' where the server does not report it).")
    ratios = compute_ratios(results, [s.name for s in specs])
    print()
    print("ratios, same run (ops/s = throughput ratio; cpu = server CPU per op of the")
    print("denominator / of the numerator, i.e. relative CPU efficiency):")
    print(rb.format_ratios(ratios))

    if args.json:
        settings = ("duration", "warmup", "connections", "procs", "body_size", "preload")
        doc = rb.json_doc(args, header, bench, specs, (*settings, "repeat", "nodes"))
        doc.update(results=results, ratios=ratios, interrupted=interrupted)
        rb.write_json(args.json, doc)
    if interrupted:
        return 130
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
