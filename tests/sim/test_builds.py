"""The simulator gives the same histories on the compiled and the pure build: the
compiled modules are the same sources, and nothing they decide may depend on which
runs. Each seed's history digest (every event of the run) is compared."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.builds import build_env

RUNS = [
    ("1", ()),
    ("7", ("--rolling",)),
    ("3", ("--federation",)),
    ("5", ("--features",)),
    ("5", ("--coordination",)),
    ("5", ("--skew",)),
    ("8", ("--flow-to-disk",)),
    ("4", ("--cron",)),
    ("3", ("--outcomes",)),
    ("6", ("--fair",)),
]


def first_line(seed: str, mode: tuple[str, ...], pure: bool) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "disquette.sim", "--seed", seed, *mode],
        env=build_env("1" if pure else None), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.stdout, out.stderr
    return out.stdout.splitlines()[0]


@pytest.mark.parametrize(("seed", "mode"), RUNS, ids=[f"{s}{''.join(m)}" for s, m in RUNS])
def test_same_history_on_both_builds(seed: str, mode: tuple[str, ...]) -> None:
    compiled = first_line(seed, mode, pure=False)
    assert "digest" in compiled
    assert first_line(seed, mode, pure=True) == compiled
