#!/usr/bin/env python3
"""A node's memory and latency while every job is acknowledged with a result.

Usage::

    python bench/outcome_soak.py [--seconds 60] [--result-ttl 5] [--result-bytes 100]
                                 [--batch 200] [--pure]

One connection loops: 200 ADDJOBs pipelined, ``GETJOB NOHANG COUNT 200``, one
``ACKJOB id RESULT r id RESULT r ...`` for the batch, a ``WAITJOB`` of one of its jobs
(answered from the kept outcome) and a ``CANCEL`` of a fresh job. With a short
``result-ttl`` the outcomes expire as fast as they are made, so the node's memory
must level off (it follows the outcomes kept, not the jobs done) and no loop may
stall while a second's worth of outcomes expires at once. Every ``--report``
seconds the table shows the jobs done per second, ``used_memory``, RSS, the
outcomes kept and the slowest loop. (Written after such a run found a stall: the
outcome table was a dict emptied from its front, which makes finding its oldest
entry walk every hole.)

Dependencies: the standard library and ``hiredis``; Linux only (RSS from /proc).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Server, disquette_spec, encode, proc_rss_bytes, run_description


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--result-ttl", type=int, default=5)
    parser.add_argument("--result-bytes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--report", type=float, default=10.0, help="seconds per table row")
    parser.add_argument("--pure", action="store_true", help="run the pure build")
    args = parser.parse_args()
    spec = disquette_spec(sys.executable, ["--result-ttl", str(args.result_ttl)], args.pure)
    lines, _ = run_description("disquette: memory and latency with results", sys.executable)
    print("\n".join(lines))
    result = b"r" * args.result_bytes
    add = encode("ADDJOB", "q", b"x" * 64, 0) * args.batch
    print(f"{'s':>5}{'jobs/s':>10}{'used_memory MB':>16}{'RSS MB':>8}{'kept':>10}"
          f"{'slowest loop ms':>17}")  # fmt: skip
    with Server(spec) as server, server.client() as client:
        start = last = time.perf_counter()
        done = done_at_last = 0
        slowest = 0.0
        while (now := time.perf_counter()) - start < args.seconds:
            client.sock.sendall(add)
            for _ in range(args.batch):
                client.read_reply()
            jobs = client.call("GETJOB", "NOHANG", "COUNT", args.batch, "FROM", "q") or []
            if jobs:
                client.call("ACKJOB", *[a for job in jobs for a in (job[1], "RESULT", result)])
                client.call("WAITJOB", jobs[0][1], "TIMEOUT", 60_000)
            client.call("CANCEL", client.call("ADDJOB", "other", "y", 0))
            done += len(jobs)
            slowest = max(slowest, time.perf_counter() - now)
            if now - last >= args.report:
                info = dict(
                    line.split(":", 1)
                    for section in ("memory", "extensions")
                    for line in client.call("INFO", section).decode().splitlines()
                    if ":" in line
                )  # fmt: skip
                rate = (done - done_at_last) / (now - last)
                print(f"{now - start:5.0f}{rate:>10,.0f}"
                      f"{int(info['used_memory']) / 2**20:>16.1f}"
                      f"{proc_rss_bytes(server.pid) / 2**20:>8.0f}"
                      f"{int(info['job_outcomes_kept']):>10,}{slowest * 1000:>17.1f}")  # fmt: skip
                last, done_at_last, slowest = now, done, 0.0
    return 0


if __name__ == "__main__":
    sys.exit(main())
