"""The ``disque`` format from a Spark Connect session: a sink and the stream source.

A Connect server is started locally (tests/spark/connect_server.py: a local
session with the Connect plugin that ships with PySpark) and the test talks to
it from another process through ``SparkSession.builder.remote(...)``, as a
Connect user does (tests/spark/connect_client.py): the data source runs on the
server side, found there by itself.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.spark.helpers import DEADLINE, addresses, unacked
from tests.support.ports import free_port
from tests.support.servers import SRC, wait_for

ENV = dict(os.environ, PYTHONPATH=f"{SRC.parent}{os.pathsep}{SRC}")


@pytest.fixture(scope="module")
def remote(tmp_path_factory) -> Iterator[str]:
    """The URL of a Connect server started for these tests."""
    port = free_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.connect_server", "--port", str(port)],
            cwd=SRC.parent, env=ENV, stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip

    def listening() -> bool:
        assert server.poll() is None, log.read_text()
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, DEADLINE, 0.2, "the Connect server")
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


@pytest.mark.timeout(DEADLINE * 4)  # the client's own run may take DEADLINE * 3
def test_connect_source_and_sinks(remote, node, client, tmp_path):
    """From a Connect session (tests/spark/connect_client.py, a process of its own):
    a batch write, the stream source into Parquet, the source into the disque sink."""
    client.add_jobs("connect-in", [f"s{i}" for i in range(300)], retry=60)
    command = [sys.executable, "-m", "tests.spark.connect_client", "--remote", remote]
    command += ["--nodes", addresses(node), "--workdir", str(tmp_path)]
    done = subprocess.run(
        command, cwd=SRC.parent, env=ENV, capture_output=True, text=True, timeout=DEADLINE * 3
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["parquet"] == sorted(f"cx-{i}" for i in range(500))
    assert client.qlen("connect-q") == 0 and unacked(client, "connect-q") == 0
    relayed = sorted(info.body.decode() for info in client.jscan(queue="connect-out", reply="all"))
    assert relayed == sorted(f"s{i}" for i in range(300))
    assert unacked(client, "connect-in") == 0
