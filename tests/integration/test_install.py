"""Installing like a Python user: a wheel built from the checkout, installed with pip
into a new virtual environment, gives the three commands, which say their version and
run a node; the wheel carries the Spark data source (and declares its extra), the
dashboard's files and, on a machine with a C compiler, the compiled hot path (which
the installed node runs).

The wheel is built from a copy of the checkout (what git tracks) with pip's isolated
build (setuptools and mypy from the index, as any user gets them) and installed with
its dependencies from the index; pip's cache makes both quick after the first time.
Where the checkout's compiled build is current, its C and extension modules go into
the copy and the build requirements are pinned to this environment's versions, so
that the build finds them up to date instead of compiling again (minutes of CPU that
``make`` has just spent; tests/support/builds.py): setup.py and mypyc still run, and
the wheel is checked to carry every compiled module. The ``spark`` extra itself is
not installed here (pyspark is large and tests/spark covers the connector): its
declaration is checked instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from disquette import __version__, build
from tests.support.builds import (
    can_compile,
    copy_checkout,
    reuse_compiled_build,
    unswitched_env,
)
from tests.support.raw import RawConnection, Status
from tests.support.servers import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
#: The hang guard: building the wheel may compile the hot path, minutes of CPU on a
#: machine running other tests beside it. (The module's tests share one wheel and environment:
#: make test runs a module's tests on one worker, tests/conftest.py.)
pytestmark = pytest.mark.timeout(1200)
COMMANDS = ("disquette-server", "disquette", "disquette-cli")


def run(*args: str | Path, timeout: float = 600, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=False,
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("checkout")
    copy_checkout(src)
    env = dict(os.environ)
    if can_compile():  # the checkout's compile, when current, not done again
        env.update(reuse_compiled_build(src, out / "constraints.txt") or {})
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, src, env=env)
    (built,) = out.glob("disquette-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    env = tmp_path_factory.mktemp("venv")
    run(sys.executable, "-m", "venv", env)
    run(env / "bin" / "python", "-m", "pip", "install", "--quiet", wheel)
    return env


def test_the_wheel_carries_the_data_source_and_declares_the_commands(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        scripts = z.read(entry_points).decode()
        meta = z.read(metadata).decode()
    assert "pyspark_disque/__init__.py" in names
    assert "disquette/server/main.py" in names
    for asset in ("index.html", "dashboard.js", "dashboard.css"):  # the dashboard's files
        assert f"disquette/http/static/{asset}" in names
    for command in COMMANDS:
        assert f"{command} = " in scripts
    assert "Provides-Extra: spark" in meta
    assert any(line.startswith("Requires-Dist: pyspark") for line in meta.splitlines())
    assert "License-Expression: BSD-3-Clause" in meta
    # Celery and Dramatiq: the extras, the result backend's entry point, and the .pth
    # that makes disque:// a Kombu transport (src/_disquette_kombu.py)
    assert {"Provides-Extra: celery", "Provides-Extra: dramatiq"} <= set(meta.splitlines())
    assert "disque = disquette.integrations.celery_backend:DisqueBackend" in scripts
    assert {"disquette-kombu.pth", "_disquette_kombu.py"} <= names
    compiled = {n for n in names if n.endswith(".so")}
    if can_compile():
        for module in build.COMPILED_MODULES:
            stem = module.replace(".", "/") + "."
            assert any(n.startswith(stem) for n in compiled), module
        assert any(n.startswith("disquette__mypyc.") for n in compiled)
    else:
        assert not compiled


def test_installed_pth_registers_the_kombu_transport_at_start_up(venv):
    """Kombu is not installed there: the hook waits for it, having imported nothing else."""
    code = "import sys; print('_disquette_kombu' in sys.modules, 'disquette' in sys.modules)"
    out = run(venv / "bin" / "python", "-c", code)
    assert out.split() == ["True", "False"]


def test_installed_commands_say_their_version_and_run_a_node(venv, tmp_path):
    bin_dir = venv / "bin"
    assert "v=1.0-rc1" in run(bin_dir / "disquette-server", "--version")
    assert run(bin_dir / "disquette", "--version").strip() == f"disquette {__version__}"
    assert run(bin_dir / "disquette-cli", "--version").strip() == f"disquette-cli {__version__}"
    port = free_port()
    # The node runs the build it was installed with, whichever this session tests.
    env = unswitched_env()
    server = subprocess.Popen(
        [bin_dir / "disquette-server", "--port", str(port), "--bind", "127.0.0.1",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:

        def answers() -> bool:
            try:
                with RawConnection(port, timeout=2) as c:
                    return c.command("PING") == Status(b"PONG")
            except OSError:
                return False

        wait_for(answers, 60, 0.1, "the installed server answering")
        reply = run(bin_dir / "disquette-cli", "-p", str(port), "ADDJOB", "q", "hello", "0")
        assert reply.startswith("D-")
        info = run(bin_dir / "disquette-cli", "-p", str(port), "INFO", "server")
        expected = "compiled" if can_compile() else "pure"
        assert f"disquette_build:{expected}" in info.split()
    finally:
        server.terminate()
        server.wait(30)
