#!/usr/bin/env python3
"""What recurring jobs (CRON) cost a node: idle schedules, schedules firing, and ADDJOB.

Usage::

    python bench/cron.py [--seconds 5] [--jobs 100000] [--pure] [--json FILE]

Three measurements, each on a fresh single node (the compiled build; ``--pure`` adds
the pure build), the server's CPU time read from /proc:

- **idle**: N schedules that never come due during the run (``SCHEDULE "0 0 1 1 *"``),
  N = 0, 10, 100, 1000: the node's CPU per second over ``--seconds``, and per cron
  tick (hz 10) above the node without schedules;
- **firing**: N schedules ``EVERY 1 REPLICATE 1`` (a job per schedule per second):
  CPU per tick fired (the job added, its announcement), from INFO's
  ``cron_ticks_fired``, above the idle node;
- **addjob**: ``--jobs`` ADDJOBs pipelined 200 deep, µs of CPU per job, with no
  schedule and with 1000 idle schedules (ADDJOB's path has no CRON code: the two
  should agree within noise).

Dependencies: the standard library and ``hiredis``; Linux only (as run.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as cm
from _common import BlockingClient, Server, ServerSpec, encode
from extensions import pipelined

SIZES = (0, 10, 100, 1000)
FIRING = (10, 100, 1000)
BODY = cm.make_body(64)


def add_schedules(client: BlockingClient, count: int, *spec: str) -> None:
    requests = (encode("CRON", "SET", f"s{i}", f"q{i % 10}", "b", *spec) for i in range(count))
    replies = pipelined(client, requests, 100)
    if any(reply != b"OK" for reply in replies):
        raise RuntimeError(f"CRON SET failed: {replies[0]!r}")


def cpu_over(server: Server, seconds: float) -> float:
    """The server's CPU seconds over ``seconds`` of wall time."""
    cpu0 = cm.proc_cpu_seconds(server.pid)
    time.sleep(seconds)
    return cm.proc_cpu_seconds(server.pid) - cpu0


def fired(client: BlockingClient) -> int:
    text = client.call("INFO", "extensions").decode()
    return int(text.split("cron_ticks_fired:")[1].split()[0])


def idle(spec: ServerSpec, count: int, seconds: float) -> float:
    """CPU ms per second of a node holding ``count`` schedules that do not fire."""
    with Server(spec) as server, server.client() as client:
        add_schedules(client, count, "SCHEDULE", "0 0 1 1 *")
        time.sleep(1.0)  # the first look at each schedule is over
        return cpu_over(server, seconds) / seconds * 1000


def firing(spec: ServerSpec, count: int, seconds: float) -> tuple[float, int]:
    """CPU ms per second with ``count`` schedules firing every second, and the ticks."""
    with Server(spec) as server, server.client() as client:
        add_schedules(client, count, "EVERY", "1", "REPLICATE", "1")
        time.sleep(1.5)
        before = fired(client)
        cpu = cpu_over(server, seconds)
        return cpu / seconds * 1000, fired(client) - before


def addjob(spec: ServerSpec, schedules: int, jobs: int) -> float:
    """µs of CPU per pipelined ADDJOB with ``schedules`` idle schedules."""
    with Server(spec) as server, server.client() as client:
        add_schedules(client, schedules, "SCHEDULE", "0 0 1 1 *")
        request = encode("ADDJOB", "q", BODY, "0")
        cpu0 = cm.proc_cpu_seconds(server.pid)
        replies = pipelined(client, (request for _ in range(jobs)), 200)
        cpu = cm.proc_cpu_seconds(server.pid) - cpu0
        if len(replies) != jobs or not all(isinstance(r, bytes) for r in replies):
            raise RuntimeError("ADDJOB failed")
        return cpu / jobs * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--jobs", type=int, default=100_000)
    cm.add_build_options(parser)
    args = parser.parse_args()
    header, meta = cm.run_description("disquette recurring jobs", sys.executable)
    print("\n".join(header))
    results: dict[str, dict[str, object]] = {}
    for spec in cm.disquette_builds(args.pure):
        quiet = {n: idle(spec, n, args.seconds) for n in SIZES}
        print(f"\n{spec.name}: idle schedules, CPU over {args.seconds:g} s")
        print(f"{'schedules':>10}{'ms CPU/s':>10}{'µs per cron tick, above none':>30}")
        for n, ms in quiet.items():
            print(f"{n:>10}{ms:>10.2f}{(ms - quiet[0]) * 100:>30.1f}")
        fire = {n: firing(spec, n, args.seconds) for n in FIRING}
        print(f"\n{spec.name}: schedules firing every second (REPLICATE 1)")
        print(f"{'schedules':>10}{'ms CPU/s':>10}{'ticks':>8}{'µs per tick fired':>20}")
        for n, (ms, ticks) in fire.items():
            per_tick = (ms - quiet[0]) * args.seconds * 1000 / ticks if ticks else 0.0
            print(f"{n:>10}{ms:>10.2f}{ticks:>8}{per_tick:>20.1f}")
        plain = min(addjob(spec, 0, args.jobs) for _ in range(3))
        beside = min(addjob(spec, 1000, args.jobs) for _ in range(3))
        print(f"\n{spec.name}: ADDJOB, {args.jobs} pipelined 200 deep, best of 3")
        print(f"  no schedule: {plain:.2f} µs CPU per job; 1000 idle schedules: "
              f"{beside:.2f} ({beside / plain:.2f}x)")  # fmt: skip
        results[spec.name] = {"idle": quiet, "firing": fire, "addjob": [plain, beside]}
    cm.save_results(args.json, meta, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
