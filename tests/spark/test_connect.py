"""The ``disque`` format from a Spark Connect session: a sink and the stream source.

A Connect server is started locally (tests/spark/connect_server.py: a local
session with the Connect plugin that ships with PySpark) and the test talks to
it through ``SparkSession.builder.remote("sc://127.0.0.1:port")``, as a Connect
user does: the data source runs on the server side, found there by itself.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from tests.spark.helpers import DEADLINE, addresses, unacked
from tests.support.ports import free_port
from tests.support.servers import SRC, wait_for

pytest.importorskip("grpc", reason="Spark Connect's client needs pyspark[connect]")


@pytest.fixture(scope="module")
def remote(tmp_path_factory) -> Iterator[SparkSession]:
    port = free_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    env = dict(os.environ, PYTHONPATH=f"{SRC.parent}{os.pathsep}{SRC}")
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.connect_server", "--port", str(port)],
            cwd=SRC.parent, env=env, stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip

    def listening() -> bool:
        assert server.poll() is None, log.read_text()
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, DEADLINE, 0.2, "the Connect server")
        session = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        yield session
        session.stop()
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_connect_writes_and_streams_jobs(remote, node, client, tmp_path):
    df = remote.range(500).selectExpr("concat('cx-', id) AS body")
    df.write.format("disque").mode("append").option("nodes", addresses(node)).option(
        "queue", "connect-q"
    ).option("retry", 60).save()
    assert client.qlen("connect-q") == 500
    stream = (
        remote.readStream.format("disque")
        .option("nodes", addresses(node))
        .option("queues", "connect-q")
        .option("bodyType", "string")
        .option("maxJobsPerTrigger", 200)
        .load()
    )
    out = tmp_path / "out"
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(DEADLINE)
    rows = remote.read.parquet(str(out)).collect()
    assert sorted(r.body for r in rows) == sorted(f"cx-{i}" for i in range(500))
    assert unacked(client, "connect-q") == 0


def test_connect_streams_into_the_disque_sink(remote, node, client, tmp_path):
    client.add_jobs("connect-in", [f"s{i}" for i in range(300)], retry=60)
    stream = (
        remote.readStream.format("disque")
        .option("nodes", addresses(node))
        .option("queues", "connect-in")
        .load()
    )
    query = (
        stream.select("body")
        .writeStream.format("disque")
        .option("nodes", addresses(node))
        .option("queue", "connect-out")
        .option("dedup", "true")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(DEADLINE)
    bodies = sorted(info.body.decode() for info in client.jscan(queue="connect-out", reply="all"))
    assert bodies == sorted(f"s{i}" for i in range(300))
    assert unacked(client, "connect-in") == 0
