#!/usr/bin/env python3
"""Flow to disk: a backlog many times larger than memory, and what spilling costs.

Usage (see bench/README.md)::

    .venv/bin/python bench/flow_to_disk.py [--jobs 10000000] [--body 256] [--maxmemory 256mb]
                                           [--level 60%] [--measure-jobs 100000] [--repeat 3]
                                           [--batch 200] [--count 500] [--appendonly]
                                           [--only 1,2,...] [--server PATH] [--pure] [--json FILE]

Every part starts fresh servers (free loopback ports, a temporary directory each, so
the spill log is in it; ``--maxmemory``, ``--flow-to-disk yes``, ``--flow-to-disk-level
--level``, ``--latency-monitor-threshold 5``; the compiled build when it is built,
``--pure`` the pure one), drives them over one blocking connection (pipelined
``--batch`` deep, two batches in flight) and stops them. Job bodies are ``--body``
bytes: the job's sequence number in 16 digits, then a pattern that depends on it;
every body taken back is compared byte for byte with the one sent, and its sequence
number with the next one expected.

1. **Backlog**: ``--jobs`` jobs (default 10,000,000: ~40x ``--maxmemory`` 256mb,
   ~4 GB of spill log) are added to one queue, then drained with ``GETJOB NOHANG COUNT
   --count`` + one ``ACKJOB`` of the IDs taken (sent with the next GETJOB). Reported:
   fill and drain rates, RSS (``/proc``, sampled every 0.25 s: the peak during the
   fill and drain, at the end of each), ``INFO memory`` used_memory and ``INFO
   flowtodisk`` (jobs in memory and on disk, bytes, spill_index_bytes, read-ahead)
   after the fill and after the drain, and the check of every body and of the order.
   Target: the peak RSS stays under maxmemory plus spill_index_bytes.
2. **Index cost per spilled job**, from the same fill: until the first job spills the
   fill goes 1,000 jobs at a time with ``QSTAT`` between, and the RSS after the last
   step with nothing on disk is the node "near its level before spilling"; then
   (RSS at the end of the fill - that RSS) / jobs_on_disk, and spill_index_bytes /
   jobs_on_disk. Target: <= 64 bytes of RSS per job on disk.
3. **ADDJOB while spilling vs into memory**: fresh nodes with the same settings, one
   empty (``--measure-jobs`` jobs fit under its level: nothing spills), one filled
   until jobs spill (every job added past the level makes room by spilling); the same
   number of pipelined ADDJOBs into each, ``--repeat`` times interleaved, the best
   run by server CPU. jobs/s and server CPU µs per job (the steadier figure on a
   shared machine). Target (issue 37): while spilling >= 0.6x into memory.
4. **Draining from disk vs from memory**: ``--measure-jobs`` jobs in queue ``q``; on
   one node they stay in memory, on the other a ballast queue first fills memory to
   the level, then ``q``'s jobs go in, all but ``q``'s head to disk (more ballast
   pushes out the rest, for a server that does not spill arrivals); then ``q`` is
   drained (GETJOB COUNT + ACKJOB, bodies and order checked). Target (issue 37):
   from disk >= 0.6x from memory.
5. **Event-loop pauses**: during part 1 a separate process (bench/memory.py's probe)
   sends ``PING`` every ``--probe-interval-ms`` (5) on its own connection; max, p99.9
   and p99 of the round trips during the fill and the drain, and the server's
   ``LATENCY LATEST`` (events of 5 ms or more). A round trip includes waiting behind
   the batch the server is working on (``--batch`` ADDJOBs, a GETJOB of ``--count``).
   Target (issue 37): none over 20 ms. ``--realtime`` runs the server SCHED_FIFO, so
   that on a machine other work keeps busy the round trips show the server's own
   pauses rather than its waits for a CPU. But a SCHED_FIFO server busy for most of a
   second (the drain, on an idle machine) meets the kernel's RT throttling
   (``/proc/sys/kernel/sched_rt_runtime_us``: 950 ms a second; ``sched: RT throttling
   activated`` in dmesg), which stops it for up to the 50 ms left: round trips and
   LATENCY events of 40-55 ms in every kind of event at once are that, not the server.
   On an idle machine, run without it.
6. **Feature on, below the level**: cycles of ``--batch`` pipelined ADDJOBs, GETJOB
   COUNT and ACKJOB (memory stays near empty) on a node with ``flow-to-disk no`` and
   one with ``yes``, ``--repeat`` times interleaved; best by server CPU. Target: no
   measurable cost (ratio ~1.0).
7. **The AOF as the store** (``--appendonly``): part 1 again with ``appendonly yes``
   (``appendfsync everysec``, ``--aof-jobs`` jobs): a queued job spilled right after
   its ``LOADJOB`` record was written is read back from the AOF, so INFO flowtodisk
   ``disk_used`` (the spill log's files) stays far below ``bytes_on_disk`` (live
   records, both stores).

``--only 1,4`` runs those parts (1, 2 and 5 share one run; ``--only 2`` skips its
drain; 7 needs ``--appendonly`` or ``--only 7``). ``--server PATH`` starts ``PATH
--port N <directives>`` instead of disquette (another checkout's
``.venv/bin/disquette-server``, an installed one); an original disque-server has no
flow-to-disk and stops at start-up on the ``flow-to-disk`` directives (``FATAL CONFIG
FILE ERROR``): its behaviour at maxmemory is soak.py's fill-oom scenario, refusing
jobs at 75 %.

Dependencies: the standard library and ``hiredis``; Linux only (/proc, fork).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as cm
from _common import encode, progress
from memory import Probe

try:
    from hiredis import ReplyError
except ImportError:  # pragma: no cover - cm.require_hiredis() explains
    ReplyError = None  # type: ignore[assignment,misc]

MB = 1 << 20
QUEUE = b"q"
BALLAST = b"ballast"
SEQ_DIGITS = 16
PATTERN = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345678"  # 61 bytes
STEP = 1000  # jobs per step while looking for the level
WINDOW = 256  # jobs a queue keeps in memory at its head (core/spill.py)
LATENCY_THRESHOLD_MS = 5
PAUSE_TARGET_MS = 20.0
INDEX_TARGET = 64  # bytes of RSS per job on disk
RATIO_TARGET = 0.6


# =========================================================================== jobs


class Bodies:
    """Job bodies: the sequence number in 16 digits, then a pattern rotated by it."""

    def __init__(self, size: int) -> None:
        if size < SEQ_DIGITS:
            raise ValueError(f"--body must be at least {SEQ_DIGITS} bytes")
        rest = size - SEQ_DIGITS
        base = PATTERN * (rest // len(PATTERN) + 2)
        self.pads = [base[k : k + rest] for k in range(len(PATTERN))]
        self.size = size

    def body(self, seq: int) -> bytes:
        return b"%016d" % seq + self.pads[seq % len(self.pads)]

    def addjobs(self, queue: bytes, start: int, count: int) -> bytes:
        """``count`` pipelined ``ADDJOB queue <body> 0``, sequence numbers from ``start``."""
        head = b"*4\r\n$6\r\nADDJOB\r\n$%d\r\n%s\r\n$%d\r\n" % (len(queue), queue, self.size)
        tail = b"\r\n$1\r\n0\r\n"
        pads = self.pads
        m = len(pads)
        return b"".join(
            [head + b"%016d" % i + pads[i % m] + tail for i in range(start, start + count)]
        )

    def chunks(
        self, queue: bytes, start: int, count: int, batch: int
    ) -> Iterator[tuple[bytes, int]]:
        end = start + count
        while start < end:
            n = min(batch, end - start)
            yield self.addjobs(queue, start, n), n
            start += n


class Checker:
    """Every body taken back: byte-identical to the one sent, in sequence order, once."""

    def __init__(self, bodies: Bodies, count: int, first: int = 0) -> None:
        self.bodies = bodies
        self.first = first
        self.count = count
        self.expected = first
        self.seen = bytearray(count)
        self.checked = 0
        self.corrupt = 0
        self.out_of_order = 0
        self.duplicates = 0
        self.examples: list[str] = []

    def check(self, body: bytes) -> None:
        self.checked += 1
        exp = self.expected
        if body == self.bodies.body(exp):
            seq = exp
        else:
            try:
                seq = int(body[:SEQ_DIGITS])
            except ValueError:
                seq = -1
            if not self.first <= seq < self.first + self.count or body != self.bodies.body(seq):
                self.corrupt += 1
                self._example(f"job #{self.checked}: a body that was never sent: {body[:40]!r}...")
                return
            self.out_of_order += 1
            self._example(f"job #{self.checked}: sequence {seq}, expected {exp}")
        i = seq - self.first
        if self.seen[i]:
            self.duplicates += 1
        self.seen[i] = 1
        self.expected = seq + 1

    def _example(self, text: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(text)

    def summary(self) -> dict[str, Any]:
        missing = self.count - self.seen.count(1)
        return {
            "checked": self.checked,
            "corrupt": self.corrupt,
            "out_of_order": self.out_of_order,
            "duplicates": self.duplicates,
            "missing": missing,
            "ok": not (self.corrupt or self.out_of_order or self.duplicates or missing),
            "examples": self.examples,
        }


# =========================================================================== load


class LoadError(RuntimeError):
    pass


def send_pipelined(
    client: cm.BlockingClient,
    chunks: Iterable[tuple[bytes, int]],
    on_done: Callable[[int], object] | None = None,
) -> int:
    """Send each chunk (requests, how many), two chunks in flight; the replies read.
    Raises :class:`LoadError` at the first error reply."""
    inflight: deque[int] = deque()
    it = iter(chunks)
    more = True
    total = 0
    while True:
        while more and len(inflight) < 2:
            nxt = next(it, None)
            if nxt is None:
                more = False
                break
            client.sock.sendall(nxt[0])
            inflight.append(nxt[1])
        if not inflight:
            return total
        n = inflight.popleft()
        read = client.read_reply
        for k in range(n):
            r = read()
            if isinstance(r, ReplyError):
                raise LoadError(f"error reply after {total + k:,} replies: {r}")
        total += n
        if on_done is not None:
            on_done(total)


def drain(
    client: cm.BlockingClient, queue: bytes, count: int, check: Callable[[bytes], None]
) -> int:
    """GETJOB NOHANG COUNT ``count`` + ACKJOB of the IDs (sent with the next GETJOB)
    until the queue answers none; every body goes to ``check``. Jobs taken."""
    get = encode("GETJOB", "NOHANG", "COUNT", count, "FROM", queue)
    client.sock.sendall(get)
    taken = 0
    read = client.read_reply
    while True:
        jobs = read()
        if isinstance(jobs, ReplyError):
            raise LoadError(f"GETJOB after {taken:,} jobs: {jobs}")
        if not jobs:
            return taken
        ids = []
        for job in jobs:
            ids.append(job[1])
            check(job[2])
        taken += len(jobs)
        client.sock.sendall(encode("ACKJOB", *ids) + get)
        acked = read()
        if acked != len(ids):
            raise LoadError(f"ACKJOB of {len(ids)} IDs answered {acked!r}")


def section(client: cm.BlockingClient, name: str) -> dict[str, str]:
    text = client.call("INFO", name)
    text = text.decode() if isinstance(text, bytes) else str(text)
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def ftd(client: cm.BlockingClient) -> dict[str, int | str]:
    """INFO flowtodisk, numbers as ints."""
    out: dict[str, int | str] = {}
    for k, v in section(client, "flowtodisk").items():
        try:
            out[k] = int(v)
        except ValueError:
            out[k] = v
    return out


def qstat(client: cm.BlockingClient, queue: bytes) -> dict[str, Any]:
    r = client.call("QSTAT", queue)
    if not r:
        return {}
    return {r[i].decode(): r[i + 1] for i in range(0, len(r), 2)}


def on_disk(client: cm.BlockingClient, queue: bytes) -> int:
    return int(qstat(client, queue).get("jobs-on-disk", 0))


def latency_latest(client: cm.BlockingClient) -> dict[str, int]:
    """LATENCY LATEST: each event's worst ms (events of the threshold or more)."""
    try:
        rows = client.call("LATENCY", "LATEST")
    except cm.ServerError:
        return {}
    return {row[0].decode(): int(row[3]) for row in rows or []}


