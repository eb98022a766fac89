#!/usr/bin/env python3
"""Throughput / latency / CPU benchmark: disquette vs redis-server (and other Disque binaries).

Usage (see bench/README.md)::

    python bench/run.py [--duration 5] [--warmup 1] [--connections 50] [--procs N]
                        [--disquette-python PY] [--redis PATH | --no-redis]
                        [--other /path/to/disque-server] [--scenarios a,b] [--json FILE]

For every server (disquette, redis-server, each ``--other`` binary) and every scenario of
that server's family, a *fresh* server is started on a free loopback port (in a temporary
working directory, in its own session so Ctrl-C does not reach it), optionally preloaded,
and then driven by several generator processes for ``warmup + duration`` seconds.

Load generation: ``--procs`` forked processes share ``--connections`` connections. Each
process runs a bare ``select.epoll`` loop over non-blocking sockets (a uvloop protocol
costs the same generator CPU per op -- both are bound by the kernel's loopback TCP work --
and would be a dependency); every connection keeps one request (or one pipelined batch,
or one step of a two-command cycle) in flight. Replies
that are single status/integer lines are counted without parsing; everything else is
parsed with ``hiredis.Reader``.

Reported per scenario: operations per second, p50/p99 latency in ms (per request; per
pipelined batch for the ``-pN`` scenarios; per GET+ACK cycle for the cycle scenarios),
server CPU per operation (utime+stime from /proc/<pid>/stat sampled at the start and end
of the measured window), generator CPU per operation (sum over generator processes), and
CPU utilisations so a generator-bound run can be recognised. Ratios disquette/redis with
their targets are printed at the end.

Dependencies: Python standard library and ``hiredis``. Linux only (/proc, epoll, fork).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing as mp
import os
import select
import shlex
import signal
import socket
import statistics
import sys
import threading
import time
import traceback
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import _common as cm
from _common import encode

try:
    from hiredis import Reader, ReplyError
except ImportError:  # pragma: no cover - cm.require_hiredis() explains
    Reader = ReplyError = None  # type: ignore[assignment,misc]


# =========================================================================== scenarios


@dataclass(frozen=True)
class Role:
    """What one connection does, forever, until the scenario ends.

    * plain role: send ``request`` ``depth`` times (one pipelined batch), wait for all
      replies, repeat. One *op* = one request; latency is per batch.
    * cycle role (``ack_prefix`` set): send ``request`` (a GET); when it returns an item,
      send ``ack_prefix`` + the item id as the last bulk argument (the ACK); when that
      returns, the cycle is complete (one *op*, latency measured from the GET) and the
      next GET is sent. A null reply to the GET is counted as *empty* and the GET is
      re-sent (the cycle restarts).

    On a cluster (``bench/cluster.py``) ``nodes`` lists the node indexes the role's
    connections go to, round-robin (empty = all nodes); a role with ``counted`` False
    (a federation producer) runs and is reported in the notes but its requests are not
    the scenario's ops.
    """

    name: str
    request: bytes
    depth: int = 1
    ack_prefix: bytes = b""
    extract: str = ""  # cycle roles: "job" (GETJOB reply) or "stream" (XREADGROUP reply)
    weight: int = 1  # share of the connections
    line_replies: bool = True  # plain roles: replies are single +status/:int lines
    nodes: tuple[int, ...] = ()  # cluster: node indexes the connections go to; () = all
    counted: bool = True  # False: load that is not the scenario's op (notes only)


@dataclass(frozen=True)
class Preload:
    """Items loaded (pipelined) before the timed run, then optional set-up commands."""

    request: bytes
    after: tuple[tuple[str, ...], ...] = ()
    size_from: str = ""  # scenario whose measured ops/s sizes the automatic preload
    nodes: tuple[int, ...] = ()  # cluster: nodes loaded, an equal share each; () = all
    # Requests per pipelined batch (two in flight per connection). Synchronously
    # replicated ADDJOBs each hold the server until their copies answer: a shallow
    # pipeline keeps that bounded, so that a fast server's bus is not flooded.
    depth: int = 1000


@dataclass(frozen=True)
class Scenario:
    name: str
    family: str  # "disque", "redis" or "cluster" (bench/cluster.py)
    roles: tuple[Role, ...]
    description: str
    preload: Preload | None = None
    dry_check: tuple[str, ...] = ()  # command returning how many items are left (0 = dry)


def _cmd_prefix(*args: str) -> bytes:
    """RESP prefix for a command whose last argument (an id) is appended later."""
    out = [b"*%d\r\n" % (len(args) + 1)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a.encode()))
    return b"".join(out)


def cycle_role(name: str, get: bytes, ack: str, **kw: Any) -> Role:
    """A cycle role of GETJOB requests ``get``, each job taken acknowledged with ``ack``
    (ACKJOB or FASTACK); ``kw``: the other :class:`Role` fields."""
    return Role(name, get, ack_prefix=_cmd_prefix(ack), extract="job", **kw)


def build_scenarios(body: bytes, depth: int) -> list[Scenario]:
    """All scenarios, Disque family first. ``depth`` is the pipeline depth of ``-pN``."""
    addjob = encode("ADDJOB", "q", body, "0")
    addjob_r1 = encode("ADDJOB", "q", body, "0", "REPLICATE", "1")
    lpush = encode("LPUSH", "q", body)
    p = f"-p{depth}"
    job_preload = Preload(addjob_r1, size_from="addjob")

    def preloaded(name: str, role: Role, description: str) -> Scenario:
        return Scenario(
            name, "disque", (role,), description, preload=job_preload, dry_check=("QLEN", "q")
        )

    def unpipelined_and_pipelined(
        name: str, family: str, role: str, request: bytes, text: str
    ) -> list[Scenario]:
        return [
            Scenario(
                name,
                family,
                (Role(role, request),),
                f"{text}, one request in flight per connection",
            ),
            Scenario(
                name + p,
                family,
                (Role(role, request, depth=depth),),
                f"{text}, pipelined {depth} deep",
            ),
        ]

    return [
        *unpipelined_and_pipelined("addjob", "disque", "add", addjob, "ADDJOB q <body> 0"),
        preloaded(
            "getjob-ack",
            cycle_role("get+ack", encode("GETJOB", "FROM", "q"), "ACKJOB"),
            "GETJOB FROM q then ACKJOB <id> on a preloaded queue; op = cycle",
        ),
        preloaded(
            "getjob-fastack",
            cycle_role("get+fastack", encode("GETJOB", "NOHANG", "FROM", "q"), "FASTACK"),
            "GETJOB NOHANG FROM q then FASTACK <id> on a preloaded queue; op = cycle",
        ),
        Scenario(
            "mixed",
            "disque",
            (
                Role("add", addjob),
                cycle_role("get+ack", encode("GETJOB", "TIMEOUT", "100", "FROM", "q"), "ACKJOB"),
            ),
            "half the connections ADDJOB, half GETJOB TIMEOUT 100 FROM q + ACKJOB; "
            "op = one ADDJOB or one cycle",
        ),
        *unpipelined_and_pipelined("lpush", "redis", "lpush", lpush, "LPUSH q <body>"),
        Scenario(
            "xreadgroup-ack",
            "redis",
            (
                Role(
                    "read+xack",
                    encode("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"),
                    ack_prefix=_cmd_prefix("XACK", "s", "g"),
                    extract="stream",
                ),
            ),
            "XREADGROUP GROUP g c COUNT 1 STREAMS s > then XACK s g <id> on a preloaded "
            "stream; op = cycle",
            preload=Preload(
                encode("XADD", "s", "*", "f", body),
                after=(("XGROUP", "CREATE", "s", "g", "0"),),
                size_from="lpush",
            ),
        ),
    ]


# Ratios printed at the end: (numerator scenario, denominator scenario, target). The
# numerator runs on disquette, the denominator on redis. "{p}" is the -pN suffix.
RATIOS: tuple[tuple[str, str, float], ...] = (
    ("addjob", "lpush", 0.75),
    ("getjob-ack", "xreadgroup-ack", 1.0),
    ("addjob{p}", "lpush{p}", 0.35),
)


# =========================================================================== generator


class _Conn:
    """Common part of a load-generating connection (one non-blocking socket)."""

    __slots__ = (
        "empties",
        "errors",
        "first_error",
        "lat_append",
        "recv_into",
        "role",
        "sent_at",
        "sock",
        "sock_send",
    )

    def __init__(self, sock: socket.socket, role: Role, lat: array) -> None:
        self.sock = sock
        self.sock_send = sock.send
        self.recv_into = sock.recv_into
        self.role = role
        self.lat_append = lat.append
        self.sent_at = 0
        self.empties = 0
        self.errors = 0
        self.first_error = ""

    def send(self, data: bytes) -> None:
        try:
            n = self.sock_send(data)
        except BlockingIOError:
            n = 0
        if n != len(data):  # practically never for requests this small
            self.sock.setblocking(True)
            try:
                self.sock.sendall(data[n:])
            finally:
                self.sock.setblocking(False)

    def error(self, text: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = text

    def reset(self) -> None:
        self.empties = 0
        self.errors = 0
        self.first_error = ""


class _PlainConn(_Conn):
    """Repeats one request (``depth`` copies per batch); counts reply lines."""

    __slots__ = ("at_line_start", "batch", "depth", "pending", "reader")

    def __init__(self, sock: socket.socket, role: Role, lat: array) -> None:
        super().__init__(sock, role, lat)
        self.depth = role.depth
        self.batch = role.request * role.depth
        self.pending = 0
        self.at_line_start = True
        self.reader = None if role.line_replies else Reader()

    def kick(self, now: int) -> None:
        self.pending = self.depth
        self.sent_at = now
        self.send(self.batch)

    def on_data(self, buf: bytearray, n: int, now: int) -> None:
        if self.reader is None:
            # Fast path: every reply is one line ("+id", ":n" or "-ERR ...").
            # Anything but '+'/':' at a line start (an error, or a reply type this mode
            # cannot count) gets a closer look. Multi-line replies would also make
            # `pending` negative below.
            if (self.at_line_start and buf[0] != 43 and buf[0] != 58) or buf.find(
                b"\n-", 0, n
            ) != -1:
                self._odd_line(buf, 0 if self.at_line_start else buf.find(b"\n", 0, n) + 1, n)
            self.at_line_start = buf[n - 1] == 10
            self.pending -= buf.count(b"\n", 0, n)
        else:
            reader = self.reader
            reader.feed(buf, 0, n)
            while (r := reader.gets()) is not False:
                if isinstance(r, ReplyError):
                    self.error(str(r))
                self.pending -= 1
        if self.pending <= 0:
            if self.pending < 0:
                raise RuntimeError(f"{self.role.name}: more replies than requests")
            self.lat_append(now - self.sent_at)
            self.pending = self.depth
            self.sent_at = now
            self.send(self.batch)

    def _odd_line(self, buf: bytearray, start: int, n: int) -> None:
        """Inspect every reply line of a chunk that contains something unexpected."""
        for line in bytes(buf[start:n]).split(b"\n"):
            if not line:
                continue
            c = line[:1]
            if c == b"-":
                self.error(line.rstrip(b"\r").decode(errors="replace"))
            elif c not in (b"+", b":"):
                raise RuntimeError(
                    f"{self.role.name}: unexpected reply line {line[:60]!r}; this scenario "
                    "expects single-line (status or integer) replies"
                )


class _CycleConn(_Conn):
    """GET an item, ACK it by id, repeat."""

    __slots__ = ("ack_prefix", "getreq", "reader", "stream", "waiting_ack")

    def __init__(self, sock: socket.socket, role: Role, lat: array) -> None:
        super().__init__(sock, role, lat)
        self.getreq = role.request
        self.ack_prefix = role.ack_prefix
        self.stream = role.extract == "stream"
        self.reader = Reader()
        self.waiting_ack = False

    def kick(self, now: int) -> None:
        self.sent_at = now
        self.waiting_ack = False
        self.send(self.getreq)

    def on_data(self, buf: bytearray, n: int, now: int) -> None:
        reader = self.reader
        reader.feed(buf, 0, n)
        while (r := reader.gets()) is not False:
            if self.waiting_ack:
                if isinstance(r, ReplyError):
                    self.error(str(r))
                else:
                    self.lat_append(now - self.sent_at)
                self.waiting_ack = False
                self.sent_at = now
                self.send(self.getreq)
            elif r is None or (self.stream and not r):
                self.empties += 1  # nothing to get (NOHANG / TIMEOUT / drained stream)
                self.sent_at = now
                self.send(self.getreq)
            elif isinstance(r, ReplyError):
                self.error(str(r))
                self.sent_at = now
                self.send(self.getreq)
            else:
                try:
                    jid = r[0][1][0][0] if self.stream else r[0][1]
                except (IndexError, TypeError) as e:
                    raise RuntimeError(f"{self.role.name}: unexpected GET reply {r!r}") from e
                self.waiting_ack = True
                self.send(self.ack_prefix + b"$%d\r\n%s\r\n" % (len(jid), jid))


def _connect(host: str, port: int) -> socket.socket:
    s = socket.create_connection((host, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setblocking(False)
    return s


def _generator(
    roles: Sequence[Role], assignment: Sequence[tuple[int, str, int]], pipe: Connection
) -> None:
    """Body of one generator process: connect (one connection per ``(role index, host,
    port)`` of ``assignment``), report ready, run the schedule."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        lats = [array("q") for _ in roles]
        conns: list[_Conn] = []
        for ri, host, port in assignment:
            role = roles[ri]
            cls = _CycleConn if role.ack_prefix else _PlainConn
            conns.append(cls(_connect(host, port), role, lats[ri]))
        pipe.send(("ready", None))
        if not pipe.poll(60):
            return
        msg, sched = pipe.recv()
        if msg != "go":
            return
        t_warm, t_end = sched
        cpu = _event_loop(conns, lats, t_warm, t_end)
        out: dict[str, Any] = {"cpu": cpu, "roles": {}}
        for ri, role in enumerate(roles):
            mine = [c for c in conns if c.role is role]
            if not mine:
                continue
            errs = [c.first_error for c in mine if c.first_error]
            out["roles"][role.name] = {
                "lat": lats[ri].tobytes(),
                "depth": role.depth,
                "empties": sum(c.empties for c in mine),
                "errors": sum(c.errors for c in mine),
                "first_error": errs[0] if errs else "",
                "conns": len(mine),
            }
        for c in conns:
            with contextlib.suppress(OSError):
                c.sock.close()
        pipe.send(("done", out))
    except BaseException:
        with contextlib.suppress(Exception):
            pipe.send(("error", traceback.format_exc()))


