#!/usr/bin/env python3
"""Soak benchmark: does a node's memory follow its dataset, or its throughput? (issue 21)

Usage (see bench/README.md)::

    python bench/soak.py [--scenarios cycle,cycle-ackjob,mixed,backlogs,fill-oom,cluster]
                         [--seconds 600] [--jobs 1000000] [--maxmemory SIZE]
                         [--other /path/to/disque-server] [--json FILE]

A server that acknowledges every job it is given holds nothing, so under a sustained
load its RSS must stay flat; one that drained a backlog must not grow when the next
one of the same size comes; ``maxmemory`` must bound the process. Each scenario starts
fresh servers (free loopback ports, temporary directories, their own sessions), drives
them for minutes, samples their RSS every second from ``/proc`` (a thread of this
process) and the PING round trip of one of them every millisecond (``memory.py``'s
probe: its own process and connection, real-time priority when permitted), and stops
them. The same load runs against every ``--other`` binary (an original
``disque-server``), and a table per scenario puts the servers side by side with
disquette / other ratios.

The load is pipelined over blocking connections driven by threads of this process:
the point is memory over time, not the last percent of throughput, and a one-
connection cycle (500 ADDJOBs in one write, GETJOB NOHANG COUNT 500, one FASTACK of
all their IDs) is the issue's workload as a production user would run it. Every loop
is bounded by the scenario's time (and, for fills and drains, by a count); a server
whose RSS passes ``--rss-limit`` (default a quarter of the machine's memory) has its
load stopped there, and the table says so.

Dependencies: Python standard library and ``hiredis``. Linux only (/proc, fork).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import _common as cm
import cluster as cb
import memory as mb
import run as rb
from _common import encode

try:
    from hiredis import ReplyError
except ImportError:  # pragma: no cover - cm.require_hiredis() explains
    ReplyError = None  # type: ignore[assignment,misc]

MB = 1 << 20
QUEUE = "soakq"
SCENARIOS = ("cycle", "cycle-ackjob", "mixed", "backlogs", "fill-oom", "cluster")

# Disque refuses a job for lack of memory in one of two ways (Disque 1.0-rc1's
# documented behaviour: ADDJOB and memory pressure): -OOM from the per-command check
# above 95 % of maxmemory, or, above 75 %, -NOREPL when the node may not hold the copy
# itself and no other node can (always the case on a single node, so that is where a
# single node refuses).
OOM_REPLY = "OOM command not allowed when used memory > 'maxmemory'."
NOREPL_OOM = "for the following reason: I'm out of memory"


def refusal_kind(text: str) -> str | None:
    """'-OOM' or '-NOREPL' when ``text`` is a refusal for lack of memory, else None."""
    if text == OOM_REPLY:
        return "-OOM"
    if text.startswith("NOREPL") and text.endswith(NOREPL_OOM):
        return "-NOREPL"
    return None


# =========================================================================== load


class Control:
    """What a scenario's load threads share: when to stop, and what they did."""

    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + seconds
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.added = 0
        self.acked = 0
        self.refused = 0
        self.refusal = ""  # the first refusal's text
        self.halted = ""  # why the load stopped before its time
        self.error: BaseException | None = None

    def running(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.deadline

    def halt(self, reason: str) -> None:
        with self.lock:
            if not self.stop.is_set():
                self.halted = reason
                self.stop.set()

    def count(self, added: int = 0, acked: int = 0, refusals: Sequence[str] = ()) -> None:
        with self.lock:
            self.added += added
            self.acked += acked
            if refusals:
                self.refused += len(refusals)
                self.refusal = self.refusal or refusals[0]

    def backlog(self) -> int:
        return self.added - self.acked

    def thread(self, load: Callable[[Control], None], name: str) -> threading.Thread:
        """A daemon thread running ``load(self)``; its exception halts everything."""

        def body() -> None:
            try:
                load(self)
            except BaseException as e:
                self.error = self.error or e
                self.halt(f"{name} failed: {type(e).__name__}: {e}")

        return threading.Thread(target=body, name=name, daemon=True)


def read_adds(c: cm.BlockingClient, n: int) -> tuple[int, list[str]]:
    """Read ``n`` ADDJOB replies: (jobs added, refusals for lack of memory). Any other
    error raises."""
    added = 0
    refusals: list[str] = []
    for _ in range(n):
        r = c.read_reply()
        if isinstance(r, ReplyError):
            if refusal_kind(str(r)) is None:
                raise cm.ServerError(f"ADDJOB: {r}")
            refusals.append(str(r))
        else:
            added += 1
    return added, refusals


def job_ids(reply: Any) -> list[bytes]:
    """The IDs in a GETJOB reply (None when it timed out)."""
    if isinstance(reply, ReplyError):
        raise cm.ServerError(f"GETJOB: {reply}")
    return [job[1] for job in reply or ()]


def add_request(args: argparse.Namespace, *more: str | int) -> bytes:
    return encode("ADDJOB", QUEUE, cm.make_body(args.body_size), "0", *more)


def cycle_load(node: cm.Server, add: bytes, batch: int, ack: str) -> Callable[[Control], None]:
    """One connection: ``batch`` pipelined ADDJOBs, GETJOB NOHANG COUNT ``batch``, one
    ``ack`` (FASTACK or ACKJOB) of every ID taken; again and again."""
    get = encode("GETJOB", "NOHANG", "COUNT", batch, "FROM", QUEUE)

    def run(ctl: Control) -> None:
        with node.client() as c:
            while ctl.running():
                c.sock.sendall(add * batch)
                added, refusals = read_adds(c, batch)
                c.sock.sendall(get)
                ids = job_ids(c.read_reply())
                if ids:
                    c.call(ack, *ids)
                ctl.count(added, len(ids), refusals)
                if not added:
                    ctl.stop.wait(0.01)  # all refused: do not spin

    return run


def producer_load(node: cm.Server, add: bytes, batch: int, cap: int) -> Callable[[Control], None]:
    """``batch`` pipelined ADDJOBs at a time, while fewer than ``cap`` jobs are waiting
    (added and not yet acknowledged): a soak at steady state, not a growing backlog."""

    def run(ctl: Control) -> None:
        with node.client() as c:
            while ctl.running():
                if ctl.backlog() >= cap:
                    ctl.stop.wait(0.001)
                    continue
                c.sock.sendall(add * batch)
                added, refusals = read_adds(c, batch)
                ctl.count(added=added, refusals=refusals)
                if not added:
                    ctl.stop.wait(0.01)

    return run


def consumer_load(node: cm.Server, count: int, ack: str) -> Callable[[Control], None]:
    """``GETJOB TIMEOUT 100 COUNT count`` and one ``ack`` of the IDs taken."""
    get = encode("GETJOB", "TIMEOUT", 100, "COUNT", count, "FROM", QUEUE)

    def run(ctl: Control) -> None:
        with node.client() as c:
            while ctl.running():
                c.sock.sendall(get)
                ids = job_ids(c.read_reply())
                if ids:
                    c.call(ack, *ids)
                    ctl.count(acked=len(ids))

    return run


# =========================================================================== measuring


class Probe:
    """``memory.py``'s PING probe on one server: its own process and connection, a PING
    every ``interval_ms``, every round trip recorded (monotonic ns)."""

    def __init__(self, server: cm.Server, interval_ms: float) -> None:
        ctx = mp.get_context("fork")
        self.stop = ctx.Event()
        self.parent, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=mb._probe,
            args=(server.host, server.port, int(interval_ms * 1e6), self.stop, child),
            daemon=True,
        )
        self.proc.start()
        child.close()
        self.priority = "?"
        self.starts, self.rtts = array("q"), array("q")

    def __enter__(self) -> Probe:
        if not self.parent.poll(30):
            raise RuntimeError("probe did not start")
        msg, payload = self.parent.recv()
        if msg != "ready":
            raise RuntimeError(f"probe failed:\n{payload}")
        self.priority = payload
        return self

    def finish(self) -> None:
        """Stop probing and collect the samples."""
        self.starts, self.rtts = mb._probe_samples(self.stop, self.parent, 30)

    def __exit__(self, *exc: object) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join(5)

    def stats(self, windows: Sequence[tuple[int, int]]) -> dict[str, Any]:
        """Round-trip statistics (ms) of the PINGs sent within any of ``windows``."""
        picked = [
            (s, r)
            for s, r in zip(self.starts, self.rtts, strict=True)
            if any(t0 <= s < t1 for t0, t1 in windows)
        ]
        return mb._pause_stats(
            array("q", (s for s, _ in picked)), array("q", (r for _, r in picked)), 0, 2**63 - 1
        )


