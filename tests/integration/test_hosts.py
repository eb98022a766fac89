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
import urllib.error
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
from tests.support.servers import SRC, ServerProcess, running_server, wait_for

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


@pytest.mark.timeout(600)
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
        # (b's links go through two forwarding threads of this test process: on a loaded
        # machine the handshakes through them take minutes)
        wait_for(lambda: meshed([a, b, c]), 300, what="a mesh through the mapping")
        b_id = myid(b)
        for server in (a, b, c):
            row = table(server)[b_id]
            assert (row["port"], row["bus_port"]) == (
                b"%d" % client_side.port,
                b"%d" % bus_side.port,
            )
        assert bus_side.connections >= 2  # (a and c reached b's bus through it)
        # A job replicated to all three goes through the mapping too.
        job = addjob(a, "q", "body", 0, "REPLICATE", 3)
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


def addjob(server, *args) -> bytes:
    """ADDJOB, again while the cluster is too new for its replication (-NOREPL)."""

    def added() -> bytes | None:
        reply = cmd(server, "ADDJOB", *args)
        return reply if isinstance(reply, bytes) and reply.startswith(b"D-") else None

    return wait_for(added, 30, what="an ADDJOB replicated")


def restart_elsewhere(cluster: Cluster, server, port: int, args: list[str]):
    """The node of ``server``'s directory (its nodes.conf, its AOF) started again on
    another port: a rescheduled pod, a new VM."""
    server.stop()
    moved = ServerProcess(server.workdir, [*membership.TIMEOUT_ARGS, *args], port=port)
    cluster.servers.append(moved)
    return moved.wait_ready()


def test_a_node_restarted_on_another_address_is_relearned_with_its_jobs(
    cluster: Cluster,
) -> None:
    aof = ["--appendonly", "yes"]
    a, b, c = (cluster.start(name, aof) for name in "abc")
    membership.join_chain([a, b, c])
    jobs = [addjob(a, "q", f"job {i}", 0, "REPLICATE", 3, "RETRY", 1) for i in range(5)]
    c_id = myid(c)
    wait_for(lambda: all(cmd(c, "SHOW", j) is not None for j in jobs), 30, what="c's copies")
    c = restart_elsewhere(cluster, c, free_port(), aof)
    assert myid(c) == c_id
    moved = b"127.0.0.1:%d" % c.port
    for server in (a, b):
        wait_for(lambda s=server: addresses(s).get(c_id) == moved, 60, what="c's new address")
    wait_for(lambda: meshed([a, b, c]), 60, what="the mesh with c moved")
    assert all(cmd(c, "SHOW", j) is not None for j in jobs)  # (its copies, from its AOF)
    for job in jobs:
        assert cmd(c, "ACKJOB", job) == 1
    for server in (a, b, c):
        wait_for(lambda s=server: all(cmd(s, "SHOW", j) is None for j in jobs), 60, what="the GC")


def drain(server, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "disquette.cli.main", "cluster", "drain",
         f"127.0.0.1:{server.port}", "--timeout", str(timeout)],
        capture_output=True, text=True, timeout=timeout + 60,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )  # fmt: skip


def test_drain_returns_once_stopping_the_node_loses_nothing(cluster: Cluster) -> None:
    a, b, c = cluster.nodes(3)
    membership.join_chain([a, b, c])
    # Copies elsewhere (REPLICATE 2), and jobs b alone holds (REPLICATE 1, at most once).
    shared = [addjob(b, "q", f"shared {i}", 0, "REPLICATE", 2, "RETRY", 1) for i in range(5)]
    alone = [addjob(b, "q", f"alone {i}", 0, "REPLICATE", 1, "RETRY", 0) for i in range(5)]
    with subprocess.Popen(
        [sys.executable, "-m", "disquette.cli.main", "cluster", "drain",
         f"127.0.0.1:{b.port}", "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    ) as draining:  # fmt: skip
        b_id = myid(b)
        wait_for(lambda: b"leaving" in table(a)[b_id]["flags"], 30, what="b leaving")
        assert draining.poll() is None  # (b's lone jobs are still there)
        # A consumer on a: a fetches b's queued jobs (NEEDJOBS), and acknowledges them.
        consumed: set[bytes] = set()
        with a.client() as consumer:

            def consume() -> bool:
                for _queue, job_id, _body in (
                    consumer.execute_command("GETJOB", "TIMEOUT", 500, "COUNT", 10, "FROM", "q")
                    or []
                ):
                    consumed.add(job_id)
                    consumer.execute_command("ACKJOB", job_id)
                return set(alone) <= consumed

            wait_for(consume, 60, interval=0.1, what="b's lone jobs consumed on a")
        out, err = draining.communicate(timeout=120)
    assert draining.returncode == 0, err
    assert "drained" in out
    b.stop()
    # The jobs shared with another node are still delivered: none is lost.
    with c.client() as consumer:

        def rest() -> bool:
            for _queue, job_id, _body in (
                consumer.execute_command("GETJOB", "TIMEOUT", 500, "COUNT", 10, "FROM", "q") or []
            ):
                consumed.add(job_id)
                consumer.execute_command("ACKJOB", job_id)
            return set(shared) | set(alone) <= consumed

        wait_for(rest, 90, interval=0.1, what="every job consumed")


def test_drain_times_out_while_jobs_would_be_lost(cluster: Cluster) -> None:
    (alone,) = cluster.nodes(1)
    cmd(alone, "ADDJOB", "q", "body", 0)
    result = drain(alone, 1)
    assert result.returncode == 1
    assert "not drained within 1s: 1 jobs would be lost" in result.stderr
    assert cmd(alone, "CLUSTER", "LEAVING") == Status(b"yes")


def test_healthz_says_ok_then_leaving_without_credentials(tmp_path) -> None:
    http = free_port()
    args = ["--http-port", str(http), "--requirepass", "secret"]
    with running_server(tmp_path, args) as server:
        url = f"http://127.0.0.1:{http}/healthz"
        with urllib.request.urlopen(url, timeout=30) as r:
            assert (r.status, r.read()) == (200, b"ok\n")
        with server.client(password="secret") as c:
            c.execute_command("CLUSTER", "LEAVING", "yes")
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(url, timeout=30)
        assert (answer.value.code, answer.value.read()) == (503, b"leaving\n")
