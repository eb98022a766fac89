"""Worker processes: a supervisor that starts N, restarts the dead, stops them all.

``disquette worker module:app --processes N`` runs this in the parent: it forks
``N`` children (after the app was imported, so the children start at once);
each makes its own clients and runs a :class:`disquette.Worker` with the
app's handler on ``M`` threads (or asyncio tasks). Each child is put in a
process group of its own, so a Ctrl-C in the terminal reaches only the
supervisor, which forwards one SIGTERM per signal it gets: the first is the
graceful stop (running jobs get the grace period, the rest are NACKed), a
second one hurries. A child that dies while the supervisor is not stopping
(SIGKILL, the OOM killer, a crash) is started again; one that dies within
``QUICK_DEATH`` seconds of its start is restarted after a pause that doubles
up to ``MAX_PAUSE``, so a broken app is not a fork loop. The jobs a dead
child held come back after their retry time, as Disque promises.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("disquette.worker")

QUICK_DEATH = 1.0
MAX_PAUSE = 30.0
#: How often the supervisor looks at its flags while waiting.
CHECK_EVERY = 0.5


def default_processes() -> int:
    """One worker process per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class _Child:
    __slots__ = ("index", "pause", "process", "restart_at", "started_at")

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: Any = None
        self.started_at = 0.0
        self.pause = 0.0
        self.restart_at: float | None = 0.0


def _child_main(target: Callable[[int], None], index: int) -> None:
    os.setpgid(0, 0)  # the terminal's Ctrl-C goes to the supervisor only
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    target(index)


class Supervisor:
    """Run ``target(index)`` in ``processes`` forked children; see the module docstring."""

    def __init__(self, target: Callable[[int], None], processes: int) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self.target = target
        self.children = [_Child(i) for i in range(processes)]
        self.signals = 0
        self._context = multiprocessing.get_context("fork")

    def run(self) -> int:
        """Supervise until a signal stops every child; the exit code (0)."""
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        forwarded = 0
        try:
            while True:
                if self.signals > forwarded:
                    forwarded = self.signals
                    self._forward()
                alive = [c.process for c in self.children if c.process is not None]
                if self.signals and not any(p.is_alive() for p in alive):
                    break
                if not self.signals:
                    self._reap_and_start()
                sentinels = [p.sentinel for p in alive if p.is_alive()]
                multiprocessing.connection.wait(sentinels, timeout=self._wait_time())
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
        log.info("all worker processes stopped")
        return 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals += 1

    def _forward(self) -> None:
        hurry = self.signals > 1
        log.info(
            "supervisor: stopping the worker processes%s",
            " now" if hurry else " after their running jobs (again to hurry)",
        )
        for child in self.children:
            if child.process is not None and child.process.is_alive():
                try:
                    os.kill(child.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def _wait_time(self) -> float:
        now = time.monotonic()
        due = [c.restart_at - now for c in self.children if c.restart_at is not None]
        return max(0.0, min([CHECK_EVERY, *due]))

    def _reap_and_start(self) -> None:
        now = time.monotonic()
        for child in self.children:
            process = child.process
            if process is not None and not process.is_alive():
                process.join()
                lived = now - child.started_at
                child.pause = (
                    min(max(2 * child.pause, 1.0), MAX_PAUSE) if lived < QUICK_DEATH else 0.0
                )
                child.restart_at = now + child.pause
                child.process = None
                log.warning(
                    "worker process %d (pid %d) exited with %s after %.1fs; restarting it%s",
                    child.index,
                    process.pid,
                    _exit_text(process.exitcode),
                    lived,
                    f" in {child.pause:.0f}s" if child.pause else "",
                )
            if child.restart_at is not None and child.restart_at <= now:
                child.restart_at = None
                child.started_at = now
                child.process = self._context.Process(
                    target=_child_main,
                    args=(self.target, child.index),
                    name=f"disquette-worker-{child.index}",
                    daemon=False,
                )
                child.process.start()
                log.info("worker process %d started (pid %d)", child.index, child.process.pid)


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"code {code}"
