"""Fixtures of the task API's tests: the session's shared node and a client of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from disquette import Client


@pytest.fixture
def seeds(shared_server) -> str:
    return f"127.0.0.1:{shared_server.port}"


@pytest.fixture
def client(seeds) -> Iterator[Client]:
    with Client(seeds) as c:
        yield c
