"""A cluster with the AOF on every node survives losing every node at once.

Three nodes with ``appendonly yes`` (``appendfsync always``) are joined with
CLUSTER MEET; jobs are added with REPLICATE 3 on all of them; every node is
killed with SIGKILL, then all are restarted from their files (nodes.conf keeps
their identities, the AOF their jobs). Every job whose ADDJOB was answered must
then be delivered: loaded jobs are active and their retry timers queue them.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.cluster import sees_mesh
from tests.support.raw import RawConnection
from tests.support.servers import ServerProcess, free_port, wait_for

ARGS = ["--appendonly", "yes", "--appendfsync", "always"]


def start(dirs: list[Path], ports: list[int]) -> list[ServerProcess]:
    return [ServerProcess(d, ARGS, port=p).wait_ready() for d, p in zip(dirs, ports, strict=True)]


def linked(port: int, ports: list[int]) -> bool:
    with RawConnection(port) as c:
        if c.command(b"INFO", b"persistence").find(b"loading:0") < 0:
            return False
        nodes = c.command(b"CLUSTER", b"NODES").decode()
        info = c.command(b"CLUSTER", b"INFO").decode()
    return sees_mesh(nodes, info, set(ports))


def test_every_replicated_job_is_delivered_after_all_nodes_restart(tmp_path):
    dirs = [tmp_path / name for name in ("n0", "n1", "n2")]
    for d in dirs:
        d.mkdir()
    ports = [free_port() for _ in dirs]
    nodes = start(dirs, ports)
    try:
        with RawConnection(ports[0]) as c:
            for port in ports[1:]:
                assert c.command(b"CLUSTER", b"MEET", b"127.0.0.1", port) == b"OK"
        for port in ports:
            wait_for(lambda port=port: linked(port, ports), 30, what="cluster links")
        added = []
        for i in range(60):
            with RawConnection(ports[i % 3]) as c:
                jid = c.command(b"ADDJOB", b"q", b"job %d" % i, 5000, b"REPLICATE", 3,
                                b"RETRY", 1)  # fmt: skip
                assert jid.startswith(b"D-"), jid
                added.append(jid)
        for node in nodes:
            node.proc.kill()
            node.proc.wait()
            node.stop()
        nodes = start(dirs, ports)
        for port in ports:
            wait_for(lambda port=port: linked(port, ports), 30, what="cluster links after restart")
        delivered: set[bytes] = set()
        deadline = time.monotonic() + 60
        while not set(added) <= delivered and time.monotonic() < deadline:
            for port in ports:
                with RawConnection(port) as c:
                    got = c.command(b"GETJOB", b"NOHANG", b"COUNT", 100, b"FROM", b"q")
                    for _queue, jid, _body in got or []:
                        delivered.add(jid)
                        c.command(b"ACKJOB", jid)
            time.sleep(0.2)
        missing = set(added) - delivered
        assert not missing, f"{len(missing)} of {len(added)} jobs never delivered"
    finally:
        for node in nodes:
            node.stop()
