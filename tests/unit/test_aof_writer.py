"""The server's AOF writer in-process: replies held (in the outbox) until the records
of their turn are written, fsync policies and postponing, write failures and recovery,
BGREWRITEAOF results.

A real event loop drives an :class:`AppendOnlyFile` working in a temporary
directory; transports are fakes that record what they are sent; failing disks
are a patched :class:`DiskIO`.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Callable
from typing import Any

import pytest

from disquette.commands import new_state
from disquette.config import Config
from disquette.core.aof import FORMAT_RECORD, deljob_record, load, loadjob_record
from disquette.server import aof as aof_mod
from disquette.server.aof import AppendOnlyFile
from disquette.server.outbox import Outbox
from disquette.sim.disk import MemorySpillStore
from disquette.state.persistence import REWRITE_FAILED, REWRITE_IN_PROGRESS, REWRITE_STARTED
from tests.unit.core_harness import Harness, RecordingClient


class Transport:
    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.closing = False

    def write(self, data: bytes) -> None:
        self.log.append(("reply", data))

    def is_closing(self) -> bool:
        return self.closing


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, message: str) -> None:
        self.lines.append(message)

    notice = verbose = debug = warning


class Disk(aof_mod.DiskIO):
    """Records writes and fsyncs in the shared event log; ``fail`` makes them fail
    (operations ``write``, ``fsync`` of a file, ``fsync-dir`` of a directory)."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.fail: dict[str, int] = {}  # operation -> errno
        self.short: int | None = None  # accept only this many bytes, once
        self.fail_fd = -1  # writes to this fd fail with ENOSPC

    def write(self, fd: int, data: Any) -> int:
        if fd == self.fail_fd:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if "write" in self.fail:
            raise OSError(self.fail["write"], os.strerror(self.fail["write"]))
        if self.short is not None:
            data, self.short = bytes(data[: self.short]), None
        n = os.write(fd, data)
        self.log.append(("write", n))
        return n

    def fsync(self, fd: int) -> None:
        op = "fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync"
        if op in self.fail:
            raise OSError(self.fail[op], os.strerror(self.fail[op]))
        self.log.append((op,) if op == "fsync-dir" else (op, fd))


def run(test: Callable[..., Any], tmp_path, monkeypatch, **config: Any) -> None:
    monkeypatch.chdir(tmp_path)

    async def main() -> None:
        h = Harness()
        cfg = Config()
        cfg.appendonly = True
        for k, v in config.items():
            setattr(cfg, k, v)
        state = new_state(cfg, h.node)
        events: list[Any] = []
        aof = AppendOnlyFile(cfg, Log(), h.node, state)
        aof.io = Disk(events)
        assert await aof.start()
        await test(aof, h, state, events)

    asyncio.run(main())