def fill_to_level(
    client: cm.BlockingClient,
    bodies: Bodies,
    queue: bytes,
    start: int,
    limit: int,
    server: cm.Server,
) -> tuple[int, dict[str, int] | None]:
    """Add jobs ``STEP`` at a time until one spills (or ``limit`` jobs); return how many
    were added and the node after the last step with nothing on disk (RSS, used_memory,
    jobs), or None when the very first step spilled."""
    added = 0
    before: dict[str, int] | None = None
    while added < limit:
        n = min(STEP, limit - added)
        send_pipelined(client, [(bodies.addjobs(queue, start + added, n), n)])
        added += n
        if on_disk(client, queue):
            break
        before = {
            "jobs": added,
            "rss": server.rss_bytes(),
            "used_memory": int(section(client, "memory")["used_memory"]),
        }
    return added, before


# =========================================================================== monitors


class RssTrace(cm.Sampler):
    """A thread sampling one process's RSS every ``interval`` s: (monotonic, bytes)."""

    join_timeout = 5

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        super().__init__("rss")
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[float, int]] = []

    def _sample(self) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError, IndexError):
                self.samples.append((time.monotonic(), cm.proc_rss_bytes(self.pid)))
            if self._stop.wait(self.interval):
                return

    def peak(self, t0: float, t1: float) -> int:
        return max((rss for t, rss in self.samples if t0 <= t <= t1), default=0)


