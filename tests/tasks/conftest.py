"""Fixtures of the task API's tests: the session's shared node, a client of it, and
workers on threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from disquette import Client
from disquette.tasks import App


@pytest.fixture
def seeds(shared_server) -> str:
    return f"127.0.0.1:{shared_server.port}"


@pytest.fixture
def client(seeds) -> Iterator[Client]:
    with Client(seeds) as c:
        yield c


@pytest.fixture
def running():
    """Run an app's worker on a thread until the test ends: ``running(app, **options)``;
    then the app's client (its tasks' steps read results with it) is closed."""
    workers = []

    def start(app: App, **options):
        worker = app.worker(poll_timeout=0.1, **options)
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        workers.append((worker, thread, app))
        return worker

    yield start
    for worker, _, _ in workers:
        worker.stop(hurry=True)
    for _, thread, app in workers:
        thread.join(30)
        app.client.close()
