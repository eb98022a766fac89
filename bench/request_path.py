#!/usr/bin/env python3
"""Where a request's time goes: disquette beside an original Disque, per workload.

Usage (see bench/README.md)::

    python bench/request_path.py --other ../shared/tools/disque-server [--repeat 3]
                                 [--scenarios addjob,getjob-ack] [--frequency 2999]
                                 [--detail N]

For each single-node workload of ``bench/run.py`` (the same load generator, the same
fresh server per run) and each server, alternating, ``perf record`` samples the server
process (``cpu-clock``, DWARF call stacks, so that neither the interpreter nor the
stripped Disque binary needs frame pointers) during the measured window. Every sample
is charged to one stage of the request path by the frames of its stack that name one
(the rules are :data:`STAGES`), and the sampled CPU time of each stage is
divided by the requests the window served (a GET+ACK cycle is two requests, an empty
GET one more):

* ``kernel``: the kernel outside a write (reading sockets, epoll, softirqs, page faults);
* ``loop``: the event loop in user space (uvloop and libuv; Disque's ``ae``), and
  what the server does between requests (timers, cron);
* ``conn``: the connection's own code between the loop and the command pipeline
  (disquette's ``ClientConnection``; Disque's ``readQueryFromClient`` and
  ``processInputBuffer`` minus parsing);
* ``parse``: turning bytes into requests (``RequestReader``; ``processMultibulkBuffer``);
* ``dispatch``: looking the command up and its checks, statistics, slow log
  (``ServerState.execute``; ``processCommand``, ``call``);
* ``command``: the command itself, the job and queue work included;
* ``reply``: encoding replies (``protocol/reply``, ``core/replies``; ``addReply*``);
* ``write``: writing replies, user space and the kernel's send (which on loopback also
  delivers the bytes to the reader and wakes it up);
* ``python``: the interpreter where no frame above it says whose work it is (the pure
  build runs all of its code there: profile the compiled build).

Times are microseconds of server CPU per request. The sampled total beside the
``/proc`` total (``proc``) shows how much of the CPU the samples saw. Beside them,
``perf stat`` counts the server's system calls in the same window: reads, writes and
polls per request (polls per request is one over the requests an event-loop turn
serves). A run ``--repeat`` times adds up the samples of every run. The table's last
line per workload is disquette's time minus the original's, stage by stage.
``--detail N`` then lists, per server and workload, the N places that take most of
each stage (the frame that decided the stage; in the kernel, the system call).

Needs Linux ``perf`` (Debian: linux-perf) and permission to sample another process
and read its syscall tracepoints (root, or ``kernel.perf_event_paranoid`` <= 1 and
a readable tracefs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import _common as cm
import run

#: The stages, in the table's order.
COLUMNS = ("kernel", "loop", "conn", "parse", "dispatch", "command", "reply", "write", "python")

#: Which stage a user-space frame names, by a piece of its symbol (``=name``: the whole
#: symbol). A sample is read from the outermost frame in: each frame that names a stage
#: sets it, so the innermost such frame decides, except that the catch-all ``command``
#: rule (:data:`WORK`) applies only inside the request pipeline (``conn``, ``dispatch``,
#: ``command``): the same core code run by a timer stays the loop's. Frames that name
#: nothing (the interpreter's, libc's, the allocator's) leave the stage as it was.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # disquette: mypyc names functions CPyDef_<module>___<Class>___<method>.
    (
        "write",
        (
            "CPyDef_outbox___",
            "UVStream_write",
            "UVStream__exec_write",
            "UVStream__try_write",
            "uv__write",
            "uv_try_write",
            "libc_write",
            "__writev",
            "__send",
            "sendmsg",
            # Disque (Redis 3.2's networking.c)
            "writeToClient",
            "handleClientsWithPendingWrites",
            "sendReplyToClient",
        ),
    ),
    (
        "reply",
        (
            "CPyDef_reply___",
            "CPyDef_replies___",
            "addReply",
            "_addReplyToBuffer",
            "_addReplyObjectToList",
            "_addReplyStringToList",
            "prepareClientToWrite",
            "setDeferred",
        ),
    ),
    (
        "parse",
        ("CPyDef_reader___", "CPyDef_inline___", "processMultibulkBuffer", "processInlineBuffer"),
    ),
    (
        "dispatch",
        (
            "CPyDef_state___ServerState___",
            "CPyDef_table___",
            "CPyDef_slowlog___",
            "CPyDef_latency___",
            "CPyDef_stats___",
            "processCommand",
            "lookupCommand",
            "=call",
            "slowlogPushEntryIfNeeded",
            "latencyAddSample",
        ),
    ),
    ("command", ("Node___serve_blocked_clients", "handleClientsBlockedOnQueues")),
    (
        "conn",
        (
            "CPyDef_server___connection___",
            "processInputBuffer",
            "readQueryFromClient",
            "resetClient",
            "freeClientArgv",
        ),
    ),
    (
        "loop",
        (
            "uvloop",
            "__pyx_",
            "=uv_run",
            "uv__io_poll",
            "epoll",
            "Node___cron",
            "Node___process_jobs",
            "gc_collect",
            "collect_generations",
            "=aeMain",
            "aeProcessEvents",
            "aeApiPoll",
            "=beforeSleep",
            "serverCron",
            "processTimeEvents",
            "clientsCron",
            "databasesCron",
        ),
    ),
)
#: The catch-all of the command stage, inside the request pipeline: the rest of the
#: compiled modules (commands/, core/), Disque's commands and data structures.
WORK: tuple[str, ...] = (
    "CPyDef_",
    "CPyPy_",
    "Command",
    "Job",
    "job",
    "Queue",
    "queue",
    "skiplist",
    "dict",
    "sds",
    "zmalloc",
    "createObject",
    "RefCount",
)
_PIPELINE = frozenset({"conn", "dispatch", "command"})

#: The system calls counted (``perf stat``), by what they are for: they say how many
#: requests an event-loop turn serves (polls), and how many reads and writes each costs.
SYSCALLS = {"read": "read", "write": "write", "epoll_wait": "poll", "epoll_pwait": "poll"}


def _names(sym: str, pieces: tuple[str, ...]) -> bool:
    return any(sym == p[1:] if p[0] == "=" else p in sym for p in pieces)


def classify(frames: Sequence[tuple[str, bool]]) -> tuple[str, str]:
    """The stage of one sample, and where in it (the frame that decided the stage; in
    the kernel, the system call or the trap it is in): ``frames`` are ``(symbol,
    in_kernel)``, innermost first."""
    stage = where = ""
    for sym, kernel in reversed(frames):
        if kernel:
            continue
        for name, pieces in STAGES:
            if _names(sym, pieces):
                stage, where = name, sym
                break
        else:
            if stage in _PIPELINE and _names(sym, WORK):
                stage, where = "command", sym
    if frames and frames[0][1]:
        kernel_frames = [sym for sym, kernel in reversed(frames) if kernel]
        entry = kernel_frames[0]
        if "do_syscall_64" in kernel_frames:
            after = kernel_frames.index("do_syscall_64") + 1
            entry = kernel_frames[after] if after < len(kernel_frames) else entry
        if stage != "write":
            return "kernel", entry
        where = "kernel " + entry
    return (stage, where) if stage else ("python", where)


def parse_script(lines: Iterable[str]) -> Counter[tuple[str, str]]:
    """Nanoseconds per (stage, where) from ``perf script -F period,ip,sym,dso`` output."""
    totals: Counter[tuple[str, str]] = Counter()
    period = 0
    frames: list[tuple[str, bool]] = []

    def flush() -> None:
        if period:
            totals[classify(frames)] += period

    for line in lines:
        if not line.strip():
            flush()
            period = 0
            frames = []
        elif line[0] != "\t":  # a sample's header: its period
            flush()
            frames = []
            period = int(line.split()[0])
        else:
            parts = line.split(None, 1)
            rest = parts[1] if len(parts) > 1 else ""
            sym, _, dso = rest.rpartition(" (")
            frames.append((sym.strip(), "kernel" in dso))
    flush()
    return totals


@dataclass
class Profile:
    server: str
    scenario: str
    requests: int = 0
    proc_cpu_s: float = 0.0
    ns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0))
    where: Counter[tuple[str, str]] = field(default_factory=Counter)
    syscalls: Counter[str] = field(default_factory=Counter)  # "read", "write", "poll"
    ops_per_sec: list[float] = field(default_factory=list)

    def us(self, column: str) -> float:
        return self.ns[column] / 1000 / self.requests if self.requests else float("nan")

    @property
    def total_us(self) -> float:
        return sum(self.ns.values()) / 1000 / self.requests if self.requests else float("nan")


def requests_served(res: run.Result, sc: run.Scenario) -> int:
    """Requests of a run's window: a cycle is two, an empty GET one more."""
    total = 0
    for role in sc.roles:
        stats = res.roles.get(role.name)
        if stats is None:
            continue
        if role.ack_prefix:
            total += 2 * stats["ops"] + stats["empties"]
        else:
            total += stats["ops"]
    return total


