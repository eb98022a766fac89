"""The layering rules (docs/architecture.md): which package of disquette may import which.

Every module's imports are read from its source with :mod:`ast`: at the top, under
``if TYPE_CHECKING:``, inside functions, and ``importlib.import_module("...")`` with a
literal name. A forbidden one fails the test with the module, the line and the import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import disquette

SOURCE = Path(disquette.__file__).resolve().parent
ROOT = "disquette"  # the package's own __init__ (the client API, the version)


def _packages(words: str) -> frozenset[str]:
    return frozenset(words.split())


#: Every package of disquette (a module at the top, such as aio or build, counts as one).
EVERYTHING = _packages(
    f"{ROOT} aio build cli client commands config core dramatiq http integrations observe "
    "protocol server sim spark state tasks tools worker"
)
#: What a node is made of, and what runs on the client's side.
NODE = _packages("core state commands observe http server sim")
CLIENT_SIDE = _packages("client aio worker tasks spark integrations dramatiq cli")

#: package -> the packages it must not import.
FORBIDDEN: dict[str, frozenset[str]] = {
    # Standard library only: setup.py runs it before the package is installed.
    "build": EVERYTHING - {"build"},
    # Bytes, not jobs (shared/DESIGN.md).
    "protocol": EVERYTHING - {"protocol", "build"},
    # Read by every layer of the node, so below all of them.
    "config": EVERYTHING - {"config", "protocol", "build", ROOT},
    # The sans-I/O core: no shell, no command, no state, no observer, no client.
    "core": (NODE | CLIENT_SIDE | {"tools"}) - {"core"},
    # The server state: read by commands, observers and shells, importing none of them.
    "state": (NODE | CLIENT_SIDE | {"tools"}) - {"core", "state"},
    # Commands stay testable without sockets: they read the state and may call the
    # observers' renderers (INFO, OBSERVE).
    "commands": _packages("server sim http tools") | CLIENT_SIDE,
    # Observers read the state, never the commands; they ask peers over the client
    # protocol with the asyncio client (observe/gather.py).
    "observe": _packages("commands server http sim cli worker tasks spark integrations tools"),
    # The HTTP port is handed what it needs by the server shell (server/app.py).
    "http": _packages("commands server sim cli worker tasks spark integrations tools"),
    # The two shells around the core never import each other.
    "server": _packages("sim tools") | CLIENT_SIDE,
    "sim": _packages("server http tools") | CLIENT_SIDE,
    # Clients reach a cluster only through the client protocol (shared/DESIGN.md).
    "client": NODE | _packages("aio worker tasks spark integrations cli tools"),
    "aio": NODE | _packages("worker tasks spark integrations cli tools"),
    "worker": NODE | _packages("tasks spark integrations cli tools"),
    "tasks": NODE | _packages("spark integrations cli tools"),
    "spark": NODE | _packages("worker tasks integrations cli tools"),
    "integrations": NODE | _packages("spark dramatiq cli tools"),
    # The short import of the Dramatiq broker: the integration, nothing else.
    "dramatiq": NODE | _packages("aio worker tasks spark cli tools"),
    # The CLI's client tools too; offline tools on a node's files may read the core's
    # formats (ALLOWED_ONLY_FROM). ``disquette top`` merges OBSERVE answers with
    # observe/merge.py, which imports nothing.
    "cli": NODE - {"observe"} | {"tools"},
    # Starts nodes as processes, never inside itself.
    "tools": NODE,
    ROOT: NODE | _packages("cli tools"),
}

#: (package, imported package) -> the only modules of the package that may import it.
ALLOWED_ONLY_FROM: dict[tuple[str, str], frozenset[str]] = {
    # The core encodes RESP in one module, with the reason in its docstring.
    ("core", "protocol"): frozenset({"disquette.core.replies"})
    # The bus messages are framed by the codec where the core makes and reads them.
    | frozenset(f"disquette.core.{name}" for name in ("messages", "membership", "dialect")),
    # An offline tool on a node's files.
    ("cli", "core"): frozenset({"disquette.cli.check_aof"}),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def _is_module(name: str) -> bool:
    path = SOURCE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(source: str, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import of ``source`` (the module ``module``),
    wherever it is written; ``from a import b`` names ``a.b`` when that is a module."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[: len(base) - node.level + 1]
                name = ".".join([*parent, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            for alias in node.names:
                full = f"{name}.{alias.name}"
                yield node.lineno, full if _is_module(full) else name
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def forbidden(module: str, imported: str) -> str | None:
    """Why ``module`` may not import ``imported`` (None: it may)."""
    if imported != ROOT and not imported.startswith(ROOT + "."):
        return None
    package, target = package_of(module), package_of(imported)
    if package == target:
        return None
    only = ALLOWED_ONLY_FROM.get((package, target))
    if only is not None:
        return None if module in only else f"only {', '.join(sorted(only))} may import {target}"
    if target in FORBIDDEN[package]:
        return f"{package} must not import {target}"
    return None


def modules() -> Iterator[tuple[Path, str]]:
    for path in sorted(SOURCE.rglob("*.py")):
        yield path, module_name(path)


def test_every_package_has_its_rules():
    packages = {package_of(name) for _, name in modules()}
    assert packages <= set(FORBIDDEN), sorted(packages - set(FORBIDDEN))
    assert packages <= EVERYTHING


def test_no_forbidden_import():
    problems = []
    for path, module in modules():
        source = path.read_text(encoding="utf-8")
        for line, imported in imports_of(source, module, path.name == "__init__.py"):
            why = forbidden(module, imported)
            if why is not None:
                where = path.relative_to(SOURCE.parent)
                problems.append(f"{where}:{line}: {module} imports {imported} ({why})")
    assert not problems, "forbidden imports:\n" + "\n".join(problems)


def test_the_reader_sees_every_kind_of_import():
    """The reader finds imports wherever they are written (else the rules above would
    pass for want of looking)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "import disquette.server.log\n"
        "from disquette.commands import table\n"
        "from disquette.state.server import ServerState\n"
        "from . import replies\n"
        "if TYPE_CHECKING:\n"
        "    from disquette.sim.process import SimNode\n"
        "def later():\n"
        "    from disquette.http import server\n"
        "    importlib.import_module('disquette.client.sync')\n"
    )
    found = {name for _, name in imports_of(source, "disquette.core.example")}
    assert found >= {
        "disquette.server.log",
        "disquette.commands.table",
        "disquette.state.server",
        "disquette.core.replies",
        "disquette.sim.process",
        "disquette.http.server",
        "disquette.client.sync",
    }
    reasons = {forbidden("disquette.core.example", name) for name in found} - {None}
    assert reasons == {
        f"core must not import {p}" for p in ("server", "commands", "state", "sim", "http")
    } | {"core must not import client"}


def test_the_exceptions_are_narrow():
    assert forbidden("disquette.core.replies", "disquette.protocol.reply") is None
    assert forbidden("disquette.core.node", "disquette.protocol.reply") is not None
    assert forbidden("disquette.cli.check_aof", "disquette.core.aof") is None
    assert forbidden("disquette.cli.top", "disquette.core.aof") is not None
