"""The sink's engine, AddJobPipe, driven directly against real nodes (no Spark).

What it must do: spread synchronously replicated ADDJOBs over many connections
(and only then), stay within its bounds, add every job exactly once, fail on an
error reply or a silent node, and close every connection it opened. The
connections are observed from the nodes' side too (CLIENT LIST, by the sink's
client name).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import zlib
from collections.abc import Iterator

import pytest

import disquette
from disquette.client.resp import make_parser
from disquette.spark import addjob
from disquette.spark.addjob import (
    MAX_KEYED_ROWS,
    MAX_TASK_CONNECTIONS,
    SYNC_CONNECTIONS_PER_NODE,
    SYNC_DEPTH,
    AddJobEncoder,
    AddJobPipe,
    ConnectionPlan,
    SinkError,
)
from disquette.spark.options import OptionError, SinkOptions
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


@contextlib.contextmanager
def sink_pipe(options: SinkOptions, servers: list[ServerProcess]) -> Iterator[AddJobPipe]:
    """An AddJobPipe for ``options``, closed on leaving the block; then (unless the
    block failed) the sink's connections to ``servers`` must all go."""
    with contextlib.closing(AddJobPipe(options)) as pipe:
        yield pipe
    no_sink_connections(servers)


def parse(nodes: list[str], **options: object) -> SinkOptions:
    return SinkOptions.parse({"nodes": ",".join(nodes), **{k: str(v) for k, v in options.items()}})


