"""``python -m disquette.tools.compiled_build``: make the compiled build, unless current.

mypyc compiles the hot path (:data:`disquette.build.COMPILED_MODULES`) into extension
modules beside their sources; on a small machine that takes minutes. ``make test``
(and ``make bench``) wait for it: :func:`build` runs in the foreground. ``make run``
does not: when the compiled build is missing or older than its sources, the local
cluster starts at once on the pure build (``DISQUETTE_PURE=1``: the same modules,
interpreted) and :func:`start_in_background` compiles meanwhile, so that the next
start runs compiled (tools/local_cluster.py). The compile's output goes to
``.venv/compile.log``.

Two compiles never run at once (``make test`` while ``make run``'s background compile
runs): each takes ``.venv/compile.lock`` first, and one that got the lock after
another finished finds the build current and does nothing. The build is current when
``.venv/.compiled`` (dated, after a build that succeeded, from the moment the build
began, so that a source edited during the build leaves it stale) is newer than every
source it is made from, the rule the Makefile's ``.venv/.compiled`` target states too.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from disquette import build

ROOT = Path(__file__).resolve().parents[3]
VENV = ROOT / ".venv"
STAMP = VENV / ".compiled"
LOG = VENV / "compile.log"
LOCK = VENV / "compile.lock"


def sources() -> list[Path]:
    """What the compiled build is made from: the modules it compiles, setup.py, build.py."""
    modules = [ROOT / "src" / (name.replace(".", "/") + ".py") for name in build.COMPILED_MODULES]
    return [ROOT / "setup.py", ROOT / "src" / "disquette" / "build.py", *modules]


def current() -> bool:
    """Whether the compiled build was made, and after its sources last changed."""
    try:
        made = STAMP.stat().st_mtime
    except FileNotFoundError:
        return False
    return all(path.stat().st_mtime <= made for path in sources())


def build_now() -> int:
    """Compile unless the build is current (waiting for a compile under way); 0 when
    the build is current after it (the pure build after a failure: setup.py says why)."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if current():
            return 0
        started = time.time()  # a source edited while it compiles leaves the build stale
        with open(LOG, "w") as log:
            pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install"]
            done = subprocess.run(
                [*pip, "--no-build-isolation", "--no-deps", "-e", str(ROOT)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                check=False,
            )
        if done.returncode != 0:
            return done.returncode
        STAMP.touch()
        os.utime(STAMP, (started, started))
        return 0


def start_in_background() -> subprocess.Popen[bytes]:
    """Compile in a process of its own session, at a low priority (the nodes started
    meanwhile come first), which goes on when ``make run`` stops; the process."""
    return subprocess.Popen(
        [sys.executable, "-m", "disquette.tools.compiled_build"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=lambda: os.nice(10),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m disquette.tools.compiled_build",
        description="Compile the hot path with mypyc unless the compiled build is current.",
    )
    parser.parse_args(argv)
    if current():
        return 0
    print(f"disquette: compiling the hot path with mypyc (a few minutes; log in {LOG})")
    code = build_now()
    if code:
        sys.stdout.write(LOG.read_text(errors="replace"))
        return code
    build.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