def ping_metrics(stats: dict[str, Any], prefix: str = "ping") -> dict[str, Any]:
    if not stats.get("samples"):
        return {}
    return {
        f"{prefix}_p99": stats["p99_ms"],
        f"{prefix}_max": stats["max_ms"],
        f"{prefix}_over": stats["over_10ms"],
    }


def window_means(series: list[tuple[float, int]]) -> tuple[float, float, float]:
    """Mean RSS over the first and last minute of a run (a tenth of it for runs shorter
    than ten minutes), and the window's length in seconds."""
    if not series:
        return float("nan"), float("nan"), 0.0
    end = series[-1][0]
    w = min(60.0, end / 10) or end
    first = [rss for t, rss in series if t <= w]
    last = [rss for t, rss in series if t >= end - w]
    return sum(first) / len(first), sum(last) / len(last), w


@dataclass
class Outcome:
    """One server's run of one scenario: metrics by key, notes, or why it failed."""

    server: str
    metrics: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed: str = ""


def info_numbers(node: cm.Server, *names: str) -> dict[str, int]:
    info = node.info()
    return {k: int(info[k]) for k in names if info.get(k, "").isdigit()}


def sampler_for(nodes: Sequence[cm.Server], args: argparse.Namespace, ctl: Control) -> Any:
    def over(rss: int) -> None:
        ctl.halt(f"stopped: RSS {rss / MB:,.0f} MB above --rss-limit")

    return cm.RssSampler([n.pid for n in nodes], args.sample_interval, args.rss_limit, over)


