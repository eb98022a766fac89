#!/usr/bin/env python3
"""What a Prometheus scrape of ``/metrics`` costs a node with many queues.

Usage::

    python bench/metrics.py [--queues 10000] [--scrapes 20] [--limits 0,1000,10000]
                            [--pure] [--json FILE]

One node (the compiled build, or the pure one with ``--pure``) with its HTTP port,
``--queues`` queues holding one job each (queue i holds i % 7 + 1 jobs, so the longest
are not the first). For each ``metrics-queues-max`` in ``--limits`` (set with CONFIG
SET), ``--scrapes`` scrapes one after the other, while a prober thread PINGs the client
port every millisecond. The table gives, per limit: the scrape's time (median and max,
as the scraper sees it), the body's size, the series exported, and the PING round
trips during the scrapes (p50, p99, max) against the same prober with no scrape (the
first row, ``idle``). The node reads its state on the event loop and renders the text
in a worker thread (observe/metrics.py): the PING columns show what clients feel.

Dependencies: the standard library and ``hiredis``; Linux only (as run.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import sys
import time
import urllib.request
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as cm
from _common import BlockingClient, Server, encode


def probe(port: int, out: Connection, stop: Event) -> None:
    """PING round trips on the client port, one every millisecond, until ``stop``: sent
    back as (monotonic time, ms) pairs. A process of its own, so that the scraper's
    work does not delay it (the interpreter lock)."""
    samples: list[tuple[float, float]] = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while not stop.is_set():
            start = time.monotonic()
            s.sendall(b"PING\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                reply += s.recv(64)
            samples.append((start, (time.monotonic() - start) * 1000))
            time.sleep(0.001)
    out.send(samples)


def within(samples: list[tuple[float, float]], start: float, end: float) -> list[float]:
    return sorted(ms for t, ms in samples if start <= t <= end)


def scrape(url: str) -> tuple[float, bytes]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
    return (time.perf_counter() - start) * 1000, body


def fill(server: Server, queues: int) -> None:
    with BlockingClient(server.host, server.port) as c:
        requests = [
            encode("ADDJOB", f"queue:{i:06d}", "x", 0)
            for i in range(queues)
            for _ in range(i % 7 + 1)
        ]
        for start in range(0, len(requests), 1000):
            batch = requests[start : start + 1000]
            c.sock.sendall(b"".join(batch))
            for _ in batch:
                c.read_reply()


def row(name: str, pings: list[float], scrapes: list[float] | None = None,
        body: bytes = b"") -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {
        "limit": name,
        "ping_p50_ms": cm.percentile(pings, 50),
        "ping_p99_ms": cm.percentile(pings, 99),
        "ping_max_ms": pings[-1] if pings else 0.0,
        "pings": len(pings),
    }
    if scrapes:
        scrapes = sorted(scrapes)
        out.update(
            scrape_median_ms=cm.percentile(scrapes, 50),
            scrape_max_ms=scrapes[-1],
            bytes=len(body),
            series=sum(1 for line in body.splitlines() if line and not line.startswith(b"#")),
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--limits", default="0,1000,10000")
    parser.add_argument("--pure", action="store_true", help="the pure build")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cm.require_hiredis()
    header_lines, meta = cm.run_description("disquette /metrics scrape cost", sys.executable)
    http_port = cm.free_port(also_bus=False)
    spec = cm.disquette_spec(sys.executable, ["--http-port", str(http_port)], pure=args.pure)
    with Server(spec) as server:
        fill(server, args.queues)
        url = f"http://127.0.0.1:{http_port}/metrics"
        receiver, sender = multiprocessing.Pipe(duplex=False)
        stop = multiprocessing.Event()
        prober = multiprocessing.Process(target=probe, args=(server.port, sender, stop))
        prober.start()
        idle_start = time.monotonic()
        time.sleep(3.0)
        windows = [("idle", idle_start, time.monotonic(), [], b"")]
        for limit in args.limits.split(","):
            with server.client() as c:
                c.call("CONFIG", "SET", "metrics-queues-max", limit)
            scrape(url)  # warm
            start = time.monotonic()
            times = []
            body = b""
            for _ in range(args.scrapes):
                ms, body = scrape(url)
                times.append(ms)
            windows.append((limit, start, time.monotonic(), times, body))
        stop.set()
        samples = receiver.recv()
        prober.join()
    rows = [row(name, within(samples, a, b), times, body) for name, a, b, times, body in windows]
    print("\n".join(header_lines))
    build = "pure" if args.pure else "compiled"
    print(f"{build} build, {args.queues} queues, {args.scrapes} scrapes back to back per limit")
    print()
    header = ("metrics-queues-max", "scrape ms (median/max)", "bytes", "series",
              "PING p50 / p99 / max ms")  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        scrape_cell = (
            f"{r['scrape_median_ms']:.1f} / {r['scrape_max_ms']:.1f}" if "bytes" in r else "-"
        )
        print(
            f"| {r['limit']} | {scrape_cell} | {r.get('bytes', '-')} | {r.get('series', '-')} "
            f"| {r['ping_p50_ms']:.2f} / {r['ping_p99_ms']:.2f} / {r['ping_max_ms']:.2f} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"meta": meta, "rows": rows, "queues": args.queues}, indent=2)
        )


if __name__ == "__main__":
    main()
