"""Makes ``disque://`` a Kombu transport name in every program of this environment.

Kombu resolves a broker URL's scheme through ``kombu.transport.TRANSPORT_ALIASES``
only (no plugin entry points), so a Celery app could otherwise name the transport
only with a second setting (``broker_transport`` set to
``"disquette.integrations.kombu_transport:Transport"``).
The package installs ``disquette-kombu.pth``, which runs :func:`install` at
interpreter start-up: it imports nothing but this module and puts a finder on
``sys.meta_path`` that, when (and only when) ``kombu.transport`` is imported, adds
``disque`` and ``disquette`` to the aliases. A program that never imports Kombu pays
for one small module and one finder that declines every other import (it imports
only what the interpreter has loaded already: about 0.1 ms).
"""

from __future__ import annotations

import importlib.machinery
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # no typing import at start-up
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

TRANSPORT = "disquette.integrations.kombu_transport:Transport"
ALIASES = ("disque", "disquette")


def register(module: object) -> None:
    """Add the aliases to ``kombu.transport`` (``module``), keeping any set already."""
    for alias in ALIASES:
        module.TRANSPORT_ALIASES.setdefault(alias, TRANSPORT)  # type: ignore[attr-defined]


class _Loader:
    """Kombu's own loader for ``kombu.transport``, then :func:`register`."""

    def __init__(self, loader: importlib.machinery.SourceFileLoader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> object:
        return self.loader.create_module(spec)

    def exec_module(self, module: object) -> None:
        self.loader.exec_module(module)  # type: ignore[arg-type]
        register(module)


class _Finder:
    """Wraps the loader of ``kombu.transport`` so the aliases follow its import."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != "kombu.transport":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)  # type: ignore[arg-type,assignment]
        return spec


def install() -> None:
    """Register now if Kombu is loaded, else when it is."""
    module = sys.modules.get("kombu.transport")
    if module is not None:
        register(module)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
