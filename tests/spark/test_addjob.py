"""The sink's engine, AddJobPipe, driven directly against real nodes (no Spark).

What it must do: spread synchronously replicated ADDJOBs over many connections
(and only then), stay within its bounds, add every job exactly once, fail on an
error reply or a silent node, and close every connection it opened. The
connections are observed from the nodes' side too (CLIENT LIST, by the sink's
client name).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

import disquette
from disquette.spark import addjob
from disquette.spark.addjob import (
    MAX_TASK_CONNECTIONS,
    SYNC_CONNECTIONS_PER_NODE,
    SYNC_DEPTH,
    AddJobEncoder,
    AddJobPipe,
    ConnectionPlan,
    SinkError,
)
from disquette.spark.options import SinkOptions
from tests.spark.helpers import DEADLINE
from tests.support.servers import ServerProcess, running_server, wait_for

SINK_NAME = "disquette-spark-sink"


def sink_connections(server: ServerProcess) -> int:
    """Connections the node has from sinks (CLIENT LIST, by client name)."""
    with server.client() as r:
        return sum(1 for c in r.client_list() if c.get("name") == SINK_NAME)


def no_sink_connections(servers: list[ServerProcess]) -> None:
    wait_for(
        lambda: all(sink_connections(s) == 0 for s in servers),
        DEADLINE,
        0.05,
        "the sink's connections to be closed",
    )


def parse(nodes: list[str], **options: object) -> SinkOptions:
    return SinkOptions.parse({"nodes": ",".join(nodes), **{k: str(v) for k, v in options.items()}})


def add(pipe: AddJobPipe, options: SinkOptions, queue: str, bodies: list[bytes]) -> None:
    """Send ``bodies`` the way the sink does, in chunks of the pipe's size."""
    encoder = AddJobEncoder(options)
    for i in range(0, len(bodies), pipe.chunk):
        part = bodies[i : i + pipe.chunk]
        pipe.send(encoder.encode(queue, part), len(part))


@pytest.fixture
def cluster_client(cluster) -> Iterator[disquette.Client]:
    with disquette.Client(cluster.addresses) as c:
        yield c


def test_replicate_3_spreads_over_many_connections_and_adds_each_job_once(cluster, cluster_client):
    options = parse(cluster.addresses, queue="pipe-r3", replicate=3)
    bodies = [b"r3-%d" % i for i in range(6000)]
    pipe = AddJobPipe(options)
    try:
        assert pipe.plan.synchronous and pipe.plan.depth == SYNC_DEPTH and pipe.chunk == 1
        add(pipe, options, "pipe-r3", bodies)
        # Every connection stays open until close(): the nodes see them all.
        opened = pipe.connections
        assert 3 < opened <= 3 * SYNC_CONNECTIONS_PER_NODE
        seen = [sink_connections(s) for s in cluster.servers]
        assert sum(seen) == opened
        assert all(n <= SYNC_CONNECTIONS_PER_NODE for n in seen)
        assert pipe.finish() == len(bodies)
    finally:
        pipe.close()
    no_sink_connections(cluster.servers)
    views = [cluster_client.on_node(a) for a in cluster.addresses]
    # Each job is queued once (on the node that received it), a copy is on every node.
    assert sum(v.qlen("pipe-r3") for v in views) == len(bodies)
    for view in views:
        jobs = list(view.jscan(queue="pipe-r3", reply="all"))
        assert len({j.id for j in jobs}) == len(bodies)
        assert sorted(j.body for j in jobs) == sorted(bodies)


@pytest.mark.parametrize(
    ("options", "synchronous"),
    [
        ({}, True),  # no REPLICATE on a three-node cluster: the nodes' default is 3
        ({"replicate": 2}, True),
        ({"replicate": 1}, False),
        ({"replicate": 3, "async": "true"}, False),
        ({"async": "true"}, False),
    ],
)
def test_the_plan_follows_the_replication(cluster, cluster_client, options, synchronous):
    queue = "pipe-plan-" + "-".join(f"{k}{v}" for k, v in options.items())
    options = parse(cluster.addresses, queue=queue, **options)
    pipe = AddJobPipe(options)
    try:
        assert pipe.plan.synchronous is synchronous
        add(pipe, options, queue, [b"p%d" % i for i in range(2000)])
        if not synchronous:
            # The pipelined path: one connection per node, the whole window each.
            assert (pipe.connections, pipe.plan.depth, pipe.chunk) == (3, 1000, 500)
        assert pipe.finish() == 2000
    finally:
        pipe.close()
    no_sink_connections(cluster.servers)
    assert sum(cluster_client.on_node(a).qlen(queue) for a in cluster.addresses) == 2000


def test_connections_per_node_overrides_the_count(cluster):
    options = parse(cluster.addresses, queue="pipe-cpn", replicate=3, connectionsPerNode=2)
    pipe = AddJobPipe(options)
    try:
        add(pipe, options, "pipe-cpn", [b"c%d" % i for i in range(1000)])
        assert pipe.connections <= 6
        assert all(sink_connections(s) <= 2 for s in cluster.servers)
        assert pipe.finish() == 1000
    finally:
        pipe.close()
    no_sink_connections(cluster.servers)


def test_plan_bounds():
    def plan(nodes: int, cluster_size: int = 3, **options: object) -> ConnectionPlan:
        return ConnectionPlan.choose(parse(["127.0.0.1:1"], **options), nodes, cluster_size)

    assert plan(3, replicate=3) == ConnectionPlan(True, SYNC_CONNECTIONS_PER_NODE, 2, grow=True)
    # The window bounds what is in flight per node, as on the pipelined path.
    assert plan(3, replicate=3, window=8) == ConnectionPlan(True, 4, 2, grow=True)
    assert plan(3, replicate=3, window=1) == ConnectionPlan(True, 1, 1, grow=True)
    # Never more than MAX_TASK_CONNECTIONS in all, whatever the options.
    assert plan(10, replicate=3).per_node * 10 <= MAX_TASK_CONNECTIONS
    assert plan(3, replicate=3, connectionsPerNode=64).per_node == MAX_TASK_CONNECTIONS // 3
    assert plan(3, connectionsPerNode=64, replicate=1).per_node == MAX_TASK_CONNECTIONS // 3
    # Without REPLICATE, the cluster's size decides.
    assert not plan(1, cluster_size=1).synchronous
    assert plan(1, cluster_size=2).synchronous
    assert plan(1, replicate=1) == ConnectionPlan(False, 1, 1000, grow=False)


def test_an_error_reply_fails_and_every_connection_is_closed(cluster):
    options = parse(cluster.addresses, queue="pipe-maxlen", replicate=3, maxlen=50)
    pipe = AddJobPipe(options)
    try:
        with pytest.raises(SinkError, match="MAXLEN"):
            add(pipe, options, "pipe-maxlen", [b"m%d" % i for i in range(2000)])
            pipe.finish()
    finally:
        pipe.close()
    no_sink_connections(cluster.servers)


def test_a_silent_node_fails_the_task(tmp_path, monkeypatch):
    monkeypatch.setattr(addjob, "REPLY_GRACE", 0.5)
    with running_server(tmp_path) as server:
        options = parse([f"127.0.0.1:{server.port}"], queue="pipe-silent", timeout=100)
        pipe = AddJobPipe(options)
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(SinkError, match="no ADDJOB reply"):
                add(pipe, options, "pipe-silent", [b"s%d" % i for i in range(10)])
                pipe.finish()
        finally:
            pipe.close()
            os.kill(server.proc.pid, signal.SIGCONT)
        no_sink_connections([server])