def soak(
    nodes: Sequence[cm.Server],
    loads: Sequence[Callable[[Control], None]],
    seconds: float,
    args: argparse.Namespace,
    out: Outcome,
) -> None:
    """Run ``loads`` (one thread each) against ``nodes`` for ``seconds``, sampling the RSS
    of every node and the PING round trips of the first; fill ``out`` (also when
    interrupted: the KeyboardInterrupt is raised again once it is filled)."""
    interrupted = False
    rss_start = [n.rss_bytes() for n in nodes]
    cpu0 = [n.cpu_seconds() for n in nodes]
    with Probe(nodes[0], args.probe_interval_ms) as probe:
        t0 = time.monotonic_ns()
        ctl = Control(seconds)
        threads = [ctl.thread(load, f"load {i}") for i, load in enumerate(loads)]
        with sampler_for(nodes, args, ctl) as sampler:
            for t in threads:
                t.start()
            try:
                for t in threads:
                    while t.is_alive():
                        t.join(0.5)
            except KeyboardInterrupt:
                interrupted = True
            finally:
                ctl.halt("interrupted")
                for t in threads:
                    t.join(40)  # a blocking read times out after 30 s
        t1 = time.monotonic_ns()
        probe.finish()
    if ctl.error is not None:
        raise ctl.error
    elapsed = (t1 - t0) / 1e9
    cpu = sum(n.cpu_seconds() for n in nodes) - sum(cpu0)
    m = out.metrics
    m.update(
        seconds=elapsed,
        jobs=ctl.acked,
        rate=ctl.acked / elapsed,
        refused=ctl.refused,
        cpu=cpu / elapsed,
        **ping_metrics(probe.stats([(t0, t1)])),
    )
    if ctl.halted != "interrupted":
        out.notes.append(ctl.halted)
    if ctl.refusal:
        out.notes.append(f"first refusal: {ctl.refusal}")
    for i, node in enumerate(nodes):
        series = sampler.series(i)
        first, last, w = window_means(series)
        suffix = "" if len(nodes) == 1 else f"_n{i}"
        m[f"rss_start{suffix}"] = rss_start[i]
        m[f"rss_first{suffix}"] = first
        m[f"rss_last{suffix}"] = last
        m[f"rss_max{suffix}"] = max(rss for _, rss in series)
        m[f"rss_growth{suffix}"] = last / first if first else float("nan")
        m[f"used_memory{suffix}"] = info_numbers(node, "used_memory").get("used_memory")
        m["window"] = w
    if interrupted:
        out.notes.append(f"interrupted after {elapsed:.0f} s")
        raise KeyboardInterrupt


# =========================================================================== scenarios


