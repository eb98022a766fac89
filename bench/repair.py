#!/usr/bin/env python3
"""What replica repair costs: a node failure with a million jobs on a five-node cluster.

Usage (see bench/README.md)::

    .venv/bin/python bench/repair.py [--jobs 1000000] [--nodes 5] [--timeout 2000]
                                     [--pipeline 64] [--serve-rate 200]
                                     [--disquette-python PY] [--json FILE]

Starts ``--nodes`` disquette servers (no AOF, ``latency-monitor-threshold 1``,
``maxmemory`` 8gb: above 75 % of it a node takes no copies, repairs included), joins
them, and loads ``--jobs`` jobs with ``ADDJOB q <body> 10000 REPLICATE 3 RETRY 3600
ASYNC``, pipelined through every node at once, until the cluster holds three copies of
each. Then a probe process sends ``PING`` to one survivor every ``--probe-interval-ms``
(bench/memory.py's probe) and a client keeps serving (ADDJOB, GETJOB, ACKJOB at
``--serve-rate`` a second on the survivors) while the first node is killed with SIGKILL.
Five busy servers on a small machine would mostly measure the CPU they take from each
other, so the probed survivor gets a CPU of its own (the last one; every other process
of the bench shares the others) unless ``--no-pin``. The survivors flag it FAIL, count it lost
``replica-repair-delay`` later (twice the node timeout by default) and repair its
copies; INFO cluster is polled until every survivor counts it down and has nothing left
to repair.

Reported: load time; when the repair started (all survivors count the node down) and
how long it took to finish; copies lost and jobs repaired; the probe's round trips
during the repair (the longest time a survivor did not answer a client: event-loop
pauses, plus CPU contention between the processes on the machine); the survivors'
``LATENCY LATEST`` (the longest ``cron`` run, where repair slices run, measured inside
each process); the served requests' worst latency and errors.

Dependencies: Python standard library and ``hiredis``. Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import _common as cm
from _common import encode, progress
from memory import Probe, _load, _pause_stats

DEADLINE = 3600.0  # seconds, for each wait


def _info(server: cm.Server) -> dict[str, str]:
    with server.client() as c:
        text = c.call("INFO", "cluster")
    text = text.decode() if isinstance(text, bytes) else str(text)
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def _wait(condition: Any, what: str, interval: float = 0.2) -> float:
    """Poll until ``condition()``; return the monotonic time it held."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(interval)
    return time.monotonic()


def _form(servers: list[cm.Server]) -> None:
    with servers[0].client() as c:
        for s in servers[1:]:
            c.call("CLUSTER", "MEET", s.host, s.port)

    def meshed() -> bool:
        for s in servers:
            with s.client() as c:
                text = c.call("CLUSTER", "INFO")
            text = text.decode() if isinstance(text, bytes) else str(text)
            if f"cluster_reachable_nodes:{len(servers) - 1}" not in text:
                return False
        return True

    _wait(meshed, "a meshed cluster")


def _serve(servers: list[cm.Server], rate: float, stop: threading.Event, out: dict) -> None:
    """ADDJOB + GETJOB + ACKJOB on each survivor in turn, ``rate`` times a second."""
    worst = 0.0
    errors = 0
    done = 0
    clients = [s.client() for s in servers]
    try:
        while not stop.is_set():
            for c in clients:
                t0 = time.monotonic()
                try:
                    c.call("ADDJOB", "served", "x", 10000, "REPLICATE", 3)
                    got = c.call("GETJOB", "NOHANG", "FROM", "served")
                    if got:
                        c.call("ACKJOB", got[0][1])
                    done += 1
                except (OSError, cm.ServerError):
                    errors += 1
                worst = max(worst, time.monotonic() - t0)
                time.sleep(1 / rate)
                if stop.is_set():
                    break
    finally:
        for c in clients:
            c.close()
        out.update({"served": done, "serve_errors": errors, "serve_worst_ms": worst * 1000})