# =========================================================================== servers


def server_spec(args: argparse.Namespace, *extra: str, flow: bool = True) -> cm.ServerSpec:
    directives = [
        "--maxmemory",
        args.maxmemory,
        "--flow-to-disk",
        "yes" if flow else "no",
        "--flow-to-disk-level",
        args.level,
        "--latency-monitor-threshold",
        str(LATENCY_THRESHOLD_MS),
        *extra,
    ]
    if args.server:
        return cm.other_spec(os.path.abspath(args.server), directives)
    return cm.disquette_spec(sys.executable, directives, pure=args.pure)


def realtime(server: cm.Server, wanted: bool) -> str:
    """With ``--realtime``, the server runs SCHED_FIFO (below the probe's priority): on a
    machine other work keeps busy, its PING round trips then show its own pauses, not
    the time it waited for a CPU."""
    if not wanted:
        return "normal"
    try:
        os.sched_setscheduler(server.pid, os.SCHED_FIFO, os.sched_param(5))
    except (OSError, AttributeError) as e:
        return f"normal (SCHED_FIFO refused: {e})"
    return "SCHED_FIFO"


def level_bytes(args: argparse.Namespace) -> int:
    maxmemory = cm.parse_memory(args.maxmemory)
    if args.level.endswith("%"):
        return maxmemory * int(args.level[:-1]) // 100
    return cm.parse_memory(args.level)


def measure_jobs(args: argparse.Namespace) -> int:
    """``--measure-jobs``, at most what fits in half the level (~500 bytes a job + body)."""
    fits = level_bytes(args) // 2 // (500 + args.body)
    return max(1000, min(args.measure_jobs, fits))


# =========================================================================== part 1, 2, 5, 7


