#!/usr/bin/env python3
"""What TLS costs: ADDJOB and the add/get/ack cycle, plaintext vs TLS, pipelined and not.

Usage::

    python bench/tls.py [--jobs 50000] [--round-trips 5000] [--batch 100] [--pure]

One server (the compiled build; ``--pure`` for the pure one) listens on a plain port
and on a TLS port (``tls-port``, a certificate of a throwaway CA made with trustme,
``tls-auth-clients no``, OpenSSL's default suite: TLS 1.3 with AES-256-GCM). One
client connection per scenario, the same code over a plain socket or an
``ssl.SSLSocket`` with a hiredis parser, measures:

- ``ADDJOB 1 by 1``: ``--round-trips`` ADDJOBs, each waiting for its reply;
- ``ADDJOB pipelined``: ``--jobs`` ADDJOBs, 1000 deep, two batches in flight;
- ``cycle 1 by 1``: ADDJOB, GETJOB, ACKJOB, one round trip each;
- ``cycle pipelined``: ``--batch`` ADDJOBs pipelined, one ``GETJOB COUNT --batch``, one
  ACKJOB of every ID: three round trips per batch;
- ``connect + PING``: new connections (the TLS handshake), each sending one PING.

It prints operations per second for each transport and the ratio, with the command
line and the machine. Nothing here is asserted: figures belong in docs/security.md.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as cm

BODY = b"x" * 64


class Conn(cm.BlockingClient):
    """The benchmark's blocking RESP client, over TLS when given a context."""

    def __init__(self, port: int, context: ssl.SSLContext | None) -> None:
        super().__init__("127.0.0.1", port)
        if context is not None:
            self.sock = context.wrap_socket(self.sock, server_hostname="127.0.0.1")


def add_one_by_one(conn: Conn, n: int) -> int:
    for _ in range(n):
        conn.call("ADDJOB", "tls-a", BODY, 0)
    return n


def add_pipelined(conn: Conn, n: int) -> int:
    conn.pipeline_repeat(cm.encode("ADDJOB", "tls-p", BODY, 0), n)
    return n


def cycle_one_by_one(conn: Conn, n: int) -> int:
    for _ in range(n):
        conn.call("ADDJOB", "tls-c", BODY, 0)
        (_queue, job_id, _body) = conn.call("GETJOB", "NOHANG", "FROM", "tls-c")[0]
        conn.call("ACKJOB", job_id)
    return n


def cycle_pipelined(conn: Conn, n: int, batch: int) -> int:
    done = 0
    while done < n:
        conn.sock.sendall(cm.encode("ADDJOB", "tls-b", BODY, 0) * batch)
        for _ in range(batch):
            conn.read_reply()
        jobs = conn.call("GETJOB", "NOHANG", "COUNT", batch, "FROM", "tls-b")
        conn.call("ACKJOB", *(job[1] for job in jobs))
        done += len(jobs)
    return done


def connects(port: int, context: ssl.SSLContext | None, n: int) -> int:
    for _ in range(n):
        with Conn(port, context) as conn:
            conn.call("PING")
    return n


def rate(run: Callable[[], int]) -> float:
    start = time.perf_counter()
    count = run()
    return count / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--round-trips", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--pure", action="store_true")
    args = parser.parse_args()
    cm.require_hiredis()
    try:
        import trustme
    except ImportError:
        sys.exit("bench/tls.py needs trustme (the dev extra: pip install -e '.[dev]')")
    folder = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(str(folder / "node.crt"))
    leaf.private_key_pem.write_to_path(str(folder / "node.key"))
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    tls_port = cm.free_port()
    extra = ["--maxmemory", "8gb", "--tls-port", str(tls_port), "--tls-auth-clients", "no",
             "--tls-cert-file", str(folder / "node.crt"),
             "--tls-key-file", str(folder / "node.key")]  # fmt: skip
    server = cm.Server(cm.disquette_spec(sys.executable, extra, pure=args.pure))
    server.start()
    transports = {"plain": (server.port, None), "tls": (tls_port, client_context)}
    scenarios: dict[str, Callable[[Conn], int]] = {
        "ADDJOB 1 by 1": lambda c: add_one_by_one(c, args.round_trips),
        "ADDJOB pipelined": lambda c: add_pipelined(c, args.jobs),
        "cycle 1 by 1": lambda c: cycle_one_by_one(c, args.round_trips // 3),
        "cycle pipelined": lambda c: cycle_pipelined(c, args.jobs // 2, args.batch),
    }
    rows = []
    try:
        for name, scenario in scenarios.items():
            rates = []
            for port, context in transports.values():
                with Conn(port, context) as conn:
                    rates.append(rate(lambda conn=conn, s=scenario: s(conn)))
            rows.append((name, *rates))
        rows.append(("connect + PING", *(
            rate(lambda p=port, c=context: connects(p, c, args.connections))
            for port, context in transports.values()
        )))  # fmt: skip
        cipher = Conn(tls_port, client_context)
        suite = cipher.sock.cipher()  # type: ignore[attr-defined]
        cipher.close()
    finally:
        server.stop()
    print(f"command: {cm.command_line()}")
    machine = cm.machine_info()
    build = "pure" if args.pure else "compiled"
    print(f"machine: {machine['cpu_model']}, {machine['nproc']} CPUs; "
          f"server: {build} build; {suite[1]} {suite[0]}")  # fmt: skip
    print(f"\n{'scenario':<18}{'plain ops/s':>14}{'tls ops/s':>14}{'tls/plain':>11}")
    for name, plain, tls in rows:
        print(f"{name:<18}{plain:>14,.0f}{tls:>14,.0f}{tls / plain:>10.0%}")
    print("\n(cycle: one ADDJOB + GETJOB + ACKJOB per job; connect: a new connection, one PING)")
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(60)
    sys.exit(main())