def fill(c: cm.BlockingClient, add: bytes, jobs: int, ctl: Control) -> int:
    """``jobs`` pipelined ADDJOBs (10,000 at a time, so the load can be stopped)."""
    done = 0
    while done < jobs and ctl.running():
        n = min(10_000, jobs - done)
        c.pipeline_repeat(add, n)
        done += n
    return done


def drain(c: cm.BlockingClient, batch: int, jobs: int, ctl: Control) -> int:
    """GETJOB NOHANG COUNT ``batch`` + FASTACK until the queue answers none (at most
    ``jobs`` taken)."""
    get = encode("GETJOB", "NOHANG", "COUNT", batch, "FROM", QUEUE)
    taken = 0
    for _ in range(jobs // batch + 100):
        if not ctl.running():
            break
        c.sock.sendall(get)
        ids = job_ids(c.read_reply())
        if not ids:
            break
        c.call("FASTACK", *ids)
        taken += len(ids)
    return taken


@contextlib.contextmanager
def measured(
    spec: cm.ServerSpec, args: argparse.Namespace, seconds: float
) -> Iterator[tuple[cm.Server, Control, Any, Probe]]:
    """A started server with a control bounded by ``seconds``, an RSS sampler and a
    PING probe; all stopped on exit."""
    with cm.Server(spec) as server, Probe(server, args.probe_interval_ms) as probe:
        ctl = Control(seconds)
        with sampler_for([server], args, ctl) as sampler:
            yield server, ctl, sampler, probe
        probe.finish()


INFO = ("registered_jobs", "used_memory")
DRAINED_SETTLE = 1.0  # seconds between the end of a drain and its RSS reading


def run_backlogs(spec: cm.ServerSpec, args: argparse.Namespace, out: Outcome) -> None:
    """``--rounds`` times: add ``--jobs`` jobs, then drain them all."""
    m = out.metrics
    add = add_request(args)
    windows: dict[str, list[tuple[int, int]]] = {"fill": [], "drain": []}
    with measured(spec, args, args.oom_seconds) as (server, ctl, sampler, probe):

        def phase(name: str, k: int, step: Callable[[], int]) -> None:
            t0 = time.monotonic_ns()
            done = step()
            t1 = time.monotonic_ns()
            windows[name].append((t0, t1))
            m[f"{name}_rate_{k}"] = done / ((t1 - t0) / 1e9)
            if name == "drain":
                time.sleep(DRAINED_SETTLE)  # the cron's heap trim runs up to 100 ms after
            m[f"rss_{name}_{k}"] = server.rss_bytes()
            if done != args.jobs:
                out.notes.append(f"round {k} {name}: {done:,} of {args.jobs:,} jobs")

        m["rss_start"] = server.rss_bytes()
        with server.client() as c:
            for k in range(1, args.rounds + 1):
                phase("fill", k, lambda: fill(c, add, args.jobs, ctl))
                if ctl.running():
                    phase("drain", k, lambda: drain(c, args.batch, args.jobs, ctl))
                if not ctl.running():
                    break
                m.update({f"{key}_{k}": v for key, v in info_numbers(server, *INFO).items()})
    direct = [v for key, v in m.items() if key.startswith("rss_")]
    m["rss_max"] = max([rss for _, rss in sampler.series()] + direct)
    for phase, spans in windows.items():
        m.update(ping_metrics(probe.stats(spans), f"ping_{phase}"))
    last = max(k for k in range(1, args.rounds + 1) if f"rss_drain_{k}" in m)
    m["drained_growth"] = m[f"rss_drain_{last}"] / m["rss_drain_1"]
    m["registered_jobs"] = m.get(f"registered_jobs_{last}")
    if ctl.halted:
        out.notes.append(ctl.halted)


def run_fill_oom(spec: cm.ServerSpec, args: argparse.Namespace, out: Outcome) -> None:
    """ADDJOB in batches of 1,000 until one is refused for lack of memory."""
    m = out.metrics
    add = add_request(args)
    m["maxmemory"] = args.oom_maxmemory
    peak = 0  # sampled after every batch too: a fill can take less than a second
    with measured(spec, args, args.oom_seconds) as (server, ctl, sampler, probe):
        t0 = time.monotonic_ns()
        with server.client() as c:
            while ctl.running() and ctl.added < args.oom_max_jobs:
                n = min(1000, args.oom_max_jobs - ctl.added)
                c.sock.sendall(add * n)
                added, refusals = read_adds(c, n)
                ctl.count(added, refusals=refusals)
                rss = server.rss_bytes()
                peak = max(peak, rss)
                if refusals:
                    m["rss_refused"] = rss
                    m.update(info_numbers(server, *INFO))
                    break
        t1 = time.monotonic_ns()
    m["rss_max"] = max([rss for _, rss in sampler.series()] + [peak])
    m.update(ping_metrics(probe.stats([(t0, t1)])))
    m["jobs"] = ctl.added
    m["seconds"] = (t1 - t0) / 1e9
    m["refusal"] = refusal_kind(ctl.refusal) or "none"
    m["over_maxmemory"] = m["rss_max"] - args.oom_maxmemory
    if ctl.refusal:
        out.notes.append(f"refusal: {ctl.refusal}")
    else:
        out.notes.append(f"no refusal after {ctl.added:,} jobs")
    if ctl.halted:
        out.notes.append(ctl.halted)


def run_cycle(ack: str) -> Callable[[cm.ServerSpec, argparse.Namespace, Outcome], None]:
    def run(spec: cm.ServerSpec, args: argparse.Namespace, out: Outcome) -> None:
        with cm.Server(spec) as server:
            load = cycle_load(server, add_request(args), args.batch, ack)
            soak([server], [load], args.seconds, args, out)

    return run


def mixed_loads(
    node: cm.Server, args: argparse.Namespace, *more: str | int
) -> list[Callable[[Control], None]]:
    add = add_request(args, *more)
    return [
        *(producer_load(node, add, args.add_batch, args.backlog) for _ in range(args.producers)),
        *(consumer_load(node, args.get_count, "ACKJOB") for _ in range(args.consumers)),
    ]


def run_mixed(spec: cm.ServerSpec, args: argparse.Namespace, out: Outcome) -> None:
    with cm.Server(spec) as server:
        soak([server], mixed_loads(server, args), args.mixed_seconds, args, out)


def run_cluster(spec: cm.ServerSpec, args: argparse.Namespace, out: Outcome) -> None:
    cluster = cb.Cluster(spec, 3)
    cluster.start()
    try:
        loads = mixed_loads(cluster.nodes[0], args, "REPLICATE", 3)
        soak(cluster.nodes, loads, args.cluster_seconds, args, out)
    finally:
        cluster.stop()


RUNNERS: dict[str, Callable[[cm.ServerSpec, argparse.Namespace, Outcome], None]] = {
    "cycle": run_cycle("FASTACK"),
    "cycle-ackjob": run_cycle("ACKJOB"),
    "mixed": run_mixed,
    "backlogs": run_backlogs,
    "fill-oom": run_fill_oom,
    "cluster": run_cluster,
}


def describe(name: str, args: argparse.Namespace) -> str:
    """One line on what scenario ``name`` does, with this run's sizes."""
    mixed = (
        f"{args.producers} producers ({args.add_batch} pipelined ADDJOBs while fewer than "
        f"{args.backlog:,} jobs wait), {args.consumers} consumers (GETJOB TIMEOUT 100 COUNT "
        f"{args.get_count} + ACKJOB)"
    )
    cycle = (
        f"one connection: {args.batch} pipelined ADDJOBs ({args.body_size} bytes, default "
        f"RETRY), GETJOB NOHANG COUNT {args.batch}, {{}} of their IDs; {args.seconds:g} s"
    )
    return {
        "cycle": cycle.format("FASTACK"),
        "cycle-ackjob": cycle.format("ACKJOB"),
        "mixed": f"{mixed}; {args.mixed_seconds:g} s",
        "backlogs": f"{args.rounds} x (add {args.jobs:,} jobs pipelined, drain them with "
        f"GETJOB NOHANG COUNT {args.batch} + FASTACK)",
        "fill-oom": f"maxmemory {args.oom_maxmemory / MB:g} MB: ADDJOB in batches of 1,000 "
        "until refused for lack of memory",
        "cluster": f"3 nodes, ADDJOB REPLICATE 3 on node 0: {mixed}; {args.cluster_seconds:g} s",
    }[name]


# =========================================================================== report


@dataclass(frozen=True)
class Row:
    """A table row: ``label``, the metric ``key``, its format, a divisor (MB for RSS)
    and whether a disquette / other ratio means something."""

    label: str
    key: str
    fmt: str = ",.0f"
    scale: float = 1.0
    ratio: bool = True


def rss_rows(window: str, suffix: str = "", label: str = "") -> list[Row]:
    return [
        Row(f"RSS at start{label} MB", f"rss_start{suffix}", ",.1f", MB),
        Row(f"RSS first {window}{label} MB", f"rss_first{suffix}", ",.1f", MB),
        Row(f"RSS last {window}{label} MB", f"rss_last{suffix}", ",.1f", MB),
        Row(f"RSS max{label} MB", f"rss_max{suffix}", ",.1f", MB),
        Row(f"RSS last/first{label}", f"rss_growth{suffix}", ".3f", ratio=False),
        Row(f"used_memory at end{label} MB", f"used_memory{suffix}", ",.1f", MB),
    ]


PING_ROWS = [
    Row("PING p99 ms", "ping_p99", ".2f"),
    Row("PING max ms", "ping_max", ".1f"),
    Row("PINGs > 10 ms", "ping_over", ",d", ratio=False),
]


def rows_for(name: str, args: argparse.Namespace, outcomes: Sequence[Outcome]) -> list[Row]:
    windows = [o.metrics["window"] for o in outcomes if "window" in o.metrics]
    window = "minute" if windows and min(windows) >= 60 else f"{min(windows or [0]):.2g} s"
    load = [
        Row("jobs/s", "rate"),
        Row("jobs acknowledged", "jobs", ",d"),
        Row("seconds", "seconds", ".0f", ratio=False),
        Row("server CPU (cores)", "cpu", ".2f"),
        Row("ADDJOB refused", "refused", ",d", ratio=False),
    ]
    if name == "cluster":
        nodes = [r for i in range(3) for r in rss_rows(window, f"_n{i}", f" node {i}")]
        return [*load, *nodes, *PING_ROWS]
    if name == "backlogs":
        rounds = range(1, args.rounds + 1)
        return [
            *(Row(f"add rate {k} jobs/s", f"fill_rate_{k}") for k in rounds),
            *(Row(f"drain rate {k} jobs/s", f"drain_rate_{k}") for k in rounds),
            Row("RSS at start MB", "rss_start", ",.1f", MB),
            *(Row(f"RSS after fill {k} MB", f"rss_fill_{k}", ",.1f", MB) for k in rounds),
            *(Row(f"RSS after drain {k} MB", f"rss_drain_{k}", ",.1f", MB) for k in rounds),
            Row("RSS max MB", "rss_max", ",.1f", MB),
            Row("last drained / first drained", "drained_growth", ".3f", ratio=False),
            *(Row(f"used_memory drained {k} MB", f"used_memory_{k}", ",.2f", MB) for k in rounds),
            Row("registered_jobs at end", "registered_jobs", ",d", ratio=False),
            Row("PING max filling ms", "ping_fill_max", ".1f"),
            Row("PING p99 filling ms", "ping_fill_p99", ".2f"),
            Row("PING max draining ms", "ping_drain_max", ".1f"),
            Row("PING p99 draining ms", "ping_drain_p99", ".2f"),
            Row("PINGs > 10 ms filling", "ping_fill_over", ",d", ratio=False),
            Row("PINGs > 10 ms draining", "ping_drain_over", ",d", ratio=False),
        ]
    if name == "fill-oom":
        return [
            Row("maxmemory MB", "maxmemory", ",.0f", MB, ratio=False),
            Row("jobs stored", "jobs", ",d"),
            Row("refusal", "refusal", "", ratio=False),
            Row("seconds", "seconds", ".1f", ratio=False),
            Row("RSS at refusal MB", "rss_refused", ",.1f", MB),
            Row("RSS max MB", "rss_max", ",.1f", MB),
            Row("RSS max - maxmemory MB", "over_maxmemory", ",.1f", MB, ratio=False),
            Row("used_memory at refusal MB", "used_memory", ",.1f", MB),
            *PING_ROWS,
        ]
    return [*load, *rss_rows(window), *PING_ROWS]


def cell(value: Any, row: Row) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, str):
        return value
    if row.fmt.endswith("d"):
        return format(int(value), row.fmt)
    return format(value / row.scale, row.fmt)


