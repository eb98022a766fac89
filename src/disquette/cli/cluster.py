"""``disquette cluster create HOST:PORT...``, ``status [HOST:PORT]`` and ``drain HOST:PORT``.

``create`` has the first node CLUSTER MEET every other one, then waits until
every node knows every other (no handshake, no failure flag): the mesh is
complete. Host names are resolved first, since CLUSTER MEET takes addresses.
``status`` prints, for every node the given one knows, its flags as that
node sees them, its HELLO priority, and its jobs, queues and clients from
its own INFO.

``drain`` retires a node from a script (a pre-stop hook): CLUSTER LEAVING yes (the
node takes no new job copies, its consumers are sent elsewhere, the other nodes fetch
its queued jobs for their consumers), then it waits until stopping the node loses no
job: every job it holds is acknowledged, or has a copy on another node that is
reachable and not leaving (that copy is queued there once its retry time passes), and
no job with retry 0 (at most once: never queued again) is queued on it alone. It
exits 0 then, 1 when ``--timeout`` passes first (the jobs at risk are counted); the
node stays leaving either way, and ``CLUSTER LEAVING no`` takes it back.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

from disquette.cli.output import table
from disquette.cli.progress import Progress
from disquette.client.errors import DisqueError
from disquette.client.models import ClusterNode
from disquette.client.sync import Client
from disquette.client.topology import Address, format_address, parse_address

BAD_FLAGS = frozenset({"handshake", "fail", "fail?", "noaddr"})
POLL = 0.1
DRAIN_POLL = 0.5


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="cluster_command", required=True, metavar="{create,status,drain}")
    create = sub.add_parser("create", help="join nodes into one cluster")
    create.add_argument("nodes", nargs="+", metavar="HOST:PORT")
    create.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the mesh")
    status = sub.add_parser("status", help="print the nodes of a cluster")
    status.add_argument("node", nargs="?", default="127.0.0.1:7711", metavar="HOST:PORT")
    drain = sub.add_parser("drain", help="set a node leaving; wait until it can stop")
    drain.add_argument("node", metavar="HOST:PORT")
    drain.add_argument("--timeout", type=float, default=300.0, help="seconds to wait (default 300)")
    for parser in (create, status, drain):
        parser.add_argument("-a", "--password", default=os.environ.get("DISQUETTE_PASSWORD"))


def run(args: argparse.Namespace) -> int:
    try:
        if args.cluster_command == "create":
            return create([parse_address(n) for n in args.nodes], args.password, args.timeout)
        if args.cluster_command == "drain":
            return drain(parse_address(args.node), args.password, args.timeout)
        return status(parse_address(args.node), args.password)
    except (DisqueError, OSError, ValueError) as exc:
        sys.stderr.write(f"disquette cluster: {exc}\n")
        return 1


def _resolve(address: Address) -> Address:
    host, port = address
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return (str(info[0][4][0]), port)


def create(addresses: list[Address], password: str | None, timeout: float) -> int:
    addresses = [_resolve(a) for a in dict.fromkeys(addresses)]
    client = Client(addresses, password=password)
    deadline = time.monotonic() + timeout
    try:
        ids = {a: _node_id(client, a, deadline) for a in addresses}
        first = client.on_node(addresses[0])
        for host, port in addresses[1:]:
            first.cluster_meet(host, port)
        wanted = len(addresses) * (len(addresses) - 1)
        progress = Progress("meeting", total=wanted, unit="links")
        while True:
            missing = _missing_links(client, ids)
            progress.advance(wanted - len(missing) - progress.done)
            if not missing:
                break
            if time.monotonic() > deadline:
                progress.close(
                    f"the cluster did not form within {timeout:g}s; still missing: "
                    + ", ".join(f"{a} -> {b}" for a, b in missing[:10])
                )
                return 1
            time.sleep(POLL)
        progress.close(f"cluster of {len(addresses)} nodes ready")
        sys.stdout.write(_status_table(client, addresses[0]))
    finally:
        client.close()
    return 0


def _node_id(client: Client, address: Address, deadline: float) -> str:
    """The ID of the node at ``address``, waiting until the deadline for it to answer
    (nodes started just before ``cluster create`` may not be listening yet)."""
    while True:
        try:
            return client.on_node(address).cluster_myid()
        except ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL)


def _missing_links(client: Client, ids: dict[Address, str]) -> list[tuple[str, str]]:
    """``(from, to)`` pairs where a node does not yet know another one as healthy."""
    missing = []
    for address in ids:
        try:
            known = {
                n.id
                for n in client.on_node(address).cluster_nodes()
                if not BAD_FLAGS.intersection(n.flags)
            }
        except DisqueError:
            known = set()
        for other, other_id in ids.items():
            if other != address and other_id not in known:
                missing.append((format_address(address), format_address(other)))
    return missing


def drain(address: Address, password: str | None, timeout: float) -> int:
    client = Client([address], password=password)
    deadline = time.monotonic() + timeout
    try:
        node = client.on_node(address)
        node.cluster_leaving(True)
        name = format_address(address)
        while True:
            at_risk = _jobs_at_risk(node)
            if not at_risk:
                sys.stdout.write(
                    f"{name} drained: every job it holds is acknowledged or has a copy on "
                    "another node; it can stop\n"
                )
                return 0
            if time.monotonic() > deadline:
                sys.stderr.write(
                    f"disquette cluster: {name} not drained within {timeout:g}s: "
                    f"{at_risk} jobs would be lost if it stopped now\n"
                )
                return 1
            time.sleep(DRAIN_POLL)
    finally:
        client.close()


def _jobs_at_risk(node: Client) -> int:
    """The jobs a stop of ``node`` would lose (see the module doc)."""
    safe = {
        n.id
        for n in node.cluster_nodes()
        if n.link_state == "connected"
        and not {"myself", "leaving", *BAD_FLAGS}.intersection(n.flags)
    }
    return sum(
        1
        for job in node.jscan(reply="all")
        if job.state != "acked"
        and (
            not safe.intersection(job.nodes_delivered) or (job.retry == 0 and job.state == "queued")
        )
    )


def status(address: Address, password: str | None) -> int:
    client = Client([address], password=password)
    try:
        sys.stdout.write(_status_table(client, address))
    finally:
        client.close()
    return 0


def _status_table(client: Client, address: Address) -> str:
    seed = client.on_node(address)
    hello = seed.hello()
    seen: dict[str, ClusterNode] = {n.id: n for n in seed.cluster_nodes()}
    rows = []
    for node in sorted(hello.nodes, key=lambda n: (n.id != hello.node_id, n.host, n.port)):
        where = address if node.id == hello.node_id else (node.host, node.port)
        view = seen.get(node.id)
        flags = ",".join(view.flags) if view else "?"
        try:
            info = client.on_node(where).info()
            counts = (
                info.get("registered_jobs", "?"),
                info.get("registered_queues", "?"),
                info.get("connected_clients", "?"),
                "up",
            )
        except DisqueError:
            counts = ("", "", "", "unreachable")
        rows.append((node.id[:8], format_address(where), flags, node.priority, *counts))
    return table(("id", "address", "flags", "priority", "jobs", "queues", "clients", "state"), rows)
