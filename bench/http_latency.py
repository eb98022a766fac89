#!/usr/bin/env python3
"""What the HTTP port costs the client port: ADDJOB/GETJOB latency with and without it.

Usage::

    python bench/http_latency.py [--queues 10000] [--jobs 0] [--requests 3000] [--pure]

One server (the compiled build; ``--pure`` for the pure one) is loaded with a job in
each of ``--queues`` queues (and ``--jobs`` more jobs spread over them: ``--jobs
1000000`` for the 1M-job figure), then one connection times ``--requests`` pairs of
``ADDJOB lat <64 bytes> 0`` and ``GETJOB FROM lat`` (one round trip each) in four
settings, printed as p50/p99 in microseconds:

- ``no http``: the HTTP port off (http-port 0);
- ``http idle``: the HTTP port on, nobody asking (its 1 s history sampler runs);
- ``dashboard 1/s``: a poller asks ``/api/cluster`` and ``/api/queues`` once a second,
  as the dashboard does;
- ``dashboard 10/s``: the same poller ten times a second.

Then the API's own response times (p50/p99 of 30 requests each, ms) for
``/api/cluster``, ``/api/queues`` (by name, by length) and a queue's jobs. Nothing
here is asserted: figures belong in docs/operations.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as cm

BODY = b"x" * 64


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def load(server: cm.Server, queues: int, jobs: int) -> None:
    with server.client() as c:
        for start in range(0, queues, 1000):
            request = b"".join(
                cm.encode("ADDJOB", f"queue-{i:06d}", BODY, 0)
                for i in range(start, min(start + 1000, queues))
            )
            c.sock.sendall(request)
            for _ in range(min(1000, queues - start)):
                c.read_reply()
        for start in range(0, jobs, 1000):
            count = min(1000, jobs - start)
            request = b"".join(
                cm.encode("ADDJOB", f"queue-{(start + i) % queues:06d}", BODY, 0)
                for i in range(count)
            )
            c.sock.sendall(request)
            for _ in range(count):
                c.read_reply()


def client_latency(server: cm.Server, requests: int) -> tuple[float, float]:
    """p50 and p99 (µs) of an ADDJOB + GETJOB round trip pair."""
    samples = []
    with server.client() as c:
        for _ in range(requests):
            start = time.perf_counter()
            c.call("ADDJOB", "lat", BODY, 0)
            c.call("GETJOB", "NOHANG", "FROM", "lat")
            samples.append((time.perf_counter() - start) * 1e6)
    return percentile(samples, 0.5), percentile(samples, 0.99)


class Poller(threading.Thread):
    """A dashboard: /api/cluster and /api/queues ``rate`` times a second."""

    def __init__(self, base: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.period = 1 / rate
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            begin = time.monotonic()
            for path in ("/api/cluster", "/api/queues?limit=50"):
                with urllib.request.urlopen(self.base + path, timeout=30) as r:
                    r.read()
            self.stop.wait(max(0.0, self.period - (time.monotonic() - begin)))


def api_times(base: str, path: str, count: int = 30) -> tuple[float, float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        with urllib.request.urlopen(base + path, timeout=60) as r:
            r.read()
        samples.append((time.perf_counter() - start) * 1000)
    return percentile(samples, 0.5), percentile(samples, 0.99)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--pure", action="store_true")
    args = parser.parse_args()
    cm.require_hiredis()
    http_port = cm.free_port(also_bus=False)
    spec = cm.disquette_spec(sys.executable, ["--maxmemory", "8gb"], pure=args.pure)
    server = cm.Server(spec)
    server.start()
    rows = []
    try:
        started = time.monotonic()
        load(server, args.queues, args.jobs)
        print(f"loaded {args.queues} queues, {args.queues + args.jobs} jobs "
              f"in {time.monotonic() - started:.1f} s", flush=True)  # fmt: skip
        base = f"http://127.0.0.1:{http_port}"
        rows.append(("no http", *client_latency(server, args.requests)))
        with server.client() as c:
            c.call("CONFIG", "SET", "http-port", http_port)
        time.sleep(2)  # (the history sampler has run)
        rows.append(("http idle", *client_latency(server, args.requests)))
        for rate in (1, 10):
            poller = Poller(base, rate)
            poller.start()
            rows.append((f"dashboard {rate}/s", *client_latency(server, args.requests)))
            poller.stop.set()
            poller.join()
        print(f"\nclient port, ADDJOB + GETJOB round trips ({args.requests} each), µs")
        print(f"{'setting':<16}{'p50':>10}{'p99':>10}")
        for name, p50, p99 in rows:
            print(f"{name:<16}{p50:>10.0f}{p99:>10.0f}")
        print("\nAPI response times (30 requests each), ms")
        print(f"{'request':<34}{'p50':>10}{'p99':>10}")
        for path in ("/api/cluster", "/api/queues?limit=50", "/api/queues?sort=len&limit=50",
                     "/api/queues/queue-000001/jobs?limit=50"):  # fmt: skip
            p50, p99 = api_times(base, path)
            print(f"{path:<34}{p50:>10.1f}{p99:>10.1f}")
        print(f"\n{'pure' if args.pure else 'compiled'} build; "
              f"median of the pairs {statistics.median([r[1] for r in rows]):.0f} µs; "
              f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
