"""Five hosts, each a network namespace with its own address (tests/support/netns.py).

The nodes find each other by name (``cluster-seeds host0:7711``, each namespace's own
/etc/hosts), one announces an address other than the one its connections come from,
and under a steady load of REPLICATE 3 jobs (tests/support/netns_load.py, in a sixth
namespace) one node moves to a new address (restarted from its directory, its name
following it) and one is retired with ``disquette cluster drain``: no job whose ADDJOB
was answered is lost. Then a whole cluster moves: a node whose peers all came back
on other addresses finds them again through its seeds. Needs root to make namespaces:
CI runs as root, and so does ``make test`` there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.netns import Hosts, stop
from tests.support.servers import wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="network namespaces need root (CI runs as root)"
)
ARGS = ("--cluster-node-timeout", "2000", "--appendonly", "yes")


def table(hosts: Hosts, ns: str) -> dict[str, tuple[str, str, str]]:
    """CLUSTER NODES from inside ``ns``: ID -> (address, flags, link state)."""
    rows = {}
    for line in hosts.cli(ns, "127.0.0.1:7711", "CLUSTER", "NODES").splitlines():
        fields = line.split()
        rows[fields[0]] = (fields[1], fields[2], fields[5])
    return rows


def meshed(hosts: Hosts, indexes: list[int]) -> bool:
    for i in indexes:
        rows = table(hosts, hosts.names[i])
        if len(rows) != len(indexes) or any(
            flags not in ("myself", "noflags") or link != "connected"
            for _address, flags, link in rows.values()
        ):
            return False
    return True


def adds(hosts: Hosts, indexes: list[int]) -> int:
    """ADDJOBs the nodes of ``indexes`` have run (INFO commandstats, from inside each)."""
    total = 0
    for i in indexes:
        stats = hosts.cli(hosts.names[i], "127.0.0.1:7711", "INFO", "commandstats")
        for line in stats.splitlines():
            if line.startswith("cmdstat_addjob:calls="):
                total += int(line.split("=", 1)[1].split(",", 1)[0])
    return total


def load_runs(hosts: Hosts, indexes: list[int], more: int = 20) -> None:
    """Wait until the load has added ``more`` jobs through the nodes of ``indexes``."""
    start = adds(hosts, indexes)
    wait_for(lambda: adds(hosts, indexes) >= start + more, 60, interval=0.2,
             what=f"{more} more jobs added by the load")  # fmt: skip


@pytest.fixture
def hosts(request):
    made = Hosts(getattr(request, "param", 5))  # (five hosts unless parametrized)
    try:
        yield made
    finally:
        made.close()


def test_five_hosts_joined_by_name_one_moved_one_drained_nothing_lost(hosts, tmp_path):
    announced = f"{hosts.subnet}.12"
    hosts.add_address(2, announced)  # (host2's connections still come from .3)
    procs = {}
    for i in range(5):
        extra = ("--cluster-announce-ip", announced) if i == 2 else ()
        procs[i] = hosts.start(i, tmp_path / f"node{i}", *ARGS, "--cluster-seeds",
                               "host0:7711", "host1:7711", *extra)  # fmt: skip
    try:
        wait_for(lambda: meshed(hosts, list(range(5))), 90, interval=0.2,
                 what="five hosts meshed through the seeds")  # fmt: skip
        ids = {i: hosts.cli(hosts.names[i], "127.0.0.1:7711", "CLUSTER", "MYID") for i in procs}
        rows = table(hosts, hosts.names[0])
        assert rows[ids[2]][0] == f"{announced}:7711"
        assert rows[ids[1]][0] == f"{hosts.subnet}.2:7711"  # (not 127.0.0.1: its address)
        # The load, from the hub, by name.
        out, stop_file = tmp_path / "load.json", tmp_path / "stop"
        load = subprocess.Popen(
            hosts.command(hosts.hub, sys.executable, "-m", "tests.support.netns_load",
                          str(out), str(stop_file), *(f"host{i}:7711" for i in range(5))),
        )  # fmt: skip
        try:
            load_runs(hosts, [0, 1, 2, 3, 4])
            # host4 moves: stopped, given another address (its name follows), restarted
            # from its directory (nodes.conf, AOF).
            stop(procs[4])
            moved = f"{hosts.subnet}.44"
            hosts.move(4, moved)
            procs[4] = hosts.start(4, tmp_path / "node4", *ARGS, "--cluster-seeds",
                                   "host0:7711", "host1:7711")  # fmt: skip
            wait_for(lambda: all(table(hosts, hosts.names[i]).get(ids[4], ("",))[0]
                                 == f"{moved}:7711" for i in range(4)),
                     60, interval=0.2, what="host4 re-learned at its new address")  # fmt: skip
            wait_for(lambda: meshed(hosts, list(range(5))), 60, interval=0.2,
                     what="the mesh with host4 moved")  # fmt: skip
            load_runs(hosts, [0, 1, 2, 3, 4])
            # host3 retires: the drain, then the stop.
            drain = subprocess.run(
                hosts.command(hosts.names[3], sys.executable, "-m", "disquette.cli.main",
                              "cluster", "drain", "127.0.0.1:7711", "--timeout", "90"),
                capture_output=True, text=True, timeout=150,
            )  # fmt: skip
            assert drain.returncode == 0, drain.stderr
            stop(procs[3])
            load_runs(hosts, [0, 1, 2, 4])
        finally:
            stop_file.touch()
            load.wait(200)
        result = json.loads(out.read_text())
        assert result["added"] > 50, result
        assert result["missing"] == [], result
    finally:
        for proc in procs.values():
            stop(proc)


def jobs_queued(hosts: Hosts, i: int) -> set[str]:
    """The IDs of the jobs GETJOB hands out from queue q on host ``i`` (acknowledged)."""
    ns = hosts.names[i]
    got = hosts.cli(ns, "127.0.0.1:7711", "GETJOB", "NOHANG", "COUNT", "1000", "FROM", "q")
    ids = {line for line in got.splitlines() if line.startswith("D-")}
    if ids:
        hosts.cli(ns, "127.0.0.1:7711", "ACKJOB", *ids)
    return ids


@pytest.mark.parametrize("hosts", [3], indirect=True)
def test_a_node_whose_peers_all_moved_finds_them_through_its_seeds(hosts, tmp_path):
    """The whole cluster is rescheduled while host0 is down: host1 and host2 come back
    on new addresses, knowing each other (and host0) only at the old ones, and no seeds;
    host0 comes back on a new address too (so that nobody reaches it where they knew
    it), its nodes.conf naming the old addresses: only its seeds, the names that
    followed the hosts, lead it to them, and its gossip leads them to each other. No
    job is lost."""
    seeds = ("--cluster-seeds", "host1:7711", "host2:7711")
    procs = {i: hosts.start(i, tmp_path / f"node{i}", *ARGS, *(seeds if i == 0 else ()))
             for i in range(3)}  # fmt: skip
    try:
        wait_for(lambda: meshed(hosts, [0, 1, 2]), 90, interval=0.2,
                 what="three hosts meshed through host0's seeds")  # fmt: skip
        ids = {i: hosts.cli(hosts.names[i], "127.0.0.1:7711", "CLUSTER", "MYID") for i in procs}

        def addjob(n: int) -> str | None:
            reply = hosts.cli(hosts.names[n % 3], "127.0.0.1:7711", "ADDJOB", "q", f"job {n}",
                              "0", "REPLICATE", "3", "RETRY", "5")  # fmt: skip
            return reply if reply.startswith("D-") else None

        jobs = {wait_for(lambda n=n: addjob(n), 30, what=f"job {n} added") for n in range(30)}
        for i in (0, 1, 2):
            stop(procs[i])
        moved = {i: f"{hosts.subnet}.{i + 31}" for i in (0, 1, 2)}
        for i in (1, 2):
            hosts.move(i, moved[i])
            procs[i] = hosts.start(i, tmp_path / f"node{i}", *ARGS)
        wait_for(lambda: "fail" in table(hosts, hosts.names[1])[ids[2]][1], 60, interval=0.2,
                 what="host1 failing to reach host2 where it knew it")  # fmt: skip
        hosts.move(0, moved[0])
        procs[0] = hosts.start(0, tmp_path / "node0", *ARGS, *seeds)
        wait_for(lambda: meshed(hosts, [0, 1, 2]), 90, interval=0.2,
                 what="the mesh at the new addresses")  # fmt: skip
        for i in (0, 1, 2):
            rows = table(hosts, hosts.names[i])
            assert {rows[ids[j]][0] for j in (0, 1, 2) if j != i} == {
                f"{moved[j]}:7711" for j in (0, 1, 2) if j != i
            }
        got: set[str] = set()

        def every_job_handed_out() -> bool:
            for i in range(3):
                got.update(jobs_queued(hosts, i))
            return jobs <= got

        wait_for(every_job_handed_out, 90, interval=0.2, what="every job handed out again")
        assert got == jobs
    finally:
        for proc in procs.values():
            stop(proc)
