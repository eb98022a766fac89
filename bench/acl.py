#!/usr/bin/env python3
"""What users with permissions cost ADDJOB and the GETJOB + ACKJOB cycle.

Usage::

    python bench/acl.py [--jobs 100000] [--repeat 3] [--batch 200] [--pure]
                        [--variants default,...] [--json FILE]

Each variant runs against a fresh server (the compiled build; ``--pure`` adds the pure
build, or runs alone with ``--pure-only``): one connection adds ``--jobs`` jobs to
queue ``q``, pipelined ``--batch`` deep with two batches in flight (bench/extensions.py's
load), then takes them back with ``GETJOB COUNT 100`` and acknowledges each batch with
one ``ACKJOB``. The table gives each phase's throughput and the server's CPU time per
job, best of ``--repeat``, relative to ``default``:

- ``default``: no user defined; the connection is ``default`` (every permission);
- ``users-elsewhere``: 20 restricted users exist, the connection stays ``default``:
  unrestricted connections are never checked (``client.acl`` is None);
- ``restricted``: the connection is a user ``%RW~q +@produce +@consume`` (every request
  checked: the command, then the queue or the jobs' queues; pipelined ADDJOBs run one
  by one instead of as a run);
- ``restricted-patterns``: the same with 20 more patterns before the one that matches
  (a queue's permissions are cached per user, so the patterns are matched once).

Dependencies: the standard library and ``hiredis``; Linux only (as run.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Server,
    ServerSpec,
    disquette_spec,
    drain,
    encode,
    make_body,
    proc_cpu_seconds,
    run_description,
)
from extensions import best_runs, check_added, pipelined

BODY = make_body(64)
OTHERS = tuple(("ACL", "SETUSER", f"u{n}", "on", ">pw", f"~other{n}*", "+@produce")
               for n in range(20))  # fmt: skip
RESTRICTED = ("ACL", "SETUSER", "app", "on", ">pw", "~q", "+@produce", "+@consume")
PATTERNS = tuple(f"%R~p{n}:*" for n in range(20))
#: Variant: (set-up commands, AUTH as ``app``).
VARIANTS: dict[str, tuple[tuple[tuple[str, ...], ...], bool]] = {
    "default": ((), False),
    "users-elsewhere": (OTHERS, False),
    "restricted": ((RESTRICTED,), True),
    "restricted-patterns": (((*RESTRICTED[:5], *PATTERNS, *RESTRICTED[5:]),), True),
}


def measure(spec: ServerSpec, name: str, jobs: int, batch: int) -> dict[str, float]:
    setup, restricted = VARIANTS[name]
    with Server(spec) as server, server.client() as client:
        for command in setup:
            client.call(*command)
        if restricted:
            client.call("AUTH", "app", "pw")
        cpu0, t0 = proc_cpu_seconds(server.pid), time.perf_counter()
        requests = (encode("ADDJOB", "q", BODY, "0") for _ in range(jobs))
        replies = pipelined(client, requests, batch)
        add_wall, add_cpu = time.perf_counter() - t0, proc_cpu_seconds(server.pid) - cpu0
        check_added(name, replies)
        cpu0, t0 = proc_cpu_seconds(server.pid), time.perf_counter()
        taken = drain(client, "q")
        take_wall, take_cpu = time.perf_counter() - t0, proc_cpu_seconds(server.pid) - cpu0
    return {
        "add_ops": jobs / add_wall,
        "add_cpu_us": add_cpu / jobs * 1e6,
        "take_ops": taken / take_wall,
        "take_cpu_us": take_cpu / taken * 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--pure", action="store_true", help="also run the pure build")
    parser.add_argument("--pure-only", action="store_true", help="run the pure build only")
    parser.add_argument("--variants", help="comma-separated variants (default: all)")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    header, meta = run_description("disquette users and permissions", sys.executable)
    print("\n".join(header))
    specs = [] if args.pure_only else [disquette_spec(sys.executable)]
    if args.pure or args.pure_only:
        specs.append(disquette_spec(sys.executable, pure=True))
    variants = args.variants.split(",") if args.variants else list(VARIANTS)
    if "default" not in variants:
        variants.insert(0, "default")  # the reference of the ratios
    results: dict[str, dict[str, dict[str, float]]] = {}
    for spec in specs:
        best = best_runs(measure, spec, variants, args.jobs, args.batch, args.repeat)
        results[spec.name] = best
        base = best["default"]
        print(f"\n{spec.name}: {args.jobs} jobs, pipelined {args.batch} deep, best of "
              f"{args.repeat}")  # fmt: skip
        print(f"{'variant':<22}{'ADDJOB/s':>11}{'µs CPU':>9}{'x default':>11}"
              f"{'GET+ACK/s':>11}{'µs CPU':>9}{'x default':>11}")  # fmt: skip
        for variant, r in best.items():
            add_ratio = r["add_cpu_us"] / base["add_cpu_us"]
            take_ratio = r["take_cpu_us"] / base["take_cpu_us"]
            add = f"{r['add_ops']:>11,.0f}{r['add_cpu_us']:>9.2f}{add_ratio:>11.2f}"
            take = f"{r['take_ops']:>11,.0f}{r['take_cpu_us']:>9.2f}{take_ratio:>11.2f}"
            print(f"{variant:<22}{add}{take}")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
