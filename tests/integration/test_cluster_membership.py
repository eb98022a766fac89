"""Cluster membership with real processes on loopback (reference sections 5.1, 5.2, 10).

Up to seven ``disquette-server`` processes with a 1 s node timeout are joined
by chains of CLUSTER MEET and watched through CLUSTER NODES, CLUSTER INFO,
HELLO and INFO cluster while nodes are killed (SIGKILL), restarted from their
nodes.conf, forgotten, reset, and set leaving; the bus is fed garbage and
strangers; ``cluster-secret`` keeps nodes with another secret out. The
``make run`` launcher is run as a user would, and two bus shells in one event
loop show the coalescing of messages into frames. Every wait is a condition
with a deadline; every process is stopped by its test.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from disquette import __version__
from disquette.core import messages as msg
from disquette.core.dialect import CURRENT, PROTOCOL, codec_for
from disquette.core.messages import Header
from disquette.core.node import Node
from disquette.protocol import bus_auth
from disquette.protocol.frames import VERSION_SHIFT, FrameReader, decode_frame, encode_frame
from disquette.server.bus import ClusterBus
from disquette.server.log import Log
from tests.support.ports import free_ports
from tests.support.raw import Error, RawConnection, Status
from tests.support.servers import SRC, ServerProcess, wait_for
from tests.unit.core_harness import Settings

TIMEOUT_ARGS = ["--cluster-node-timeout", "1000"]
LINE = re.compile(
    rb"^(?P<id>[0-9a-f]{40}) (?P<ip>[0-9.:a-f]*):(?P<port>\d+) (?P<flags>\S+) "
    rb"(?P<ping>\d+) (?P<pong>\d+) (?P<link>connected|disconnected)"
    rb" release=(?P<release>\S+) bus=(?P<bus>-|\d+(:refused)?)"  # after Disque's six
    rb"( bus-port=(?P<bus_port>\d+))?$"  # (a bus not at port + 10000: test_hosts.py)
)


class Cluster:
    """Server processes started by one test, each in its own directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.servers: list[ServerProcess] = []

    def start(self, name: str, args: list[str] | None = None, port: int | None = None):
        workdir = self.tmp_path / name
        workdir.mkdir(exist_ok=True)
        server = ServerProcess(workdir, [*TIMEOUT_ARGS, *(args or [])], port=port)
        self.servers.append(server)
        return server.wait_ready()

    def nodes(self, n: int, args: list[str] | None = None) -> list[ServerProcess]:
        return [self.start(f"n{len(self.servers)}", args) for _ in range(n)]

    def restart(self, server: ServerProcess, args: list[str] | None = None) -> ServerProcess:
        again = ServerProcess(server.workdir, [*TIMEOUT_ARGS, *(args or [])], port=server.port)
        self.servers.append(again)
        return again.wait_ready()

    def stop_all(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop_all()


def cmd(server: ServerProcess, *args) -> object:
    with RawConnection(server.port) as conn:
        return conn.command(*args)


def myid(server: ServerProcess) -> bytes:
    return cmd(server, "CLUSTER", "MYID")


def table(server: ServerProcess) -> dict[bytes, dict[str, bytes]]:
    """CLUSTER NODES by node ID (every line checked against the format)."""
    text = cmd(server, "CLUSTER", "NODES")
    assert text.endswith(b"\n")
    rows = {}
    for line in text.splitlines():
        match = LINE.match(line)
        assert match, line
        rows[match["id"]] = match.groupdict()
    return rows


def info(server: ServerProcess, section: str = "CLUSTER") -> dict[str, str]:
    text = cmd(server, "CLUSTER", "INFO") if section == "CLUSTER" else cmd(server, "INFO", section)
    return dict(line.split(":", 1) for line in text.decode().splitlines() if ":" in line)


def hello(server: ServerProcess) -> dict[bytes, tuple[bytes, bytes, bytes]]:
    reply = cmd(server, "HELLO")
    assert reply[0] == 1 and reply[1] == myid(server)
    return {entry[0]: tuple(entry[1:]) for entry in reply[2:]}


def meshed(servers: list[ServerProcess]) -> bool:
    ids = [myid(s) for s in servers]
    for server, own in zip(servers, ids, strict=True):
        rows = table(server)
        if set(rows) != set(ids):
            return False
        for node_id, row in rows.items():
            expected = b"myself" if node_id == own else b"noflags"
            if row["flags"] != expected or row["link"] != b"connected":
                return False
    return True


def join_chain(servers: list[ServerProcess]) -> None:
    for a, b in itertools.pairwise(servers):
        assert cmd(a, "CLUSTER", "MEET", "127.0.0.1", b.port) == Status(b"OK")
    wait_for(lambda: meshed(servers), 60, what="a full mesh")


def flags(server: ServerProcess, node_id: bytes) -> bytes | None:
    row = table(server).get(node_id)
    return None if row is None else row["flags"]


# ---------------------------------------------------------------- joining


def test_chain_of_meets_becomes_a_full_mesh(cluster):
    servers = cluster.nodes(7)
    join_chain(servers)
    ids = [myid(s) for s in servers]
    for server in servers:
        rows = table(server)
        assert all(row["ip"] == b"127.0.0.1" for row in rows.values())
        assert {row["port"] for row in rows.values()} == {b"%d" % s.port for s in servers}
        fields = info(server)
        assert fields["cluster_state"] == "ok"
        assert (fields["cluster_known_nodes"], fields["cluster_size"]) == ("7", "7")
        wait_for(lambda s=server: info(s)["cluster_reachable_nodes"] == "6", 5, what="cron")
        assert int(fields["cluster_stats_messages_sent"]) > 0
        assert int(fields["cluster_stats_messages_received"]) > 0
        entries = hello(server)
        assert set(entries) == set(ids)
        assert {e[0] for e in entries.values()} == {b"127.0.0.1"}
        assert {e[2] for e in entries.values()} == {b"1"}
        assert entries[ids[0]][1] == b"%d" % servers[0].port
        # nodes.conf holds the same nodes, myself included.
        conf = (server.workdir / "nodes.conf").read_bytes()
        nodes = [line for line in conf.splitlines() if not line.startswith(b"vars ")]
        assert {line.split()[0] for line in nodes} == set(ids)
        bus = info(server, "cluster")
        assert 0 < int(bus["cluster_bus_frames_sent"]) <= int(bus["cluster_stats_messages_sent"])
        assert int(bus["cluster_bus_bytes_received"]) > 0
        assert bus["cluster_bus_frames_rejected"] == bus["cluster_bus_links_refused"] == "0"
    # INFO cluster is beyond Disque: requested only, never in the default or full report.
    assert "# Cluster" not in cmd(servers[0], "INFO", "all").decode()


def test_meet_arguments_and_handshake_nodes(cluster):
    (a,) = cluster.nodes(1)
    errors = {
        ("127.0.0.1", "x"): b"ERR Invalid TCP port specified: x",
        ("127.0.0.1", "1 "): b"ERR Invalid TCP port specified: 1 ",
        ("127.0.0.1", "0"): b"ERR Invalid node address specified: 127.0.0.1:0",
        ("127.0.0.1", ""): b"ERR Invalid node address specified: 127.0.0.1:",
        ("127.0.0.1", "55536"): b"ERR Invalid node address specified: 127.0.0.1:55536",
        # (a DNS name is met, beyond Disque: test_hosts.py; what cannot be one is refused)
        ("local host", "7711"): b"ERR Invalid node address specified: local host:7711",
    }
    for (ip, port), error in errors.items():
        assert cmd(a, "CLUSTER", "MEET", ip, port) == Error(error)
    assert cmd(a, "CLUSTER", "MEET", "127.0.0.1") == Error(
        b"ERR Wrong CLUSTER subcommand or number of arguments"
    )
    assert cmd(a, "CLUSTER", "MEET", "127.0.0.1", "1") == Status(b"OK")
    assert cmd(a, "CLUSTER", "MEET", "127.0.0.1", "1") == Status(b"OK")  # in progress
    assert cmd(a, "CLUSTER", "MEET", "::1", "55535") == Status(b"OK")
    handshakes = [r for r in table(a).values() if r["flags"] == b"handshake"]
    assert sorted((r["ip"], r["port"]) for r in handshakes) == [
        (b"127.0.0.1", b"1"), (b"::1", b"55535")
    ]  # fmt: skip
    assert {e[2] for node_id, e in hello(a).items() if node_id != myid(a)} == {b"5"}
    assert info(a)["cluster_known_nodes"] == "3" and info(a)["cluster_size"] == "1"
    # Nobody answers: the handshakes time out (max(node timeout, 1 s)).
    wait_for(lambda: len(table(a)) == 1, 20, what="handshake timeout")
    assert b"handshake" not in (a.workdir / "nodes.conf").read_bytes()


# ---------------------------------------------------------------- failures


def test_killed_node_is_failing_then_rejoins_from_nodes_conf(cluster):
    a, b, c = servers = cluster.nodes(3)
    join_chain(servers)
    c_id = myid(c)
    c.proc.kill()  # SIGKILL
    c.proc.wait()
    for server in (a, b):
        wait_for(lambda s=server: flags(s, c_id) == b"fail", 30, what="FAIL")
        assert hello(server)[c_id][2] == b"100"
        wait_for(lambda s=server: info(s)["cluster_reachable_nodes"] == "1", 5, what="cron")
        assert info(server)["cluster_size"] == "3"
    assert "FAIL message received" in a.log() + b.log() or "as failing" in a.log() + b.log()
    c2 = cluster.restart(c)
    assert myid(c2) == c_id
    assert set(table(c2)) == {myid(a), myid(b), c_id}
    wait_for(lambda: meshed([a, b, c2]), 30, what="the node back")
    for server in (a, b):
        assert hello(server)[c_id][2] == b"1"
    assert "Clear FAIL state" in a.log() + b.log()


def test_pfail_alone_is_not_fail(cluster):
    a, b = servers = cluster.nodes(2)
    join_chain(servers)
    b_id = myid(b)
    b.proc.kill()
    b.proc.wait()
    wait_for(lambda: flags(a, b_id) == b"fail?", 30, what="PFAIL")
    assert hello(a)[b_id][2] == b"10"
    assert table(a)[b_id]["link"] == b"disconnected"


# ---------------------------------------------------------------- commands


def test_forget_and_its_blacklist(cluster):
    a, _b, c = servers = cluster.nodes(3)
    join_chain(servers)
    c_id = myid(c)
    assert cmd(a, "CLUSTER", "FORGET", "abc") == Error(b"ERR Invalid node identifier")
    assert cmd(a, "CLUSTER", "FORGET", "f" * 40) == Error(b"ERR Unknown node " + b"f" * 40)
    assert cmd(a, "CLUSTER", "FORGET", myid(a)) == Error(
        b"ERR I tried hard but I can't forget myself..."
    )
    assert cmd(a, "CLUSTER", "FORGET", c_id) == Status(b"OK")
    assert c_id not in table(a) and c_id not in hello(a)
    assert info(a)["cluster_known_nodes"] == "2" and info(a)["cluster_reachable_nodes"] == "1"
    assert c_id not in (a.workdir / "nodes.conf").read_bytes()
    # B (and C itself) keep talking about C: the blacklist keeps it out.
    seen = int(info(a)["cluster_stats_messages_received"])
    wait_for(lambda: int(info(a)["cluster_stats_messages_received"]) > seen + 40, 60, what="gossip")
    assert c_id not in table(a)


def test_reset_soft_and_hard(cluster):
    a, b = servers = cluster.nodes(2)
    join_chain(servers)
    a_id = myid(a)
    with RawConnection(a.port) as conn:
        assert conn.command("ADDJOB", "q", "body", "0", "REPLICATE", "1").startswith(b"D-")
        assert conn.command("CLUSTER", "RESET", "sideways") == Error(b"ERR syntax error")
        assert conn.command("CLUSTER", "RESET", "SOFT") == Status(b"OK")
        assert conn.command("QLEN", "q") == 0
        assert conn.command("CLUSTER", "MYID") == a_id
        assert conn.command("CLUSTER", "INFO").startswith(
            b"cluster_state:ok\r\ncluster_known_nodes:1\r\n"
        )
        assert conn.command("CLUSTER", "RESET", "HARD") == Status(b"OK")
        new_id = conn.command("CLUSTER", "MYID")
        assert new_id != a_id and list(table(a)) == [new_id]
        assert conn.command("CLUSTER", "RESET") == Status(b"OK")  # SOFT by default
        assert conn.command("CLUSTER", "RESET", "soft", "x") == Error(
            b"ERR Wrong CLUSTER subcommand or number of arguments"
        )
    assert (a.workdir / "nodes.conf").read_bytes().split(b"\n")[1].startswith(new_id + b" ")
    # B finds another node at that address: the old ID loses its address.
    wait_for(lambda: flags(b, a_id) == b"noaddr", 30, what="noaddr")
    assert cmd(a, "CLUSTER", "MEET", "127.0.0.1", b.port) == Status(b"OK")
    wait_for(
        lambda: flags(b, new_id) == b"noflags" and flags(a, myid(b)) == b"noflags",
        30,
        what="the new ID joined",
    )


def test_leaving_propagates_and_persists(cluster):
    a, b, c = servers = cluster.nodes(3)
    join_chain(servers)
    c_id = myid(c)
    assert cmd(c, "CLUSTER", "LEAVING", "maybe") == Error(
        b"ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'"
    )
    assert cmd(c, "CLUSTER", "LEAVING", "YES") == Status(b"OK")
    assert cmd(c, "CLUSTER", "LEAVING") == Status(b"yes")
    assert hello(c)[c_id][2] == b"100"
    assert table(c)[c_id]["flags"] == b"myself,leaving"
    for server in (a, b):
        wait_for(lambda s=server: hello(s)[c_id][2] == b"100", 30, what="leaving seen")
        assert flags(server, c_id) == b"leaving"
        # The reachable list is recomputed by the cluster cron, every 100 ms.
        wait_for(lambda s=server: info(s)["cluster_reachable_nodes"] == "1", 30, what="cron")
    assert b"myself,leaving" in (c.workdir / "nodes.conf").read_bytes()
    c.stop()
    c2 = cluster.restart(c)
    assert cmd(c2, "CLUSTER", "LEAVING") == Status(b"yes")
    assert cmd(c2, "CLUSTER", "LEAVING", "no") == Status(b"OK")
    for server in (a, b):
        wait_for(lambda s=server: hello(s)[c_id][2] == b"1", 30, what="leaving cleared")


def test_saveconfig_and_its_error(cluster):
    (a,) = cluster.nodes(1)
    assert cmd(a, "CLUSTER", "SAVECONFIG") == Status(b"OK")
    (a.workdir / "nodes.conf.tmp").mkdir()
    assert cmd(a, "CLUSTER", "SAVECONFIG") == Error(
        b"ERR error saving the cluster node config: Is a directory"
    )


# ---------------------------------------------------------------- nodes.conf


def test_nodes_conf_is_locked_and_checked(cluster, tmp_path):
    a = cluster.start("shared")
    second = ServerProcess(a.workdir, TIMEOUT_ARGS)
    cluster.servers.append(second)
    assert second.proc.wait(30) == 1
    assert "is already used by a different Disque node" in second.log()
    a.stop()
    (a.workdir / "nodes.conf").write_bytes(b"this is not a nodes.conf\n")
    broken = ServerProcess(a.workdir, TIMEOUT_ARGS)
    cluster.servers.append(broken)
    assert broken.proc.wait(30) == 1
    assert 'Unrecoverable error: corrupted cluster config file "this is not a nodes.conf"' in (
        broken.log()
    )


def test_new_node_writes_its_identity(cluster):
    (a,) = cluster.nodes(1)
    conf = (a.workdir / "nodes.conf").read_bytes()
    generation = int(info(a, "cluster")["cluster_data_generation"])
    form = b"vars nodes-conf-format 2 %s\n" % __version__.encode()  # (0.1.0 skips it)
    assert conf == form + b"%s :%d myself 0 0 connected\nvars data-generation %d\n" % (
        myid(a),
        a.port,
        generation,
    )


# ---------------------------------------------------------------- the bus


def bus_connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port + 10000), timeout=10)