def add(
    pipe: AddJobPipe,
    options: SinkOptions,
    queue: str,
    bodies: list[bytes],
    dedup_prefix: str | None = None,
) -> None:
    """Send ``bodies`` the way the sink does, in chunks of the pipe's size, each
    chunk to the next node (DEDUP keys only with ``dedup_prefix``)."""
    encoder = AddJobEncoder(options, dedup_prefix)
    for i in range(0, len(bodies), pipe.chunk):
        part = bodies[i : i + pipe.chunk]
        pipe.send(encoder.encode(queue, part, i), len(part), i // pipe.chunk)


@pytest.fixture
def cluster_client(cluster) -> Iterator[disquette.Client]:
    with disquette.Client(cluster.addresses) as c:
        yield c


def test_replicate_3_spreads_over_many_connections_and_adds_each_job_once(cluster, cluster_client):
    options = parse(cluster.addresses, queue="pipe-r3", replicate=3)
    bodies = [b"r3-%d" % i for i in range(6000)]
    with sink_pipe(options, cluster.servers) as pipe:
        assert pipe.plan.synchronous and pipe.plan.depth == SYNC_DEPTH and pipe.chunk == 1
        add(pipe, options, "pipe-r3", bodies)
        # Every connection stays open until close(): the nodes see them all.
        opened = pipe.connections
        assert 3 < opened <= 3 * SYNC_CONNECTIONS_PER_NODE
        seen = [sink_connections(s) for s in cluster.servers]
        assert sum(seen) == opened
        assert all(n <= SYNC_CONNECTIONS_PER_NODE for n in seen)
        assert pipe.finish() == len(bodies)
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
    with sink_pipe(options, cluster.servers) as pipe:
        assert pipe.plan.synchronous is synchronous
        add(pipe, options, queue, [b"p%d" % i for i in range(2000)])
        if not synchronous:
            # The pipelined path: one connection per node, the whole window each.
            assert (pipe.connections, pipe.plan.depth, pipe.chunk) == (3, 1000, 500)
        assert pipe.finish() == 2000
    assert sum(cluster_client.on_node(a).qlen(queue) for a in cluster.addresses) == 2000


def test_connections_per_node_overrides_the_count(cluster):
    options = parse(cluster.addresses, queue="pipe-cpn", replicate=3, connectionsPerNode=2)
    with sink_pipe(options, cluster.servers) as pipe:
        add(pipe, options, "pipe-cpn", [b"c%d" % i for i in range(1000)])
        assert pipe.connections <= 6
        assert all(sink_connections(s) <= 2 for s in cluster.servers)
        assert pipe.finish() == 1000


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
    with sink_pipe(options, cluster.servers) as pipe, pytest.raises(SinkError, match="MAXLEN"):
        add(pipe, options, "pipe-maxlen", [b"m%d" % i for i in range(2000)])
        pipe.finish()


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


def requests(data: bytes) -> list[list[bytes]]:
    """The commands in ``data``, read back with the client's RESP parser."""
    parser = make_parser()
    parser.feed(data)
    out = []
    while (request := parser.gets()) is not False:
        out.append(request)
    return out


def test_the_encoder_sends_priority_and_a_dedup_key_per_row():
    options = parse(["127.0.0.1:1"], queue="q", replicate=2, retry=60, priority=7)
    bodies = [b"a", b"", b"a" * 300, b"a"]
    prefix = "5f1c0d8e-1b5e-4f7e-9c55-0d6a8a1b2c3d:12:3"
    encoder = AddJobEncoder(options, prefix)
    keyed = requests(encoder.encode("q", bodies, 41))
    common = [b"ADDJOB", b"q"]
    options_args = [b"5000", b"REPLICATE", b"2", b"RETRY", b"60", b"PRIORITY", b"7", b"DEDUP"]
    for row, (request, body) in enumerate(zip(keyed, bodies, strict=True), 41):
        key = f"{prefix}:{row:010d}:{zlib.crc32(body):08x}".encode()
        assert request == [*common, body, *options_args, key]
    # The same rows at the same positions get the same keys, from another encoder
    # (another attempt), with a queue column or the queue option alike.
    again = AddJobEncoder(options, prefix)
    assert requests(again.encode_rows(["q"] * 4, bodies, 41)) == keyed
    # Another body at a row gets another key (a retry that sees its input in
    # another order adds that row, it does not take it for the row it replaced).
    swapped = requests(again.encode("q", [b"b", b""], 41))
    assert swapped[0][-1] != keyed[0][-1] and swapped[1][-1] == keyed[1][-1]
    # Without a prefix, no DEDUP; without priority, no PRIORITY.
    plain = requests(AddJobEncoder(parse(["127.0.0.1:1"], queue="q")).encode("q", [b"x"]))
    assert plain == [[b"ADDJOB", b"q", b"x", b"5000"]]


def test_the_encoder_refuses_row_numbers_beyond_the_key_width():
    encoder = AddJobEncoder(parse(["127.0.0.1:1"], queue="q"), "w:0:0")
    assert requests(encoder.encode("q", [b"x"], MAX_KEYED_ROWS - 1))[0][-1].startswith(
        b"w:0:0:9999999999:"
    )
    with pytest.raises(SinkError, match="at most"):
        encoder.encode("q", [b"x", b"y"], MAX_KEYED_ROWS - 1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": "10"}, "option 'priority' must be between 0 and 9, not 10"),
        ({"priority": "-1"}, "option 'priority' must be between 0 and 9, not -1"),
        ({"priority": "high"}, "option 'priority' must be an integer"),
        ({"dedup": "sometimes"}, "option 'dedup' must be true or false"),
    ],
)
def test_bad_priority_or_dedup(options, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        SinkOptions.parse({"nodes": "127.0.0.1:1", "queue": "q", **options})


def test_priority_and_dedup_options():
    def sink(**options: str) -> SinkOptions:
        return SinkOptions.parse({"nodes": "127.0.0.1:1", "queue": "q", **options})

    assert (sink().priority, sink().dedup) == (None, False)
    assert (sink(priority="0").priority, sink(PRIORITY="9").priority) == (0, 9)
    assert (sink(dedup="false").dedup, sink(Dedup="TRUE").dedup) == (False, True)


def test_the_backoff_option_goes_to_every_addjob():
    options = parse(["127.0.0.1:1"], queue="q", retry=60, BackOff="Exponential:1:60")
    assert options.backoff == disquette.Backoff.exponential(1, 60)
    (request,) = requests(AddJobEncoder(options).encode("q", [b"x"]))
    assert request == [
        b"ADDJOB", b"q", b"x", b"5000", b"RETRY", b"60", b"BACKOFF", b"exponential", b"1", b"60",
    ]  # fmt: skip
    fixed = parse(["127.0.0.1:1"], queue="q", backoff="fixed:30")
    (request,) = requests(AddJobEncoder(fixed, "k:0:0").encode("q", [b"x"]))
    assert request[4:8] == [b"BACKOFF", b"fixed", b"30", b"DEDUP"]
    assert parse(["127.0.0.1:1"], queue="q").backoff is None
    for bad in ("fixed", "fixed:0", "linear:1", "exponential:1", "fixed:soon"):
        with pytest.raises(OptionError, match="option 'backoff' must be fixed:<seconds> or exp"):
            parse(["127.0.0.1:1"], queue="q", backoff=bad)


def test_backoff_postpones_the_sinks_jobs_and_needs_disquette(node, client, monkeypatch):
    options = parse([f"127.0.0.1:{node.port}"], queue="pipe-backoff", backoff="fixed:600")
    with contextlib.closing(AddJobPipe(options)) as pipe:
        add(pipe, options, "pipe-backoff", [b"flaky"])
        assert pipe.finish() == 1
    (job,) = client.get_jobs("pipe-backoff", timeout=DEADLINE)
    client.nack(job)
    assert client.get_jobs("pipe-backoff", nohang=True) == []  # postponed by its backoff
    assert client.show(job.id).state == "active"
    client.ack(job)
    # a disquette from before BACKOFF: INFO extensions without jobs_postponed
    monkeypatch.setattr(AddJobPipe, "_ask", lambda self, link, *args: b"dedup_hits:0\r\n")
    AddJobPipe(parse([f"127.0.0.1:{node.port}"], queue="q", priority=1)).close()
    with pytest.raises(SinkError, match=r"does not know ADDJOB's BACKOFF \(backoff\)"):
        AddJobPipe(options).close()


def keyed_request(options: SinkOptions, queue: str, body: bytes) -> tuple[bytes, list[bytes]]:
    """One encoded ADDJOB with a DEDUP key, and its arguments."""
    data = AddJobEncoder(options, "test:0:0").encode(queue, [body])
    return data, requests(data)[0]


def test_dedup_and_priority_need_disquette(node, monkeypatch):
    address = [f"127.0.0.1:{node.port}"]

    def pipe(**options: object) -> None:
        AddJobPipe(parse(address, queue="pipe-ext", **options)).close()

    pipe(dedup="true", priority=3)
    # A plain Disque node: INFO extensions is empty (an unknown section), and
    # it would refuse DEDUP and PRIORITY as a syntax error.
    monkeypatch.setattr(AddJobPipe, "_ask", lambda self, link, *args: b"")
    pipe()
    pipe(dedup="false")
    with pytest.raises(SinkError, match=r"does not know ADDJOB's DEDUP \(dedup=true\) \(a plain"):
        pipe(dedup="true")
    with pytest.raises(SinkError, match=r"does not know ADDJOB's PRIORITY \(priority\) \(a pl"):
        pipe(priority=3)


def test_the_same_keys_add_nothing_twice(node, client):
    options = parse([f"127.0.0.1:{node.port}"], queue="pipe-twice", replicate=1, dedup="true")
    bodies = [b"t%d" % (i % 7) for i in range(3000)]  # bodies repeat: rows differ by position
    for _attempt in range(2):
        with contextlib.closing(AddJobPipe(options)) as pipe:
            add(pipe, options, "pipe-twice", bodies, "twice:0:0")
            assert pipe.finish() == len(bodies)  # an existing job's ID counts as added
    assert client.qlen("pipe-twice") == len(bodies)
    jobs = client.jscan(queue="pipe-twice", reply="all")
    assert sorted(info.body for info in jobs) == sorted(bodies)


def test_tryagain_is_sent_again_until_the_first_copy_is_replicated(cluster):
    # Another client's ADDJOB with the same key waits for its copies (node 2 is
    # stopped): the pipe's ADDJOB gets -TRYAGAIN, sends it again until that job
    # is replicated, and then gets its ID: one job.
    options = parse(
        cluster.addresses[:1], queue="pipe-again", replicate=3, timeout=60_000, dedup="true"
    )
    data, args = keyed_request(options, "pipe-again", b"again")
    stopped = cluster.servers[2].proc.pid
    first: list[object] = []
    pipe = AddJobPipe(options)
    os.kill(stopped, signal.SIGSTOP)
    try:
        other = threading.Thread(target=lambda: first.append(cluster.command(0, *args)))
        other.start()
        wait_for(lambda: cluster.blocked(0) == 1, DEADLINE, 0.02, "the first ADDJOB to wait")
        pipe.send(data, 1)
        finished = threading.Thread(target=pipe.finish)
        finished.start()
        wait_for(lambda: pipe.tryagain >= 2, DEADLINE, 0.02, "-TRYAGAIN replies")
        os.kill(stopped, signal.SIGCONT)
        finished.join(DEADLINE)
        other.join(DEADLINE)
        assert not finished.is_alive() and pipe.added == 1
    finally:
        os.kill(stopped, signal.SIGCONT)
        pipe.close()
    with disquette.Client(cluster.addresses[0]) as client:
        ids = list(client.jscan(queue="pipe-again"))
    assert len(ids) == 1 and first == [ids[0].encode()]  # one job: the first client's
