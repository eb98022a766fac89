"""Shared helpers for the disquette benchmark scripts (``run.py`` and ``memory.py``).

Everything here is standard library only (plus ``hiredis`` where a RESP parser is
needed) and Linux specific: server CPU time and RSS are read from ``/proc``.

Contents:

* :class:`ServerSpec` / :class:`Server` -- start a server (disquette, redis-server or
  any other binary) on a free loopback port in its own temporary directory and
  session, wait until it answers ``PING``, and stop it again (SIGTERM, then SIGKILL).
* :class:`BlockingClient` -- a tiny synchronous RESP client used for set-up work
  (preloading, ``INFO``, ``QLEN``...), never for the timed load.
* ``/proc`` readers: process CPU time, RSS, machine-wide CPU counters.
* Machine / interpreter descriptions printed in every report.
* For ``soak.py``: job bodies, Disque memory sizes, an RSS sampler thread and the
  report header.
* For the scripts that measure disquette's compiled build and, with ``--pure``, its pure
  build too (``acl.py``, ``cron.py``, ``extensions.py``): their shared options, the
  builds they select and their JSON output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Self

try:
    import hiredis
except ImportError:  # pragma: no cover - reported to the user by the entry points
    hiredis = None  # type: ignore[assignment]

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def require_hiredis() -> None:
    """Exit with a helpful message when hiredis is not importable."""
    if hiredis is None:
        sys.exit(
            "bench: the 'hiredis' package is required (pip install hiredis, or run with the "
            "project's virtualenv: .venv/bin/python bench/run.py)"
        )


def progress(msg: str) -> None:
    """A progress line on stderr (the report itself goes to stdout)."""
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- RESP


def interrupt_on_sigterm() -> None:
    """A SIGTERM ends a benchmark as Ctrl-C does: its servers are stopped and what it
    measured so far is reported."""

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)


def encode(*args: bytes | str | int) -> bytes:
    """Encode one command as a RESP multi-bulk request."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a).encode()
        elif isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class ServerStartError(RuntimeError):
    """The server process exited or did not answer PING during start-up."""


class ServerError(Exception):
    """An error reply (``-ERR ...``) received by :class:`BlockingClient`."""


class BlockingClient:
    """Minimal blocking RESP2 client on top of ``hiredis.Reader`` (set-up work only)."""

    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        require_hiredis()
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_reply(self) -> Any:
        """Return the next reply; error replies are returned as ``hiredis.ReplyError``."""
        while True:
            r = self.reader.gets()
            if r is not False:
                return r
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("server closed the connection")
            self.reader.feed(data)

    def call(self, *args: bytes | str | int) -> Any:
        """Send one command and return its reply, raising :class:`ServerError` on errors."""
        self.sock.sendall(encode(*args))
        r = self.read_reply()
        if isinstance(r, hiredis.ReplyError):
            raise ServerError(str(r))
        return r

    def pipeline_repeat(self, request: bytes, count: int, batch: int = 1000) -> None:
        """Send ``request`` ``count`` times, pipelined ``batch`` deep with two batches in
        flight. Raises :class:`ServerError` (after draining what is in flight) as soon as a
        batch contained an error reply."""
        sent = 0
        inflight: list[int] = []
        errors = 0
        first_error = ""
        while inflight or (sent < count and not errors):  # after an error: drain, stop
            while sent < count and len(inflight) < 2 and not errors:
                n = min(batch, count - sent)
                self.sock.sendall(request * n)
                inflight.append(n)
                sent += n
            for _ in range(inflight.pop(0)):
                r = self.read_reply()
                if isinstance(r, hiredis.ReplyError):
                    errors += 1
                    first_error = first_error or str(r)
        if errors:
            raise ServerError(f"{errors} of {sent} replies were errors, first: {first_error}")


# --------------------------------------------------------------------------- /proc


