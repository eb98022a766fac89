#!/usr/bin/env python3
"""What disquette's queue extensions cost: priorities, de-duplication and policies.

Usage::

    python bench/extensions.py [--jobs 200000] [--repeat 3] [--batch 200] [--pure]
                               [--variants plain,priority,...] [--json FILE]

Each variant runs against a fresh server (the compiled build; ``--pure`` adds the pure
build): one connection adds ``--jobs`` jobs, pipelined ``--batch`` deep with two batches
in flight, then takes them back with ``GETJOB COUNT 100`` and acknowledges each batch
with one ``ACKJOB``. The table gives the throughput of each phase and the server's CPU
time per job (the steadier figure on a shared machine), best of ``--repeat``, and each
variant's CPU per job relative to plain jobs:

- ``plain``: ``ADDJOB q <64 bytes> 0`` (Disque's command, nothing beyond it);
- ``policies-elsewhere``: plain jobs while 20 policies exist, none matching ``q``;
- ``policy``: plain ADDJOBs into a queue whose policy sets retry, TTL and priority;
- ``priority``: ``... PRIORITY 5`` (one level in use);
- ``priority-mixed``: ``... PRIORITY n``, n cycling over 0-9 (ten levels, and no two
  consecutive requests alike: each is a pipelined run of its own);
- ``dedup``: ``... DEDUP <unique key>`` (every key new: the index grows and shrinks);
- ``dedup-hit``: the same ADDJOB repeated with one key (each answered from the index:
  one job is taken back).

A dead letter costs what it is made of (a requeue that becomes an asynchronous ADDJOB
and an ACKJOB); it only happens to jobs that failed, so it is not a variant here.

Dependencies: the standard library and ``hiredis``; Linux only (as run.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BlockingClient,
    Server,
    ServerSpec,
    disquette_spec,
    encode,
    make_body,
    proc_cpu_seconds,
    run_description,
)

BODY = make_body(64)


def _adds(extra: Callable[[int], tuple[bytes | str | int, ...]]) -> Callable[[int], bytes]:
    return lambda i: encode("ADDJOB", "q", BODY, "0", *extra(i))


VARIANTS: dict[str, tuple[tuple[tuple[str, ...], ...], Callable[[int], bytes]]] = {
    "plain": ((), _adds(lambda i: ())),
    "policies-elsewhere": (
        tuple(("QPOLICY", "SET", f"p{n}", f"other{n}*", "retry", "5") for n in range(20)),
        _adds(lambda i: ()),
    ),
    "policy": (
        (("QPOLICY", "SET", "p", "q", "retry", "30", "ttl", "3600", "priority", "2"),),
        _adds(lambda i: ()),
    ),
    "priority": ((), _adds(lambda i: ("PRIORITY", 5))),
    "priority-mixed": ((), _adds(lambda i: ("PRIORITY", i % 10))),
    "dedup": ((), _adds(lambda i: ("DEDUP", b"key-%d" % i))),
    "dedup-hit": ((), _adds(lambda i: ("DEDUP", "same"))),
}


def pipelined(client: BlockingClient, requests: Iterator[bytes], batch: int) -> list:
    """Send the requests ``batch`` at a time, two batches in flight; the replies."""
    replies: list = []
    inflight: list[int] = []
    done = False
    while inflight or not done:
        while not done and len(inflight) < 2:
            chunk = [r for _, r in zip(range(batch), requests, strict=False)]
            if not chunk:
                done = True
                break
            client.sock.sendall(b"".join(chunk))
            inflight.append(len(chunk))
        if inflight:
            replies.extend(client.read_reply() for _ in range(inflight.pop(0)))
    return replies


def measure(spec: ServerSpec, variant: str, jobs: int, batch: int) -> dict[str, float]:
    setup, request = VARIANTS[variant]
    with Server(spec) as server, server.client() as client:
        for command in setup:
            client.call(*command)
        cpu0, t0 = proc_cpu_seconds(server.pid), time.perf_counter()
        replies = pipelined(client, (request(i) for i in range(jobs)), batch)
        add_wall, add_cpu = time.perf_counter() - t0, proc_cpu_seconds(server.pid) - cpu0
        errors = [r for r in replies if not isinstance(r, bytes)]
        if errors:
            raise RuntimeError(f"{variant}: {len(errors)} errors, first {errors[0]}")
        cpu0, t0 = proc_cpu_seconds(server.pid), time.perf_counter()
        taken = 0
        while True:
            got = client.call("GETJOB", "NOHANG", "COUNT", 100, "FROM", "q")
            if not got:
                break
            client.call("ACKJOB", *[job[1] for job in got])
            taken += len(got)
        take_wall, take_cpu = time.perf_counter() - t0, proc_cpu_seconds(server.pid) - cpu0
    return {
        "add_ops": jobs / add_wall,
        "add_cpu_us": add_cpu / jobs * 1e6,
        "take_ops": taken / take_wall if taken else 0.0,
        "take_cpu_us": take_cpu / taken * 1e6 if taken else 0.0,
        "taken": taken,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--pure", action="store_true", help="also run the pure build")
    parser.add_argument("--variants", help="comma-separated variants (default: all)")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    header, meta = run_description("disquette queue extensions", sys.executable)
    print("\n".join(header))
    specs = [disquette_spec(sys.executable)]
    if args.pure:
        specs.append(disquette_spec(sys.executable, pure=True))
    results: dict[str, dict[str, dict[str, float]]] = {}
    variants = args.variants.split(",") if args.variants else list(VARIANTS)
    if "plain" not in variants:
        variants.insert(0, "plain")  # the reference of the ratios
    for spec in specs:
        best: dict[str, dict[str, float]] = {}
        for _ in range(args.repeat):
            for variant in variants:  # interleaved: drifts of the machine hit all alike
                run = measure(spec, variant, args.jobs, args.batch)
                old = best.get(variant)
                if old is None or run["add_cpu_us"] < old["add_cpu_us"]:
                    best[variant] = run
        results[spec.name] = best
        base = best["plain"]
        print(f"\n{spec.name}: {args.jobs} jobs, pipelined {args.batch} deep, best of "
              f"{args.repeat}")  # fmt: skip
        print(f"{'variant':<20}{'ADDJOB/s':>11}{'µs CPU':>9}{'x plain':>9}"
              f"{'GET+ACK/s':>11}{'µs CPU':>9}{'x plain':>9}")  # fmt: skip
        for variant, r in best.items():
            take_ratio = r["take_cpu_us"] / base["take_cpu_us"] if r["taken"] else 0.0
            print(f"{variant:<20}{r['add_ops']:>11,.0f}{r['add_cpu_us']:>9.2f}"
                  f"{r['add_cpu_us'] / base['add_cpu_us']:>9.2f}{r['take_ops']:>11,.0f}"
                  f"{r['take_cpu_us']:>9.2f}{take_ratio:>9.2f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