def measure(args: argparse.Namespace) -> dict[str, Any]:
    extra = ["--cluster-node-timeout", str(args.timeout), "--latency-monitor-threshold", "1",
             "--maxmemory", args.maxmemory, *shlex.split(args.disquette_args)]  # fmt: skip
    spec = cm.disquette_spec(args.disquette_python, extra)
    out: dict[str, Any] = {"jobs": args.jobs, "nodes": args.nodes, "argv": [*spec.argv, *extra]}
    servers = [cm.Server(spec) for _ in range(args.nodes)]
    probes: list[Probe] = []
    try:
        for s in servers:
            s.start()
        _form(servers)
        progress(f"[repair] {args.nodes} nodes meshed; loading {args.jobs:,} jobs")
        request = encode("ADDJOB", "q", b"x" * args.body_size, 10000, "REPLICATE", 3,
                         "RETRY", 3600, "ASYNC")  # fmt: skip
        share = [args.jobs // args.nodes + (i < args.jobs % args.nodes) for i in range(args.nodes)]
        errors = [0] * args.nodes

        def load(i: int) -> None:
            with servers[i].client() as c:
                errors[i] = _load(c, request, share[i], args.pipeline)

        started = time.monotonic()
        loaders = [threading.Thread(target=load, args=(i,)) for i in range(args.nodes)]
        for t in loaders:
            t.start()
        for t in loaders:
            t.join()
        copies = 3 * (args.jobs - sum(errors))

        def replicated() -> bool:
            return sum(int(s.info().get("registered_jobs", 0)) for s in servers) >= copies

        _wait(replicated, "every copy made", interval=1)
        out["load_seconds"] = time.monotonic() - started
        out["load_errors"] = sum(errors)
        progress(f"[repair] loaded in {out['load_seconds']:.0f} s ({sum(errors)} errors)")
        victim, survivors = servers[0], servers[1:]
        out["victim_jobs"] = int(victim.info().get("registered_jobs", 0))
        out["rss_mb"] = [round(s.rss_bytes() / 1e6) for s in servers]
        probed = survivors[0]
        cpus = sorted(os.sched_getaffinity(0))
        if args.pin and len(cpus) > 1:
            for s in servers:
                os.sched_setaffinity(s.pid, cpus[-1:] if s is probed else cpus[:-1])
            os.sched_setaffinity(0, cpus[:-1])
            out["pinned"] = f"probed node on CPU {cpus[-1]}, the rest on {cpus[:-1]}"
        for s in survivors:
            with s.client() as c:
                c.call("LATENCY", "RESET")
        for s in (probed,):
            probes.append(Probe(s, args.probe_interval_ms))
        served: dict[str, Any] = {}
        stop_serving = threading.Event()
        server_thread = threading.Thread(
            target=_serve, args=(survivors, args.serve_rate, stop_serving, served)
        )
        server_thread.start()
        time.sleep(1)
        t_kill = time.monotonic()
        t_kill_ns = time.monotonic_ns()
        assert victim.proc is not None
        victim.proc.kill()
        victim.proc.wait()
        progress("[repair] node killed; waiting for the survivors to count it lost")
        fields: list[dict[str, str]] = []

        def counted() -> bool:
            fields[:] = [_info(s) for s in survivors]
            return all(f["repair_nodes_down"] == "1" for f in fields)

        t_start = _wait(counted, "the node counted lost")
        t_start_ns = time.monotonic_ns()
        progress(f"[repair] repair started {t_start - t_kill:.1f} s after the kill")

        def finished() -> bool:
            fields[:] = [_info(s) for s in survivors]
            return all(f["repair_backlog"] == "0" for f in fields)

        t_done = _wait(finished, "the end of the repair")
        t_done_ns = time.monotonic_ns()
        stop_serving.set()
        server_thread.join()
        out["copies_after"] = sum(int(s.info().get("registered_jobs", 0)) for s in survivors)
        samples = [probe.finish() for probe in probes]
        pauses = [_pause_stats(starts, rtts, t_start_ns, t_done_ns) for starts, rtts in samples]
        before = [
            _pause_stats(starts, rtts, t_kill_ns - 10**9, t_kill_ns) for starts, rtts in samples
        ]
        latest = []
        for s in survivors:
            with s.client() as c:
                latest.append(c.call("LATENCY", "LATEST"))
        out.update(served)
        out.update(
            {
                "repair_start_after_kill_s": t_start - t_kill,
                "repair_seconds": t_done - t_start,
                "copies_lost": sum(int(f["repair_copies_lost"]) for f in fields),
                "jobs_repaired": sum(int(f["repair_jobs_repaired"]) for f in fields),
                "probe_max_ms_during_repair": max(p.get("max_ms", 0) for p in pauses),
                "probe_p99_ms_during_repair": max(p.get("p99_ms", 0) for p in pauses),
                "probe_over_10ms_during_repair": sum(p.get("over_10ms", 0) for p in pauses),
                "probe_max_ms_before_kill": max(p.get("max_ms", 0) for p in before),
                "latency_latest": [_decode(x) for x in latest],
            }
        )
    except Exception as e:
        out["failed"] = f"{type(e).__name__}: {e}"
    finally:
        for probe in probes:
            probe.close()
        for s in servers:
            s.stop()
    return out


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def format_report(r: dict[str, Any]) -> str:
    if "failed" in r:
        return f"repair bench failed: {r['failed']}"
    crons = [next((e[3] for e in node if e[0] == "cron"), 0) for node in r["latency_latest"]]
    return "\n".join(
        [
            f"{cm.command_line()}",
            f"{r['jobs']:,} jobs, REPLICATE 3, {r['nodes']} nodes; loaded in "
            f"{r['load_seconds']:.0f} s ({r['load_errors']} errors); RSS MB {r['rss_mb']}",
            f"killed node held {r['victim_jobs']:,} copies; repair started "
            f"{r['repair_start_after_kill_s']:.1f} s after the kill (FAIL + delay) and took "
            f"{r['repair_seconds']:.1f} s: {r['copies_lost']:,} copies lost, "
            f"{r['jobs_repaired']:,} jobs repaired; the survivors then held "
            f"{r['copies_after']:,} copies",
            f"{r.get('pinned', 'not pinned')}; "
            f"probe round trips during the repair: max {r['probe_max_ms_during_repair']:.1f} ms, "
            f"p99 {r['probe_p99_ms_during_repair']:.1f} ms, "
            f"{r['probe_over_10ms_during_repair']} over 10 ms (max "
            f"{r['probe_max_ms_before_kill']:.1f} ms in the second before the kill)",
            f"longest cron run (repair slices included) inside each survivor, probed first "
            f"(LATENCY LATEST max): {crons} ms",
            f"served meanwhile: {r['served']} ADDJOB+GETJOB+ACKJOB rounds, "
            f"{r['serve_errors']} errors, worst {r['serve_worst_ms']:.1f} ms",
        ]
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--maxmemory", default="8gb", help="per node (above 75 %% no copies)")
    p.add_argument("--timeout", type=int, default=2000, help="cluster-node-timeout, ms")
    p.add_argument("--body-size", type=int, default=64)
    p.add_argument("--pipeline", type=int, default=64)
    p.add_argument("--serve-rate", type=float, default=200.0, help="served rounds a second")
    p.add_argument("--probe-interval-ms", type=int, default=1)
    p.add_argument("--no-pin", dest="pin", action="store_false", help="no CPU pinning")
    p.add_argument("--disquette-python", default=sys.executable)
    p.add_argument("--disquette-args", default="", help="extra server arguments")
    p.add_argument("--json", help="also write the results here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    cm.require_hiredis()
    args = parse_args(argv)
    r = measure(args)
    print(format_report(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2, default=str)
    return 1 if "failed" in r else 0


if __name__ == "__main__":
    sys.exit(main())