def format_scenario(name: str, args: argparse.Namespace, outcomes: Sequence[Outcome]) -> str:
    """One scenario's table: a row per metric, a column per server, and disquette /
    other ratio columns."""
    ok = [o for o in outcomes if not o.failed]
    base = next((o for o in ok if o.server == "disquette"), None)
    others = [o for o in ok if base is not None and o is not base]
    rows = rows_for(name, args, ok)
    heads = [o.server for o in ok] + [f"disquette/{o.server}" for o in others]
    lw = max(len(r.label) for r in rows)
    widths = [max(12, len(h)) for h in heads]
    lines = [f"{name}: {describe(name, args)}"]
    lines.append(" " * lw + "".join(f"  {h:>{w}}" for h, w in zip(heads, widths, strict=True)))
    for row in rows:
        cells = [cell(o.metrics.get(row.key), row) for o in ok]
        for o in others:
            a, b = (base.metrics.get(row.key) if base else None), o.metrics.get(row.key)
            numeric = isinstance(a, int | float) and isinstance(b, int | float)
            cells.append(f"{a / b:.2f}" if row.ratio and numeric and b else "-")
        if any(c != "-" for c in cells):
            lines.append(
                f"{row.label:<{lw}}"
                + "".join(f"  {c:>{w}}" for c, w in zip(cells, widths, strict=True))
            )
    for o in outcomes:
        if o.failed:
            lines.append(f"  {o.server}: FAILED: {o.failed}")
        lines.extend(f"  {o.server}: {note}" for note in o.notes)
    return "\n".join(lines)


