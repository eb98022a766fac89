"""The versioned bus seen by operators, on real nodes (core/dialect.py).

What a node says of itself (``--version``, INFO server) and of its peers (CLUSTER
NODES after Disque's fields, INFO cluster); a peer that lacks a feature makes the
commands needing it cluster-wide answer an error naming it; a peer with no protocol
in common is refused, logged on both sides with the reason once a minute (not at
every reconnection), and shown ``refused``. Peers of other speeches are this
release started with ``DISQUETTE_BUS_REHEARSAL`` (a release that announces fewer
features, or only a newer protocol).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis

from disquette import __version__
from disquette.core.dialect import FEATURES, OLDEST, PROTOCOL, REHEARSAL_VARIABLE
from tests.support.cluster import DEADLINE
from tests.support.servers import SRC, ServerProcess, wait_for


def nodes_fields(server: ServerProcess) -> dict[int, list[str]]:
    """CLUSTER NODES: the fields after Disque's six, by client port."""
    with server.client() as c:
        text = c.execute_command("CLUSTER", "NODES").decode()
    return {int(f[1].rsplit(":", 1)[1]): f[6:] for f in map(str.split, text.splitlines())}


def reachable(client: redis.Redis) -> int:
    text = client.execute_command("CLUSTER", "INFO").decode()
    return int(text.split("cluster_reachable_nodes:")[1].split()[0])


def refused_frames(server: ServerProcess) -> int:
    with server.client() as c:
        return int(c.info("cluster")["cluster_bus_refused_frames"])


def meet(a: ServerProcess, b: ServerProcess) -> None:
    with a.client() as c:
        assert c.execute_command("CLUSTER", "MEET", "127.0.0.1", b.port) == b"OK"


def start(tmp_path, name: str, rehearsal: str = "", port: int | None = None) -> ServerProcess:
    """A node in ``tmp_path/name`` (started again there, with its port, when it exists)."""
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    env = {REHEARSAL_VARIABLE: rehearsal} if rehearsal else None
    args = ["--cluster-node-timeout", "2000"]
    return ServerProcess(folder, args, port=port, env=env).wait_ready()


def test_a_node_says_its_release_and_protocol():
    out = subprocess.run(
        [sys.executable, "-m", "disquette.server", "--version"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC)},
        check=True,
    ).stdout
    assert f" disquette={__version__} bus-protocols={OLDEST}-{PROTOCOL}\n" in out


def test_info_and_cluster_nodes_show_what_each_node_speaks(tmp_path):
    a, b = start(tmp_path, "a"), start(tmp_path, "b")
    try:
        with a.client() as c:
            server = c.info("server")
        assert server["disquette_version"] == __version__
        assert (server["bus_protocol_version"], server["bus_protocol_oldest"]) == (PROTOCOL, 1)
        assert server["bus_features"] == sorted(f.decode() for f in FEATURES)  # (redis-py: a list)
        assert nodes_fields(a)[a.port] == [f"release={__version__}", f"bus={PROTOCOL}"]
        meet(a, b)
        wait_for(
            lambda: nodes_fields(a).get(b.port) == [f"release={__version__}", f"bus={PROTOCOL}"],
            DEADLINE,
            what="a knowing what b speaks",
        )
        with a.client() as c:
            cluster = c.info("cluster")
        assert cluster["cluster_releases"] == {__version__: 2}
        assert cluster["cluster_bus_peers_refused"] == 0
        assert cluster["cluster_bus_messages_withheld"] == 0
    finally:
        a.stop()
        b.stop()


def test_a_peer_lacking_a_feature_makes_its_commands_answer_an_error(tmp_path):
    a = start(tmp_path, "a")
    b = start(tmp_path, "b", "release=older,drop=cron+policies")
    try:
        meet(a, b)
        wait_for(
            lambda: nodes_fields(a).get(b.port) == ["release=older", f"bus={PROTOCOL}"],
            DEADLINE,
            what="a knowing what b speaks",
        )
        with a.client() as c:
            wait_for(lambda: reachable(c) == 1, DEADLINE, what="b reachable")
            with pytest.raises(redis.ResponseError) as e:
                c.execute_command("QPOLICY", "SET", "p", "q*", "retry", 5)
            assert "QPOLICY SET needs the 'policies' feature on every node" in str(e.value)
            with b.client() as cb:
                b_id = cb.execute_command("CLUSTER", "MYID").decode()
            assert f"node {b_id} (disquette older, bus protocols 1 to {PROTOCOL})" in str(e.value)
            with pytest.raises(redis.ResponseError, match="'cron' feature"):
                c.execute_command("CRON", "SET", "c", "q", "b", "EVERY", 1)
            assert c.execute_command("QPOLICY", "LIST") == []  # nothing was written
            assert c.info("cluster")["cluster_bus_features_missing"] == ["cron", "policies"]
            # What both speak works: users, and the jobs.
            assert c.execute_command("ACL", "SETUSER", "u", "on", "nopass", "+ping") == b"OK"
            assert c.execute_command("ADDJOB", "q", "x", 0, "REPLICATE", 2).startswith(b"D-")
    finally:
        a.stop()
        b.stop()


def test_a_peer_with_no_protocol_in_common_is_refused_and_logged_once_a_minute(tmp_path):
    far = f"version={PROTOCOL + 1},oldest={PROTOCOL + 1},release=far"
    a = start(tmp_path, "a")
    b = start(tmp_path, "b", far)
    try:
        meet(a, b)
        reason = "has no bus protocol in common with it"
        wait_for(lambda: reason in a.log() and reason in b.log(), DEADLINE, what="both logs")
        assert f"(disquette far, bus protocol {PROTOCOL + 1}): this node (disquette " in a.log()
        refused_a = f"(bus protocol {PROTOCOL}, release not announced yet): this node "
        assert refused_a + f"(disquette far, bus protocol {PROTOCOL + 1})" in b.log()
        assert f"bus={PROTOCOL + 1}:refused" in nodes_fields(a)[b.port]
        with a.client() as c:
            assert c.info("cluster")["cluster_bus_peers_refused"] == 1
            assert reachable(c) == 0
            with pytest.raises(redis.ResponseError, match="NOREPL"):
                c.execute_command("ADDJOB", "q", "x", 0, "REPLICATE", 2)
        # The refused node started again twice (on its port, from its nodes.conf): it
        # links again and is refused again each time, and the reason is not logged again
        # (the new processes log it once each).
        for _ in range(2):
            seen = refused_frames(a)
            b.stop()
            b = start(tmp_path, "b", far, port=b.port)
            wait_for(lambda seen=seen: refused_frames(a) > seen, DEADLINE, what="refused again")
        assert a.log().count(reason) == 1
        wait_for(lambda: b.log().count(reason) == 3, DEADLINE, what="the new processes' line")
    finally:
        a.stop()
        b.stop()