def closed(sock: socket.socket) -> bool:
    try:
        while True:
            data = sock.recv(1 << 16)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_bus_speaks_frames_and_closes_on_garbage(cluster):
    (a,) = cluster.nodes(1)
    stranger = b"e" * 40
    with bus_connect(a) as sock:
        sock.sendall(encode_frame(Header(stranger, 9999, 0), [(msg.PING, (), 1234)]))
        reader = FrameReader()
        while (payload := reader.next_payload()) is None:
            reader.feed(sock.recv(1 << 16))
        header, messages = decode_frame(payload, codec_for(CURRENT))
        header = Header(*header)
        assert header == Header(myid(a), a.port, PROTOCOL << VERSION_SHIFT, header.generation)
        assert header.generation > 0
        assert [m[0] for m in messages] == [msg.PONG]
        assert messages[0][2] == 1234  # the PING's clock reading, echoed
    bad = [
        b"GET / HTTP/1.1\r\n\r\n",
        (100 << 20).to_bytes(4, "big"),  # oversized: refused from the length alone
        encode_frame(Header(stranger, 1, 0), [(42, b"x")]),  # unknown message type
    ]
    for data in bad:
        with bus_connect(a) as sock:
            sock.sendall(data)
            assert closed(sock)
    assert cmd(a, "PING") == Status(b"PONG")
    assert info(a, "cluster")["cluster_bus_frames_rejected"] == "3"
    assert a.log().count("Closing the cluster bus link from 127.0.0.1:") == 3
    assert len(table(a)) == 1  # a PING from a stranger adds nobody
    # A newer release's frame: its unknown type is skipped and counted, its PING answered.
    newer = (PROTOCOL + 1) << VERSION_SHIFT
    with bus_connect(a) as sock:
        sock.sendall(encode_frame(Header(stranger, 9999, newer), [(42, b"x"), (msg.PING, (), 7)]))
        reader = FrameReader()
        while (payload := reader.next_payload()) is None:
            reader.feed(sock.recv(1 << 16))
        assert [m[0] for m in decode_frame(payload, codec_for(CURRENT))[1]] == [msg.PONG]
    assert info(a, "cluster")["cluster_bus_messages_skipped"] == "1"
    assert info(a, "cluster")["cluster_bus_frames_rejected"] == "3"