def drain(client: BlockingClient, queue: str, batch: int = 100) -> int:
    """Take every job queued in ``queue`` (``GETJOB NOHANG COUNT batch``), acknowledging
    each batch with one ACKJOB; returns how many jobs were taken."""
    taken = 0
    while True:
        got = client.call("GETJOB", "NOHANG", "COUNT", batch, "FROM", queue)
        if not got:
            return taken
        client.call("ACKJOB", *[job[1] for job in got])
        taken += len(got)


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    # The command name (field 2) may contain spaces and parentheses: split after the
    # last ')'. Fields from there on start at field 3 (state).
    rest = data[data.rindex(b")") + 2 :].split()
    utime, stime = int(rest[11]), int(rest[12])  # fields 14 and 15
    return (utime + stime) / CLK_TCK


def proc_rss_bytes(pid: int) -> int:
    """Resident set size of a process in bytes (from /proc/<pid>/statm)."""
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE_SIZE


def machine_cpu_ticks() -> tuple[int, int, int]:
    """(busy, irq, total) clock ticks of the whole machine from /proc/stat.

    ``irq`` is hard + soft interrupt time. It is charged to no process: on loopback TCP
    most of it is the kernel's packet processing for the benchmark's own traffic."""
    with open("/proc/stat", "rb") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already included in user/nice
    irq = fields[5] + fields[6] if len(fields) > 6 else 0
    return total - idle, irq, total


def background_load(seconds: float = 1.0) -> float:
    """Fraction of the machine's CPU busy over ``seconds`` (sampled before a benchmark:
    anything well above 0 means other work is competing with the measurement)."""
    b0, _, t0 = machine_cpu_ticks()
    time.sleep(seconds)
    b1, _, t1 = machine_cpu_ticks()
    return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


def describe_background(load: float) -> str:
    ncpu = os.cpu_count() or 1
    text = f"{load:.0%} of {ncpu} CPUs busy during 1 s before starting"
    if load >= 0.1:
        text += "  ** WARNING: the machine is not idle; results will be noisy **"
    return text


# --------------------------------------------------------------------------- descriptions


def machine_info() -> dict[str, Any]:
    """nproc, CPU model, memory, kernel -- printed with every result set."""
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
                break
    return {
        "nproc": os.cpu_count() or 1,
        "affinity_cpus": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "mem_total_bytes": mem,
        "kernel": platform.release(),
        "hostname": platform.node(),
    }


_INTERP_PROBE = r"""
import json, sys, sysconfig
def v(name):
    return sysconfig.get_config_var(name) or ""
mods = {}
for m in ("uvloop", "hiredis", "disquette"):
    try:
        mod = __import__(m)
        mods[m] = getattr(mod, "__version__", "?")
    except Exception:
        mods[m] = None
try:  # which build a server started with this interpreter (and environment) runs
    from disquette import build
    mods["disquette"] += f" ({build.current()} build)"
except Exception:
    pass
shared = False
try:
    with open("/proc/self/maps") as f:
        shared = "libpython" in f.read()
except OSError:
    pass
print(json.dumps({
    "executable": sys.executable,
    "libpython_shared": shared,
    "version": sys.version.split()[0],
    "implementation": sys.implementation.name,
    "build": " ".join(sys.version.split()[1:]),
    "flags": {k: v(k) for k in ("PY_CFLAGS", "PY_CFLAGS_NODIST", "PY_CORE_CFLAGS",
                                  "PY_LDFLAGS_NODIST", "CONFIG_ARGS")},
    "modules": mods,
}))
"""