def backlog(args: argparse.Namespace, appendonly: bool, jobs: int, drained: bool) -> dict[str, Any]:
    """Fill one queue with ``jobs`` jobs (the level found step by step), then drain it."""
    name = "aof" if appendonly else "backlog"
    extra = ("--appendonly", "yes", "--appendfsync", "everysec") if appendonly else ()
    bodies = Bodies(args.body)
    out: dict[str, Any] = {"jobs": jobs, "appendonly": appendonly}
    server = cm.Server(server_spec(args, *extra))
    probe: Probe | None = None
    try:
        server.start()
        out["argv"] = [*server.spec.argv, "--port", "N", *server.spec.extra]
        out["server_priority"] = realtime(server, args.realtime)
        time.sleep(1)
        out["rss_start"] = server.rss_bytes()
        probe = Probe(server, args.probe_interval_ms)
        out["probe_priority"] = probe.priority
        with RssTrace(server.pid) as trace, server.client() as c:
            t_fill0 = time.monotonic()
            added, before = fill_to_level(c, bodies, QUEUE, 0, jobs, server)
            t_level = time.monotonic()
            out["level_found_after"] = added
            out["before_spilling"] = before
            last = [t_level, added]

            def report(done: int) -> None:
                now = time.monotonic()
                if now - last[0] >= 10:
                    rate = (added + done - last[1]) / (now - last[0])
                    last[:] = [now, added + done]
                    progress(
                        f"[{name}] {added + done:,} / {jobs:,} added, {rate:,.0f}/s, "
                        f"RSS {server.rss_bytes() / MB:,.0f} MiB"
                    )

            send_pipelined(c, bodies.chunks(QUEUE, added, jobs - added, args.batch), report)
            t_fill1 = time.monotonic()
            out["rss_fill_end"] = server.rss_bytes()
            out["fill_seconds"] = t_fill1 - t_fill0
            out["fill_rate"] = jobs / (t_fill1 - t_fill0)
            out["fill_rate_past_level"] = (jobs - added) / max(t_fill1 - t_level, 1e-9)
            out["rss_fill_peak"] = max(trace.peak(t_fill0, t_fill1), out["rss_fill_end"])
            out["latency_fill"] = latency_latest(c)
            c.call("LATENCY", "RESET")
            out["after_fill"] = ftd(c)
            out["used_memory_fill_end"] = int(section(c, "memory")["used_memory"])
            out["qlen_fill_end"] = c.call("QLEN", QUEUE)
            if appendonly:
                out["aof_after_fill"] = int(section(c, "persistence").get("aof_current_size", 0))
            progress(
                f"[{name}] filled {jobs:,} in {out['fill_seconds']:.1f}s, "
                f"{out['after_fill']['jobs_on_disk']:,} on disk, "
                f"RSS {out['rss_fill_end'] / MB:,.0f} MiB"
            )
            if drained:
                checker = Checker(bodies, jobs)
                t_drain0 = time.monotonic()
                last[:] = [t_drain0, 0]
                taken = drain(c, QUEUE, args.count, checker.check)
                t_drain1 = time.monotonic()
                out["taken"] = taken
                out["drain_seconds"] = t_drain1 - t_drain0
                out["drain_rate"] = taken / (t_drain1 - t_drain0)
                out["rss_drain_end"] = server.rss_bytes()
                out["rss_drain_peak"] = trace.peak(t_drain0, t_drain1)
                out["check"] = checker.summary()
                out["latency_drain"] = latency_latest(c)
                out["after_drain"] = ftd(c)
                out["used_memory_drain_end"] = int(section(c, "memory")["used_memory"])
                out["qlen_drain_end"] = c.call("QLEN", QUEUE)
                progress(f"[{name}] drained {taken:,} in {out['drain_seconds']:.1f}s")
        probe.finish()
        out["pauses_fill"] = probe.stats(t_fill0, t_fill1)
        if drained:
            out["pauses_drain"] = probe.stats(t_drain0, t_drain1)
        out["rss_samples"] = [(round(t - t_fill0, 2), rss) for t, rss in trace.samples]
    except (LoadError, cm.ServerError, cm.ServerStartError, OSError, RuntimeError) as e:
        out["failed"] = f"{type(e).__name__}: {e}"
        out["log_tail"] = server.log_tail()
    finally:
        if probe is not None:
            probe.close()
        server.stop()
    return out


# =========================================================================== part 3


def add_run(args: argparse.Namespace, spilling: bool, count: int) -> dict[str, Any]:
    bodies = Bodies(args.body)
    with cm.Server(server_spec(args)) as server, server.client() as c:
        start = 0
        if spilling:
            start, _ = fill_to_level(c, bodies, QUEUE, 0, 50 * count, server)
            if not on_disk(c, QUEUE):
                raise LoadError("nothing spilled while filling to the level")
        spilled0 = int(ftd(c)["jobs_spilled"])
        cpu0, t0 = server.cpu_seconds(), time.perf_counter()
        send_pipelined(c, bodies.chunks(QUEUE, start, count, args.batch))
        wall, cpu = time.perf_counter() - t0, server.cpu_seconds() - cpu0
        spilled = int(ftd(c)["jobs_spilled"]) - spilled0
    return {
        "jobs_per_s": count / wall,
        "cpu_us": cpu / count * 1e6,
        "spilled": spilled,
        "prefill": start,
    }


