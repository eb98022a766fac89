"""Which build runs: the hot modules compiled to C extensions, or the pure sources.

The modules on the request path (:data:`COMPILED_MODULES`) are compiled by mypyc
from the very ``.py`` files beside them (``setup.py`` reads the list from here), and
Python imports an extension module in preference to the source of the same name.
``DISQUETTE_PURE=1`` in the environment turns that preference around: a finder put
first on ``sys.meta_path`` resolves every ``disquette`` module to its source, so the
pure build can run, and be tested, where compiled modules exist. Nothing here may
import more than the standard library: ``setup.py`` runs this file before the package
is installed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

#: The modules compiled in the compiled build: the request path from the bytes read
#: to the reply written, the core's job, queue, ack and replication code, and the
#: cluster bus from the frames read to the messages handled.
COMPILED_MODULES = (
    "disquette.protocol.reader",
    "disquette.protocol.reply",
    "disquette.protocol.frames",
    "disquette.server.connection",
    "disquette.server.outbox",
    "disquette.server.clock",
    "disquette.server.aof",
    "disquette.state.server",
    "disquette.state.command",
    "disquette.commands.table",
    "disquette.commands.args",
    "disquette.commands.jobs",
    "disquette.commands.queues",
    "disquette.core.job",
    "disquette.core.joblist",
    "disquette.core.queue",
    "disquette.core.node",
    "disquette.core.ids",
    "disquette.core.schedule",
    "disquette.core.scan",
    "disquette.core.client",
    "disquette.core.memory",
    "disquette.core.acks",
    "disquette.core.replication",
    "disquette.core.requeue",
    "disquette.core.messages",
    "disquette.core.serialize",
    "disquette.core.aof",
    "disquette.state.stats",
    "disquette.state.slowlog",
    "disquette.state.latency",
    "disquette.commands.connection",
    "disquette.commands.cluster",
    "disquette.core.replies",
    "disquette.core.membership",
    "disquette.core.federation",
    "disquette.core.repair",
    "disquette.core.replicated",
    "disquette.core.policy",
    "disquette.core.deadletter",
    "disquette.core.dependency",
    "disquette.core.progress",
    "disquette.core.claim",
    "disquette.core.ratelimit",
    "disquette.core.spill",
    "disquette.core.tags",
    "disquette.server.bus",
    "disquette.server.spill",
)

#: The environment variable that selects the pure build.
PURE_SWITCH = "DISQUETTE_PURE"


def pure_requested() -> bool:
    return os.environ.get(PURE_SWITCH, "") not in ("", "0")


class SourcesOnly(importlib.abc.MetaPathFinder):
    """Finds ``disquette`` modules among ``.py`` files only, never an extension."""

    def __init__(self) -> None:
        self._finders: dict[str, importlib.machinery.FileFinder] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is None or not fullname.startswith("disquette."):
            return None
        for entry in path:
            finder = self._finders.get(entry)
            if finder is None:
                loader = (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)
                finder = self._finders[entry] = importlib.machinery.FileFinder(entry, loader)
            spec = finder.find_spec(fullname, target)
            if spec is not None:
                return spec
        return None


def select() -> None:
    """Run the pure sources if ``DISQUETTE_PURE`` asks for them (called by the package
    before it imports anything of its own)."""
    if pure_requested() and not any(isinstance(f, SourcesOnly) for f in sys.meta_path):
        sys.meta_path.insert(0, SourcesOnly())


def is_compiled(module: str) -> bool:
    """Whether ``module`` is (or would be) imported from a compiled extension."""
    loaded = sys.modules.get(module)
    spec = loaded.__spec__ if loaded is not None else importlib.util.find_spec(module)
    return isinstance(getattr(spec, "loader", None), importlib.machinery.ExtensionFileLoader)


def current() -> str:
    """``compiled`` when every module of :data:`COMPILED_MODULES` runs compiled, else
    ``pure`` (INFO server's ``disquette_build``, the startup log, the benchmarks)."""
    return "compiled" if all(map(is_compiled, COMPILED_MODULES)) else "pure"


def report() -> None:
    """What ``make`` says after a build: which build runs, and a warning for a pure
    build nobody asked for."""
    which = current()
    print(f"disquette: the {which} build runs")
    if which == "pure" and not pure_requested():
        missing = [m for m in COMPILED_MODULES if not is_compiled(m)]
        print(
            f"WARNING: {len(missing)} of the {len(COMPILED_MODULES)} compiled modules are "
            "missing, so the slower pure build runs: the compiled build needs a C compiler "
            "and Python's headers (`make tools` installs them), see .venv/install.log",
            file=sys.stderr,
        )
