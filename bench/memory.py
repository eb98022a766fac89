#!/usr/bin/env python3
"""Memory per job and event-loop pauses of disquette (and other Disque servers).

Usage (see bench/README.md)::

    python bench/memory.py [--jobs 1000000] [--pipeline 16] [--idle 10]
                           [--disquette-python PY] [--other /path/to/disque-server]
                           [--redis [PATH]] [--json FILE]

For each server a fresh instance is started on a free loopback port. After it has been
idle for a moment its RSS is sampled, then ``--jobs`` jobs with ``--body-size`` byte bodies
are loaded over one connection with ``ADDJOB q <body> 0 REPLICATE 1`` (queued at once),
pipelined ``--pipeline`` deep with two batches in flight. RSS is sampled again right after
loading and after ``--idle`` seconds of idleness; bytes per job = (RSS after - RSS before)
/ jobs. ``QLEN q`` must equal ``--jobs`` at the end.

Meanwhile a separate probe process (real-time priority when permitted) sends ``PING``
every ``--probe-interval-ms`` on its own connection and records each round trip. The
maximum round trip while loading and while idle is the longest time the server did not
serve a client (event-loop pause: a slow command, a garbage-collector pass, a cron job
walking all jobs...). While loading, a round trip also includes waiting behind the
loader's pipelined batch that the server is processing, so ``--pipeline`` bounds the
baseline. Targets: < 700 bytes RSS per job, no pause > 10 ms.

``--redis`` adds redis-server loaded with ``RPUSH q <body>`` as a reference point for the
measuring method (not for the targets).

Dependencies: Python standard library and ``hiredis``. Linux only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import shlex
import signal
import socket
import sys
import time
import traceback
from array import array
from collections.abc import Sequence
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any

import _common as cm
from _common import encode, progress

RSS_TARGET = 700  # bytes per job
PAUSE_TARGET_MS = 10.0
PING = b"*1\r\n$4\r\nPING\r\n"


def _boost_priority() -> str:
    """Make the probe process win the CPU whenever it wakes up (best effort)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        return "SCHED_FIFO"
    except (OSError, AttributeError):
        pass
    try:
        os.nice(-10)
        return "nice -10"
    except OSError:
        return "normal"


def _probe_samples(stop: Any, parent: Any, timeout: float) -> tuple[array, array]:
    """Stop the probe and return its samples: start times and round trips (ns)."""
    stop.set()
    if not parent.poll(timeout):
        raise RuntimeError("probe did not report")
    msg, payload = parent.recv()
    if msg != "done":
        raise RuntimeError(f"probe failed:\n{payload}")
    starts, rtts = array("q"), array("q")
    starts.frombytes(payload[0])
    rtts.frombytes(payload[1])
    return starts, rtts


