"""Fixtures for the client tests: clients on the module's node, unique queue and policy
names."""

from __future__ import annotations

import pytest

from disquette.client import Client


@pytest.fixture
def qname(request) -> str:
    """A queue name no other test uses."""
    return "q-" + request.node.name


@pytest.fixture
def client(shared_server):
    with Client(f"127.0.0.1:{shared_server.port}") as c:
        yield c


@pytest.fixture
def policy(client, qname):
    """A policy name no other test uses, deleted after the test."""
    yield qname
    client.qpolicy_del(qname)