# =========================================================================== part 4


def drain_run(args: argparse.Namespace, from_disk: bool, count: int) -> dict[str, Any]:
    bodies = Bodies(args.body)
    with cm.Server(server_spec(args)) as server, server.client() as c:
        ballast = 0
        limit = 20 * count + level_bytes(args) // 200
        if from_disk:
            # Memory at the level first, then q: past the level, a run of ADDJOBs writes
            # all but q's head straight to the spill log (more ballast spills the rest).
            ballast, _ = fill_to_level(c, bodies, BALLAST, 0, limit, server)
        send_pipelined(c, bodies.chunks(QUEUE, 0, count, args.batch))
        if from_disk:
            want = count - 4 * WINDOW  # (its head, and what the clients' buffers left room for)
            while on_disk(c, QUEUE) < want:
                if ballast >= limit:
                    raise LoadError(f"{ballast:,} ballast jobs and q still in memory")
                send_pipelined(c, [(bodies.addjobs(BALLAST, ballast, STEP), STEP)])
                ballast += STEP
        before = on_disk(c, QUEUE)
        loaded0 = int(ftd(c)["jobs_loaded"])
        checker = Checker(bodies, count)
        cpu0, t0 = server.cpu_seconds(), time.perf_counter()
        taken = drain(c, QUEUE, args.count, checker.check)
        wall, cpu = time.perf_counter() - t0, server.cpu_seconds() - cpu0
        info = ftd(c)
    return {
        "jobs_per_s": taken / wall,
        "cpu_us": cpu / max(taken, 1) * 1e6,
        "on_disk_before": before,
        "loaded": int(info["jobs_loaded"]) - loaded0,
        "ballast": ballast,
        "readahead_hits": info["readahead_hits"],
        "readahead_misses": info["readahead_misses"],
        "check": checker.summary(),
    }


# =========================================================================== part 6


