"""The two builds as tests see them: whether this machine can build the compiled hot
path (a C compiler and Python's headers, what setup.py's mypyc build needs; ``make
tools`` installs both), and the environment that runs a fresh interpreter on the
checkout's sources with the build asked for."""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

from disquette import build

SRC = Path(__file__).resolve().parents[2] / "src"


def can_compile() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"], "Python.h")
    return shutil.which(compiler) is not None and headers.exists()


def build_env(pure: str | None = None) -> dict[str, str]:
    """This process's environment with ``src`` on the path and ``DISQUETTE_PURE`` set to
    ``pure`` (unset when None): what a child interpreter needs to run either build."""
    env = {k: v for k, v in os.environ.items() if k != build.PURE_SWITCH}
    env["PYTHONPATH"] = str(SRC)
    if pure is not None:
        env[build.PURE_SWITCH] = pure
    return env