class ProfiledBench(run.Bench):
    """run.py's bench with ``perf record`` attached to the server for the window."""

    def __init__(self, args: argparse.Namespace, scenarios: list[run.Scenario]) -> None:
        super().__init__(args, scenarios)
        self.workdir = tempfile.mkdtemp(prefix="bench-profile-")
        self.profiles: dict[tuple[str, str], Profile] = {}
        self._perf: list[subprocess.Popen[bytes]] = []
        self._data = ""

    def run_one(self, spec: cm.ServerSpec, sc: run.Scenario) -> run.Result:
        self._data = os.path.join(self.workdir, f"{spec.name}-{sc.name}.data")
        res = super().run_one(spec, sc)
        if not res.failed:
            self._add(spec.name, sc, res)
        return res

    def counters(self, target: Any) -> dict[str, int]:
        # Called at the start and at the end of the measured window.
        if not self._perf:
            pid = str(target.pid)
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
            self._perf = [
                subprocess.Popen(
                    ["perf", "record", "-q", "-F", str(self.args.frequency), "-e", "cpu-clock",
                     "--call-graph", "dwarf,16384", "-p", pid, "-o", self._data], **quiet
                ),
                subprocess.Popen(
                    ["perf", "stat", "-x", ",", "-o", self._data + ".stat", "-p", pid, "-e",
                     ",".join(f"syscalls:sys_enter_{call}" for call in SYSCALLS)], **quiet
                ),
            ]  # fmt: skip
        else:
            self._stop_perf()
        return {}

    def _stop_perf(self) -> None:
        for perf in self._perf:
            perf.send_signal(signal.SIGINT)
        for perf in self._perf:
            try:
                perf.wait(60)
            except subprocess.TimeoutExpired:
                perf.kill()
                perf.wait()
        self._perf = []

    def reap_children(self) -> None:
        super().reap_children()
        self._stop_perf()

    def _add(self, server: str, sc: run.Scenario, res: run.Result) -> None:
        profile = self.profiles.setdefault((server, sc.name), Profile(server, sc.name))
        script = subprocess.run(
            ["perf", "script", "-i", self._data, "-F", "period,ip,sym,dso"],
            capture_output=True,
            text=True,
            errors="replace",
            check=True,
        )
        os.unlink(self._data)
        with open(self._data + ".stat") as f:
            for line in f:
                fields = line.split(",")
                if len(fields) > 2 and fields[2].startswith("syscalls:sys_enter_"):
                    call = fields[2].removeprefix("syscalls:sys_enter_")
                    if fields[0].isdigit():
                        profile.syscalls[SYSCALLS[call]] += int(fields[0])
        os.unlink(self._data + ".stat")
        for (stage, where), ns in parse_script(script.stdout.splitlines()).items():
            profile.ns[stage] += ns
            profile.where[stage, where] += ns
        profile.requests += requests_served(res, sc)
        profile.proc_cpu_s += res.server_cpu_s
        profile.ops_per_sec.append(res.ops_per_sec)

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def format_profiles(profiles: dict[tuple[str, str], Profile], scenarios: Sequence[str]) -> str:
    head = (
        f"{'workload':<16} {'server':<14} {'req/s':>8} {'proc':>6} {'total':>6} "
        + " ".join(f"{c:>8}" for c in COLUMNS)
        + "    reads writes  polls"
    )
    lines = [head, "-" * len(head)]
    for sc in scenarios:
        rows = [p for (_s, name), p in profiles.items() if name == sc]
        for p in rows:
            window = sum(p.ops_per_sec) / len(p.ops_per_sec) if p.ops_per_sec else 0
            proc = p.proc_cpu_s * 1e6 / p.requests if p.requests else float("nan")
            lines.append(
                f"{sc:<16} {p.server:<14} {window:>8,.0f} {proc:>6.2f} {p.total_us:>6.2f} "
                + " ".join(f"{p.us(c):>8.2f}" for c in COLUMNS)
                + "".join(f" {p.syscalls[k] / p.requests:>6.2f}" for k in ("read", "write", "poll"))
            )
        mine = next((p for p in rows if p.server == "disquette"), None)
        for other in (p for p in rows if p.server != "disquette"):
            if mine is None:
                continue
            cells = []
            for c in COLUMNS:
                a, b = mine.us(c), other.us(c)
                cells.append(f"{a - b:>+8.2f}")
            lines.append(
                f"{'':<16} {'minus ' + other.server[:8]:<14} {'':>8} "
                f"{'':>6} {mine.total_us - other.total_us:>+6.2f} " + " ".join(cells)
            )
        lines.append("")
    return "\n".join(lines)


