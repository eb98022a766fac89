#!/usr/bin/env python3
"""The request path in one process, without sockets: CPU per request (not a test).

``bench/request_path.py`` profiles servers under load, which on a shared machine
moves by tens of percent from run to run. This measures the part of a request that
is disquette's own Python, the same way every time: a :class:`ClientConnection`
with a transport that keeps what it is given, fed the requests of each workload of
``bench/run.py`` (``data_received``, the command pipeline, the outbox flushed as at
the end of an event-loop turn, its callback scheduled as in the server), timed
with this thread's CPU clock, best of many short runs. What it leaves out is the
event loop's own work and the kernel's: reading, polling, writing.

Run: .venv/bin/python bench/request_micro.py [--quick] [--pure]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

BODY = b"0123456789abcdef" * 4


def encode(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Transport:
    """What a connection writes to, kept (the last write) and counted."""

    def __init__(self) -> None:
        self.last = b""
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.last = data
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else None

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


class NoAof:
    def flush(self) -> None:
        pass


def make_connection() -> tuple[object, Transport, object]:
    """A node, its command pipeline and one connected client, as the server makes them."""
    from disquette.commands import new_state
    from disquette.config.model import Config
    from disquette.core.node import Node
    from disquette.server.clock import NodeClock
    from disquette.server.connection import ClientConnection
    from disquette.server.outbox import Outbox

    config = Config()
    rng = random.Random(1)
    node = Node(config, os.urandom(20).hex().encode(), NodeClock().now_ms, rng, os.urandom)

    class Server:  # what a connection asks of the server
        def __init__(self) -> None:
            self.config = config
            self.state = new_state(config, node)
            self.outbox = Outbox(NoAof())

        def protected_mode(self) -> bool:
            return False

    server = Server()
    conn = ClientConnection(server)
    transport = Transport()
    conn.connection_made(transport)
    return conn, transport, server.outbox


Step = tuple[Callable[[], object], int]


def workloads(conn: object, transport: Transport, outbox: object) -> dict[str, Step]:
    """Each workload's step (a function) and how many requests it makes."""
    received = conn.data_received  # type: ignore[attr-defined]
    flush = outbox.flush  # type: ignore[attr-defined]
    addjob = encode(b"ADDJOB", b"q", BODY, b"0")
    pipeline = addjob * 16
    getjob = encode(b"GETJOB", b"FROM", b"q")
    nohang = encode(b"GETJOB", b"NOHANG", b"FROM", b"q")
    timeout = encode(b"GETJOB", b"TIMEOUT", b"100", b"FROM", b"q")
    ack = b"*2\r\n$6\r\nACKJOB\r\n$40\r\n"
    fastack = b"*2\r\n$7\r\nFASTACK\r\n$40\r\n"
    # A job reply for queue "q": its ID starts at a fixed offset.
    id_at = len(b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n")

    def one(request: bytes) -> None:
        received(request)
        flush()

    def cycle(get: bytes, done: bytes) -> None:
        one(get)
        job_id = transport.last[id_at : id_at + 40]
        one(done + job_id + b"\r\n")

    def mixed() -> None:
        one(addjob)
        cycle(timeout, ack)

    return {
        "addjob": (lambda: one(addjob), 1),
        "addjob-p16": (lambda: one(pipeline), 16),
        "getjob-ack": (lambda: cycle(getjob, ack), 2),
        "getjob-fastack": (lambda: cycle(nohang, fastack), 2),
        "mixed": (mixed, 3),
    }


NAMES = ("addjob", "addjob-p16", "getjob-ack", "getjob-fastack", "mixed")


def measure(quick: bool, names: list[str]) -> None:
    number = 2000 if quick else 5000
    repeat = 7 if quick else 21
    print(f"{'workload':<16} {'ns/request':>10}")
    for name in names:
        conn, transport, outbox = make_connection()
        steps = workloads(conn, transport, outbox)
        step, requests = steps[name]
        if name in ("getjob-ack", "getjob-fastack"):  # a queue that never runs dry
            load = steps["addjob-p16"][0]
            for _ in range((number * repeat + 1000) // 16):
                load()
        timer = timeit.Timer(step, timer=time.thread_time)
        best = min(timer.repeat(number=number, repeat=repeat))
        print(f"{name:<16} {best / number / requests * 1e9:>10.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    ap.add_argument("--pure", action="store_true", help="measure the pure build")
    ap.add_argument(
        "--workloads", default=",".join(NAMES), help="comma-separated, of " + ", ".join(NAMES)
    )
    args = ap.parse_args()
    names = [n for n in args.workloads.split(",") if n]
    if not set(names) <= set(NAMES):
        ap.error(f"unknown workloads: {', '.join(sorted(set(names) - set(NAMES)))}")
    src = str(Path(__file__).resolve().parents[1] / "src")
    if args.pure and os.environ.get("DISQUETTE_PURE") != "1":
        env = {**os.environ, "DISQUETTE_PURE": "1"}
        argv = [sys.executable, __file__, "--workloads", args.workloads]
        argv += ["--quick"] if args.quick else []
        sys.exit(subprocess.call(argv, env=env))
    sys.path.insert(0, src)
    import uvloop

    from disquette import build

    async def run() -> None:  # a running loop, for the outbox's end-of-turn callback
        measure(args.quick, names)

    print(f"disquette {build.current()} build, ns of CPU per request (best of many runs)")
    uvloop.run(run())


if __name__ == "__main__":
    main()