def _event_loop(conns: list[_Conn], lats: list[array], t_warm: int, t_end: int) -> float:
    """Drive all connections until ``t_end``; statistics are reset at ``t_warm``.

    Returns this process's CPU seconds spent inside the measured window."""
    ep = select.epoll()
    byfd: dict[int, _Conn] = {}
    for c in conns:
        fd = c.sock.fileno()
        ep.register(fd, select.EPOLLIN)
        byfd[fd] = c
    buf = bytearray(1 << 16)
    mono = time.monotonic_ns
    poll = ep.poll
    for c in conns:
        c.kick(mono())
    measuring = False
    cpu0 = 0.0
    while True:
        events = poll(0.02)
        now = mono()
        if now >= t_end:
            break
        if not measuring and now >= t_warm:
            for lat in lats:
                del lat[:]
            for c in conns:
                c.reset()
            cpu0 = time.process_time()
            measuring = True
        for fd, _ in events:
            c = byfd[fd]
            try:
                n = c.recv_into(buf)
            except BlockingIOError:
                continue
            if not n:
                raise ConnectionError("server closed a connection")
            c.on_data(buf, n, mono())
    cpu = time.process_time() - cpu0
    ep.close()
    return cpu


# =========================================================================== orchestration


@dataclass
class Result:
    server: str
    scenario: str
    ops: int = 0
    duration: float = 0.0
    ops_per_sec: float = 0.0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    server_cpu_s: float = 0.0
    gen_cpu_s: float = 0.0
    server_us_per_op: float = math.nan
    gen_us_per_op: float = math.nan
    server_util: float = 0.0  # fraction of one core
    gen_util: float = 0.0  # cores
    machine_busy: float = 0.0  # fraction of all cores
    irq_util: float = 0.0  # cores in (soft)irq context: mostly loopback TCP processing
    other_util: float = 0.0  # cores busy with anything else (other processes...)
    preload: int = 0
    errors: int = 0
    empties: int = 0
    notes: list[str] = field(default_factory=list)
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)
    all_runs: list[float] = field(default_factory=list)  # ops/s of every repetition
    # Every repetition in order, (ops/s, server us/op), None where it failed: the
    # pairs of two servers' runs of one round give the paired ratios.
    rounds: list[tuple[float, float] | None] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)  # Bench.counters() deltas
    failed: str = ""