def interpreter_info(python: str, pythonpath: str | None = None) -> dict[str, Any]:
    """Describe a Python interpreter: version and whether it is an optimised build.

    "Optimised" means profile-guided (``--enable-optimizations`` in CONFIG_ARGS or
    ``-fprofile-use`` in the compiler flags) and/or link-time optimised (``--with-lto`` or
    ``-flto``). Also reports whether uvloop and hiredis are importable by it.
    """
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    try:
        out = subprocess.run(
            [python, "-c", _INTERP_PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=True,
        ).stdout
        info: dict[str, Any] = json.loads(out)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as e:
        return {"executable": python, "error": str(e)}
    flags = info.pop("flags")
    allflags = " ".join(flags.values())
    pgo = "-fprofile-use" in allflags or "--enable-optimizations" in flags["CONFIG_ARGS"]
    lto = "-flto" in allflags or "--with-lto" in flags["CONFIG_ARGS"]
    info["pgo"] = pgo
    info["lto"] = lto
    info["package"] = _distribution_package(info["executable"]) if not (pgo or lto) else None
    info["optimised"] = pgo or lto or info["package"] is not None
    info["config_args"] = flags["CONFIG_ARGS"]
    info["cflags"] = flags["PY_CFLAGS"]
    return info


def _distribution_package(executable: str) -> str | None:
    """The Debian package that ships this interpreter, if any.

    Debian builds python3.x with PGO and LTO but strips those flags from sysconfig,
    so the build can only be recognised by where it comes from.
    """
    try:
        out = subprocess.run(
            ["dpkg", "-S", os.path.realpath(executable)],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.split(":", 1)[0] or None


def describe_interpreter(info: dict[str, Any]) -> str:
    """One-line human description of :func:`interpreter_info` output."""
    if "error" in info:
        return f"{info['executable']} (could not be inspected: {info['error']})"
    opt = []
    if info["pgo"]:
        opt.append("PGO")
    if info["lto"]:
        opt.append("LTO")
    if opt:
        optdesc = "optimised build (" + "+".join(opt) + ")"
    elif info.get("package"):
        optdesc = f"Debian's build from {info['package']} (PGO+LTO, not shown by sysconfig)"
    else:
        optdesc = "NOT an optimised build according to sysconfig"
    if info.get("libpython_shared"):
        optdesc += ", shared libpython"
    mods = ", ".join(
        f"{k} {v}" if v else f"no {k}" for k, v in info["modules"].items() if k != "disquette" or v
    )
    return f"{info['executable']}: {info['implementation']} {info['version']}, {optdesc}; {mods}"


def command_line() -> str:
    """The exact command line this script was started with (shell-quoted)."""
    return " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])


# --------------------------------------------------------------------------- servers


def free_port(also_bus: bool = True) -> int:
    """A free loopback TCP port (and, for Disque servers, a free port + 10000 too)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not also_bus:
            return port
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("could not find a free port")


@dataclass
class ServerSpec:
    """How to start one kind of server.

    ``argv`` gets ``--port N`` appended (then ``extra``); ``family`` is ``"disque"`` or
    ``"redis"`` and selects the scenarios it runs.
    """

    name: str
    family: str
    argv: list[str]
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    start_timeout: float = 60.0


class Server:
    """A running server process in its own session and temporary working directory."""

    def __init__(self, spec: ServerSpec, host: str = "127.0.0.1") -> None:
        self.spec = spec
        self.host = host
        self.port = free_port(also_bus=spec.family == "disque")
        self.tmpdir = tempfile.mkdtemp(prefix=f"bench-{spec.name}-")
        self.log_path = Path(self.tmpdir) / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def nodes(self) -> list[Server]:
        """The servers of this benchmark target: itself (``bench/cluster.py`` has targets
        of several)."""
        return [self]

    def start(self) -> None:
        argv = [*self.spec.argv, "--port", str(self.port), *self.spec.extra]
        env = dict(os.environ)
        env.update(self.spec.env)
        log = open(self.log_path, "wb")  # noqa: SIM115 - closed by the child/OS
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=self.tmpdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in the terminal must not reach it
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.spec.start_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"{self.spec.name} exited with status {self.proc.returncode} during "
                    f"start-up: {' '.join(argv)}\n{self.log_tail()}"
                )
            try:
                with BlockingClient(self.host, self.port, timeout=2) as c:
                    r = c.call("PING")
                    if r in (b"PONG", "PONG"):
                        return
            except (OSError, ServerError) as e:
                last = e
            time.sleep(0.05)
        self.stop()
        raise ServerStartError(
            f"{self.spec.name} did not answer PING within {self.spec.start_timeout:.0f}s "
            f"({last}): {' '.join(argv)}\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("    " + x for x in text[-lines:])

    def client(self) -> BlockingClient:
        return BlockingClient(self.host, self.port)

    def info(self) -> dict[str, str]:
        """Parsed ``INFO`` output (empty dict when the command fails)."""
        try:
            with self.client() as c:
                raw = c.call("INFO")
        except (OSError, ServerError):
            return {}
        if isinstance(raw, bytes):
            raw = raw.decode(errors="replace")
        out = {}
        for line in str(raw).splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k.strip()] = v.strip()
        return out

    def version(self) -> str:
        info = self.info()
        for key in ("disque_version", "redis_version", "version"):
            if key in info:
                return info[key]
        return "?"

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.pid)

    def rss_bytes(self) -> int:
        return proc_rss_bytes(self.pid)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove its directory."""
        p = self.proc
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait(10)
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _with_src() -> dict[str, str]:
    """The environment that makes the repository's ``src`` importable first."""
    src = str(REPO / "src")
    pp = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": src + (os.pathsep + pp if pp else "")}


def disquette_spec(python: str, extra: Sequence[str] = (), pure: bool = False) -> ServerSpec:
    """disquette started as ``<python> -m disquette.server --port N [extra]`` with the
    repository's ``src`` prepended to PYTHONPATH; ``pure``: the pure build
    (``DISQUETTE_PURE=1``), named ``disquette-pure``."""
    return ServerSpec(
        name="disquette-pure" if pure else "disquette",
        family="disque",
        argv=[python, "-m", "disquette.server"],
        extra=list(extra),
        env={**_with_src(), "DISQUETTE_PURE": "1"} if pure else _with_src(),
    )


def floor_spec(python: str, mode: str, extra: Sequence[str] = ()) -> ServerSpec:
    """The floor server ``mode`` of bench/floors.py, named ``floor-<mode>``."""
    return ServerSpec(
        name=f"floor-{mode}",
        family="disque",
        argv=[python, str(REPO / "bench" / "floors.py"), mode],
        extra=list(extra),
        env=_with_src(),
    )


def redis_spec(path: str, extra: Sequence[str] = ()) -> ServerSpec:
    """redis-server with persistence off, loopback only."""
    return ServerSpec(
        name="redis",
        family="redis",
        argv=[path],
        extra=[
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            *extra,
        ],
        start_timeout=20,
    )


def other_spec(path: str, extra: Sequence[str] = ()) -> ServerSpec:
    """Any other Disque-compatible binary, started as ``PATH --port N [extra]``."""
    return ServerSpec(
        name=Path(path).name, family="disque", argv=[path], extra=list(extra), start_timeout=30
    )


def add_build_options(parser: argparse.ArgumentParser) -> None:
    """``--pure`` (also measure the pure build: :func:`disquette_builds`) and ``--json FILE``
    (:func:`save_results`)."""
    parser.add_argument("--pure", action="store_true", help="also run the pure build")
    parser.add_argument("--json", help="write the results to this file")


def disquette_builds(pure: bool, pure_only: bool = False) -> list[ServerSpec]:
    """disquette's compiled build run by this interpreter, then its pure build with
    ``pure``; the pure build alone with ``pure_only``."""
    specs = [] if pure_only else [disquette_spec(sys.executable)]
    if pure or pure_only:
        specs.append(disquette_spec(sys.executable, pure=True))
    return specs


def find_redis(path: str | None) -> str | None:
    """The redis-server binary to use (explicit path or from PATH)."""
    if path:
        return path
    return shutil.which("redis-server")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of an already sorted sequence."""
    if not sorted_values:
        return float("nan")
    k = math.ceil(q / 100 * len(sorted_values)) - 1
    return sorted_values[max(0, min(len(sorted_values) - 1, k))]


# --------------------------------------------------------------------------- soak helpers


def make_body(size: int) -> bytes:
    """A job / element body of ``size`` bytes (a repeated hex digit run)."""
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


_MEMORY_UNITS = {
    "b": 1,
    "k": 1000,
    "kb": 1024,
    "m": 10**6,
    "mb": 1 << 20,
    "g": 10**9,
    "gb": 1 << 30,
}


def parse_memory(text: str) -> int:
    """Bytes of a Disque memory size (``256mb``, ``1gb``, ``100m``, ``4096``): the units of
    the ``maxmemory`` directive, case-insensitive (``k``/``m``/``g`` are powers of 1000,
    ``kb``/``mb``/``gb`` of 1024)."""
    t = text.strip().lower()
    digits = t.rstrip("kmgb")
    unit = t[len(digits) :] or "b"
    if not digits.isdigit() or unit not in _MEMORY_UNITS:
        raise ValueError(f"not a memory size: {text!r}")
    return int(digits) * _MEMORY_UNITS[unit]


class Sampler:
    """A daemon thread running :meth:`_sample` for the length of a ``with`` block, which
    ends by setting ``_stop`` (the loop waits on it between samples) and joining it."""

    join_timeout: float | None = None

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name=name, daemon=True)

    @abstractmethod
    def _sample(self) -> None:
        """Sample until ``_stop`` is set."""

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.join_timeout)


class RssSampler:
    """The RSS of some processes, sampled by a thread every ``interval`` seconds.

    ``samples`` holds ``(seconds since start(), [rss of each pid])``. When ``limit`` is
    non-zero and any process's RSS passes it, ``on_limit(rss)`` is called once (the soak
    benchmark stops its load there, so a server whose memory runs away cannot take the
    machine's). A process that has gone away samples as 0."""

    def __init__(
        self,
        pids: Sequence[int],
        interval: float = 1.0,
        limit: int = 0,
        on_limit: Callable[[int], object] | None = None,
    ) -> None:
        self.pids = list(pids)
        self.interval = interval
        self.limit = limit
        self.on_limit = on_limit
        self.samples: list[tuple[float, list[int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._t0 = 0.0

    def read(self) -> list[int]:
        out = []
        for pid in self.pids:
            try:
                out.append(proc_rss_bytes(pid))
            except (OSError, ValueError, IndexError):
                out.append(0)
        return out

    def _run(self) -> None:
        tripped = False
        next_t = self._t0
        while True:
            rss = self.read()
            self.samples.append((time.monotonic() - self._t0, rss))
            if self.limit and not tripped and max(rss) > self.limit:
                tripped = True
                if self.on_limit is not None:
                    self.on_limit(max(rss))
            next_t += self.interval
            if self._stop.wait(max(0.0, next_t - time.monotonic())):
                return

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (after one last sample)."""
        self._stop.set()
        self._thread.join(10)
        self.samples.append((time.monotonic() - self._t0, self.read()))

    def __enter__(self) -> RssSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def series(self, index: int = 0) -> list[tuple[float, int]]:
        """``(seconds, rss)`` of the ``index``-th process."""
        return [(t, rss[index]) for t, rss in self.samples]


def run_description(
    title: str, disquette_python: str | None, generator: bool = False
) -> tuple[list[str], dict[str, Any]]:
    """The lines a report starts with (title, command, date, machine, background load,
    the load generator's interpreter when ``generator``, disquette's interpreter when
    ``disquette_python`` is given) and the same as data."""
    started = datetime.now().astimezone()
    machine = machine_info()
    machine["background_load"] = background_load()
    bench_interp = interpreter_info(sys.executable) if generator else None
    interp = interpreter_info(disquette_python, str(REPO / "src")) if disquette_python else None
    lines = [
        title,
        f"command:     {command_line()}",
        f"date:        {started.isoformat(timespec='seconds')}",
        f"machine:     {machine['nproc']} CPUs ({machine['affinity_cpus']} usable), "
        f"{machine['cpu_model']}, {machine['mem_total_bytes'] / 2**30:.1f} GiB, "
        f"Linux {machine['kernel']}",
        f"background:  {describe_background(machine['background_load'])}",
    ]
    if bench_interp:
        lines.append(f"generator:   {describe_interpreter(bench_interp)}")
    if interp:
        lines.append(f"disquette:   {describe_interpreter(interp)}")
    doc = {
        "command": command_line(),
        "argv": sys.argv,
        "date": started.isoformat(timespec="seconds"),
        "machine": machine,
        "disquette_interpreter": interp,
    }
    if bench_interp:
        doc["generator_interpreter"] = bench_interp
    return lines, doc


def save_results(path: str | None, meta: dict[str, Any], results: object) -> None:
    """With ``--json FILE``: the report's description (:func:`run_description`) and its
    results, written as JSON."""
    if path:
        Path(path).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
