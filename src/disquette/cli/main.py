"""``disquette SUBCOMMAND ...``: the dispatcher of the operator's subcommands.

Each subcommand lives in its own module with ``add_arguments(parser)`` and
``run(args) -> int`` (the exit code); add one by adding a line to
:data:`SUBCOMMANDS`. Modules are imported only when their subcommand runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from disquette import __version__

#: name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "worker": ("disquette.cli.worker", "consume jobs with a Python handler"),
    "cluster": ("disquette.cli.cluster", "create a cluster, or show its status"),
    "check-aof": ("disquette.cli.check_aof", "check an AOF file; --fix cuts a torn tail"),
    "top": ("disquette.cli.top", "the live cluster in a terminal: nodes, and queues by rate"),
    "failed": ("disquette.cli.failed", "list, retry or delete the cluster's failed jobs"),
    "workflows": ("disquette.cli.workflows", "list, show or cancel the task API's workflows"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="disquette", description="disquette tools")
    parser.add_argument("--version", action="version", version=f"disquette {__version__}")
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    modules = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            modules[name] = importlib.import_module(module_name)
            modules[name].add_arguments(p)
    args = parser.parse_args(argv)
    return modules[args.subcommand].run(args)


if __name__ == "__main__":
    sys.exit(main())