def _assign(roles: Sequence[Role], total: int) -> list[int]:
    """Role index of every connection: shares by weight, interleaved."""
    wsum = sum(r.weight for r in roles)
    counts = [total * r.weight // wsum for r in roles]
    for i in range(total - sum(counts)):
        counts[i % len(roles)] += 1
    out: list[int] = []
    while len(out) < total:
        for i in range(len(roles)):
            if counts[i]:
                counts[i] -= 1
                out.append(i)
    return out


def _connections(
    roles: Sequence[Role], total: int, nodes: Sequence[cm.Server]
) -> list[tuple[int, str, int]]:
    """``(role index, host, port)`` of every connection: roles shared by weight
    (:func:`_assign`), each role's connections spread round-robin over its nodes."""
    seen = [0] * len(roles)
    out: list[tuple[int, str, int]] = []
    for ri in _assign(roles, total):
        choice = roles[ri].nodes or range(len(nodes))
        node = nodes[choice[seen[ri] % len(choice)]]
        seen[ri] += 1
        out.append((ri, node.host, node.port))
    return out


def _lat_stats(chunks: list[bytes]) -> tuple[float, float, int]:
    """p50, p99 (ms) and count of merged nanosecond latency arrays."""
    a = array("q")
    for ch in chunks:
        a.frombytes(ch)
    s = sorted(a)
    return cm.percentile(s, 50) / 1e6, cm.percentile(s, 99) / 1e6, len(s)


class Bench:
    """Runs the scenarios for one server spec and collects :class:`Result` objects.

    A *target* is what one scenario run starts and measures: here one
    :class:`_common.Server`; ``bench/cluster.py`` overrides :meth:`make_target` (a
    joined cluster of servers, ``target.nodes``) and :meth:`counters`."""

    #: connections per node loading a preload (a sync-replicated ADDJOB blocks its
    #: connection, so the cluster bench loads over several)
    preload_connections = 1
    #: ops/s assumed to size a preload whose ``size_from`` scenario did not run
    default_rate = 100_000.0

    def __init__(self, args: argparse.Namespace, scenarios: list[Scenario]) -> None:
        self.args = args
        self.scenarios = scenarios
        self.rates: dict[tuple[str, str], float] = {}
        self.runs: dict[tuple[str, str], list[Result]] = {}
        self.versions: dict[str, str] = {}
        self.dead: set[str] = set()
        self.children: list[mp.process.BaseProcess] = []

    def log(self, msg: str) -> None:
        if not self.args.quiet:
            print(msg, file=sys.stderr, flush=True)

    def preload_count(self, server: str, sc: Scenario) -> int:
        if self.args.preload:
            return self.args.preload
        assert sc.preload is not None
        rate = self.rates.get((server, sc.preload.size_from), 0.0) or self.default_rate
        n = int(rate * (self.args.warmup + self.args.duration) * 1.3) + 20_000
        return max(50_000, min(n, 3_000_000))

    def run_all(self, specs: Sequence[cm.ServerSpec]) -> None:
        """Run every (server, scenario) pair ``--repeat`` times in rounds: in a round,
        each scenario runs on every server back to back, in the opposite order in the
        next round, so that a scenario's runs on two servers meet the same state of a
        busy machine (the paired ratios compare the runs of one round)."""
        for rep in range(self.args.repeat):
            order = specs if rep % 2 == 0 else list(reversed(specs))
            for sc in self.scenarios:
                for spec in order:
                    if not self.runs_on(spec, sc) or spec.name in self.dead:
                        continue
                    res = self.run_one(spec, sc)
                    self.runs.setdefault((spec.name, sc.name), []).append(res)

    def run_one(self, spec: cm.ServerSpec, sc: Scenario) -> Result:
        res = Result(spec.name, sc.name)
        self.log(f"[{spec.name}] {sc.name}: starting server")
        target = self.make_target(spec)
        try:
            target.start()
            if spec.name not in self.versions:
                self.versions[spec.name] = target.version()
            self.run_scenario(target, sc, res)
        except cm.ServerStartError as e:
            res.failed = f"server did not start: {e}"
            self.dead.add(spec.name)  # skip its remaining scenarios
        except Exception as e:
            res.failed = f"{type(e).__name__}: {e}"
        finally:
            self.reap_children()
            target.stop()
        if res.failed:
            self.log(f"[{spec.name}] {sc.name}: FAILED: {res.failed}")
        else:
            key = (spec.name, sc.name)
            self.rates[key] = max(self.rates.get(key, 0.0), res.ops_per_sec)
            self.log(
                f"[{spec.name}] {sc.name}: {res.ops_per_sec:,.0f} ops/s, "
                f"p50 {res.p50_ms:.3f} ms, p99 {res.p99_ms:.3f} ms"
            )
        return res

    def runs_on(self, spec: cm.ServerSpec, sc: Scenario) -> bool:
        """Whether scenario ``sc`` is one for servers of ``spec``'s kind."""
        return sc.family == spec.family

    def make_target(self, spec: cm.ServerSpec) -> Any:
        """A not yet started target with ``start()``, ``stop()``, ``version()``, ``spec``
        and ``nodes`` (the servers to load and measure)."""
        return cm.Server(spec)

    def counters(self, target: Any) -> dict[str, int]:
        """Server counters sampled at the start and end of the measured window; their
        deltas end up in ``Result.counters``. None here."""
        return {}

    def results(self, specs: Sequence[cm.ServerSpec]) -> list[Result]:
        """One result per (server, scenario): the run with the median ops/s."""
        out: list[Result] = []
        for spec in specs:
            for sc in self.scenarios:
                runs = self.runs.get((spec.name, sc.name))
                if not runs:
                    continue
                ok = sorted((r for r in runs if not r.failed), key=lambda r: r.ops_per_sec)
                if not ok:
                    out.append(runs[0])
                    continue
                med = ok[(len(ok) - 1) // 2]
                med.all_runs = [r.ops_per_sec for r in runs if not r.failed]
                med.rounds = [
                    None if r.failed else (r.ops_per_sec, r.server_us_per_op) for r in runs
                ]
                if len(runs) > 1:
                    med.notes.insert(
                        0,
                        f"median of {len(ok)} runs ("
                        + "/".join(f"{r.ops_per_sec:,.0f}" for r in runs if not r.failed)
                        + ")",
                    )
                if len(ok) < len(runs):
                    med.notes.append(f"{len(runs) - len(ok)} run(s) failed")
                out.append(med)
        return out

    def reap_children(self) -> None:
        for p in self.children:
            if p.is_alive():
                p.terminate()
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        self.children.clear()

    def preload(self, target: Any, sc: Scenario, res: Result) -> None:
        """Load ``sc.preload`` into its nodes, an equal share each, over
        ``preload_connections`` parallel connections per node."""
        assert sc.preload is not None
        n = self.preload_count(target.spec.name, sc)
        self.log(f"[{target.spec.name}] {sc.name}: preloading {n:,} items")
        nodes = [target.nodes[i] for i in sc.preload.nodes] if sc.preload.nodes else target.nodes
        k = self.preload_connections
        share = -(-n // (len(nodes) * k))
        errors: list[BaseException] = []

        def load(node: cm.Server) -> None:
            try:
                with node.client() as c:
                    c.pipeline_repeat(sc.preload.request, share, sc.preload.depth)  # type: ignore[union-attr]
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        threads = [
            threading.Thread(target=load, args=(nd,), daemon=True) for nd in nodes for _ in range(k)
        ]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        self.log(f"[{target.spec.name}] {sc.name}: preloaded in {time.monotonic() - t0:.1f}s")
        for node in nodes:
            with node.client() as c:
                for cmd in sc.preload.after:
                    c.call(*cmd)
        res.preload = share * len(threads)

    def run_scenario(self, target: Any, sc: Scenario, res: Result) -> None:
        args = self.args
        nodes: list[cm.Server] = target.nodes
        if sc.preload:
            self.preload(target, sc, res)
        assignment = _connections(sc.roles, args.connections, nodes)
        nproc = max(1, min(args.procs, args.connections))
        ctx = mp.get_context("fork")
        pipes: list[Connection] = []
        for w in range(nproc):
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_generator,
                args=(sc.roles, assignment[w::nproc], child),
                daemon=True,
            )
            p.start()
            child.close()
            self.children.append(p)
            pipes.append(parent)
        for pipe in pipes:
            msg, payload = self._recv(pipe, 60)
            if msg != "ready":
                raise RuntimeError(f"generator failed to start:\n{payload}")
        now = time.monotonic_ns()
        t_warm = now + int((0.02 + args.warmup) * 1e9)
        t_end = t_warm + int(args.duration * 1e9)
        for pipe in pipes:
            pipe.send(("go", (t_warm, t_end)))
        _sleep_until(t_warm)
        srv0 = sum(nd.cpu_seconds() for nd in nodes)
        m0 = cm.machine_cpu_ticks()
        c0 = self.counters(target)
        _sleep_until(t_end)
        srv1 = sum(nd.cpu_seconds() for nd in nodes)
        m1 = cm.machine_cpu_ticks()
        c1 = self.counters(target)
        res.counters = {k: v - c0[k] for k, v in c1.items() if k in c0}
        outs = []
        for pipe in pipes:
            msg, payload = self._recv(pipe, 60)
            if msg != "done":
                raise RuntimeError(f"generator failed:\n{payload}")
            outs.append(payload)
        if sc.dry_check:
            checked = sc.preload.nodes if sc.preload and sc.preload.nodes else range(len(nodes))
            dry = []
            for i in checked:
                with nodes[i].client() as c:
                    if c.call(*sc.dry_check) == 0:
                        dry.append(i)
            if dry:
                where = "" if len(nodes) == 1 else " on node " + ",".join(map(str, dry))
                res.notes.append(f"queue ran dry{where} (raise --preload)")
        self._aggregate(sc, res, outs, srv1 - srv0, m0, m1)

    @staticmethod
    def _recv(pipe: Connection, timeout: float) -> tuple[str, Any]:
        if not pipe.poll(timeout):
            raise TimeoutError("generator did not answer")
        try:
            return pipe.recv()
        except EOFError:
            return ("error", "generator process died")

    def _aggregate(
        self,
        sc: Scenario,
        res: Result,
        outs: list[dict[str, Any]],
        server_cpu: float,
        m0: tuple[int, int, int],
        m1: tuple[int, int, int],
    ) -> None:
        dur = self.args.duration
        res.duration = dur
        all_lat: list[bytes] = []
        for role in sc.roles:
            parts = [o["roles"][role.name] for o in outs if role.name in o["roles"]]
            if not parts:
                continue
            chunks = [p["lat"] for p in parts]
            p50, p99, count = _lat_stats(chunks)
            ops = count * role.depth
            empties = sum(p["empties"] for p in parts)
            errors = sum(p["errors"] for p in parts)
            first = next((p["first_error"] for p in parts if p["first_error"]), "")
            res.roles[role.name] = {
                "connections": sum(p["conns"] for p in parts),
                "ops": ops,
                "ops_per_sec": ops / dur,
                "p50_ms": p50,
                "p99_ms": p99,
                "empties": empties,
                "errors": errors,
                "first_error": first,
            }
            res.errors += errors
            res.empties += empties
            if role.counted:
                res.ops += ops
                all_lat.extend(chunks)
            if errors:
                res.notes.append(f"{errors} errors ({role.name}): {first[:80]}")
        res.p50_ms, res.p99_ms, _ = _lat_stats(all_lat)
        res.ops_per_sec = res.ops / dur
        res.server_cpu_s = server_cpu
        res.gen_cpu_s = sum(o["cpu"] for o in outs)
        if res.ops:
            res.server_us_per_op = server_cpu * 1e6 / res.ops
            res.gen_us_per_op = res.gen_cpu_s * 1e6 / res.ops
        res.server_util = server_cpu / dur
        res.gen_util = res.gen_cpu_s / dur
        busy, irq, total = (b - a for a, b in zip(m0, m1, strict=True))
        ncpu = os.cpu_count() or 1
        res.machine_busy = busy / total if total else 0.0
        res.irq_util = irq / total * ncpu if total else 0.0
        res.other_util = max(
            0.0, res.machine_busy * ncpu - res.server_util - res.gen_util - res.irq_util
        )
        if res.empties and sc.dry_check:
            res.notes.append(f"{res.empties} empty GETs (queue ran dry? raise --preload)")
        if res.server_util >= 0.9 and sc.family != "cluster":
            res.notes.append("server-bound")
        elif res.machine_busy >= 0.9:
            res.notes.append("machine CPU-saturated")

        if len(sc.roles) > 1:
            res.notes.append(
                ", ".join(
                    f"{k} {v['ops_per_sec']:,.0f}/s p99 {v['p99_ms']:.2f}ms"
                    for k, v in res.roles.items()
                )
            )


def _sleep_until(t_ns: int) -> None:
    while True:
        d = (t_ns - time.monotonic_ns()) / 1e9
        if d <= 0:
            return
        time.sleep(min(d, 0.5))


# =========================================================================== report


def _fmt(x: float, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def format_table(
    results: list[Result], extra: Sequence[tuple[str, int, Callable[[Result], str]]] = ()
) -> str:
    """The results table; ``extra`` adds ``(heading, width, cell)`` columns before the
    notes (``bench/cluster.py``: bus traffic per op)."""
    head = (
        f"{'server':<14} {'scenario':<16} {'ops/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'srv us/op':>9} {'gen us/op':>9} {'srv cpu':>7} {'gen cpu':>7} {'irq':>5} {'other':>5} "
        f"{'mach':>5}" + "".join(f" {h:>{w}}" for h, w, _ in extra) + "  notes"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        if r.failed:
            lines.append(f"{r.server:<14} {r.scenario:<16} FAILED: {r.failed.splitlines()[0]}")
            continue
        lines.append(
            f"{r.server:<14} {r.scenario:<16} {r.ops_per_sec:>10,.0f} {_fmt(r.p50_ms, '.3f'):>8} "
            f"{_fmt(r.p99_ms, '.3f'):>8} {_fmt(r.server_us_per_op, '.2f'):>9} "
            f"{_fmt(r.gen_us_per_op, '.2f'):>9} {r.server_util:>7.0%} {r.gen_util:>7.0%} "
            f"{r.irq_util:>5.0%} {r.other_util:>5.0%} {r.machine_busy:>5.0%}"
            + "".join(f" {cell(r):>{w}}" for _, w, cell in extra)
            + f"  {'; '.join(r.notes)}"
        )
    failed = [r for r in results if r.failed]
    if failed:
        lines.append("")
        lines.append("failures:")
        for r in failed:
            text = r.failed.splitlines()
            lines.append(f"  {r.server} {r.scenario}: {text[0]}")
            lines.extend("  " + x for x in text[1:25])
    return "\n".join(lines)


def ratio_entry(
    by: dict[tuple[str, str], Result],
    num: tuple[str, str],
    den: tuple[str, str],
    target: float | None,
) -> dict[str, Any]:
    """One ratio of two (server, scenario) results of the same run: throughput (the
    target applies to it) and server-CPU efficiency (denominator's server us/op /
    numerator's), which is less sensitive to a busy machine. With ``--repeat``, also
    the paired ratios: the median (and range) of the ratios of the two servers' runs
    of each round, which the target then applies to."""
    a, b = by.get(num), by.get(den)
    value = cpu = None
    paired: list[tuple[float, float]] = []
    if a is not None and b is not None and b.ops_per_sec:
        value = a.ops_per_sec / b.ops_per_sec
        if a.server_us_per_op > 0 and b.server_us_per_op > 0:
            cpu = b.server_us_per_op / a.server_us_per_op
        paired = [
            (x[0] / y[0], y[1] / x[1] if x[1] > 0 and y[1] > 0 else math.nan)
            for x, y in zip(a.rounds, b.rounds, strict=False)
            if x is not None and y is not None and y[0] > 0
        ]
    ops = sorted(p[0] for p in paired)
    cpus = sorted(p[1] for p in paired if not math.isnan(p[1]))
    paired_ratio = statistics.median(ops) if len(ops) > 1 else None
    decisive = value if paired_ratio is None else paired_ratio
    return {
        "numerator": f"{num[0]} {num[1]}",
        "denominator": f"{den[0]} {den[1]}",
        "ratio": value,
        "cpu_ratio": cpu,
        "paired": paired_ratio,
        "paired_range": (ops[0], ops[-1]) if paired_ratio is not None else None,
        "paired_cpu": statistics.median(cpus) if len(cpus) > 1 else None,
        "target": target,
        "ok": None if decisive is None or target is None else decisive >= target,
    }


def compute_ratios(results: list[Result], depth: int, others: list[str]) -> list[dict[str, Any]]:
    """The target ratios disquette / redis, and disquette / other and other / redis for
    every --other binary (see :func:`ratio_entry`)."""
    by = {(r.server, r.scenario): r for r in results if not r.failed}
    p = f"-p{depth}"
    out: list[dict[str, Any]] = []
    for num, den, target in RATIOS:
        out.append(
            ratio_entry(by, ("disquette", num.format(p=p)), ("redis", den.format(p=p)), target)
        )
    for other in others:
        for sc in ("addjob", "addjob" + p, "getjob-ack", "getjob-fastack", "mixed"):
            out.append(ratio_entry(by, ("disquette", sc), (other, sc), None))
        for num, den, _target in RATIOS:
            out.append(ratio_entry(by, (other, num.format(p=p)), ("redis", den.format(p=p)), None))
    return out


def format_ratios(ratios: list[dict[str, Any]]) -> str:
    w = max([28, *(len(r["numerator"]) for r in ratios), *(len(r["denominator"]) for r in ratios)])
    lines = [
        f"  {'numerator':<{w}}   {'denominator':<{w}}   {'ops/s':>7}  {'cpu':>6}"
        f"  {'paired ops/s (range)':>21}  {'paired cpu':>10}",
    ]
    for r in ratios:
        v = "n/a" if r["ratio"] is None else f"{r['ratio']:.3f}"
        c = "n/a" if r["cpu_ratio"] is None else f"{r['cpu_ratio']:.3f}"
        p = pc = "-"
        if r.get("paired") is not None:
            low, high = r["paired_range"]
            p = f"{r['paired']:.3f} ({low:.2f}-{high:.2f})"
        if r.get("paired_cpu") is not None:
            pc = f"{r['paired_cpu']:.3f}"
        t = ""
        if r["target"] is not None:
            verdict = "n/a" if r["ok"] is None else ("OK" if r["ok"] else "BELOW TARGET")
            t = f"  ops/s target >= {r['target']:.2f}: {verdict}"
        lines.append(
            f"  {r['numerator']:<{w}} / {r['denominator']:<{w}} = {v:>7}  {c:>6}"
            f"  {p:>21}  {pc:>10}{t}"
        )
    return "\n".join(lines)


# =========================================================================== main


def add_common_args(ap: argparse.ArgumentParser) -> None:
    """Options shared by run.py and cluster.py: load shape, disquette, --other binaries,
    repetitions, output."""
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per scenario")
    ap.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per scenario")
    ap.add_argument("--connections", type=int, default=50, help="total connections")
    ap.add_argument(
        "--procs",
        type=int,
        default=min(4, max(2, os.cpu_count() or 2)),
        help="generator processes",
    )
    ap.add_argument("--body-size", type=int, default=64, help="job / element body bytes")
    ap.add_argument(
        "--preload",
        type=int,
        default=0,
        help="items preloaded for the GET+ACK scenarios (0 = sized automatically from the "
        "measured add rate)",
    )
    ap.add_argument(
        "--scenarios", default="", help="comma-separated scenario names to run; empty = all"
    )
    ap.add_argument(
        "--servers",
        default="",
        help="comma-separated server names to run: disquette, redis, or an --other "
        "basename; empty = all configured",
    )
    ap.add_argument(
        "--disquette-python",
        default=sys.executable,
        help="interpreter that runs 'python -m disquette.server'",
    )
    ap.add_argument(
        "--disquette-args", default="", help="extra directives for disquette, e.g. '--hz 10'"
    )
    ap.add_argument("--no-disquette", action="store_true", help="do not run disquette")
    ap.add_argument(
        "--other",
        action="append",
        default=[],
        metavar="PATH",
        help="another Disque server binary (e.g. an original disque-server), started as "
        "'PATH --port N' in a temporary directory; may be repeated",
    )
    ap.add_argument("--other-args", default="", help="extra arguments for --other binaries")
    ap.add_argument(
        "--pure",
        action="store_true",
        help="also run disquette's pure build (DISQUETTE_PURE=1) as disquette-pure, beside "
        "the build the interpreter has (the compiled one where it was built)",
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="also run this benchmark's floor server from bench/floors.py (run.py: a bare "
        "echo; cluster.py: replicas that store nothing), with --disquette-python",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run everything N times (servers interleaved) and report the median run",
    )
    ap.add_argument("--json", default=None, metavar="FILE", help="also save results as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress messages on stderr")


def check_common_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.duration <= 0 or args.warmup < 0 or min(args.connections, args.procs, args.repeat) < 1:
        ap.error("--duration must be > 0, --warmup >= 0, --connections/--procs/--repeat >= 1")


def common_parser(doc: str | None) -> argparse.ArgumentParser:
    """The parser of run.py or of a benchmark built on it: the first paragraph of its
    docstring ``doc`` as description, defaults shown in --help, and
    :func:`add_common_args`' options (then :func:`check_common_args` once parsed)."""
    ap = argparse.ArgumentParser(
        description=doc.split("\n\n")[0] if doc else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_common_args(ap)
    return ap


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = common_parser(__doc__)
    ap.add_argument("--depth", type=int, default=16, help="pipeline depth of the -pN scenarios")
    ap.add_argument("--redis", default=None, help="redis-server binary; None = found on PATH")
    ap.add_argument("--redis-args", default="", help="extra arguments for redis-server")
    ap.add_argument("--no-redis", action="store_true", help="do not run redis-server")
    args = ap.parse_args(argv)
    check_common_args(ap, args)
    return args


def disque_specs(
    args: argparse.Namespace, extra: Sequence[str] = (), floor: str = "echo"
) -> list[cm.ServerSpec]:
    """disquette (unless --no-disquette), the ``floor`` server of bench/floors.py (with
    --floor) and every --other binary, with unique names; ``extra`` arguments go to all
    of them."""
    specs: list[cm.ServerSpec] = []
    directives = [*shlex.split(args.disquette_args), *extra]
    if not args.no_disquette:
        specs.append(cm.disquette_spec(args.disquette_python, directives))
    if args.pure:
        specs.append(cm.disquette_spec(args.disquette_python, directives, pure=True))
    if args.floor:
        specs.append(cm.floor_spec(args.disquette_python, floor, directives))
    seen = {s.name for s in specs}
    for path in args.other:
        spec = cm.other_spec(os.path.abspath(path), [*shlex.split(args.other_args), *extra])
        base, i = spec.name, 2
        while spec.name in seen:
            spec.name = f"{base}#{i}"
            i += 1
        seen.add(spec.name)
        specs.append(spec)
    return specs


def select_servers(args: argparse.Namespace, specs: list[cm.ServerSpec]) -> list[cm.ServerSpec]:
    if args.servers:
        wanted = {s.strip() for s in args.servers.split(",") if s.strip()}
        specs = [s for s in specs if s.name in wanted]
    return specs


def server_specs(args: argparse.Namespace) -> list[cm.ServerSpec]:
    specs: list[cm.ServerSpec] = []
    if not args.no_redis:
        path = cm.find_redis(args.redis)
        if path is None:
            print(
                "bench: redis-server not found on PATH (use --redis or --no-redis)", file=sys.stderr
            )
        else:
            specs.append(cm.redis_spec(path, shlex.split(args.redis_args)))
    return select_servers(args, specs + disque_specs(args))


def select_scenarios(args: argparse.Namespace, scenarios: list[Scenario]) -> list[Scenario]:
    """The scenarios named by --scenarios (all when empty); exits on unknown names."""
    if not args.scenarios:
        return scenarios
    wanted = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    unknown = wanted - {s.name for s in scenarios}
    if unknown:
        sys.exit(
            f"bench: unknown scenario(s): {', '.join(sorted(unknown))}; known: "
            + ", ".join(s.name for s in scenarios)
        )
    return [s for s in scenarios if s.name in wanted]


@dataclass
class Header:
    """What every report starts with: command, date, machine, interpreters, load; as
    lines to print and as the JSON report's data."""

    lines: list[str]
    meta: dict[str, Any]


def make_header(
    title: str, args: argparse.Namespace, specs: Sequence[cm.ServerSpec], load: str
) -> Header:
    """Describe the run (and sample the background load for a second)."""
    disquette = any(s.name == "disquette" for s in specs)
    lines, meta = cm.run_description(
        title, args.disquette_python if disquette else None, generator=True
    )
    if any(s.name == "disquette-pure" for s in specs):
        lines.append("disquette-pure: the same interpreter with DISQUETTE_PURE=1 (pure build)")
    lines.append(
        f"load:        {args.connections} connections over {args.procs} generator processes; "
        f"{args.warmup:g}s warm-up + {args.duration:g}s measured per scenario; "
        f"{args.body_size}-byte bodies; {load}"
    )
    return Header(lines, meta)


def run_bench(bench: Bench, specs: Sequence[cm.ServerSpec]) -> bool:
    """Run every scenario; Ctrl-C or SIGTERM stop it (every process it started is
    stopped). Returns True when interrupted."""

    cm.interrupt_on_sigterm()
    try:
        bench.run_all(specs)
    except KeyboardInterrupt:
        print("\ninterrupted; partial results:", file=sys.stderr)
        return True
    finally:
        bench.reap_children()
    return False


def print_servers(bench: Bench, specs: Sequence[cm.ServerSpec], header: Header) -> None:
    versions = bench.versions
    disq_interp = header.meta["disquette_interpreter"]
    if disq_interp and versions.get("disquette", "?") == "?":
        versions["disquette"] = (disq_interp.get("modules") or {}).get("disquette") or "?"
    print()
    print("servers:     " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    for spec in specs:
        print(f"  {spec.name}: {shlex.join([*spec.argv, '--port', 'N', *spec.extra])}")


def json_doc(
    args: argparse.Namespace,
    header: Header,
    bench: Bench,
    specs: Sequence[cm.ServerSpec],
    settings: Sequence[str],
) -> dict[str, Any]:
    """The JSON report's common part (callers add results, ratios...)."""
    return {
        **header.meta,
        "servers": {
            s.name: {
                "argv": [*s.argv, "--port", "N", *s.extra],
                "version": bench.versions.get(s.name),
            }
            for s in specs
        },
        "settings": {k: getattr(args, k) for k in settings},
        "scenarios": {s.name: s.description for s in bench.scenarios},
        "all_runs": [r for runs in bench.runs.values() for r in runs],
    }


def write_json(path: str, doc: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(_clean(doc), f, indent=2, allow_nan=False)
        f.write("\n")
    print(f"\nresults saved to {path}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit status 0, 1 if any scenario failed, 130 if interrupted."""
    cm.require_hiredis()
    args = parse_args(argv)
    body = (b"0123456789abcdef" * (args.body_size // 16 + 1))[: args.body_size]
    scenarios = select_scenarios(args, build_scenarios(body, args.depth))
    specs = server_specs(args)
    if not specs:
        sys.exit("bench: no server to run")
    header = make_header("disquette benchmark", args, specs, "fresh server per scenario")
    print("\n".join(header.lines), flush=True)

    bench = Bench(args, scenarios)
    interrupted = run_bench(bench, specs)
    results = bench.results(specs)
    print_servers(bench, specs, header)
    print()
    print(format_table(results))
    print()
    print("latency: per request (per pipelined batch for -pN; per GET+ACK cycle for the cycle")
    print("scenarios); srv cpu = server CPU as % of one core; gen cpu = generator CPU summed")
    print("over processes (% of one core); irq = interrupt/softirq time, charged to no process")
    print("(mostly the kernel's loopback TCP work for this traffic); other = CPU used by")
    print("anything else (other processes: should be ~0); mach = whole-machine CPU busy.")
    others = [s.name for s in specs if s.family == "disque" and s.name != "disquette"]
    ratios = compute_ratios(results, args.depth, others)
    print()
    print("ratios, same run (ops/s = throughput ratio of the median runs; cpu = server CPU")
    print("per op of the denominator / of the numerator, i.e. relative CPU efficiency;")
    print("paired = the median of the ratios of the two servers' runs of each round, which")
    print("a target applies to when there are --repeat rounds):")
    print(format_ratios(ratios))

    if args.json:
        doc = json_doc(
            args,
            header,
            bench,
            specs,
            (
                "duration",
                "warmup",
                "connections",
                "procs",
                "depth",
                "body_size",
                "preload",
                "repeat",
            ),
        )
        doc.update(results=results, ratios=ratios, interrupted=interrupted)
        write_json(args.json, doc)
    if interrupted:
        return 130
    return 1 if any(r.failed for r in results) else 0


def _clean(o: Any) -> Any:
    """JSON-safe copy: NaN -> null, dataclass-like objects -> dicts."""
    if isinstance(o, float):
        return None if math.isnan(o) or math.isinf(o) else o
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_clean(v) for v in o]
    if isinstance(o, Result):
        return _clean(dict(o.__dict__))
    if o is None or isinstance(o, str | int | bool):
        return o
    return str(o)


if __name__ == "__main__":
    sys.exit(main())