async def turn() -> None:
    """Let the event loop run what was scheduled (the flush) once."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def until(condition: Callable[[], object], tries: int = 200) -> None:
    """Let the loop and the writer's threads run until ``condition()`` holds, looking
    every 10 ms, ``tries`` times at most (the assertions after it say what failed)."""
    for _ in range(tries):
        await asyncio.sleep(0.01)
        if condition():
            return


def add(h: Harness, body: bytes = b"x"):
    return h.node.add_job(RecordingClient(), b"q", body, 0)


def test_replies_wait_for_the_write_of_their_iteration(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        outbox = Outbox(aof)
        t1, t2 = Transport(events), Transport(events)
        outbox.send(t1, b"+before\r\n")
        assert events == []  # at the end of the turn, records or not
        await turn()
        assert events == [("reply", b"+before\r\n")]
        events.clear()
        job = add(h)
        outbox.send(t1, b"+one\r\n")
        outbox.send(t2, b"+two\r\n")
        outbox.send(t1, b"+three\r\n")
        assert events == []
        await turn()
        record = len(FORMAT_RECORD + loadjob_record(job))  # a new file: its format first
        assert events[0] == ("write", record)
        # One write per connection, its replies in order.
        assert events[1:] == [("reply", b"+one\r\n+three\r\n"), ("reply", b"+two\r\n")]
        assert os.path.getsize("disque.aof") == aof.current_size == record

    run(test, tmp_path, monkeypatch)


def test_always_fsyncs_before_releasing(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        add(h)
        add(h)
        Outbox(aof).send(Transport(events), b"+r\r\n")
        await turn()
        assert [e[0] for e in events] == ["write", "fsync", "reply"]
        assert aof.synced_size == aof.current_size

    run(test, tmp_path, monkeypatch, appendfsync="always")


def test_no_leaves_syncing_to_the_kernel_until_shutdown(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        clock = [3000.0]
        monkeypatch.setattr(aof_mod.time, "time", lambda: clock[0])
        add(h)
        Outbox(aof).send(Transport(events), b"+r\r\n")
        await turn()
        assert [e[0] for e in events] == ["write", "reply"]
        for _ in range(5):
            clock[0] += 1.5
            add(h)
            await turn()
            aof.cron()
        await asyncio.sleep(0.05)
        assert aof.fsyncs_pending == 0
        assert [e for e in events if e[0] == "fsync"] == []
        assert aof.prepare_shutdown(False)
        assert events[-1] == ("fsync", aof.fd)  # SIGTERM and SHUTDOWN sync it

    run(test, tmp_path, monkeypatch, appendfsync="no")


def test_a_closing_connection_flushes_at_once(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        outbox = Outbox(aof)
        closing = Transport(events)
        outbox.send(closing, b"+owed\r\n")
        add(h)
        outbox.send_now(closing, b"+bye\r\n")
        assert events[0][0] == "write"
        assert events[1:] == [("reply", b"+owed\r\n+bye\r\n")]
        await turn()
        assert len(events) == 2  # nothing more for it at the end of the turn

    run(test, tmp_path, monkeypatch)


def test_closed_transports_are_skipped(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        gone = Transport(events)
        add(h)
        Outbox(aof).send(gone, b"+lost\r\n")
        gone.closing = True
        await turn()
        assert [e[0] for e in events] == ["write"]

    run(test, tmp_path, monkeypatch)


def test_everysec_postpones_while_a_background_fsync_runs(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        clock = [1000.0]
        monkeypatch.setattr(aof_mod.time, "time", lambda: clock[0])
        aof.fsyncs_pending = 1  # a slow fsync in the background
        add(h)
        Outbox(aof).send(Transport(events), b"+r\r\n")
        await turn()
        assert events == [("reply", b"+r\r\n")]  # postponed; the reply is not held
        assert aof.postponed_since == 1000.0
        clock[0] = 1001.5
        aof.cron()
        assert [e[0] for e in events] == ["reply"]  # still under two seconds
        clock[0] = 1002.0
        aof.cron()
        assert [e[0] for e in events] == ["reply", "write"]
        assert aof.delayed_fsync == 1
        assert aof.status().delayed_fsync == 1

    run(test, tmp_path, monkeypatch)


def test_everysec_fsyncs_in_the_background_at_most_once_a_second(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        clock = [2000.2]
        monkeypatch.setattr(aof_mod.time, "time", lambda: clock[0])
        aof.last_fsync = 2000.0
        add(h)
        await turn()
        assert aof.fsyncs_pending == 0  # same second as the last fsync
        clock[0] = 2001.1
        aof.cron()  # the cron syncs an idle AOF that is behind
        assert aof.fsyncs_pending == 1
        await until(lambda: not aof.fsyncs_pending, 100)
        assert ("fsync", aof.fd) in events
        assert aof.synced_size == aof.current_size

    run(test, tmp_path, monkeypatch)


def test_write_failure_gives_misconf_and_recovers(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        aof.io.fail["write"] = errno.ENOSPC
        job = add(h)
        Outbox(aof).send(Transport(events), b"+r\r\n")
        await turn()
        assert events == [("reply", b"+r\r\n")]  # released anyway (everysec)
        assert state.aof_write_error == "No space left on device"
        assert aof.status().buffer_length == len(FORMAT_RECORD + loadjob_record(job))
        assert "Error writing to the AOF file: No space left on device" in aof.log.lines
        client = RecordingClient()
        state.add_client(client)
        misconf = b"-MISCONF Errors writing to the AOF file: No space left on device\r\n"
        assert state.execute(client, [b"PING"]) == misconf
        assert state.execute(client, [b"ADDJOB", b"q", b"y", b"0"]) == misconf
        del aof.io.fail["write"]
        aof._last_write_retry = 0
        aof.cron()
        assert state.aof_write_error is None
        assert state.execute(client, [b"PING"]) == b"+PONG\r\n"
        assert "AOF write error looks solved, Disque can write again." in aof.log.lines
        with open("disque.aof", "rb") as f:
            assert f.read() == FORMAT_RECORD + loadjob_record(job)

    run(test, tmp_path, monkeypatch)


def test_a_short_write_is_cut_off_the_file(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        aof.io.short = 10
        real_write = aof.io.write

        def write(fd: int, data: Any) -> int:
            if aof.io.short is None and len(events) and events[-1] == ("write", 10):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        aof.io.write = write
        job = add(h)
        await turn()
        assert os.path.getsize("disque.aof") == 0  # the partial record was removed
        assert aof.status().buffer_length == len(FORMAT_RECORD + loadjob_record(job))
        assert state.aof_write_error == "No space left on device"

    run(test, tmp_path, monkeypatch)


def test_failed_background_fsync_gives_misconf_until_one_works(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        aof.io.fail["fsync"] = errno.EIO
        add(h)
        await turn()
        aof.last_fsync = 0
        aof.cron()
        await until(lambda: state.aof_write_error, 100)
        assert state.aof_write_error == "Input/output error"
        assert aof.status().state == "on"
        del aof.io.fail["fsync"]
        aof.last_fsync = 0
        aof.cron()
        await until(lambda: not state.aof_write_error, 100)
        assert state.aof_write_error is None

    run(test, tmp_path, monkeypatch)


def test_always_exits_on_a_failed_write(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        exits = []
        monkeypatch.setattr(aof_mod.os, "_exit", lambda code: exits.append(code))
        aof.io.fail["write"] = errno.EROFS
        add(h)
        Outbox(aof).send(Transport(events), b"+r\r\n")
        aof.flush()
        assert exits[0] == 1
        assert (
            "Can't recover from AOF write error when the AOF fsync policy is 'always'. "
            "Exiting..." in aof.log.lines
        )

    run(test, tmp_path, monkeypatch, appendfsync="always")


def test_bgrewriteaof_results_and_the_switch_to_the_new_file(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        kept = add(h, b"kept")
        gone = add(h, b"gone")
        h.node.ack_jobs([gone.id])
        await turn()
        assert aof.bgrewriteaof() == REWRITE_STARTED
        assert aof.bgrewriteaof() == REWRITE_IN_PROGRESS
        during = add(h, b"during")  # goes to both files
        await until(lambda: aof.rewrite is None)
        assert aof.status().last_bgrewrite_ok
        with open("disque.aof", "rb") as f:
            data = f.read()
        # The snapshot, and the records written while it was taken (a duplicate here).
        fresh = Harness()
        load(fresh.node, data, enqueue=False, truncated_ok=False)
        assert {j.id for j in fresh.node.jobs.values()} == {kept.id, during.id}
        assert gone.id not in data
        assert aof.current_size == aof.base_size == len(data)
        assert not [n for n in os.listdir() if n.startswith("temp-rewriteaof")]
        h.node.ack_jobs([kept.id])

        # The write waits (everysec) while the new file's background fsync runs; the
        # cron retries it, as the server's does each tick.
        def written() -> bool:
            aof.cron()
            return not aof.buffer.data

        await until(written, 300)
        with open("disque.aof", "rb") as f:
            assert f.read() == data + deljob_record(kept.id)

    run(test, tmp_path, monkeypatch)


@pytest.mark.parametrize("policy", ["always", "everysec"])
def test_a_rewrite_syncs_its_file_then_renames_then_syncs_the_directory(
    tmp_path, monkeypatch, policy
):
    async def test(aof, h, state, events):
        add(h)
        await turn()
        mark = len(events)
        assert aof.bgrewriteaof() == REWRITE_STARTED
        add(h)  # a record for the residual diff

        def syncs() -> list:
            return [e for e in events[mark:] if e in (("fsync", aof.fd), ("fsync-dir",))]

        await until(lambda: aof.rewrite is None and len(syncs()) == 3, 500)
        # The snapshot (rewrite thread), the residual diff (at once: in the loop with
        # always, in the background with everysec), then the rename's directory.
        assert syncs() == [("fsync", aof.fd), ("fsync", aof.fd), ("fsync-dir",)]

    run(test, tmp_path, monkeypatch, appendfsync=policy)


def test_a_failed_directory_fsync_after_a_rewrite_is_logged(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        add(h)
        aof.io.fail["fsync-dir"] = errno.EIO
        assert aof.bgrewriteaof() == REWRITE_STARTED
        message = (
            "Can't fsync the AOF directory after the rewrite: Input/output error; the rename "
            "may be lost if the machine crashes."
        )
        await until(lambda: message in aof.log.lines, 500)
        assert message in aof.log.lines
        assert aof.status().last_bgrewrite_ok  # the new file is in place and in use

    run(test, tmp_path, monkeypatch)


def test_bgrewriteaof_that_cannot_start(tmp_path, monkeypatch):
    async def test(aof, h, state, events):
        real_open = aof_mod.os.open

        def no_temp(path: str, *args: Any) -> int:
            if path.startswith("temp-rewriteaof"):
                raise OSError(errno.EACCES, "Permission denied")
            return real_open(path, *args)

        monkeypatch.setattr(aof_mod.os, "open", no_temp)
        assert aof.status().last_bgrewrite_ok
        assert aof.bgrewriteaof() == REWRITE_FAILED
        assert "Can't start the background AOF rewrite: Permission denied" in aof.log.lines
        assert not aof.status().last_bgrewrite_ok  # INFO: aof_last_bgrewrite_status:err
        aof.config.appendonly = False
        aof.set_appendonly()
        aof.config.appendonly = True
        assert aof.set_appendonly() == "Unable to turn on AOF. Check server logs."

    run(test, tmp_path, monkeypatch)


@pytest.mark.parametrize("policy", ["always", "everysec"])
def test_failed_rewrite_keeps_the_old_file(tmp_path, monkeypatch, policy):
    async def test(aof, h, state, events):
        job = add(h)
        await turn()
        aof.io.fail["write"] = errno.ENOSPC
        aof.bgrewriteaof()
        await until(lambda: aof.rewrite is None)
        assert not aof.status().last_bgrewrite_ok
        del aof.io.fail["write"]
        with open("disque.aof", "rb") as f:
            assert f.read() == FORMAT_RECORD + loadjob_record(job)
        assert not [n for n in os.listdir() if n.startswith("temp-rewriteaof")]

    run(test, tmp_path, monkeypatch, appendfsync=policy)


def test_jobs_spilled_to_records_the_old_file_never_got_are_read_after_a_rewrite(
    tmp_path, monkeypatch
):
    # Found by bench/flow_to_disk.py (part 7): queued jobs spilled to their LOADJOB
    # records while those were still in the buffer when a rewrite switched files were
    # read back from the old file, which never got them: damaged, and dropped. Here the
    # old file refuses writes, so its last records stay in the buffer until the switch.
    async def test(aof, h, state, events):
        node = h.node
        node.spill.attach(MemorySpillStore())
        node.spill.configure(True, 1, 0, 1)  # every job past a queue's head spills
        first = [add(h, b"before %d" % i) for i in range(5)]
        await turn()
        aof.io.fail_fd = aof.fd
        late = [add(h, b"late %d" % i) for i in range(5)]
        await turn()
        assert aof.buffer.data and aof.write_error is not None
        assert aof.bgrewriteaof() == REWRITE_STARTED
        await until(lambda: aof.rewrite is None)
        assert aof.status().last_bgrewrite_ok and aof.write_error is None
        assert node.spill.count == 9  # all but the head, read from the AOF's two files
        served = node.get_jobs([b"q"], 100)
        assert [(j.id, j.body) for j in served] == [(j.id, j.body) for j in first + late]
        assert node.spill.read_errors == 0

    run(test, tmp_path, monkeypatch)