def test_cluster_secret_lets_in_only_nodes_that_know_it(cluster):
    a, b = cluster.nodes(2, ["--cluster-secret", "s3cret"])
    c = cluster.start("wrong", ["--cluster-secret", "other"])
    d = cluster.start("none")
    assert cmd(a, "CONFIG", "GET", "cluster-secret") == [b"cluster-secret", b"s3cret"]
    join_chain([a, b])
    assert cmd(a, "CLUSTER", "MEET", "127.0.0.1", c.port) == Status(b"OK")
    assert cmd(d, "CLUSTER", "MEET", "127.0.0.1", a.port) == Status(b"OK")
    wait_for(lambda: "Refused the cluster bus link" in c.log(), 30, what="C refusing A")
    wait_for(lambda: "Refused the cluster bus link" in a.log(), 30, what="A refusing D")
    no_secret = "asks for a cluster-secret this node does not have"
    wait_for(lambda: no_secret in d.log(), 30, what="D saying it has no secret")
    wait_for(lambda: len(table(a)) == 2 and len(table(d)) == 1, 30, what="handshakes gone")
    assert int(info(c, "cluster")["cluster_bus_links_refused"]) > 0
    assert myid(c) not in table(a) and myid(a) not in table(c)
    # A stranger that speaks frames without the handshake is refused too.
    with bus_connect(a) as sock:
        reader = FrameReader()
        while (challenge := reader.next_payload()) is None:
            reader.feed(sock.recv(1 << 16))
        assert challenge.startswith(bus_auth.CHALLENGE_TAG)
        sock.sendall(encode_frame(Header(b"e" * 40, 1, 0), [(msg.MEET, (), 0)]))
        assert closed(sock)
    assert meshed([a, b])


