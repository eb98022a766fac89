"""``disquette top`` in a real terminal (tmux, 120x40) against a real three-node
cluster: the nodes, then a queue added with redis-cli, its length after more
ADDJOBs, a killed node shown failed, and ``q`` quitting. Every screen waited on is
saved (plain, and with its colours) in ``test-artifacts/`` at the repository root."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.cluster import running_cluster
from tests.support.servers import SRC, redis_cli, wait_for

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
DEADLINE = 60.0


class Tmux:
    """One detached tmux session running a command."""

    def __init__(self, command: list[str], width: int = 120, height: int = 40) -> None:
        self.name = f"disquette-top-{uuid.uuid4().hex[:8]}"
        env = {"PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        if os.environ.get("DISQUETTE_PURE"):
            env["DISQUETTE_PURE"] = os.environ["DISQUETTE_PURE"]
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # The pane stays after the command, to show that it exited and how.
        run = f"env TERM=xterm-256color {exports} {shlex.join(command)}"
        shell = f"{run}; echo top exited $?; sleep 600"
        self.tmux("new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height), shell)

    def tmux(self, *args: str) -> str:
        out = subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def screen(self, colours: bool = False) -> str:
        return self.tmux("capture-pane", "-p", *(["-e"] if colours else []), "-t", self.name)

    def wait_for_screen(self, test: object, what: str, artifact: str) -> str:
        """Until ``test(screen)``; the screen (and its colours) saved as ``artifact``."""
        seen = {"text": ""}

        def shown() -> bool:
            seen["text"] = self.screen()
            return bool(test(seen["text"]))  # type: ignore[operator]

        try:
            wait_for(shown, DEADLINE, interval=0.2, what=what)
        finally:
            ARTIFACTS.mkdir(exist_ok=True)
            (ARTIFACTS / f"top-{artifact}.txt").write_text(seen["text"])
            (ARTIFACTS / f"top-{artifact}.ansi").write_text(self.screen(colours=True))
        return seen["text"]

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def kill(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True, timeout=30)


@pytest.fixture(autouse=True)
def _tmux_installed() -> None:
    assert shutil.which("tmux"), "tmux is not installed (apt-get install tmux)"


def row(screen: str, start: str) -> list[str]:
    return next((line.split() for line in screen.splitlines() if line.startswith(start)), [])


def test_top_shows_the_cluster_live(tmp_path):
    with running_cluster(tmp_path, 3, ["--cluster-node-timeout", "1000"]) as c:
        ids = [i.decode()[:8] for i in c.ids]
        top = Tmux([sys.executable, "-m", "disquette.cli.main", "top", "-i", "0.5", c.addresses[0]])
        try:
            top.wait_for_screen(
                lambda s: all(row(s, i)[2:3] == ["ok"] for i in ids), "the three nodes", "nodes"
            )
            for n in range(3):
                redis_cli(c.servers[1].port, "ADDJOB", "top-orders", f"order {n}", "0")
            top.wait_for_screen(
                lambda s: row(s, "top-orders")[1:2] == ["3"], "the queue added", "queue"
            )
            for n in range(4):
                redis_cli(c.servers[1].port, "ADDJOB", "top-orders", f"more {n}", "0")
            screen = top.wait_for_screen(
                lambda s: row(s, "top-orders")[1:2] == ["7"], "its new length", "length"
            )
            assert re.search(r"QUEUE +LEN +IN/S +OUT/S", screen)
            assert re.fullmatch(r"\d+s", row(screen, "top-orders")[6])  # the age with its unit
            c.kill(2)
            top.wait_for_screen(lambda s: row(s, ids[2])[2:3] == ["fail"], "FAIL shown", "failed")
            top.keys("q")
            top.wait_for_screen(lambda s: "top exited 0" in s, "top quits on q", "quit")
        finally:
            top.kill()


def test_top_on_a_dead_address_says_so_in_one_line():
    """It printed a title, the address twice and Python's exception text."""
    for args in ([], ["--once"]):
        result = subprocess.run(
            [sys.executable, "-m", "disquette.cli.main", "top", *args, "127.0.0.1:1"],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ, PYTHONPATH=str(SRC)),
        )
        assert (result.returncode, result.stdout) == (1, "")
        assert result.stderr == (
            "disquette top: could not reach 127.0.0.1:1: "
            "connection refused (no node listens on that port)\n"
        )
