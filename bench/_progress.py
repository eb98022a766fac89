"""Counting tasks done in worker processes, for bench/celery.py: one byte per task.

A worker process appends one byte per task it ran to ``$BENCH_DIR/progress-<pid>``
(an unbuffered write, about 2 µs), so the benchmark counts processed tasks by the
files' sizes, without a result backend and the same way for every framework.
"""

from __future__ import annotations

import os
from pathlib import Path

DIR = Path(os.environ.get("BENCH_DIR", "."))
_fd: int | None = None


def count_one() -> None:
    """One more task done in this process."""
    global _fd
    if _fd is None:
        _fd = os.open(DIR / f"progress-{os.getpid()}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(_fd, b"x")


def counted(directory: Path) -> int:
    """Tasks done so far by every worker process writing into ``directory``."""
    return sum(p.stat().st_size for p in directory.glob("progress-*"))
