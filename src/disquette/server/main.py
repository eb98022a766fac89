"""``disquette-server [configfile|-] [--directive value ...]``: the process entry point.

The command line is disque-server's: an optional config file (``-`` reads it
from standard input), then ``--name value`` pairs appended as config lines,
plus ``--version`` and ``--help``. A bad config line prints Disque's fatal
banner and exits 1. The event loop is uvloop's when it is installed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from disquette.config import ConfigFileError, ConfigOpenError, parse_command_line
from disquette.server.app import Server
from disquette.server.log import Log


def _daemonize(pidfile: str) -> None:
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if pidfile:
        try:
            with open(pidfile, "w") as f:
                f.write(f"{os.getpid()}\n")
        except OSError:
            pass


def run(argv: list[str]) -> int:
    """Run the server with ``argv`` (without the program name); return the exit code."""
    try:
        cmdline = parse_command_line(["disquette-server", *argv], sys.stdin.buffer)
        if cmdline.action != "run":
            stream = sys.stdout if cmdline.stream == "stdout" else sys.stderr
            stream.write(cmdline.output)
            return cmdline.exit_code
        config = cmdline.load(stdin=sys.stdin.buffer)
    except ConfigOpenError as e:
        Log().warning(str(e))
        return 1
    except ConfigFileError as e:
        sys.stderr.flush()
        sys.stderr.buffer.write(bytes(e))
        sys.stderr.flush()
        return 1
    if config.daemonize:
        _daemonize(config.pidfile)
    log = Log(config.loglevel, config.logfile)
    if cmdline.warning:
        log.warning(cmdline.warning)
    server = Server(config, log, argv)
    runner: Callable[[Coroutine[Any, Any, int]], int]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        runner = asyncio.run
    code = runner(server.serve())
    log.close()
    if server.restart_argv is not None:
        time.sleep(server.restart_delay)
        os.execv(server.restart_argv[0], server.restart_argv)
    return code


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