READING = """\
How to read: RSS is the server process's resident size (/proc/<pid>/statm), sampled every
second; "first"/"last" are its means over the first and last minute of the run (a tenth of
the run when shorter than ten minutes). A server whose memory follows its dataset keeps
last/first near 1.00 under a cycle that acknowledges everything it adds; one that keeps
deleted jobs grows with throughput x RETRY. used_memory is what the server reports in
INFO. PING: round trips of a probe connection pinging every millisecond: the longest is
the longest time the server served nobody. disquette/other: the ratio of the two values
(for jobs/s higher is better; for RSS and PING lower is)."""


# =========================================================================== main


# (flag, type, default, help) of the numeric options.
NUMBER_OPTIONS: tuple[tuple[str, type, float, str], ...] = (
    ("--seconds", float, 600.0, "cycle / cycle-ackjob seconds"),
    ("--mixed-seconds", float, 180.0, "mixed seconds"),
    ("--cluster-seconds", float, 120.0, "cluster seconds"),
    ("--batch", int, 500, "jobs per cycle / drain batch"),
    ("--body-size", int, 64, "job body bytes"),
    ("--jobs", int, 1_000_000, "jobs per backlog"),
    ("--rounds", int, 3, "backlogs added and drained"),
    ("--producers", int, 2, "mixed / cluster producer connections"),
    ("--consumers", int, 2, "mixed / cluster consumer connections"),
    ("--add-batch", int, 50, "pipelined ADDJOBs per producer write"),
    ("--get-count", int, 50, "GETJOB COUNT of the consumers"),
    ("--backlog", int, 10_000, "producers wait while this many jobs are unacknowledged"),
    ("--oom-max-jobs", int, 50_000_000, "fill-oom adds at most this many jobs"),
    ("--oom-seconds", float, 600.0, "time bound of fill-oom and of backlogs"),
    ("--sample-interval", float, 1.0, "seconds between RSS samples"),
    ("--probe-interval-ms", float, 1.0, "milliseconds between PINGs"),
)

