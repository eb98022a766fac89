"""Clock skew between real server processes, over real sockets.

Processes on one machine share its clock, so ``DEBUG CLOCK-SKEW`` sets one node's
clock off; its peers must measure the offset from PING/PONG round trips (CLUSTER
CLOCKS, INFO cluster through redis-py with ``protocol=2``), log the warning in their
log files once, and the notice once the clock is put right. redis-cli shows CLUSTER
CLOCKS as text, like CLUSTER NODES.
"""

from __future__ import annotations

import shutil
import subprocess

from tests.support.cluster import DEADLINE, running_cluster
from tests.support.servers import wait_for

SKEW_MS = 5000


def clocks(client) -> dict[str, dict[str, str]]:
    """CLUSTER CLOCKS by node ID: the address, the ``key=value`` numbers and the status."""
    out = {}
    for line in client.execute_command("CLUSTER", "CLOCKS").decode().splitlines():
        node_id, address, *numbers, status = line.split()
        out[node_id] = dict(n.split("=") for n in numbers) | {"address": address, "status": status}
    return out


def within(row: dict[str, str], offset: int) -> bool:
    """Whether a measured row's estimate holds ``offset`` within its bound."""
    return row["offset"] != "-" and abs(int(row["offset"]) - offset) <= int(row["bound"])


def skew_lines(log: str, level_mark: str) -> list[str]:
    return [line for line in log.splitlines() if f" {level_mark} Clock skew: node " in line]


def test_a_skewed_node_is_measured_warned_about_and_noticed_back(tmp_path):
    with running_cluster(tmp_path, 3) as c:
        skewed = c.ids[1].decode()
        assert c.command(1, "DEBUG", "CLOCK-SKEW", SKEW_MS) == b"OK"
        for i in (0, 2):
            wait_for(
                lambda i=i: clocks(c.clients[i])[skewed]["status"] == "skewed",
                DEADLINE,
                what=f"node {i} to see node 1 skewed",
            )
            row = clocks(c.clients[i])[skewed]
            assert within(row, SKEW_MS), row
            assert row["address"] == c.addresses[1]
            cluster = c.clients[i].info("cluster")
            assert abs(cluster["clock_skew_max_ms"] - SKEW_MS) <= int(row["bound"]) + 50
            assert cluster["clock_skew_warn_ms"] == 500
            assert cluster["clock_skew_peers_over"] == 1
            [warning] = skew_lines(c.servers[i].log(), "#")
            assert (
                f"node {skewed} is +" in warning and "over clock-skew-warn-ms (500 ms)" in warning
            )
        # The skewed node sees every other clock behind its own.
        wait_for(
            lambda: all(within(row, -SKEW_MS) for row in clocks(c.clients[1]).values()),
            DEADLINE,
            what="node 1 to measure the others behind",
        )
        assert "DEBUG CLOCK-SKEW" in c.servers[1].log()

        assert c.command(1, "DEBUG", "CLOCK-SKEW", 0) == b"OK"
        for i in (0, 2):
            wait_for(
                lambda i=i: clocks(c.clients[i])[skewed]["status"] == "ok",
                DEADLINE,
                what=f"node {i} to see node 1 back",
            )
            assert within(clocks(c.clients[i])[skewed], 0)
            assert c.clients[i].info("cluster")["clock_skew_peers_over"] == 0
            log = c.servers[i].log()
            assert len(skew_lines(log, "#")) == 1  # warned once, however many samples
            [notice] = skew_lines(log, "*")
            assert f"node {skewed} is back within clock-skew-warn-ms (500 ms)" in notice


def test_the_threshold_is_a_directive_set_at_run_time(tmp_path):
    with running_cluster(tmp_path, 2, args=["--clock-skew-warn-ms", "0"]) as c:
        other = c.ids[1].decode()
        assert c.clients[0].config_get("clock-skew-warn-ms") == {"clock-skew-warn-ms": "0"}
        c.command(1, "DEBUG", "CLOCK-SKEW", 800)
        wait_for(lambda: within(clocks(c.clients[0])[other], 800), DEADLINE, what="a sample")
        assert clocks(c.clients[0])[other]["status"] == "ok"  # the warning is off
        assert not skew_lines(c.servers[0].log(), "#")
        # Lowered under the measured skew: judged at once, without waiting for a sample.
        assert c.clients[0].config_set("clock-skew-warn-ms", 300)
        assert clocks(c.clients[0])[other]["status"] == "skewed"
        assert c.clients[0].info("cluster")["clock_skew_warn_ms"] == 300
        [warning] = skew_lines(c.servers[0].log(), "#")
        assert "over clock-skew-warn-ms (300 ms)" in warning


def test_redis_cli_shows_cluster_clocks_as_text(tmp_path):
    assert shutil.which("redis-cli"), "redis-cli not installed: `make tools` installs it"
    with running_cluster(tmp_path, 2) as c:
        other = c.ids[1].decode()
        wait_for(lambda: clocks(c.clients[0])[other]["status"] == "ok", DEADLINE, what="a sample")
        out = subprocess.run(
            ["redis-cli", "-p", str(c.servers[0].port), "CLUSTER", "CLOCKS"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        [line] = out.rstrip("\n").splitlines()  # (redis-cli ends a bulk reply with a newline)
        fields = line.split()
        assert fields[:2] == [other, c.addresses[1]]
        assert [f.split("=")[0] for f in fields[2:6]] == ["offset", "bound", "rtt", "age"]
        assert fields[6] == "ok"
