#!/usr/bin/env python3
"""AOF benchmark: ADDJOB throughput per fsync policy, and event-loop stalls during a rewrite.

Usage::

    python bench/aof.py [--duration 5] [--warmup 1] [--repeat 1] [--connections 50]
                        [--scenarios addjob,addjob-p16] [--rewrite-jobs 1000000]
                        [--no-throughput] [--no-rewrite] [--json FILE]

Part 1 runs ``bench/run.py``'s Disque scenarios (``addjob`` by default: one ``ADDJOB q
<64 bytes> 0`` in flight per connection; ``addjob-p16``: 16 pipelined) against four
fresh disquette servers, interleaved per repetition: ``appendonly no``, then
``appendonly yes`` with ``appendfsync no``, ``everysec`` and ``always``. It prints the
run.py table and, per scenario, each policy's throughput and server CPU per operation
relative to ``appendonly no``. Target: ``everysec`` >= 0.85x the throughput of
``appendonly no``.

Part 2 starts a server with ``appendonly yes``, loads ``--rewrite-jobs`` jobs (pipelined
``ADDJOB``), lets it idle, then runs ``BGREWRITEAOF`` while a separate probe process sends
``PING`` every millisecond (bench/memory.py's probe, real-time priority when permitted).
It reports the rewrite's duration and the PING round trips during the idle period before
it and during the rewrite: the longest round trip is the longest time the event loop did
not serve a client.

Dependencies: the standard library and ``hiredis``; Linux only (as run.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from typing import Any

import _common as cm
import run as rb
from _common import encode, progress
from memory import Probe, _load, _pause_stats

POLICIES = (
    ("aof-off", ["--appendonly", "no"]),
    ("fsync-no", ["--appendonly", "yes", "--appendfsync", "no"]),
    ("everysec", ["--appendonly", "yes", "--appendfsync", "everysec"]),
    ("always", ["--appendonly", "yes", "--appendfsync", "always"]),
)
TARGET = ("everysec", "addjob", 0.85)


# =========================================================================== throughput


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    run_args = rb.parse_args(
        [
            "--duration", str(args.duration), "--warmup", str(args.warmup),
            "--connections", str(args.connections), "--procs", str(args.procs),
            "--repeat", str(args.repeat), "--no-redis", "--quiet",
        ]
    )  # fmt: skip
    body = b"0123456789abcdef" * 4
    wanted = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    scenarios = [s for s in rb.build_scenarios(body, run_args.depth) if s.name in wanted]
    extra = shlex.split(args.disquette_args)
    specs = []
    for name, policy in POLICIES:
        spec = cm.disquette_spec(args.disquette_python, [*policy, *extra])
        spec.name = name
        specs.append(spec)
    bench = rb.Bench(run_args, scenarios)
    try:
        bench.run_all(specs)
    finally:
        bench.reap_children()
    results = bench.results(specs)
    by = {(r.server, r.scenario): r for r in results if not r.failed}
    ratios = []
    for sc in scenarios:
        base = by.get(("aof-off", sc.name))
        for name, _ in POLICIES[1:]:
            r = by.get((name, sc.name))
            if base is None or r is None or not base.ops_per_sec:
                continue
            cpu = (
                base.server_us_per_op / r.server_us_per_op
                if base.server_us_per_op > 0 and r.server_us_per_op > 0
                else None
            )
            ratio = r.ops_per_sec / base.ops_per_sec
            ratios.append({"policy": name, "scenario": sc.name, "ratio": ratio, "cpu_ratio": cpu})
    return {"results": results, "ratios": ratios, "table": rb.format_table(results)}


def format_ratios(ratios: list[dict[str, Any]]) -> str:
    lines = [f"  {'policy':<10} {'scenario':<12} {'ops/s':>7} {'cpu':>7}"]
    for r in ratios:
        cpu = "n/a" if r["cpu_ratio"] is None else f"{r['cpu_ratio']:.3f}"
        line = f"  {r['policy']:<10} {r['scenario']:<12} {r['ratio']:>7.3f} {cpu:>7}"
        if (r["policy"], r["scenario"]) == TARGET[:2]:
            verdict = "OK" if r["ratio"] >= TARGET[2] else "BELOW TARGET"
            line += f"   target >= {TARGET[2]:.2f}: {verdict}"
        lines.append(line)
    return "\n".join(lines)


# =========================================================================== rewrite stall


def _info(client: cm.BlockingClient) -> dict[str, str]:
    text = client.call("INFO", "persistence")
    text = text.decode() if isinstance(text, bytes) else str(text)
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def rewrite_stall(args: argparse.Namespace) -> dict[str, Any]:
    spec = cm.disquette_spec(
        args.disquette_python, ["--appendonly", "yes", *shlex.split(args.disquette_args)]
    )
    out: dict[str, Any] = {"jobs": args.rewrite_jobs, "argv": [*spec.argv, *spec.extra]}
    server = cm.Server(spec)
    try:
        server.start()
        with server.client() as c:
            started = time.monotonic()
            errors = _load(c, encode("ADDJOB", "q", b"0123456789abcdef" * 4, "0"),
                           args.rewrite_jobs, 16)  # fmt: skip
            out["load_seconds"] = time.monotonic() - started
            out["load_errors"] = errors
            progress(f"[rewrite] loaded {args.rewrite_jobs:,} jobs in {out['load_seconds']:.1f}s")
            out["rss_bytes"] = server.rss_bytes()
            with Probe(server, 1) as probe:
                t_idle = time.monotonic_ns()
                time.sleep(args.idle)
                t_rewrite = time.monotonic_ns()
                reply = c.call("BGREWRITEAOF")
                if reply not in (b"Background append only file rewriting started",
                                 "Background append only file rewriting started"):  # fmt: skip
                    raise RuntimeError(f"BGREWRITEAOF: {reply!r}")
                while _info(c)["aof_rewrite_in_progress"] == "1":
                    time.sleep(0.05)
                t_done = time.monotonic_ns()
                fields = _info(c)
                starts, rtts = probe.finish()
            out.update(
                {
                    "rewrite_seconds": (t_done - t_rewrite) / 1e9,
                    "rewrite_status": fields["aof_last_bgrewrite_status"],
                    "aof_bytes": int(fields["aof_current_size"]),
                    "pauses_idle": _pause_stats(starts, rtts, t_idle, t_rewrite),
                    "pauses_rewrite": _pause_stats(starts, rtts, t_rewrite, t_done),
                }
            )
    except Exception as e:
        out["failed"] = f"{type(e).__name__}: {e}"
    finally:
        server.stop()
    return out


def format_rewrite(r: dict[str, Any]) -> str:
    if "failed" in r:
        return f"  FAILED: {r['failed']}"
    lines = [
        f"  {r['jobs']:,} jobs ({r['aof_bytes'] / 2**20:.0f} MiB AOF, server RSS "
        f"{r['rss_bytes'] / 2**20:.0f} MiB): rewrite took {r['rewrite_seconds']:.2f} s "
        f"(status {r['rewrite_status']})",
        f"  {'PING round trips':<24} {'samples':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'p99.9 ms':>9} {'max ms':>8} {'>10 ms':>7}",
    ]
    for label, key in (("idle, before", "pauses_idle"), ("during the rewrite", "pauses_rewrite")):
        p = r[key]
        if not p.get("samples"):
            lines.append(f"  {label:<24} no samples")
            continue
        lines.append(
            f"  {label:<24} {p['samples']:>8} {p['p50_ms']:>8.3f} {p['p99_ms']:>8.3f} "
            f"{p['p999_ms']:>9.3f} {p['max_ms']:>8.3f} {p['over_10ms']:>7}"
        )
    return "\n".join(lines)


# =========================================================================== main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per run")
    ap.add_argument("--repeat", type=int, default=1, help="repetitions (median reported)")
    ap.add_argument("--connections", type=int, default=50, help="total connections")
    ap.add_argument("--procs", type=int, default=min(4, max(2, os.cpu_count() or 2)),
                    help="generator processes")  # fmt: skip
    ap.add_argument("--scenarios", default="addjob,addjob-p16", help="run.py scenarios")
    ap.add_argument("--disquette-python", default=sys.executable, help="server interpreter")
    ap.add_argument("--disquette-args", default="", help="extra directives for every server")
    ap.add_argument("--rewrite-jobs", type=int, default=1_000_000, help="jobs in the rewrite")
    ap.add_argument("--idle", type=float, default=3.0, help="idle seconds before the rewrite")
    ap.add_argument("--no-throughput", action="store_true", help="skip part 1")
    ap.add_argument("--no-rewrite", action="store_true", help="skip part 2")
    ap.add_argument("--json", default=None, metavar="FILE", help="also save results as JSON")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    cm.require_hiredis()
    args = parse_args(argv)
    header, meta = cm.run_description("disquette AOF benchmark", args.disquette_python)
    print("\n".join(header), flush=True)
    doc: dict[str, Any] = dict(meta)
    failed = False
    if not args.no_throughput:
        part = throughput(args)
        print("\n1. ADDJOB throughput per fsync policy (fresh server per run)\n")
        print(part["table"])
        print("\nrelative to appendonly no (ops/s = throughput ratio, cpu = server CPU per op")
        print("of appendonly no / of the policy):")
        print(format_ratios(part["ratios"]))
        doc["throughput"] = {"results": rb._clean(part["results"]), "ratios": part["ratios"]}
        failed |= any(r.failed for r in part["results"])
    if not args.no_rewrite:
        result = rewrite_stall(args)
        print(f"\n2. Event-loop stalls during BGREWRITEAOF of {args.rewrite_jobs:,} jobs\n")
        print(format_rewrite(result))
        doc["rewrite"] = result
        failed |= "failed" in result
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, default=str)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