# ---------------------------------------------------------------- make run


def test_local_cluster_launcher(tmp_path):
    base = free_ports(3)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    launcher = subprocess.Popen(
        [sys.executable, "-m", "disquette.tools.local_cluster", "--port", str(base),
         "--dir", str(tmp_path / "run"), "--", *TIMEOUT_ARGS],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        line = launcher.stdout.readline().decode()
        assert "local cluster of 3 nodes ready" in line, line + launcher.stdout.read().decode()
        launcher.stdout.readline()  # where the data and logs are
        dashboard = f"dashboard: http://127.0.0.1:{base + 1000}/"
        assert launcher.stdout.readline().decode().strip() == dashboard
        for port in range(base, base + 3):  # every node's HTTP port answers the API
            url = f"http://127.0.0.1:{port + 1000}/api/cluster"
            with urllib.request.urlopen(url, timeout=30) as response:
                nodes = json.load(response)["nodes"]
            assert len(nodes) == 3, [(n["id"][:8], n["addr"], n["flags"]) for n in nodes]
        for port in range(base, base + 3):
            with RawConnection(port) as conn:
                text = conn.command("CLUSTER", "INFO").decode()
                assert "cluster_known_nodes:3" in text and "cluster_reachable_nodes:2" in text
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(30) == 0
        assert "all nodes stopped" in launcher.stdout.read().decode()
        for port in range(base, base + 3):
            with socket.socket() as s:
                assert s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        if launcher.poll() is None:
            launcher.terminate()  # it stops its nodes
            launcher.wait(30)


def accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_local_cluster_launcher_single_node_keeps_its_data_under_the_run_dir(tmp_path):
    """``make run NODES=1`` (or PORT=...): the node's nodes.conf goes in
    ``.run/node-<port>/`` as in the three-node mode, not in the current directory."""
    port = free_ports(1)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    launcher = subprocess.Popen(
        [sys.executable, "-m", "disquette.tools.local_cluster", "--nodes", "1",
         "--port", str(port), "--", "--bind", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
    )  # fmt: skip
    try:
        line = launcher.stdout.readline().decode()
        workdir = cwd / ".run" / f"node-{port}"
        assert f"data in {workdir}/" in line, line
        wait_for(lambda: accepts(port), what="the node listening")
        with RawConnection(port) as conn:
            assert conn.command("PING") == Status(b"PONG")
        assert (workdir / "nodes.conf").exists()
        assert sorted(p.name for p in cwd.iterdir()) == [".run"]
    finally:
        launcher.terminate()
        launcher.wait(30)


# ---------------------------------------------------------------- the bus shell in-process


def test_bus_coalesces_one_loop_iteration_into_one_frame():
    """Two cores, each with its TCP bus, in one event loop: 100 messages queued to a
    peer in one iteration leave as one frame and one write."""

    def make(port: int) -> tuple[Node, ClusterBus]:
        rng = random.Random(port)
        clock = lambda: int(time.time() * 1000)  # noqa: E731
        node = Node(
            Settings(cluster_node_timeout=1000),
            b"%040x" % port,
            clock,
            rng,
            rng.randbytes,
            port=port,
        )
        bus = ClusterBus(node, Log("warning"), bind=["127.0.0.1"], secret=None)
        node.bus = bus
        return node, bus

    async def until(condition) -> None:
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("timed out")

    async def scenario() -> None:
        base = free_ports(2)
        (a, bus_a), (b, bus_b) = make(base), make(base + 1)
        await bus_a.listen(base, 16)
        await bus_b.listen(base + 1, 16)

        async def crons() -> None:
            while True:
                a.cluster.cron()
                b.cluster.cron()
                await asyncio.sleep(0.1)

        cron_task = asyncio.get_running_loop().create_task(crons())
        try:
            a.cluster.start_handshake(b"127.0.0.1", base + 1)
            await until(lambda: a.cluster.has_link(b.myself) and b.cluster.has_link(a.myself))
            cron_task.cancel()  # no PING of its own in the middle of the count
            await asyncio.sleep(0.1)
            frames, received = b.cluster.stats.frames_received, b.cluster.messages_received
            writes = a.cluster.stats.frames_sent
            for i in range(100):
                a.send(b.myself, (msg.GOTJOB, (b"D-job-%d" % i,)))
            await until(lambda: b.cluster.messages_received == received + 100)
            assert b.cluster.stats.frames_received == frames + 1
            assert a.cluster.stats.frames_sent == writes + 1
            assert a.cluster.messages_sent >= 101
        finally:
            cron_task.cancel()
            bus_a.close()
            bus_b.close()

    asyncio.run(scenario())
