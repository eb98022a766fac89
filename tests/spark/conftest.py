"""Fixtures of the Spark tests: one SparkSession, real disquette nodes.

The session is shared by every Spark test (starting one costs 5-10 s). The
nodes are real server processes on free loopback ports: one node shared by the
module's tests (each test uses its own queues), and three-node clusters from
tests/support/cluster.py where a test needs one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

import disquette
from disquette.spark.local import local_session
from tests.support.cluster import Cluster, running_cluster
from tests.support.servers import ServerProcess, running_server


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_session("disquette-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("node")) as server:
        yield server


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), 3) as c:
        yield c


@pytest.fixture
def client(node: ServerProcess) -> Iterator[disquette.Client]:
    with disquette.Client(f"127.0.0.1:{node.port}") as c:
        yield c