# run.py's options that choose the servers (and --json), taken from its parser.
SERVER_OPTIONS = (
    "disquette_python",
    "disquette_args",
    "no_disquette",
    "pure",
    "other",
    "other_args",
    "json",
)


def add_server_args(ap: argparse.ArgumentParser) -> None:
    """Add :data:`SERVER_OPTIONS` as ``run.py`` defines them (one definition for all the
    benchmarks that start disquette and other Disque binaries)."""
    donor = argparse.ArgumentParser(add_help=False)
    rb.add_common_args(donor)
    for action in donor._actions:
        if action.dest in SERVER_OPTIONS:
            ap._add_action(action)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help="comma-separated scenarios to run: " + ", ".join(SCENARIOS),
    )
    for flag, kind, default, text in NUMBER_OPTIONS:
        ap.add_argument(flag, type=kind, default=default, help=text)
    ap.add_argument(
        "--maxmemory",
        default=None,
        help="maxmemory of every scenario's servers (Disque units: 256mb, 1gb...)",
    )
    ap.add_argument(
        "--oom-maxmemory", default="256mb", help="fill-oom's maxmemory when --maxmemory is not set"
    )
    ap.add_argument(
        "--rss-limit",
        default=None,
        help="stop a scenario's load when a server's RSS passes this (0 = never; default "
        "a quarter of the machine's memory)",
    )
    add_server_args(ap)
    ap.set_defaults(floor=False)
    args = ap.parse_args(argv)
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenario(s) {', '.join(sorted(unknown))}; known: {', '.join(SCENARIOS)}")
    try:
        args.maxmemory = cm.parse_memory(args.maxmemory) if args.maxmemory else 0
        args.oom_maxmemory = args.maxmemory or cm.parse_memory(args.oom_maxmemory)
        if args.rss_limit is None:
            args.rss_limit = cm.machine_info()["mem_total_bytes"] // 4
        else:
            args.rss_limit = cm.parse_memory(args.rss_limit)
    except ValueError as e:
        ap.error(str(e))
    if min(args.batch, args.jobs, args.rounds, args.add_batch, args.get_count) < 1:
        ap.error("--batch, --jobs, --rounds, --add-batch and --get-count must be >= 1")
    return args


