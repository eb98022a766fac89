"""Sustained job load for the memory soak tests, and a server process's RSS.

The soak tests drive a real server hard enough for memory to show what it
follows (throughput, or the dataset), so the load is pipelined: a batch of
ADDJOBs is sent in one write, the jobs are taken back with one
``GETJOB NOHANG COUNT n`` and acknowledged with one ``FASTACK``/``ACKJOB`` of all
their IDs. Replies are parsed by ``hiredis`` (a project dependency) because a
500-job GETJOB reply is 2,500 RESP items; requests are encoded by
:func:`tests.support.raw.encode`. Every loop here is bounded by a count and a
deadline; callers add their own stop conditions (a sampled RSS, say).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence

import hiredis

from tests.support.raw import RawConnection, encode

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
MB = 1 << 20

# Disque refuses a job for lack of memory in one of two ways (Disque 1.0-rc1's
# documented behaviour: ADDJOB and memory pressure): ``-OOM ...`` from the per-command
# check once used memory is above 95 % of maxmemory, or, above 75 %, ``-NOREPL ...``
# when the node can hold no copy itself ("external replication") and no other node is
# there to hold it.
OOM_ERROR = "OOM command not allowed when used memory > 'maxmemory'."
NOREPL_OOM_SUFFIX = "for the following reason: I'm out of memory"


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from ``/proc/<pid>/statm``."""
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE_SIZE


def is_memory_refusal(reply: object) -> bool:
    """Whether ``reply`` is Disque's refusal of a job for lack of memory."""
    if not isinstance(reply, hiredis.ReplyError):
        return False
    text = str(reply)
    return text == OOM_ERROR or text.endswith(NOREPL_OOM_SUFFIX)


class JobLoad(RawConnection):
    """One connection adding, taking and acknowledging jobs of one queue in batches
    (a :class:`RawConnection` whose replies are parsed by hiredis)."""

    def __init__(self, port: int, queue: bytes = b"soak", body_size: int = 64) -> None:
        super().__init__(port, timeout=60.0)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()
        self.queue = queue
        self.addjob = encode(b"ADDJOB", queue, b"x" * body_size, b"0")

    def _reply(self) -> object:
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            data = self.sock.recv(1 << 18)
            if not data:
                raise ConnectionError("server closed the connection")
            self.reader.feed(data)

    def call(self, *args: bytes | str | int) -> object:
        """One command; error replies are returned as ``hiredis.ReplyError``."""
        self.send(encode(*args))
        return self._reply()

    def add(self, count: int) -> list[object]:
        """``count`` pipelined ADDJOBs; their replies (IDs or errors), in order."""
        self.send(self.addjob * count)
        return [self._reply() for _ in range(count)]

    def take(self, count: int) -> list[bytes]:
        """The IDs of up to ``count`` queued jobs (``GETJOB NOHANG COUNT``)."""
        reply = self.call(b"GETJOB", b"NOHANG", b"COUNT", count, b"FROM", self.queue)
        if isinstance(reply, hiredis.ReplyError):
            raise AssertionError(f"GETJOB failed: {reply}")
        return [job[1] for job in reply or ()]

    def ack(self, ids: Sequence[bytes], command: bytes = b"FASTACK") -> None:
        if ids:
            reply = self.call(command, *ids)
            if isinstance(reply, hiredis.ReplyError):
                raise AssertionError(f"{command.decode()} failed: {reply}")

    def cycle(self, batch: int, command: bytes = b"FASTACK") -> int:
        """Add ``batch`` jobs, take them back, acknowledge them; how many were taken."""
        errors = [r for r in self.add(batch) if isinstance(r, hiredis.ReplyError)]
        if errors:
            raise AssertionError(f"{len(errors)} ADDJOB errors, first: {errors[0]}")
        ids = self.take(batch)
        self.ack(ids, command)
        return len(ids)

    def drain(self, batch: int, deadline: float, command: bytes = b"FASTACK") -> int:
        """Take and acknowledge jobs until the queue answers none; how many."""
        total = 0
        while time.monotonic() < deadline:
            ids = self.take(batch)
            if not ids:
                return total
            self.ack(ids, command)
            total += len(ids)
        raise AssertionError(f"queue not drained in time ({total} jobs taken)")

    def fill_until_refused(
        self,
        batch: int,
        max_jobs: int,
        deadline: float,
        after_batch: Callable[[], object] = lambda: None,
    ) -> tuple[int, object | None]:
        """Add jobs in batches until one is refused for lack of memory (or ``max_jobs``
        were added, or the deadline passed), calling ``after_batch`` after each batch.
        Returns (jobs added, the first refusal or None). Any other error fails."""
        added = 0
        while added < max_jobs and time.monotonic() < deadline:
            replies = self.add(min(batch, max_jobs - added))
            after_batch()
            for reply in replies:
                if is_memory_refusal(reply):
                    return added, reply
                if isinstance(reply, hiredis.ReplyError):
                    raise AssertionError(f"ADDJOB failed: {reply}")
                added += 1
        return added, None

    def info(self) -> dict[str, str]:
        """``INFO`` as a dict of its ``field:value`` lines."""
        text = self.call(b"INFO")
        assert isinstance(text, bytes), text
        return dict(
            line.split(":", 1)
            for line in text.decode().splitlines()
            if ":" in line and not line.startswith("#")
        )