def format_details(profiles: dict[tuple[str, str], Profile], top: int) -> str:
    """The ``top`` places of each stage, per server and workload, in us per request."""
    lines = []
    for (server, scenario), p in profiles.items():
        lines.append(f"{scenario} on {server}:")
        for stage in COLUMNS:
            places = [(w, ns) for (s, w), ns in p.where.most_common() if s == stage][:top]
            if not places:
                continue
            lines.append(f"  {stage:<9} {p.us(stage):6.2f}")
            lines.extend(f"    {ns / 1000 / p.requests:6.2f}  {w[:90]}" for w, ns in places)
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = run.common_parser(__doc__)
    ap.add_argument("--depth", type=int, default=16, help="pipeline depth of the -pN scenario")
    ap.add_argument("--frequency", type=int, default=2999, help="samples per second (perf -F)")
    ap.add_argument(
        "--detail", type=int, default=0, metavar="N",
        help="also list the N places that take most of each stage",
    )  # fmt: skip
    ap.set_defaults(duration=3.0)
    args = ap.parse_args(argv)
    run.check_common_args(ap, args)
    args.no_redis = True
    return args


def main(argv: Sequence[str] | None = None) -> int:
    cm.require_hiredis()
    if shutil.which("perf") is None:
        sys.exit("bench: perf is not installed (Debian: apt-get install linux-perf)")
    args = parse_args(argv)
    body = (b"0123456789abcdef" * (args.body_size // 16 + 1))[: args.body_size]
    scenarios = [
        s
        for s in run.select_scenarios(args, run.build_scenarios(body, args.depth))
        if s.family == "disque"
    ]
    specs = run.select_servers(args, run.disque_specs(args))
    if not specs:
        sys.exit("bench: no server to run")
    header = run.make_header(
        "disquette request-path profile", args, specs, "perf record of the server's window"
    )
    print("\n".join(header.lines), flush=True)
    bench = ProfiledBench(args, scenarios)
    try:
        interrupted = run.run_bench(bench, specs)
    finally:
        bench.close()
    run.print_servers(bench, specs, header)
    print()
    print("microseconds of server CPU per request, by stage (bench/request_path.py's docstring):")
    print(format_profiles(bench.profiles, [s.name for s in scenarios]))
    if args.detail:
        print()
        print(format_details(bench.profiles, args.detail))
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
