"""docs/operations.md's backups, run with real processes: a copy of every node's data
taken while the cluster runs and takes jobs, restored into a new cluster, where every
job that was waiting comes back once and no acknowledged job does.

The copies are made by the page's own backup loop (disquette-cli, cp, disquette
check-aof), read from the page and run with bash against a three-node cluster with the
AOF on; the restore is the page's: the copies one after the other as the AOF of a new
node started with aof-enqueue-jobs-once, two more nodes started empty and joined."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from disquette import Client
from disquette.tools.local_cluster import join
from tests.support import docblocks
from tests.support.cluster import Cluster, running_cluster
from tests.support.servers import SRC, ServerProcess, wait_for

BIN = Path(sys.executable).parent
ENV = dict(os.environ, PYTHONPATH=str(SRC), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def backup_loop() -> str:
    """docs/operations.md's backup loop, as the page has it (for nodes 7711-7713)."""
    blocks = [b.source for b in docblocks.parse(PAGE.read_text()).blocks if b.kind == "script"]
    (loop,) = [source for source in blocks if "BGREWRITEAOF" in source]
    return loop


def bash(script: str, cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "-e", "-c", script], env=ENV, cwd=cwd, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def drain(client: Client, queue: str, nodes: list[str]) -> list[bytes]:
    """Every job of ``queue`` taken from every node and acknowledged; their bodies."""
    bodies: list[bytes] = []
    for node in nodes:
        while jobs := client.on_node(node).get_jobs(queue, count=100, nohang=True):
            bodies += [job.body for job in jobs]
            client.ack(*jobs)
    return bodies


def test_a_live_copy_restored_into_a_new_cluster(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    with running_cluster(tmp_path / "old", 3, ["--appendonly", "yes"]) as old:
        seeds = ",".join(old.addresses)
        with Client(seeds) as client:
            for n in range(30):
                client.on_node(old.addresses[n % 3]).add_job(
                    "orders", f"order {n}".encode(), replicate=2, retry=3
                )
            done = drain_some(client, old, 5)
            # Producers keep going while the copies are taken: the copy is consistent
            # all the same (a record caught half-written is cut by check-aof --fix).
            stop = threading.Event()
            traffic = threading.Thread(target=produce, args=(seeds, stop), daemon=True)
            traffic.start()
            try:
                ports = docblocks.port_map([server.port for server in old.servers])
                out = bash(docblocks.rewrite_ports(backup_loop(), ports), tmp_path)
                assert out.count("AOF is valid") + out.count("Successfully truncated AOF") == 3
            finally:
                stop.set()
                traffic.join(30)

    # The restore: the copies, one after the other, are the AOF of a new node (a job in
    # several copies loads once), which queues at once what was queued; two more nodes
    # start empty and join it.
    for i in range(3):
        (tmp_path / "new" / f"n{i}").mkdir(parents=True)
    copies = " ".join(f"backups/{s.port}.aof" for s in old.servers)
    bash(f"cat {copies} > new/n0/disque.aof", tmp_path)
    new = [
        ServerProcess(
            tmp_path / "new" / "n0", ["--appendonly", "yes", "--aof-enqueue-jobs-once", "yes"]
        ),
        *(ServerProcess(tmp_path / "new" / f"n{i}", ["--appendonly", "yes"]) for i in (1, 2)),
    ]
    try:
        for server in new:
            server.wait_ready()
        wait_for(lambda: not loading(new[0]), 60, what="the copies loaded")
        assert join([s.port for s in new], 60, {s.port: s.proc for s in new}), "no mesh"
        addresses = [f"127.0.0.1:{s.port}" for s in new]
        with Client(",".join(addresses)) as client:
            expected = {f"order {n}".encode() for n in range(30)} - done
            got: list[bytes] = []

            def all_back() -> bool:
                got.extend(drain(client, "orders", addresses))
                return set(got) >= expected

            # Queued jobs come back at once, those that were active after their retry.
            wait_for(all_back, 60, interval=0.5, what="every waiting job back")
            assert not set(got) & done  # no acknowledged job came back
            assert len(got) == len(set(got))  # each once
    finally:
        for server in new:
            server.stop()


def loading(server: ServerProcess) -> bool:
    """Whether the node still loads its AOF (it answers -LOADING meanwhile)."""
    with server.client() as client:
        return bool(client.info("persistence")["loading"])


def drain_some(client: Client, cluster: Cluster, count: int) -> set[bytes]:
    """Acknowledge ``count`` jobs and wait until every copy of them is gone (so that
    the copies taken after this hold them as acknowledged: nothing to come back)."""
    jobs = client.get_jobs("orders", count=count, timeout=30)
    assert len(jobs) == count
    client.ack(*jobs)
    wait_for(
        lambda: all(cluster.acked_or_gone(job.id.encode(), range(3)) for job in jobs),
        60,
        what="the acknowledgements everywhere",
    )
    return {job.body for job in jobs}


def produce(seeds: str, stop: threading.Event) -> None:
    with Client(seeds) as client:
        n = 0
        while not stop.is_set():
            client.add_job("during-backup", f"later {n}".encode(), replicate=2)
            n += 1
