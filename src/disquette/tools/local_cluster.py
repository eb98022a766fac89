"""``python -m disquette.tools.local_cluster``: a local cluster for development.

``make run`` uses it. It starts ``--nodes`` servers on 127.0.0.1, on ports
``--port`` upwards, each in its own data directory under ``--dir``
(``.run/node-<port>``: nodes.conf and ``server.log``), joins them with
CLUSTER MEET from the first node (gossip completes the mesh), waits until
every node sees every other one connected, says so, and runs until Ctrl-C or
SIGTERM, which stop every node cleanly. A node that dies meanwhile is reported
and the others keep running; restart it by hand in its directory (``cd
.run/node-<port> && disquette-server --port <port> --bind 127.0.0.1``): it rejoins
from its nodes.conf (docs/getting-started.md shows it). Arguments after ``--``
go to every server. With ``--nodes 1`` it runs one server in the foreground instead, its
data (nodes.conf, the AOF) in ``.run/node-<port>`` as well. Every node opens its
HTTP port (the JSON API and the dashboard) on its client port + 1000 (:data:`HTTP_OFFSET`),
and the first node's dashboard URL is printed. With ``--compile-in-background`` (make
run), a missing or stale compiled build is made in the background while the nodes run
the pure build (tools/compiled_build.py), and its end is told.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from disquette import build
from disquette.tools import compiled_build

HOST = "127.0.0.1"


class Stop(Exception):
    """SIGTERM or SIGINT: stop every node."""


def command(port: int, *args: str, timeout: float = 2.0, host: str = HOST) -> Any:
    """Send one command to the node on ``host:port`` and return its parsed reply."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(b"".join(parts))
        with sock.makefile("rb") as stream:
            return _read_reply(stream)


def _read_reply(stream: Any) -> Any:
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else stream.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(stream) for _ in range(n)]
    raise ConnectionError(f"bad reply {line!r}")


def _answers(port: int) -> bool:
    try:
        return command(port, "PING", timeout=0.5) == b"PONG"
    except (OSError, RuntimeError):
        return False


def _meshed(ports: list[int], ids: dict[int, bytes], host: str = HOST) -> bool:
    """Every node sees every other one, connected, not failing, not in handshake, and
    counts it reachable (CLUSTER INFO's count, recomputed a moment after NODES shows it),
    and no row is in handshake: a node met twice (by MEET and by gossip) shows a
    handshake row of its address until the second handshake ends."""
    reachable = b"cluster_reachable_nodes:%d\r\n" % (len(ports) - 1)
    for port in ports:
        try:
            text = command(port, "CLUSTER", "NODES", host=host)
            if reachable not in command(port, "CLUSTER", "INFO", host=host):
                return False
        except (OSError, RuntimeError):
            return False
        seen = {}
        for line in text.splitlines():
            fields = line.split()
            seen[fields[0]] = (fields[2], fields[5])  # (disquette adds fields after Disque's)
        if any(b"handshake" in flags.split(b",") for flags, _ in seen.values()):
            return False
        for other in ports:
            if other == port:
                continue
            flags, state = seen.get(ids[other], (b"?", b"?"))
            if state != b"connected" or flags not in (b"noflags", b"leaving"):
                return False
    return True


def _wait(condition: Any, seconds: float, procs: dict[int, subprocess.Popen[bytes]]) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs.values()):
            return False
        if condition():
            return True
        time.sleep(0.05)
    return False


def join(
    ports: list[int],
    wait: float,
    procs: dict[int, subprocess.Popen[bytes]] | None = None,
    host: str = HOST,
) -> bool:
    """Join running nodes on ``host:ports`` into one cluster and wait for the full mesh.

    The first node sends CLUSTER MEET to each other one (gossip completes the mesh);
    then every node must see every other one connected and without flags. Works for
    any server that speaks Disque's CLUSTER MEET/MYID/NODES (disquette or an original
    disque-server; the benchmarks use it for both). Returns False when the mesh is not
    complete within ``wait`` seconds or one of ``procs`` exits meanwhile.
    """
    procs = procs or {}
    ids = {port: command(port, "CLUSTER", "MYID", host=host) for port in ports}
    for port in ports[1:]:
        command(ports[0], "CLUSTER", "MEET", host, str(port), host=host)
    return _wait(lambda: _meshed(ports, ids, host), wait, procs)