def cycle_run(args: argparse.Namespace, flow: bool, count: int) -> dict[str, Any]:
    """Cycles of --batch ADDJOBs, GETJOB COUNT --batch, ACKJOB: memory stays near empty."""
    bodies = Bodies(args.body)
    checker = Checker(bodies, count + count // 10)

    def cycles(c: cm.BlockingClient, start: int, n: int) -> None:
        end = start + n
        while start < end:
            k = min(args.batch, end - start)
            send_pipelined(c, [(bodies.addjobs(QUEUE, start, k), k)])
            jobs = c.call("GETJOB", "NOHANG", "COUNT", k, "FROM", QUEUE)
            ids = [job[1] for job in jobs]
            for job in jobs:
                checker.check(job[2])
            if c.call("ACKJOB", *ids) != k:
                raise LoadError("ACKJOB did not acknowledge every job")
            start += k

    with cm.Server(server_spec(args, flow=flow)) as server, server.client() as c:
        cycles(c, 0, count // 10)  # warm-up
        cpu0, t0 = server.cpu_seconds(), time.perf_counter()
        cycles(c, count // 10, count)
        wall, cpu = time.perf_counter() - t0, server.cpu_seconds() - cpu0
        info = ftd(c)
    if not checker.summary()["ok"]:
        raise LoadError(f"cycle bodies: {checker.summary()}")
    return {
        "jobs_per_s": count / wall,
        "cpu_us": cpu / count * 1e6,
        "jobs_on_disk": info["jobs_on_disk"],
        "jobs_spilled": info["jobs_spilled"],
    }


def interleaved(
    args: argparse.Namespace, label: str, runs: dict[str, Callable[[], dict[str, Any]]]
) -> dict[str, Any]:
    """Each run ``--repeat`` times, interleaved (the order alternating); the best of each
    by server CPU per job, and every run."""
    every: dict[str, list[dict[str, Any]]] = {k: [] for k in runs}
    names = list(runs)
    for r in range(args.repeat):
        for name in names if r % 2 == 0 else reversed(names):
            result = runs[name]()
            every[name].append(result)
            progress(
                f"[{label}] {name} #{r + 1}: {result['jobs_per_s']:,.0f} jobs/s, "
                f"{result['cpu_us']:.2f} µs CPU/job"
            )
    best = {k: min(v, key=lambda x: x["cpu_us"]) for k, v in every.items()}
    fastest = {k: max(x["jobs_per_s"] for x in v) for k, v in every.items()}
    return {"best": best, "fastest": fastest, "runs": every}


# =========================================================================== report


def mib(n: float) -> str:
    return f"{n / MB:,.1f} MiB"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


class Table:
    def __init__(self, title: str) -> None:
        self.lines = ["", title]

    def row(self, label: str, value: str, note: str = "") -> None:
        self.lines.append(f"  {label:<42} {value:<28} {note}".rstrip())

    def text(self) -> str:
        return "\n".join(self.lines)


def pause_text(p: dict[str, Any]) -> str:
    if not p or not p.get("samples"):
        return "no samples"
    return (
        f"max {p['max_ms']:.1f} ms, p99.9 {p['p999_ms']:.1f}, p99 {p['p99_ms']:.1f}, "
        f"p50 {p['p50_ms']:.2f} ({p['samples']:,} PINGs, {p['over_10ms']} > 10 ms)"
    )


def report_backlog(
    r: dict[str, Any],
    args: argparse.Namespace,
    parts: set[int],
    title: str,
    summary: list[tuple[str, str, str, bool | None]],
) -> str:
    t = Table(title)
    label = "AOF backlog" if r["appendonly"] else "backlog"
    if "failed" in r:
        t.row("FAILED", r["failed"])
        t.lines.append(r.get("log_tail", ""))
        return t.text()
    maxmemory = cm.parse_memory(args.maxmemory)
    a = r["after_fill"]
    index = int(a["spill_index_bytes"])
    t.row(
        "fill",
        f"{r['fill_seconds']:,.1f} s",
        f"{r['fill_rate']:,.0f} jobs/s ({r['fill_rate_past_level']:,.0f}/s past the level)",
    )
    t.row("first job spilled after", f"{r['level_found_after']:,} jobs")
    t.row("RSS at start", mib(r["rss_start"]))
    if r["before_spilling"]:
        b = r["before_spilling"]
        t.row(
            "RSS near the level, before spilling",
            mib(b["rss"]),
            f"{b['jobs']:,} jobs, used_memory {mib(b['used_memory'])}",
        )
    t.row(
        "RSS peak during the fill",
        mib(r["rss_fill_peak"]),
        f"{mib(r['rss_fill_peak'] - r['rss_start'])} above the start",
    )
    t.row("RSS at the end of the fill", mib(r["rss_fill_end"]))
    t.row(
        "used_memory at the end of the fill",
        mib(r["used_memory_fill_end"]),
        f"level {mib(level_bytes(args))}",
    )
    t.row(
        "jobs in memory / on disk",
        f"{a['jobs_in_memory']:,} / {a['jobs_on_disk']:,}",
        f"QLEN {r['qlen_fill_end']:,}",
    )
    t.row(
        "bytes_on_disk / disk_used",
        f"{mib(a['bytes_on_disk'])} / {mib(a['disk_used'])}",
        f"{a['spill_segments']} segments",
    )
    if r["appendonly"]:
        t.row("AOF size after the fill", mib(r["aof_after_fill"]))
        in_aof = int(a["bytes_on_disk"]) - int(a["disk_used"])
        t.row(
            "records read back from the AOF (at least)",
            mib(max(in_aof, 0)),
            f"{max(in_aof, 0) / max(int(a['bytes_on_disk']), 1):.0%} of bytes_on_disk",
        )
    t.row(
        "spill_index_bytes",
        mib(index),
        f"{index / max(int(a['jobs_on_disk']), 1):.1f} bytes per job on disk",
    )
    bound = maxmemory + index
    ok_rss = r["rss_fill_peak"] <= bound
    t.row(
        "RSS peak vs maxmemory + index",
        f"{mib(r['rss_fill_peak'])} vs {mib(bound)}",
        verdict(ok_rss),
    )
    if 1 in parts:
        summary.append(
            (
                "1",
                f"{label}: peak RSS <= maxmemory + index",
                f"{mib(r['rss_fill_peak'])} <= {mib(bound)}",
                ok_rss,
            )
        )
    if 2 in parts and not r["appendonly"] and r["before_spilling"]:
        per_job = (r["rss_fill_end"] - r["before_spilling"]["rss"]) / max(int(a["jobs_on_disk"]), 1)
        t.row(
            "index cost: RSS per job on disk",
            f"{per_job:.1f} bytes",
            f"target <= {INDEX_TARGET}: {verdict(per_job <= INDEX_TARGET)}",
        )
        summary.append(
            (
                "2",
                "RSS per job on disk <= 64 bytes",
                f"{per_job:.1f} bytes (index {index / max(int(a['jobs_on_disk']), 1):.1f})",
                per_job <= INDEX_TARGET,
            )
        )
    if "drain_seconds" in r:
        d = r["after_drain"]
        ck = r["check"]
        t.row("drain", f"{r['drain_seconds']:,.1f} s", f"{r['drain_rate']:,.0f} jobs/s")
        t.row(
            "RSS peak during the drain / at its end",
            f"{mib(r['rss_drain_peak'])} / {mib(r['rss_drain_end'])}",
        )
        t.row(
            "jobs taken / checked",
            f"{r['taken']:,} / {ck['checked']:,}",
            "every body byte-identical, in order, once"
            if ck["ok"]
            else f"corrupt {ck['corrupt']}, out of order {ck['out_of_order']}, duplicates "
            f"{ck['duplicates']}, missing {ck['missing']}",
        )
        for example in ck["examples"]:
            t.row("", example)
        t.row(
            "after the drain: in memory / on disk",
            f"{d['jobs_in_memory']:,} / {d['jobs_on_disk']:,}",
            f"QLEN {r['qlen_drain_end']}, disk_used {mib(d['disk_used'])}",
        )
        t.row(
            "read-ahead hits / misses / batches",
            f"{d['readahead_hits']:,} / {d['readahead_misses']:,} / {d['readahead_batches']:,}",
            f"read errors {d['spill_read_errors']}",
        )
        if 1 in parts:
            summary.append(
                (
                    "1",
                    f"{label}: drained byte-identical, in order",
                    f"{ck['checked']:,} of {r['jobs']:,} checked",
                    ck["ok"],
                )
            )
    t.row("PING round trips, fill", pause_text(r["pauses_fill"]))
    if "pauses_drain" in r:
        t.row("PING round trips, drain", pause_text(r["pauses_drain"]))
    t.row("LATENCY LATEST (>= 5 ms), fill", _latency_text(r["latency_fill"]))
    if "latency_drain" in r:
        t.row("LATENCY LATEST (>= 5 ms), drain", _latency_text(r["latency_drain"]))
    t.row("probe priority", r["probe_priority"])
    t.row("server priority", r.get("server_priority", "normal"))
    if 5 in parts and not r["appendonly"]:
        worst = max(r["pauses_fill"].get("max_ms", 0), r.get("pauses_drain", {}).get("max_ms", 0))
        summary.append(
            (
                "5",
                f"no event-loop pause > {PAUSE_TARGET_MS:.0f} ms (PING max, fill and drain)",
                f"{worst:.1f} ms",
                worst <= PAUSE_TARGET_MS,
            )
        )
    if r["appendonly"]:
        in_aof = int(a["bytes_on_disk"]) - int(a["disk_used"])
        summary.append(
            (
                "7",
                "AOF as the store: spill log not written for queued jobs",
                f"disk_used {mib(a['disk_used'])} of bytes_on_disk {mib(a['bytes_on_disk'])}",
                in_aof > int(a["disk_used"]),
            )
        )
    return t.text()


def _latency_text(events: dict[str, int]) -> str:
    return ", ".join(f"{k} {v} ms" for k, v in sorted(events.items())) or "none"


def report_pair(
    r: dict[str, Any],
    title: str,
    base: str,
    other: str,
    number: str,
    target: str,
    summary: list[tuple[str, str, str, bool | None]],
    goal: float | None,
) -> str:
    t = Table(title)
    t.lines.append(f"  {'':<42} {'jobs/s (best)':>14} {'µs CPU/job':>12} {'jobs/s (that run)':>18}")
    for name in (base, other):
        b = r["best"][name]
        t.lines.append(
            f"  {name:<42} {r['fastest'][name]:>14,.0f} {b['cpu_us']:>12.2f} "
            f"{b['jobs_per_s']:>18,.0f}"
        )
    rate = r["fastest"][other] / r["fastest"][base]
    cpu = r["best"][base]["cpu_us"] / r["best"][other]["cpu_us"]
    t.lines.append(
        f"  {other + ' / ' + base:<42} {rate:>14.2f} {cpu:>12.2f}   (CPU: {base} µs / {other} µs)"
    )
    ok = None if goal is None else min(rate, cpu) >= goal
    summary.append((number, target, f"jobs/s {rate:.2f}x, CPU {cpu:.2f}x", ok))
    return t.text()


# =========================================================================== main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("--jobs", type=int, default=10_000_000, help="backlog jobs (parts 1, 2, 5)")
    ap.add_argument("--aof-jobs", type=int, default=None, help="part 7's jobs (default --jobs)")
    ap.add_argument("--body", type=int, default=256, help="job body bytes")
    ap.add_argument("--maxmemory", default="256mb")
    ap.add_argument("--level", default="60%", help="flow-to-disk-level")
    ap.add_argument(
        "--measure-jobs",
        type=int,
        default=100_000,
        help="jobs per run of parts 3, 4, 6 (at most half the level's worth)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs of parts 3, 4, 6")
    ap.add_argument("--batch", type=int, default=200, help="ADDJOBs pipelined per batch")
    ap.add_argument("--count", type=int, default=500, help="GETJOB COUNT of the drains")
    ap.add_argument("--probe-interval-ms", type=float, default=5.0, help="PING interval")
    ap.add_argument(
        "--realtime",
        action="store_true",
        help="parts 1, 5: the server at SCHED_FIFO (its own pauses, not a busy machine's)",
    )
    ap.add_argument("--appendonly", action="store_true", help="also run part 7")
    ap.add_argument("--only", default=None, help="parts to run, e.g. 1,2,5")
    ap.add_argument("--server", default=None, metavar="PATH", help="another server binary")
    ap.add_argument("--pure", action="store_true", help="run the pure build (DISQUETTE_PURE=1)")
    ap.add_argument("--json", default=None, metavar="FILE", help="also save results as JSON")
    args = ap.parse_args(argv)
    parts = {1, 2, 3, 4, 5, 6} if args.only is None else {int(p) for p in args.only.split(",")}
    if args.appendonly:
        parts.add(7)
    if not parts <= {1, 2, 3, 4, 5, 6, 7}:
        ap.error("--only takes parts 1 to 7")
    args.parts = parts
    if args.aof_jobs is None:
        args.aof_jobs = args.jobs
    return args


def main(argv: list[str] | None = None) -> int:
    cm.require_hiredis()
    args = parse_args(argv)
    parts: set[int] = args.parts
    if args.pure:
        os.environ["DISQUETTE_PURE"] = "1"  # (the header's description of the build too)
    header, meta = cm.run_description(
        "disquette flow to disk", None if args.server else sys.executable
    )
    if args.server:
        header.append(f"server:      {args.server}")
    header.append(
        f"settings:    maxmemory {args.maxmemory}, flow-to-disk-level {args.level} "
        f"({mib(level_bytes(args))}), bodies {args.body} B, ADDJOB batches {args.batch} "
        f"(2 in flight), GETJOB COUNT {args.count}, parts {','.join(map(str, sorted(parts)))}"
    )
    print("\n".join(header), flush=True)

    cm.interrupt_on_sigterm()
    results: dict[str, Any] = {}
    summary: list[tuple[str, str, str, bool | None]] = []
    texts: list[str] = []
    count = measure_jobs(args)
    interrupted = False
    try:
        if parts & {1, 2, 5}:
            started = time.monotonic()
            r = backlog(args, False, args.jobs, drained=bool(parts & {1, 5}))
            r["wall_seconds"] = time.monotonic() - started
            results["backlog"] = r
            texts.append(
                report_backlog(
                    r,
                    args,
                    parts,
                    f"parts 1, 2, 5 -- backlog: {args.jobs:,} jobs x {args.body} B into maxmemory "
                    f"{args.maxmemory} ({r['wall_seconds']:,.0f} s in all)",
                    summary,
                )
            )
            print(texts[-1], flush=True)

        def pair(
            key: str,
            runs: dict[str, Any],
            title: str,
            number: str,
            target: str,
            goal: float = RATIO_TARGET,
        ) -> dict[str, Any]:
            """One of the parts that measure two nodes, interleaved: its table."""
            base, other = runs
            r = results[key] = interleaved(args, key, runs)
            texts.append(report_pair(r, title, base, other, number, target, summary, goal))
            return r

        if 3 in parts:
            r = pair(
                "addjob",
                {
                    "into memory": lambda: add_run(args, False, count),
                    "while spilling": lambda: add_run(args, True, count),
                },
                f"part 3 -- ADDJOB, {count:,} jobs pipelined, best of {args.repeat}",
                "3",
                f"ADDJOB while spilling >= {RATIO_TARGET}x into memory",
            )
            spilled = r["best"]["while spilling"]["spilled"]
            texts[-1] += (
                f"\n  jobs spilled during the measured adds: {spilled:,} of {count:,}"
                f" (into memory: {r['best']['into memory']['spilled']})"
            )
            print(texts[-1], flush=True)
        if 4 in parts:
            r = pair(
                "drain",
                {
                    "from memory": lambda: drain_run(args, False, count),
                    "from disk": lambda: drain_run(args, True, count),
                },
                f"part 4 -- GETJOB COUNT {args.count} + ACKJOB of {count:,} jobs, best of "
                f"{args.repeat}",
                "4",
                f"draining from disk >= {RATIO_TARGET}x from memory",
            )
            d = r["best"]["from disk"]
            ok = all(x["check"]["ok"] for v in r["runs"].values() for x in v)
            texts[-1] += (
                f"\n  from disk: {d['on_disk_before']:,} of {count:,} on disk before, "
                f"{d['loaded']:,} loaded back, ballast {d['ballast']:,} jobs; bodies "
                f"and order {'all checked OK' if ok else 'WRONG: see the JSON'}"
            )
            print(texts[-1], flush=True)
        if 6 in parts:
            pair(
                "below_level",
                {
                    "flow-to-disk no": lambda: cycle_run(args, False, count),
                    "flow-to-disk yes": lambda: cycle_run(args, True, count),
                },
                f"part 6 -- ADDJOB+GETJOB+ACKJOB cycles of {args.batch}, {count:,} jobs, "
                f"below the level, best of {args.repeat}",
                "6",
                "flow-to-disk yes below the level: no measurable cost",
                0.95,
            )
            print(texts[-1], flush=True)
        if 7 in parts:
            started = time.monotonic()
            r = backlog(args, True, args.aof_jobs, drained=True)
            r["wall_seconds"] = time.monotonic() - started
            results["aof"] = r
            texts.append(
                report_backlog(
                    r,
                    args,
                    parts - {2, 5},
                    f"part 7 -- appendonly yes: {args.aof_jobs:,} jobs x {args.body} B into "
                    f"maxmemory {args.maxmemory} ({r['wall_seconds']:,.0f} s in all)",
                    summary,
                )
            )
            print(texts[-1], flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted", file=sys.stderr)
    except (LoadError, cm.ServerError, cm.ServerStartError) as e:
        print(f"\nFAILED: {type(e).__name__}: {e}", flush=True)
        results["failed"] = str(e)
    if summary:
        print("\ntargets (one run on this machine; never asserted in tests)")
        for number, target, figure, ok in summary:
            mark = "-" if ok is None else verdict(ok)
            print(f"  {number}  {target:<58} {figure:<34} {mark}")
    if args.json:
        doc = {
            "meta": meta,
            "args": {k: v for k, v in vars(args).items() if k != "parts"},
            "parts": sorted(parts),
            "results": results,
            "summary": [
                dict(zip(("part", "target", "figure", "met"), s, strict=True)) for s in summary
            ],
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nresults saved to {args.json}")
    if interrupted:
        return 130
    return (
        1
        if "failed" in results
        or any("failed" in v for v in results.values() if isinstance(v, dict))
        else 0
    )


if __name__ == "__main__":
    sys.exit(main())
