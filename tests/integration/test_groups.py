"""Fair shares (ADDJOB GROUP) on real processes: a tenant with 100,000 jobs beside nine
with 100; the group through replication, federation and the AOF; per-group limits;
beside a peer without the feature and beside the previous release (0.1.0).

Nothing is timed: the share of the light tenants is counted in jobs handed out
(each 100 of them must come within the first 1,000 deliveries, as strict turns
over ten groups give), limits by counting jobs out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from disquette.core.dialect import REHEARSAL_VARIABLE
from tests.support.cluster import DEADLINE, pairs
from tests.support.cluster import running_cluster as cluster
from tests.support.servers import ServerProcess, running_server, wait_for
from tests.support.upgrade import previous_release

HEAVY_JOBS = 100_000
LIGHT = [f"tenant-{i}" for i in range(1, 10)]
LIGHT_JOBS = 100


def add_many(client: redis.Redis, queue: str, group: str, count: int, chunk: int = 10_000) -> None:
    """``count`` ADDJOBs of ``group``, pipelined ``chunk`` at a time (one run each)."""
    for start in range(0, count, chunk):
        pipe = client.pipeline(transaction=False)
        for n in range(start, min(count, start + chunk)):
            pipe.execute_command("ADDJOB", queue, f"{group}:{n}", 0, "GROUP", group)
        replies = pipe.execute()
        assert all(r.startswith(b"D-") for r in replies)


def test_nine_light_tenants_are_served_within_their_share_beside_a_heavy_one(tmp_path):
    with running_server(tmp_path) as server, server.client() as c:
        add_many(c, "fair", "heavy", HEAVY_JOBS)
        for tenant in LIGHT:
            add_many(c, "fair", tenant, LIGHT_JOBS)
        assert c.execute_command("QLEN", "fair") == HEAVY_JOBS + len(LIGHT) * LIGHT_JOBS
        delivered: list[str] = []
        light_left = len(LIGHT) * LIGHT_JOBS
        while light_left:
            jobs = c.execute_command("GETJOB", "NOHANG", "COUNT", 100, "FROM", "fair")
            groups = [job[2].decode().split(":")[0] for job in jobs]
            delivered += groups
            light_left -= sum(group != "heavy" for group in groups)
            c.execute_command("FASTACK", *[job[1] for job in jobs])
        # Ten groups in turn: the light ones' 900 jobs within the first 1,000 handed out.
        assert len(delivered) <= 10 * LIGHT_JOBS
        assert delivered[:10].count("heavy") == 1 and set(delivered[:10]) == {"heavy", *LIGHT}
        assert c.execute_command("QLEN", "fair") == HEAVY_JOBS - delivered.count("heavy")


def test_bad_groups_are_refused_and_a_job_shows_its_group(tmp_path):
    with running_server(tmp_path) as server, server.client() as c:
        for bad, error in (([""], "GROUP key must be 1 to 256"), (["x" * 257], "GROUP key")):
            with pytest.raises(redis.ResponseError, match=error):
                c.execute_command("ADDJOB", "q", "body", 0, "GROUP", *bad)
        with pytest.raises(redis.ResponseError, match="syntax error"):
            c.execute_command("ADDJOB", "q", "body", 0, "GROUP")
        with pytest.raises(redis.ResponseError, match="GROUP are not options of a schedule"):
            c.execute_command("CRON", "SET", "c", "q", "b", "EVERY", 1, "GROUP", "g")
        job_id = c.execute_command("ADDJOB", "q", "body", 0, "GROUP", "tenant-1")
        assert pairs(c.execute_command("SHOW", job_id))["group"] == b"tenant-1"
        _, [shown] = c.execute_command("JSCAN", "REPLY", "ALL")
        assert pairs(shown)["group"] == b"tenant-1"
        plain = c.execute_command("ADDJOB", "q", "body", 0)
        assert "group" not in pairs(c.execute_command("SHOW", plain))


def test_the_group_rides_through_replication_federation_and_the_aof(tmp_path):
    with cluster(tmp_path, 2, ["--appendonly", "yes"]) as c:
        job_id = c.command(0, "ADDJOB", "q", "body", 0, "GROUP", "g", "REPLICATE", 2)
        assert c.show(1, job_id)["group"] == b"g"  # the replica
        other = c.command(0, "ADDJOB", "moved", "body", 0, "GROUP", "m", "REPLICATE", 1)
        [[_, got, _]] = c.command(1, "GETJOB", "TIMEOUT", 30_000, "FROM", "moved")
        assert got == other and c.show(1, other)["group"] == b"m"  # brought by federation
        c.kill(0)
        c.restart(0)  # read back from its AOF
        assert c.show(0, job_id)["group"] == b"g"


def test_group_limits_hold_and_are_shown(tmp_path):
    with running_server(tmp_path) as server, server.client() as c:
        with pytest.raises(redis.ResponseError, match="group-rate must be a positive number"):
            c.execute_command("QPOLICY", "SET", "p", "lim", "group-rate", 0)
        options = ["group-concurrency", 2, "group-rate", 1000]
        assert c.execute_command("QPOLICY", "SET", "p", "lim", *options) == b"OK"
        shown = c.execute_command("QPOLICY", "GET", "p")[2]
        assert shown == [b"group-rate", 1000, b"group-concurrency", 2]
        for group in ("a", "b"):
            add_many(c, "lim", group, 10)
        out: list[list] = []

        def served() -> bool:  # (a group's first GETJOB asks for its share)
            out.extend(c.execute_command("GETJOB", "NOHANG", "COUNT", 10, "FROM", "lim") or [])
            return len(out) == 4

        wait_for(served, DEADLINE, what="two jobs of each group")
        assert sorted(job[2].split(b":")[0] for job in out) == [b"a", b"a", b"b", b"b"]
        assert c.execute_command("GETJOB", "NOHANG", "COUNT", 10, "FROM", "lim") is None
        c.execute_command("ACKJOB", out[0][1])
        [job] = c.execute_command("GETJOB", "NOHANG", "COUNT", 10, "FROM", "lim")
        assert job[2].split(b":")[0] == out[0][2].split(b":")[0]  # its group's slot


def start(folder: Path, env: dict[str, str] | None = None, aof: bool = False) -> ServerProcess:
    folder.mkdir(exist_ok=True)
    args = ["--cluster-node-timeout", "2000"] + (["--appendonly", "yes"] if aof else [])
    return ServerProcess(folder, args, env=env).wait_ready()


def mesh(a: ServerProcess, b: ServerProcess) -> tuple[redis.Redis, redis.Redis]:
    ca, cb = a.client(), b.client()
    ca.execute_command("CLUSTER", "MEET", "127.0.0.1", b.port)
    for client in (ca, cb):
        wait_for(
            lambda client=client: (
                b"cluster_reachable_nodes:1" in client.execute_command("CLUSTER", "INFO")
            ),
            DEADLINE,
            what="the two nodes linked",
        )
    return ca, cb


def test_a_peer_without_groups_gets_the_jobs_and_refuses_group_limits(tmp_path):
    a = start(tmp_path / "a")
    b = start(tmp_path / "b", {REHEARSAL_VARIABLE: "release=older,drop=groups"})
    try:
        ca, cb = mesh(a, b)
        wait_for(
            lambda: ca.info("cluster")["cluster_bus_features_missing"] in ("groups", ["groups"]),
            DEADLINE,
            what="a knowing b lacks groups",
        )
        with pytest.raises(redis.ResponseError, match="needs the 'groups' feature"):
            ca.execute_command("QPOLICY", "SET", "p", "q", "group-concurrency", 1)
        job_id = ca.execute_command("ADDJOB", "q", "body", 0, "GROUP", "g", "REPLICATE", 2)
        assert cb.execute_command("SHOW", job_id) is not None  # (it reads the tag: a rehearsal)
    finally:
        a.stop()
        b.stop()


def test_the_previous_release_holds_grouped_jobs_and_reads_their_aof(tmp_path):
    """0.1.0 skips the group's tagged field (on the bus and in the AOF): it keeps the job,
    without its group, and serves it in its queue's order."""
    old = previous_release(tmp_path / "release")
    new = start(tmp_path / "new", aof=True)
    prev = start(tmp_path / "old", old.env)
    try:
        cn, co = mesh(new, prev)
        job_id = cn.execute_command("ADDJOB", "q", "body", 0, "GROUP", "g", "REPLICATE", 2)
        shown = pairs(co.execute_command("SHOW", job_id))
        assert shown["queue"] == b"q" and "group" not in shown
        moved = cn.execute_command("ADDJOB", "moved", "body", 0, "GROUP", "m", "REPLICATE", 1)
        [[_, got, _]] = co.execute_command("GETJOB", "TIMEOUT", 30_000, "FROM", "moved")
        assert got == moved  # YOURJOBS from this release: read by 0.1.0
        cn.close()
        co.close()
    finally:
        new.stop()
        prev.stop()
    back = start(tmp_path / "new", old.env, aof=True)  # 0.1.0 on this release's AOF
    try:
        with back.client() as c:
            shown = pairs(c.execute_command("SHOW", job_id))
            assert shown["queue"] == b"q" and "group" not in shown
    finally:
        back.stop()