def specs_for(args: argparse.Namespace, maxmemory: int) -> list[cm.ServerSpec]:
    """disquette and every --other binary, loopback only, no AOF, ``maxmemory`` set."""
    extra = ["--bind", "127.0.0.1", "--appendonly", "no"]
    if maxmemory:
        extra += ["--maxmemory", str(maxmemory)]
    return rb.disque_specs(args, extra)


def run_one(name: str, spec: cm.ServerSpec, args: argparse.Namespace, out: Outcome) -> None:
    """Run scenario ``name`` on ``spec``'s servers into ``out``."""
    mb.progress(f"[{spec.name}] {name}: {describe(name, args)}")
    try:
        RUNNERS[name](spec, args, out)
    except cm.ServerStartError as e:
        out.failed = f"server did not start: {e}"
    except Exception as e:
        out.failed = f"{type(e).__name__}: {e}"
    m = out.metrics
    if "rate" in m:
        mb.progress(
            f"[{spec.name}] {name}: {m['rate']:,.0f} jobs/s, RSS max "
            f"{m.get('rss_max', m.get('rss_max_n0', 0)) / MB:,.0f} MB"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the scenarios; exit status 0, 1 if any failed, 130 if interrupted."""
    cm.require_hiredis()
    args = parse_args(argv)
    if not specs_for(args, 0):
        sys.exit("soak: no server to run")
    lines, doc = cm.run_description(
        "disquette soak benchmark", None if args.no_disquette else args.disquette_python
    )
    lines.append(
        f"settings:    maxmemory {args.maxmemory / MB:g} MB (0 = the servers' default); "
        f"RSS every {args.sample_interval:g} s; PING every {args.probe_interval_ms:g} ms; "
        f"--rss-limit {args.rss_limit / MB:,.0f} MB"
    )
    print("\n".join(lines), flush=True)

    cm.interrupt_on_sigterm()
    results: dict[str, list[Outcome]] = {}
    interrupted = False
    try:
        for name in args.scenarios:
            maxmemory = args.oom_maxmemory if name == "fill-oom" else args.maxmemory
            for spec in specs_for(args, maxmemory):
                out = Outcome(spec.name)
                results.setdefault(name, []).append(out)  # partial when interrupted
                run_one(name, spec, args, out)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted; partial results:", file=sys.stderr)
    print()
    print("servers:")
    for spec in specs_for(args, 0):
        print(f"  {spec.name}: {' '.join([*spec.argv, '--port', 'N', *spec.extra])}")
    for name, outcomes in results.items():
        print()
        print(format_scenario(name, args, outcomes))
    print()
    print(READING)
    if args.json:
        doc.update(
            settings={k: v for k, v in vars(args).items() if k != "floor"},
            results={name: [vars(o) for o in outs] for name, outs in results.items()},
            interrupted=interrupted,
        )
        rb.write_json(args.json, doc)
    if interrupted:
        return 130
    return 1 if any(o.failed for outs in results.values() for o in outs) else 0


if __name__ == "__main__":
    sys.exit(main())
