"""Fixtures for the Celery and Dramatiq tests: real worker processes, real nodes.

Each test gets its own queue and directory; its app module
(``tests/integrations/celeryapp.py`` or ``dramatiqapp.py``) is imported afresh
with them in the environment, as a user's app reads its settings, and worker
processes are started the way users start them (``celery -A ... worker``,
``dramatiq ...``), each in its own session so that a test can SIGKILL a whole
worker (its pool processes too). Every process a test starts is stopped.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cluster import running_cluster
from tests.support.servers import SRC

REPO = SRC.parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator:
    """Three joined nodes, shared by a module's tests."""
    with running_cluster(tmp_path_factory.mktemp("cluster"), 3) as c:
        yield c


def lines(path: Path) -> list[list[str]]:
    """The ``tag pid time`` lines a task app recorded in ``path`` (none if absent)."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


def tags(path: Path) -> list[str]:
    return [fields[0] for fields in lines(path)]


class Workers:
    """Worker processes started for one test; all stopped (SIGKILL if need be) after it."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], **env: str) -> subprocess.Popen:
        log = (self.log_dir / f"worker-{len(self.procs)}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", *argv],
            cwd=REPO,
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL the worker and every process of its session (its pool)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log")))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill(proc)
            else:
                self.kill(proc)  # its pool processes, if any outlived it


def make_env(tmp_path: Path, seeds: str, queue: str) -> dict[str, str]:
    env = {
        "PYTHONPATH": f"{SRC}{os.pathsep}{REPO}",
        "DISQUETTE_TEST_DIR": str(tmp_path),
        "DISQUETTE_TEST_QUEUE": queue,
        "DISQUETTE_SEEDS": seeds,
        "DISQUETTE_TEST_RETRY": "2",
    }
    os.environ.update(env)
    return {**os.environ, **env}


def app_module(name: str) -> Callable[[], object]:
    """A fixture factory: the test app ``name``, imported with this test's environment."""

    def load():
        sys.modules.pop(name, None)
        return importlib.import_module(name)

    return load


@pytest.fixture
def queue_name(request) -> str:
    return "itg-" + request.node.name.replace("[", "-").replace("]", "")


@pytest.fixture
def seeds(shared_server) -> str:
    """The seed list of the test apps: the session's shared node."""
    return f"127.0.0.1:{shared_server.port}"


@pytest.fixture
def env(tmp_path, seeds, queue_name) -> dict[str, str]:
    """This test's environment, set in os.environ (for the app) and returned (for workers)."""
    return make_env(tmp_path, seeds, queue_name)


@pytest.fixture
def workers(env, tmp_path) -> Iterator[Workers]:
    """The worker processes this test starts, all stopped at its end."""
    w = Workers(env, tmp_path)
    yield w
    w.stop()
