"""``make run`` does not wait for the compiled build (tools/compiled_build.py and
tools/local_cluster.py): when it is missing or stale the nodes start on the pure build
at once and the compile runs in the background, told when it ends; a compile never
runs twice; the run recipe echoes no command line. The compile itself is replaced by
a stand-in here (a real one takes minutes); `make test` builds the real one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from disquette import build
from disquette.tools import compiled_build, local_cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A source tree of the compiled modules' files, its .venv, as compiled_build sees it."""
    for path in compiled_build.sources():
        copy = tmp_path / path.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text("")
    (tmp_path / ".venv").mkdir()
    monkeypatch.setattr(compiled_build, "ROOT", tmp_path)
    for name in ("STAMP", "LOG", "LOCK"):
        path = getattr(compiled_build, name)
        monkeypatch.setattr(compiled_build, name, tmp_path / ".venv" / path.name)
    return tmp_path


def touch(path: Path, when: float) -> None:
    os.utime(path, (when, when))


def test_the_build_is_current_once_made_after_every_source(tree: Path) -> None:
    assert not compiled_build.current()  # never made
    compiled_build.STAMP.touch()
    assert compiled_build.current()
    source = tree / "src" / "disquette" / "core" / "node.py"
    touch(source, compiled_build.STAMP.stat().st_mtime + 10)
    assert not compiled_build.current()  # a source changed since


def test_a_second_compile_finds_the_build_current(tree: Path, monkeypatch) -> None:
    """``make test`` while ``make run``'s background compile runs: it waits for the lock,
    then finds nothing to do; the lock keeps the two apart."""
    runs: list[float] = []

    def pip(*args: object, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        runs.append(time.monotonic())
        time.sleep(0.3)
        return subprocess.CompletedProcess([], 0)

    monkeypatch.setattr(compiled_build.subprocess, "run", pip)
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(compiled_build.build_now()))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [0, 0] and len(runs) == 1
    assert compiled_build.current()


def test_a_source_edited_during_the_compile_leaves_the_build_stale(tree, monkeypatch) -> None:
    source = tree / "src" / "disquette" / "core" / "node.py"

    def pip(*args: object, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        time.sleep(0.05)
        source.write_text("# edited while mypyc read the old one")
        return subprocess.CompletedProcess([], 0)

    monkeypatch.setattr(compiled_build.subprocess, "run", pip)
    assert compiled_build.build_now() == 0
    assert not compiled_build.current()


def test_make_run_starts_on_the_pure_build_and_compiles_meanwhile(tree, monkeypatch, capsys):
    started: list[bool] = []
    monkeypatch.setattr(compiled_build, "start_in_background", lambda: started.append(True))
    monkeypatch.setenv(build.PURE_SWITCH, "")  # (undone after the test: a delenv is not)
    local_cluster._pure_meanwhile()
    assert started == [True]
    assert os.environ[build.PURE_SWITCH] == "1"  # the nodes started from here: pure
    out = capsys.readouterr().out
    assert out.startswith("disquette: the compiled build is being made in the background")
    assert "this start runs the pure build" in out
    # Once built, nothing runs in the background and the nodes run the compiled build.
    monkeypatch.delenv(build.PURE_SWITCH)
    compiled_build.STAMP.touch()
    assert local_cluster._pure_meanwhile() is None and started == [True]
    assert build.PURE_SWITCH not in os.environ


def test_the_end_of_the_compile_is_told(tree: Path, monkeypatch) -> None:
    failed = "disquette: the compiled build could not be made (a C compiler"
    assert local_cluster._compiled_message(0).startswith(failed)  # no stamp: no build
    compiled_build.STAMP.touch()
    monkeypatch.setattr(build, "current", lambda: "compiled")
    assert local_cluster._compiled_message(0) == (
        "disquette: the compiled build is ready; the next start runs it"
    )
    assert local_cluster._compiled_message(1).startswith(failed)
    # setup.py installs the pure build when it cannot compile (no C compiler): said too.
    monkeypatch.setattr(build, "current", lambda: "pure")
    assert local_cluster._compiled_message(0).startswith(failed)


def test_the_run_recipe_echoes_no_command_line() -> None:
    """make echoed the local cluster's command line between the setup and the cluster."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^run:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe is not None
    commands = [line for line in recipe[1].splitlines() if not line.startswith("\t  ")]
    assert commands and all(line.startswith("\t@") for line in commands), commands
    assert re.search(r"^run: \$\(STAMP\)$", makefile, re.M)  # not the compiled build


def test_the_compile_runs_alone_in_the_background(monkeypatch) -> None:
    """The background compile is a process of its own session (Ctrl-C on make run does
    not stop it), at a low priority (the nodes come first)."""
    seen: dict[str, object] = {}
    monkeypatch.setattr(
        compiled_build.subprocess, "Popen", lambda argv, **kw: seen.update(kw, argv=argv)
    )
    compiled_build.start_in_background()
    assert seen["argv"] == [sys.executable, "-m", "disquette.tools.compiled_build"]
    assert seen["start_new_session"] is True and callable(seen["preexec_fn"])