def _probe(host: str, port: int, interval_ns: int, stop: Event, pipe: Connection) -> None:
    """Probe process: PING every ``interval_ns``; send back (start times, round trips)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        prio = _boost_priority()
        s = socket.create_connection((host, port), timeout=60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        starts = array("q")
        rtts = array("q")
        mono = time.monotonic_ns
        next_t = mono()
        pipe.send(("ready", prio))
        while not stop.is_set():
            t0 = mono()
            s.sendall(PING)
            got = s.recv(64)
            while not got.endswith(b"\n"):
                more = s.recv(64)
                if not more:
                    raise ConnectionError("server closed the probe connection")
                got += more
            t1 = mono()
            if not got.startswith(b"+"):
                raise RuntimeError(f"unexpected PING reply {got!r}")
            starts.append(t0)
            rtts.append(t1 - t0)
            next_t += interval_ns
            d = next_t - mono()
            if d > 0:
                time.sleep(d / 1e9)
            else:
                next_t = mono()  # fell behind (a pause): do not burst to catch up
        s.close()
        pipe.send(("done", (starts.tobytes(), rtts.tobytes())))
    except BaseException:
        with contextlib.suppress(Exception):
            pipe.send(("error", traceback.format_exc()))


def _pause_stats(starts: array, rtts: array, t0: int, t1: int) -> dict[str, Any]:
    vals = sorted(r for s, r in zip(starts, rtts, strict=True) if t0 <= s < t1)
    if not vals:
        return {"samples": 0}
    return {
        "samples": len(vals),
        "p50_ms": cm.percentile(vals, 50) / 1e6,
        "p99_ms": cm.percentile(vals, 99) / 1e6,
        "p999_ms": cm.percentile(vals, 99.9) / 1e6,
        "max_ms": vals[-1] / 1e6,
        "over_10ms": sum(1 for v in vals if v > PAUSE_TARGET_MS * 1e6),
    }


class Probe:
    """The PING probe (:func:`_probe`) in a forked process every ``interval_ms``, ready."""

    def __init__(self, server: cm.Server, interval_ms: float) -> None:
        ctx = mp.get_context("fork")
        self.stop = ctx.Event()
        self.parent, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_probe,
            args=(server.host, server.port, int(interval_ms * 1e6), self.stop, child),
            daemon=True,
        )
        self.proc.start()
        child.close()
        if not self.parent.poll(30):
            raise RuntimeError("probe did not start")
        msg, self.priority = self.parent.recv()
        if msg != "ready":
            raise RuntimeError(f"probe failed:\n{self.priority}")
        self.starts: Any = None
        self.rtts: Any = None

    def finish(self, timeout: float = 60) -> tuple[array, array]:
        """Stop it: its samples, start times and round trips (ns; kept for :meth:`stats`)."""
        self.starts, self.rtts = _probe_samples(self.stop, self.parent, timeout)
        self.close()
        return self.starts, self.rtts

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self, t0: float, t1: float) -> dict[str, Any]:
        """The pauses seen between ``t0`` and ``t1`` (``time.monotonic()`` seconds)."""
        return _pause_stats(self.starts, self.rtts, int(t0 * 1e9), int(t1 * 1e9))


def _load(client: cm.BlockingClient, request: bytes, count: int, depth: int) -> int:
    """Pipelined load, two batches in flight; returns the number of error replies."""
    from hiredis import ReplyError

    sent = 0
    errors = 0
    inflight: list[int] = []
    while sent < count or inflight:
        while sent < count and len(inflight) < 2:
            n = min(depth, count - sent)
            client.sock.sendall(request * n)
            inflight.append(n)
            sent += n
        for _ in range(inflight.pop(0)):
            if isinstance(client.read_reply(), ReplyError):
                errors += 1
        if errors and errors == sent - sum(inflight):
            raise cm.ServerError("every reply so far is an error")
    return errors


def measure(spec: cm.ServerSpec, args: argparse.Namespace) -> dict[str, Any]:
    """Run the load + idle measurement against one server."""
    body = (b"0123456789abcdef" * (args.body_size // 16 + 1))[: args.body_size]
    if spec.family == "disque":
        request = encode("ADDJOB", "q", body, "0", "REPLICATE", "1")
        length_cmd: tuple[str, ...] = ("QLEN", "q")
    else:
        request = encode("RPUSH", "q", body)
        length_cmd = ("LLEN", "q")
    out: dict[str, Any] = {
        "server": spec.name,
        "family": spec.family,
        "argv": [*spec.argv, "--port", "N", *spec.extra],
    }
    server = cm.Server(spec)
    try:
        server.start()
        out["version"] = server.version()
        time.sleep(args.settle)
        rss0 = server.rss_bytes()
        with Probe(server, args.probe_interval_ms) as probe:
            out["probe_priority"] = probe.priority
            time.sleep(0.2)
            with server.client() as c:
                t_load0 = time.monotonic_ns()
                errors = _load(c, request, args.jobs, args.pipeline)
                t_load1 = time.monotonic_ns()
                rss_loaded = server.rss_bytes()
                progress(f"[{spec.name}] loaded {args.jobs:,} in {(t_load1 - t_load0) / 1e9:.1f}s")
                time.sleep(args.idle)
                t_idle1 = time.monotonic_ns()
                rss_idle = server.rss_bytes()
                length = c.call(*length_cmd)
            starts, rtts = probe.finish(30)
        out.update(
            {
                "jobs": args.jobs,
                "errors": errors,
                "queue_length": length,
                "load_seconds": (t_load1 - t_load0) / 1e9,
                "load_rate": args.jobs / ((t_load1 - t_load0) / 1e9),
                "rss_before": rss0,
                "rss_loaded": rss_loaded,
                "rss_idle": rss_idle,
                "bytes_per_job_loaded": (rss_loaded - rss0) / args.jobs,
                "bytes_per_job_idle": (rss_idle - rss0) / args.jobs,
                "pauses_loading": _pause_stats(starts, rtts, t_load0, t_load1),
                "pauses_idle": _pause_stats(starts, rtts, t_load1, t_idle1),
                "info_memory": {
                    k: v for k, v in server.info().items() if k.startswith("used_memory")
                },
            }
        )
    except Exception as e:
        out["failed"] = f"{type(e).__name__}: {e}"
    finally:
        server.stop()
    return out


def format_report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = []
    for r in results:
        name = f"{r['server']} {r.get('version', '')}".strip()
        if "failed" in r:
            lines.append(f"{name}: FAILED: {r['failed']}")
            continue
        disque = r["family"] == "disque"
        bpj = r["bytes_per_job_loaded"]
        verdict = ""
        if disque:
            verdict = "OK" if bpj < RSS_TARGET else "ABOVE TARGET"
            verdict = f"  (target < {RSS_TARGET}: {verdict})"
        lines.append(f"{name}")
        lines.append(
            f"  loaded {r['jobs']:,} in {r['load_seconds']:.1f}s ({r['load_rate']:,.0f}/s), "
            f"errors {r['errors']}, queue length {r['queue_length']}"
            + ("" if r["queue_length"] == r["jobs"] else "  (MISMATCH)")
        )
        lines.append(
            f"  RSS before {r['rss_before'] / 2**20:.1f} MiB, after load "
            f"{r['rss_loaded'] / 2**20:.1f} MiB, after idle {r['rss_idle'] / 2**20:.1f} MiB"
        )
        lines.append(
            f"  bytes/job: {bpj:.0f} after load, {r['bytes_per_job_idle']:.0f} after idle" + verdict
        )
        for phase in ("loading", "idle"):
            p = r[f"pauses_{phase}"]
            if not p.get("samples"):
                lines.append(f"  pauses while {phase}: no samples")
                continue
            v = ""
            if disque:
                ok = p["max_ms"] <= PAUSE_TARGET_MS
                v = f"  (target <= {PAUSE_TARGET_MS:g} ms: {'OK' if ok else 'ABOVE TARGET'})"
            lines.append(
                f"  PING round trip while {phase:<7}: max {p['max_ms']:.2f} ms, "
                f"p99.9 {p['p999_ms']:.2f}, p99 {p['p99_ms']:.2f}, p50 {p['p50_ms']:.3f} ms "
                f"({p['samples']} samples, {p['over_10ms']} > 10 ms){v}"
            )
        lines.append(f"  probe priority: {r['probe_priority']}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="RSS per job and event-loop pauses of disquette / Disque servers.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--jobs", type=int, default=1_000_000, help="jobs to load")
    ap.add_argument("--body-size", type=int, default=64, help="job body bytes")
    ap.add_argument("--pipeline", type=int, default=16, help="loader pipeline depth")
    ap.add_argument("--idle", type=float, default=10.0, help="idle seconds after loading")
    ap.add_argument("--settle", type=float, default=1.0, help="idle seconds before sampling")
    ap.add_argument("--probe-interval-ms", type=float, default=1.0, help="PING interval")
    ap.add_argument(
        "--disquette-python", default=sys.executable, help="interpreter running disquette"
    )
    ap.add_argument("--disquette-args", default="", help="extra directives for disquette")
    ap.add_argument("--no-disquette", action="store_true", help="do not measure disquette")
    ap.add_argument(
        "--pure",
        action="store_true",
        help="also measure disquette's pure build (DISQUETTE_PURE=1) as disquette-pure",
    )
    ap.add_argument(
        "--other", action="append", default=[], metavar="PATH", help="other Disque binary"
    )
    ap.add_argument("--other-args", default="", help="extra arguments for --other binaries")
    ap.add_argument(
        "--redis",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="also measure redis-server (RPUSH) as a reference; PATH defaults to PATH lookup",
    )
    ap.add_argument("--json", default=None, metavar="FILE", help="also save results as JSON")
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.pipeline < 1:
        ap.error("--jobs and --pipeline must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every configured server; exit status 0, 1 on a failure, 130 if interrupted."""
    cm.require_hiredis()
    args = parse_args(argv)
    specs: list[cm.ServerSpec] = []
    if not args.no_disquette:
        specs.append(cm.disquette_spec(args.disquette_python, shlex.split(args.disquette_args)))
    if args.pure:
        specs.append(
            cm.disquette_spec(args.disquette_python, shlex.split(args.disquette_args), pure=True)
        )
    for path in args.other:
        specs.append(cm.other_spec(os.path.abspath(path), shlex.split(args.other_args)))
    if args.redis is not None:
        path = cm.find_redis(args.redis or None)
        if path is None:
            sys.exit("memory: redis-server not found")
        specs.append(cm.redis_spec(path))
    if not specs:
        sys.exit("memory: no server to measure")

    header, meta = cm.run_description(
        "disquette memory / pause benchmark",
        None if args.no_disquette else args.disquette_python,
    )
    disq_interp = meta["disquette_interpreter"]
    print("\n".join(header))
    print(
        f"load:        {args.jobs:,} jobs x {args.body_size} bytes, pipeline {args.pipeline} "
        f"(2 batches in flight); PING probe every {args.probe_interval_ms:g} ms; "
        f"{args.idle:g}s idle afterwards",
        flush=True,
    )

    cm.interrupt_on_sigterm()
    results: list[dict[str, Any]] = []
    interrupted = False
    try:
        for spec in specs:
            progress(f"[{spec.name}] measuring")
            results.append(measure(spec, args))
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted", file=sys.stderr)
    for r in results:
        if r["server"] == "disquette" and r.get("version", "?") == "?" and disq_interp:
            r["version"] = (disq_interp.get("modules") or {}).get("disquette") or "?"
    print()
    print(format_report(results, args))
    if args.json:
        doc = {
            **meta,
            "settings": {
                k: getattr(args, k)
                for k in ("jobs", "body_size", "pipeline", "idle", "probe_interval_ms")
            },
            "targets": {"bytes_per_job": RSS_TARGET, "max_pause_ms": PAUSE_TARGET_MS},
            "results": results,
            "interrupted": interrupted,
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print(f"\nresults saved to {args.json}")
    if interrupted:
        return 130
    return 1 if any("failed" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
