"""The slow log: commands that took at least ``slowlog-log-slower-than`` µs.

Entries keep at most 32 arguments (the last one replaced by a note saying how
many more there were) and at most 128 bytes of each argument, as Disque does.
"""

from __future__ import annotations

from collections import deque
from typing import Final

MAX_ARGS: Final = 32
MAX_ARG_LEN: Final = 128


class SlowLogEntry:
    __slots__ = ("args", "duration_us", "id", "time")

    def __init__(self, entry_id: int, when: int, duration_us: int, args: list[bytes]) -> None:
        self.id = entry_id
        self.time = when
        self.duration_us = duration_us
        self.args = args


class SlowLog:
    def __init__(self) -> None:
        self.entries: deque[SlowLogEntry] = deque()
        self.next_id = 0

    def add(self, argv: list[bytes], duration_us: int, now_s: int, max_len: int) -> None:
        args = []
        for i, arg in enumerate(argv[:MAX_ARGS]):
            if i == MAX_ARGS - 1 and len(argv) > MAX_ARGS:
                args.append(b"... (%d more arguments)" % (len(argv) - MAX_ARGS + 1))
                break
            if len(arg) > MAX_ARG_LEN:
                arg = arg[:MAX_ARG_LEN] + b"... (%d more bytes)" % (len(arg) - MAX_ARG_LEN)
            args.append(arg)
        self.entries.appendleft(SlowLogEntry(self.next_id, now_s, duration_us, args))
        self.next_id += 1
        self.trim(max_len)

    def trim(self, max_len: int) -> None:
        while len(self.entries) > max_len:
            self.entries.pop()

    def reset(self) -> None:
        self.entries.clear()
