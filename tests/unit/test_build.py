"""Which build runs: the compiled extension modules where they were built, the pure
sources with DISQUETTE_PURE=1, and never a silent fall back to pure on a machine that
has what the compiled build needs."""

from __future__ import annotations

import subprocess
import sys

from disquette import build
from tests.support.builds import SRC, build_env, can_compile

PROBE = (
    "import disquette.build as b, disquette.core.node as n, disquette.server.connection as c;"
    "print(b.current(), type(n.__loader__).__name__, Path(c.__file__).suffix)"
)


def probe(pure: str | None = None) -> list[str]:
    """Import two hot modules in a fresh interpreter; what build, which loader, which file."""
    code = "from pathlib import Path;" + PROBE
    out = subprocess.run(
        [sys.executable, "-c", code], env=build_env(pure), capture_output=True, text=True,
        check=True, timeout=60,
    )  # fmt: skip
    return out.stdout.split()


def test_the_compiled_build_is_installed_where_it_can_be() -> None:
    """`make` builds the extensions in place; a machine with a compiler must get them
    (a failed build would leave the pure one, with a warning nobody reads in CI)."""
    expected = "compiled" if can_compile() else "pure"
    assert probe()[0] == expected


def test_the_pure_switch_imports_the_sources() -> None:
    assert probe(pure="1") == ["pure", "SourceFileLoader", ".py"]
    assert probe(pure="0")[0] == probe()[0]


def test_the_compiled_modules_are_all_sources_of_the_package() -> None:
    for name in build.COMPILED_MODULES:
        assert (SRC / (name.replace(".", "/") + ".py")).is_file(), name


def test_no_compiled_module_is_older_than_its_source() -> None:
    """A stale extension would run instead of an edited source (`make` rebuilds them).
    The code of every compiled module is in the group's library, rebuilt when any of
    them changes (a module's own extension is a stub that stays as it was)."""
    libraries = list(SRC.glob("disquette__mypyc.*.so"))
    if not libraries:
        assert probe()[0] == "pure"
        return
    built = max(lib.stat().st_mtime for lib in libraries)
    for name in build.COMPILED_MODULES:
        source = SRC / (name.replace(".", "/") + ".py")
        assert source.stat().st_mtime <= built, f"{source} changed after the build: run make"
