"""Shared fixtures: a running server per test module or per test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.support import cpu, slowest
from tests.support.disks import small_disk  # noqa: F401  (a fixture, for every test)
from tests.support.fuzz import PROFILE
from tests.support.raw import RawConnection
from tests.support.servers import ServerProcess, running_server

settings.load_profile(PROFILE)  # no deadline, no too-slow check (tests/support/fuzz.py)

#: The JVMs the tests start (Spark's, in this process and in the drivers, Spark Connect
#: servers and documentation examples it starts) run short queries, many times over:
#: the client compiler alone and the serial collector halve the CPU a session's start
#: costs (about 29 s to 15 s here, a tenth of a suite's Spark time) on a two-core
#: machine. Picked up by every ``java`` launched below (a NOTE line on its stderr).
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

#: The hang guard of a simulator test (a whole seed range).
SIM_TIMEOUT_S = 1800


def pytest_collection_modifyitems(config, items) -> None:
    """The slowest modules first, as measured (tests/support/slowest.py); the order is
    the same in every worker. make test runs each module's tests on one worker
    (``--dist loadscope``), which makes its module fixtures once (a cluster, a browser,
    a wheel built in build/), and hands out the modules with the most tests first: this
    order breaks its ties."""
    known = slowest.load()
    weight: dict[str, float] = {}  # module -> its tests' measured seconds
    for item in items:
        module = item.nodeid.split("::")[0]
        weight[module] = weight.get(module, 0.0) + known.get(item.nodeid, 0.0)
    # Whole modules, heaviest first, each in its own order: a module's fixtures (a
    # cluster, a browser, a wheel) live while its tests run back to back, and would be
    # made again for each stretch of its tests between other modules'.
    items.sort(key=lambda item: -weight[item.nodeid.split("::")[0]])
    for item in items:
        if item.nodeid.startswith("tests/sim/") and item.get_closest_marker("timeout") is None:
            # A seed range is minutes of CPU: on a machine running the other sessions'
            # tests beside it, the hang guard (pyproject.toml's 300 s) would cut it short.
            item.add_marker(pytest.mark.timeout(SIM_TIMEOUT_S))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    cpu.started(item)  # each test's CPU, in the JUnit report (tests/support/cpu.py)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call) -> None:
    if call.when == "teardown":
        cpu.finished(item)


#: Test folders whose modules run on one worker, one after the other: tests/spark's
#: modules share one Spark session per worker (tests/spark/conftest.py), a JVM that
#: costs about 15 s of CPU to start (with JDK_JAVA_OPTIONS above); on one worker it
#: starts once.
ONE_WORKER = ("tests/spark/",)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope`` with the folders of ONE_WORKER as one scope each."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FolderScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            folder = next((f for f in ONE_WORKER if nodeid.startswith(f)), None)
            return folder or super()._split_scope(nodeid)

    return FolderScopes(config, log)


@pytest.fixture
def server(tmp_path) -> ServerProcess:
    """A fresh single node for one test."""
    with running_server(tmp_path) as srv:
        yield srv


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory) -> ServerProcess:
    """One node shared by a module's tests (they must not depend on each other's data)."""
    with running_server(tmp_path_factory.mktemp("node")) as srv:
        yield srv


@pytest.fixture
def r(server):
    client = server.client()
    yield client
    client.close()


@pytest.fixture
def raw(shared_server):
    """A raw RESP connection to the module's shared node."""
    with RawConnection(shared_server.port) as conn:
        yield conn


@pytest.fixture
def queue(request) -> bytes:
    """A queue name no other test uses."""
    return b"q-" + request.node.name.encode()


@pytest.fixture
def policy(raw: RawConnection, queue: bytes) -> Iterator[bytes]:
    """A policy name for the test (on the shared node); deleted after it."""
    name = b"p-" + queue
    yield name
    raw.command(b"QPOLICY", b"DEL", name)
