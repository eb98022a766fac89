"""The two builds as tests see them: whether this machine can build the compiled hot
path (a C compiler and Python's headers, what setup.py's mypyc build needs; ``make
tools`` installs both), the environment that runs a fresh interpreter on the
checkout's sources with the build asked for, and a copy of the checkout that a pip
build turns into the compiled build without compiling it again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from importlib import metadata
from pathlib import Path

from disquette import build
from disquette.tools import compiled_build

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def can_compile() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"], "Python.h")
    return shutil.which(compiler) is not None and headers.exists()


def unswitched_env() -> dict[str, str]:
    """This process's environment without ``DISQUETTE_PURE``: a child runs the build it
    finds, whichever build this process runs."""
    return {k: v for k, v in os.environ.items() if k != build.PURE_SWITCH}


def build_env(pure: str | None = None) -> dict[str, str]:
    """This process's environment with ``src`` on the path and ``DISQUETTE_PURE`` set to
    ``pure`` (unset when None): what a child interpreter needs to run either build."""
    env = unswitched_env()
    env["PYTHONPATH"] = str(SRC)
    if pure is not None:
        env[build.PURE_SWITCH] = pure
    return env


def copy_checkout(dest: Path) -> None:
    """The checkout's files at ``dest``, as a build context or an sdist holds them: what
    git tracks, and what it would (not what it ignores: .venv, build/, the modules
    compiled in place)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    for name in files:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)


def reuse_compiled_build(dest: Path, constraints: Path) -> dict[str, str] | None:
    """Put the checkout's compiled build where a pip build of the copy ``dest`` finds it
    up to date; the environment variables that make that build use it, or None when the
    checkout's compiled build is not made or not current (a build then compiles).

    ``make`` compiles in place: mypyc writes its C into ``build/`` and the extension
    modules land beside the sources. Copied as a build of ``dest`` would leave them
    (the C with its dates, the modules newer, under ``build/lib.<platform>``), they
    make setuptools skip each extension as up to date: setup.py still runs mypyc, which
    writes the same C again only where it differs (it leaves identical files alone), so
    a changed compiled module is compiled for real. pip builds in an isolated
    environment, with the build requirements pinned (in ``constraints``) to this
    environment's versions, whose mypyc wrote the C: older pips read the pins from
    PIP_CONSTRAINT, newer ones (which keep it out of isolated builds) from
    PIP_BUILD_CONSTRAINT.
    """
    if not compiled_build.current() or not (ROOT / "build" / "__native_disquette.c").exists():
        return None
    shutil.copytree(
        ROOT / "build", dest / "build", ignore=shutil.ignore_patterns("lib.*", "temp.*", "bdist.*")
    )
    lib = dest / "build" / f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    now = time.time()
    for module in SRC.rglob(f"*{suffix}"):
        target = lib / module.relative_to(SRC)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(module, target)
        os.utime(target, (now, now))
    pins = [f"{name}=={metadata.version(name)}" for name in ("mypy", "setuptools")]
    constraints.write_text("\n".join(pins) + "\n")
    return {"PIP_CONSTRAINT": str(constraints), "PIP_BUILD_CONSTRAINT": str(constraints)}