def _stop(procs: dict[int, subprocess.Popen[bytes]]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for proc in procs.values():
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _raise_stop(signum: int, frame: Any) -> None:
    # Once: a second Ctrl-C must not interrupt the stopping (bounded by _stop).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Stop


def node_dir(base: Path, port: int) -> Path:
    """The data directory of the node on ``port`` (nodes.conf, its log, the AOF)."""
    workdir = base / f"node-{port}"
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


#: A node's HTTP port is its client port + this (7711 -> 8711).
HTTP_OFFSET = 1000


def node_args(port: int) -> list[str]:
    """A node's arguments: its port on loopback, its HTTP port on the port + 1000 (the
    documentation's tests start their nodes with them too)."""
    return ["--port", str(port), "--bind", HOST, "--http-port", str(port + HTTP_OFFSET)]


def dashboard_line(port: int) -> str:
    return f"dashboard: http://{HOST}:{port + HTTP_OFFSET}/"


def run_cluster(
    nodes: int,
    first_port: int,
    base: Path,
    extra: list[str],
    wait: float,
    compiler: subprocess.Popen[bytes] | None = None,
) -> int:
    """Run ``nodes`` nodes until a signal; ``compiler``: the compile under way in the
    background, whose end is told (the next start runs compiled)."""
    ports = list(range(first_port, first_port + nodes))
    procs: dict[int, subprocess.Popen[bytes]] = {}
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    try:
        for port in ports:
            workdir = node_dir(base, port)
            with open(workdir / "server.log", "ab") as log:
                procs[port] = subprocess.Popen(
                    [sys.executable, "-m", "disquette.server", *node_args(port), *extra],
                    cwd=workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C reaches this process, which stops them
                )  # fmt: skip
        if not _wait(lambda: all(_answers(p) for p in ports), wait, procs):
            return _failed(procs, base, "did not start")
        if not join(ports, wait, procs):
            return _failed(procs, base, "did not join")
        addresses = " ".join(f"{HOST}:{p}" for p in ports)
        print(
            f"disquette: local cluster of {nodes} nodes ready on {addresses}\n"
            f"  data and logs in {base}/node-<port>/; Ctrl-C stops all nodes.\n"
            f"  {dashboard_line(first_port)}",
            flush=True,
        )
        running = set(ports)
        while running:
            time.sleep(0.2)
            if compiler is not None and compiler.poll() is not None:
                print(_compiled_message(compiler.returncode), flush=True)
                compiler = None
            for port in sorted(running):
                code = procs[port].poll()
                if code is not None:
                    running.discard(port)
                    print(f"disquette: the node on port {port} exited ({code})", flush=True)
        return 1
    except Stop:
        print("disquette: stopping the local cluster...", flush=True)
        _stop(procs)
        print("disquette: all nodes stopped.", flush=True)
        return 0
    finally:
        _stop(procs)


def _failed(procs: dict[int, subprocess.Popen[bytes]], base: Path, what: str) -> int:
    _stop(procs)
    print(f"disquette: the local cluster {what}; see {base}/node-<port>/server.log:",
          file=sys.stderr)  # fmt: skip
    for port in procs:
        log = base / f"node-{port}" / "server.log"
        tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
        for line in tail:
            print(f"  [{port}] {line}", file=sys.stderr)
    return 1


def _compiled_message(code: int) -> str:
    """What the end of the background compile means for the next start."""
    importlib.invalidate_caches()  # (the extension modules appeared since the start)
    if code == 0 and compiled_build.current() and build.current() == "compiled":
        return "disquette: the compiled build is ready; the next start runs it"
    return (
        "disquette: the compiled build could not be made (a C compiler and Python's headers "
        f"are needed: make tools), so the pure build runs; see {compiled_build.LOG}"
    )


def _pure_meanwhile() -> subprocess.Popen[bytes] | None:
    """When the compiled build is missing or stale: compile it in the background and run
    this start's nodes on the pure build; the compile, or None when the build is current."""
    if compiled_build.current() or build.pure_requested():
        return None
    compiler = compiled_build.start_in_background()
    os.environ[build.PURE_SWITCH] = "1"  # for the nodes started from here
    print(
        "disquette: the compiled build is being made in the background (a few minutes; "
        f"log in {compiled_build.LOG});\n"
        "  this start runs the pure build (the same code, interpreted, slower) and the "
        "next one the compiled build",
        flush=True,
    )
    return compiler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m disquette.tools.local_cluster",
        description="Run a local disquette cluster joined and ready (Ctrl-C stops it).",
    )
    parser.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    parser.add_argument("--port", type=int, default=7711, help="first client port (7711)")
    parser.add_argument("--dir", default=".run", help="parent of the data directories (.run)")
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the mesh")
    parser.add_argument(
        "--compile-in-background",
        action="store_true",
        help="when the compiled build is missing or stale, run the pure build and compile "
        "meanwhile (make run)",
    )
    parser.add_argument("server_args", nargs="*", help="after --: arguments for every server")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")
    compiler = _pure_meanwhile() if args.compile_in_background else None
    if args.nodes == 1:
        workdir = node_dir(Path(args.dir), args.port).resolve()
        print(f"disquette: one node on port {args.port}, data in {workdir}/", flush=True)
        print(f"  {dashboard_line(args.port)}", flush=True)
        server = [sys.executable, "-m", "disquette.server", "--port", str(args.port),
                  "--dir", str(workdir), "--http-port", str(args.port + HTTP_OFFSET)]  # fmt: skip
        os.execv(sys.executable, [*server, *args.server_args])
    return run_cluster(args.nodes, args.port, Path(args.dir), args.server_args, args.wait, compiler)


if __name__ == "__main__":
    sys.exit(main())
