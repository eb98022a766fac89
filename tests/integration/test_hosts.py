"""Running on many machines, on loopback: announced addresses, names, seeds.

Loopback is all of 127.0.0.0/8 on Linux, so a node can be told to announce an
address (``cluster-announce-ip 127.0.0.3``) other than the one its peers met it at
and its connections come from: its peers, its HELLO and the HTTP API must use the
announced one. A port forwarder in the test stands for a NAT or a container's port
mapping (``cluster-announce-port`` and ``-bus-port``). Names are ``localhost``
(the test checks that it resolves to 127.0.0.1 first). The network-namespace tests
(tests/integration/test_namespaces.py) run the same things with real addresses.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request

import pytest

from tests.integration import test_cluster_membership as membership
from tests.integration.test_cluster_membership import (
    Cluster,
    cmd,
    hello,
    meshed,
    myid,
    table,
)
from tests.support.forward import Forwarder
from tests.support.ports import free_port
from tests.support.raw import Error, Status
from tests.support.servers import SRC, wait_for

cluster = membership.cluster  # (the fixture: its servers stopped by the test's end)


def addresses(server) -> dict[bytes, bytes]:
    """CLUSTER NODES' ip:port by node ID."""
    return {node_id: b"%s:%s" % (row["ip"], row["port"]) for node_id, row in table(server).items()}


def test_announced_ip_is_what_peers_hello_and_http_say(cluster: Cluster) -> None:
    a = cluster.start("a", ["--http-port", str(free_port())])
    b = cluster.start(
        "b", ["--cluster-announce-ip", "127.0.0.3", "--bind", "127.0.0.1", "127.0.0.3"]
    )
    assert cmd(b, "CONFIG", "GET", "cluster-announce-ip") == [b"cluster-announce-ip", b"127.0.0.3"]
    # Met at 127.0.0.1, its links come from 127.0.0.1: known at the announced address.
    assert cmd(a, "CLUSTER", "MEET", "127.0.0.1", b.port) == Status(b"OK")
    wait_for(lambda: meshed([a, b]), 60, what="a mesh")
    b_id = myid(b)
    wanted = b"127.0.0.3:%d" % b.port
    wait_for(lambda: addresses(a)[b_id] == wanted, 30, what="the announced address")
    assert addresses(b)[b_id] == wanted
    assert hello(a)[b_id][:2] == (b"127.0.0.3", b"%d" % b.port)
    port = int(cmd(a, "CONFIG", "GET", "http-port")[1])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/cluster", timeout=30) as r:
        nodes = {n["id"]: n for n in json.load(r)["nodes"]}
    assert nodes[b_id.decode()]["addr"] == wanted.decode()
    # CONFIG SET: the peer learns the new one at once, and the link follows it.
    assert cmd(b, "CONFIG", "SET", "cluster-announce-ip", "127.0.0.4") == Status(b"OK")
    moved = b"127.0.0.4:%d" % b.port
    wait_for(lambda: addresses(a)[b_id] == moved, 30, what="the new announced address")
    assert addresses(b)[b_id] == moved
    # Nothing listens at 127.0.0.4: the link to it fails, and b is failing for a.
    wait_for(lambda: b"fail" in table(a)[b_id]["flags"], 60, what="b unreachable at 127.0.0.4")
    assert cmd(b, "CONFIG", "SET", "cluster-announce-ip", "127.0.0.3") == Status(b"OK")
    wait_for(lambda: meshed([a, b]), 60, what="the mesh back at 127.0.0.3")
    assert cmd(b, "CONFIG", "SET", "cluster-announce-ip", "not-an-ip") == Error(
        b"ERR Invalid argument 'not-an-ip' for CONFIG SET 'cluster-announce-ip'"
    )


def test_announced_ports_through_a_port_mapping(cluster: Cluster) -> None:
    """b is reachable only through a forwarder's ports (a NAT's): it announces them, and
    is met at them with CLUSTER MEET's bus-port argument."""
    a = cluster.start("a")
    b_port = free_port()
    with Forwarder(b_port) as client_side, Forwarder(b_port + 10000) as bus_side:
        b = cluster.start(
            "b",
            ["--cluster-announce-port", str(client_side.port),
             "--cluster-announce-bus-port", str(bus_side.port)],
            port=b_port,
        )  # fmt: skip
        c = cluster.start("c")
        assert cmd(a, "CLUSTER", "MEET", "127.0.0.1", client_side.port, bus_side.port) == Status(
            b"OK"
        )
        assert cmd(a, "CLUSTER", "MEET", "127.0.0.1", c.port) == Status(b"OK")
        wait_for(lambda: meshed([a, b, c]), 90, what="a mesh through the mapping")
        b_id = myid(b)
        for server in (a, b, c):
            row = table(server)[b_id]
            assert (row["port"], row["bus_port"]) == (
                b"%d" % client_side.port,
                b"%d" % bus_side.port,
            )
        assert bus_side.connections >= 2  # (a and c reached b's bus through it)
        # A job replicated to all three goes through the mapping too.
        job = cmd(a, "ADDJOB", "q", "body", 0, "REPLICATE", 3)
        assert isinstance(job, bytes)
        wait_for(lambda: cmd(b, "SHOW", job) is not None, 30, what="b's copy")


def test_meet_by_name(cluster: Cluster) -> None:
    assert socket.getaddrinfo("localhost", 1, type=socket.SOCK_STREAM)[0][4][0] in (
        "127.0.0.1",
        "::1",
    )
    a, b = cluster.nodes(2)
    assert cmd(a, "CLUSTER", "MEET", "localhost", b.port) == Status(b"OK")
    wait_for(lambda: meshed([a, b]), 60, what="a mesh through a name")
    reply = cmd(a, "CLUSTER", "MEET", "no-such-host.invalid", b.port)
    assert reply == Status(b"OK")  # (resolved in the background: the log says)
    wait_for(lambda: "Can't resolve no-such-host.invalid" in a.log(), 30, what="the warning")
    assert cmd(a, "CLUSTER", "MEET", "bad name!", b.port) == Error(
        b"ERR Invalid node address specified: bad name!:%d" % b.port
    )
    assert cmd(a, "CLUSTER", "MEET", "localhost", b.port, "x") == Error(
        b"ERR Invalid TCP bus port specified: x"
    )


def test_seeds_join_and_find_a_restarted_peer(cluster: Cluster) -> None:
    a = cluster.start("a")
    seeds = ["--cluster-seeds", f"localhost:{a.port}"]
    others = [cluster.start(f"s{i}", seeds) for i in range(3)]
    wait_for(lambda: meshed([a, *others]), 90, what="a mesh through the seeds")
    assert cmd(others[0], "CONFIG", "GET", "cluster-seeds") == [
        b"cluster-seeds",
        b"localhost:%d" % a.port,
    ]
    assert cmd(a, "CONFIG", "SET", "cluster-seeds", "nohost") == Error(
        b"ERR Invalid argument 'nohost' for CONFIG SET 'cluster-seeds'"
    )
    assert cmd(a, "CONFIG", "SET", "cluster-seeds", f"localhost:{others[0].port}") == Status(b"OK")


@pytest.mark.parametrize("value", ["127.0.0.1", "host:0", "host:70000", "host:1@x", ":1"])
def test_bad_seeds_are_refused_at_start(tmp_path, value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "disquette.server", "--port", "0", "--cluster-seeds", value],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )  # fmt: skip
    assert result.returncode != 0
    assert "cluster-seeds" in result.stdout + result.stderr
