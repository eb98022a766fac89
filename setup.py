"""Builds the compiled hot path: mypyc compiles the request-path modules listed in
``src/disquette/build.py`` from their own typed ``.py`` sources.

Everything else about the package is in ``pyproject.toml``. Where mypyc or a C
compiler (or Python's headers) is missing, or the build fails, the package installs
without extensions after one warning: the pure build works the same, only slower.
``make tools`` installs the compiler and headers from Debian. ``DISQUETTE_BUILD=pure``
skips the compiled build on purpose.
"""

from __future__ import annotations

import os
import runpy
import sys
import sysconfig
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

#: Installed beside the packages: registers ``disque://`` with Kombu at start-up
#: (src/_disquette_kombu.py says why).
PTH = "disquette-kombu.pth"

BUILD = runpy.run_path(os.path.join("src", "disquette", "build.py"))
MODULES: tuple[str, ...] = BUILD["COMPILED_MODULES"]


def _remove_in_place() -> None:
    """After a failed build: remove the extension modules an earlier build left beside
    the sources. An editable install imports them before the sources, so stale ones
    would run old code and hide the failure."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for name in (*MODULES, "disquette__mypyc"):
        path = os.path.join("src", *name.split(".")) + suffix
        if os.path.exists(path):
            os.remove(path)


def _remove_orphans() -> None:
    """Remove the extension modules an earlier build left beside a source that has moved
    or is no longer compiled: nothing imports them any more, but they would outlive
    their code (and fail to load, their shared library rebuilt without them)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    wanted = {os.path.join("src", *name.split(".")) + suffix for name in MODULES}
    for folder, _, files in os.walk(os.path.join("src", "disquette")):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(suffix) and path not in wanted:
                os.remove(path)


def _warn(reason: object) -> None:
    line = "=" * 78
    print(
        f"\n{line}\nWARNING: disquette is installed as the PURE build: the compiled hot path "
        f"could not be built\n({reason}).\nIt works the same, slower. `make tools` installs "
        "a C compiler and the Python headers\n(Debian: gcc, python3-dev); then reinstall.\n"
        f"{line}\n",
        file=sys.stderr,
    )


class OptionalBuildExt(build_ext):
    """Build every extension or none: a failure removes what was built and leaves the
    pure build, with one warning. Compiles with every core."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # no compiler, no headers, a compile error
            for path in self.get_outputs():
                if os.path.exists(path):
                    os.remove(path)
            _remove_in_place()
            reason = str(error).splitlines()[0] if str(error) else ""
            _warn(f"{type(error).__name__}: {reason[:160]}")


class BuildPyWithPth(build_py):
    """Also put the ``.pth`` file at the top of the build (so of site-packages)."""

    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


#: The setup.py commands that build; pip's build first runs setup.py for the metadata
#: and the build's requirements (egg_info, dist_info), where mypyc's type check, most of
#: a build's time when the C is current, would be done for nothing.
BUILDING = {"build", "build_ext", "bdist", "bdist_wheel", "editable_wheel", "install", "develop"}


def _extensions() -> list[Any]:
    _remove_orphans()
    if os.environ.get("DISQUETTE_BUILD", "") == "pure" or BUILDING.isdisjoint(sys.argv[1:]):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("mypyc is not installed")
        return []
    sources = [os.path.join("src", *name.split(".")) + ".py" for name in MODULES]
    try:
        # One shared library for the group (cross-module calls stay native), its C
        # split into several files so that they compile in parallel.
        # The compiled modules must type-check; the modules they import are only read
        # for their types (follow-imports silent), as when they are installed.
        return mypycify(
            ["--config-file", "pyproject.toml", "--follow-imports", "silent", *sources],
            opt_level="3",
            group_name="disquette",
            multi_file=True,
        )
    except (Exception, SystemExit) as error:  # mypy's type errors exit
        _warn(f"mypyc: {error}")
        _remove_in_place()
        return []


setup(
    ext_modules=_extensions(),
    cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithPth},
)
