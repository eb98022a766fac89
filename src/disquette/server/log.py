"""Disque's log: ``<pid>:M <date> <time>.<ms> <level mark> <message>`` lines.

Levels are Disque's (debug ``.``, verbose ``-``, notice ``*``, warning ``#``);
lines go to ``logfile`` or, when it is empty, to standard output.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

LEVELS = {"debug": 0, "verbose": 1, "notice": 2, "warning": 3}
_MARKS = ".-*#"


class Log:
    def __init__(self, level: str = "notice", path: str = "") -> None:
        self.level = LEVELS[level]
        self.path = path
        self._stream: TextIO = open(path, "a") if path else sys.stdout  # noqa: SIM115

    def set_level(self, level: str) -> None:
        self.level = LEVELS[level]

    def write(self, level: int, message: str) -> None:
        if level < self.level:
            return
        now = time.time()
        stamp = time.strftime("%d %b %H:%M:%S", time.localtime(now))
        line = f"{os.getpid()}:M {stamp}.{int(now * 1000) % 1000:03d} {_MARKS[level]} {message}\n"
        try:
            self._stream.write(line)
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def debug(self, message: str) -> None:
        self.write(0, message)

    def verbose(self, message: str) -> None:
        self.write(1, message)

    def notice(self, message: str) -> None:
        self.write(2, message)

    def warning(self, message: str) -> None:
        self.write(3, message)

    def close(self) -> None:
        if self.path:
            self._stream.close()
