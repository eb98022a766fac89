"""The AOF's guarantees under crashes and failing disks, on real processes.

* SIGKILL under a steady ADDJOB load with ``appendfsync always``: every job whose
  ADDJOB got a reply is there after the restart.
* A background rewrite under concurrent load keeps every job, and the event
  loop keeps answering (the longest PING round trip during the rewrite is
  printed; nothing is asserted about it). SIGKILL in the middle of a rewrite
  leaves the old file whole: the restart has every job.
* Failing disks: the writer's system calls (``disquette.server.aof.disk``, a
  ``DiskIO``) fail on demand in the server process, through a ``sitecustomize`` module put
  on its PYTHONPATH by the test, so the real writer code meets ENOSPC, EROFS
  and EIO: -MISCONF for write commands and PING, then recovery once the disk
  works again; with ``always`` the server exits. A real full filesystem (a
  small tmpfs) is used too where the test may mount one, and a real read-only
  one (the tmpfs remounted read-only): rewrites, turning the AOF on and
  SHUTDOWN REWRITE-AOF fail with errors that say so, a start with
  ``appendonly yes`` is refused, and all of it works once the folder is writable.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import redis

from tests.support.aof import info, job_ids, kill_once_written
from tests.support.disks import mount
from tests.support.raw import Error, RawConnection, Status, encode
from tests.support.servers import ServerProcess, running_server, wait_for

AOF = "disque.aof"
FAULTS = '''
"""Test-only: make disquette's AOF system calls fail while a control file says so."""
import errno
import os

from disquette.server import aof

_CONTROL = os.environ["DISQUETTE_TEST_AOF_FAULT"]


def _fault(op):
    try:
        with open(_CONTROL) as f:
            words = f.read().split()
    except FileNotFoundError:
        return
    if words and words[0] == op:
        code = getattr(errno, words[1])
        raise OSError(code, os.strerror(code))


class FaultyDisk(aof.DiskIO):
    def write(self, fd, data):
        _fault("write")
        return super().write(fd, data)

    def fsync(self, fd):
        _fault("fsync")
        super().fsync(fd)


aof.disk = FaultyDisk()
'''


def log_text(workdir: Path) -> str:
    return (workdir / "server.log").read_text(errors="replace")


@pytest.fixture
def faulty(tmp_path, monkeypatch) -> Path:
    """The control file: write ``write ENOSPC``, ``fsync EIO``... to it; remove it to heal."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(FAULTS)
    control = tmp_path / "fault"
    monkeypatch.setenv("DISQUETTE_TEST_AOF_FAULT", str(control))
    monkeypatch.setenv("PYTHONPATH", str(hooks))
    return control


# ---------------------------------------------------------------- crashes


def _adder(port: int, queue: bytes, acked: list[bytes], stop: threading.Event) -> None:
    client = redis.Redis(port=port, protocol=2, socket_timeout=10)
    try:
        while not stop.is_set():
            acked.append(client.execute_command("ADDJOB", queue, b"x" * 64, 0))
    except (redis.ConnectionError, redis.TimeoutError):
        pass
    finally:
        client.close()


def test_sigkill_under_load_loses_no_acknowledged_job(tmp_path):
    args = ["--appendonly", "yes", "--appendfsync", "always"]
    srv = ServerProcess(tmp_path, args).wait_ready()
    stop = threading.Event()
    logs: list[list[bytes]] = [[] for _ in range(4)]
    threads = [
        threading.Thread(target=_adder, args=(srv.port, b"q%d" % i, logs[i], stop))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    # The kill lands mid-load: once the adders have had many ADDJOBs acknowledged.
    wait_for(lambda: sum(map(len, logs)) >= 1000, 60, what="1000 acknowledged ADDJOBs")
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    stop.set()
    for t in threads:
        t.join(10)
    srv.stop()
    acked = [jid for log in logs for jid in log]
    assert len(acked) > 100
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        present = job_ids(c)
    missing = [jid for jid in acked if jid not in present]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged jobs lost"
    print(f"\n{len(acked)} acknowledged ADDJOBs, {len(present)} jobs after the restart")


def _churn(port: int, stop: threading.Event, errors: list[BaseException]) -> None:
    client = redis.Redis(port=port, protocol=2, socket_timeout=10)
    try:
        while not stop.is_set():
            jid = client.execute_command("ADDJOB", "churn", b"y" * 64, 0)
            if int(jid[-1:], 16) % 2 == 0:  # roughly half are acknowledged at once
                client.execute_command("ACKJOB", jid)
    except BaseException as e:  # reported by the test
        errors.append(e)
    finally:
        client.close()


def _probe(port: int, stop: threading.Event, rtts: list[float]) -> None:
    with RawConnection(port) as c:
        while not stop.is_set():
            started = time.perf_counter()
            assert c.command(b"PING") == Status(b"PONG")
            rtts.append(time.perf_counter() - started)
            time.sleep(0.001)


def preload(c: RawConnection, thousands: int) -> set[bytes]:
    """Add ``thousands`` x 1000 jobs to queue ``pre``, pipelined; their IDs."""
    batch = encode(b"ADDJOB", b"pre", b"z" * 64, 0) * 1000
    ids: set[bytes] = set()
    for _ in range(thousands):
        c.send(batch)
        ids.update(c.read() for _ in range(1000))
    return ids


def test_rewrite_under_load_keeps_every_job(tmp_path):
    args = ["--appendonly", "yes"]
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        preload(c, 100)
        stop, probe_stop = threading.Event(), threading.Event()
        errors: list[BaseException] = []
        rtts: list[float] = []
        workers = [threading.Thread(target=_churn, args=(srv.port, stop, errors))
                   for _ in range(3)]  # fmt: skip
        probe = threading.Thread(target=_probe, args=(srv.port, probe_stop, rtts))
        for t in workers:
            t.start()
        time.sleep(0.3)
        probe.start()
        started = time.perf_counter()
        assert c.command(b"BGREWRITEAOF") == Status(
            b"Background append only file rewriting started"
        )
        wait_for(lambda: info(c)["aof_rewrite_in_progress"] == "0", 60, what="rewrite")
        duration = time.perf_counter() - started
        probe_stop.set()
        probe.join(10)
        time.sleep(0.3)  # more changes after the switch to the new file
        stop.set()
        for t in workers:
            t.join(10)
        assert not errors
        assert info(c)["aof_last_bgrewrite_status"] == "ok"
        live = job_ids(c)
        assert len(live) > 100_000
        kill_once_written(srv, c)
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == live
    print(
        f"\nrewrite of {len(live)} jobs under load: {duration:.2f} s, {len(rtts)} PINGs, "
        f"longest round trip {max(rtts) * 1000:.1f} ms, "
        f"p99 {sorted(rtts)[int(len(rtts) * 0.99)] * 1000:.1f} ms"
    )


def test_sigkill_during_a_rewrite_leaves_the_old_file_whole(tmp_path):
    args = ["--appendonly", "yes"]
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        ids = preload(c, 200)
        for _ in range(5):  # until the kill lands while a rewrite runs
            assert c.command(b"BGREWRITEAOF") == Status(
                b"Background append only file rewriting started"
            )
            ids.add(c.command(b"ADDJOB", b"q", b"during", 0))  # in both files
            if info(c)["aof_rewrite_in_progress"] == "1":
                srv.proc.kill()
                srv.proc.wait()
                break
            wait_for(lambda: info(c)["aof_rewrite_in_progress"] == "0", 60, what="rewrite")
        else:
            pytest.fail("every rewrite ended before the kill")
    assert list(tmp_path.glob("temp-rewriteaof-bg-*.aof"))  # killed mid-rewrite
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == ids


# ---------------------------------------------------------------- failing disks


@pytest.mark.parametrize(
    ("errno_name", "text"),
    [("ENOSPC", "No space left on device"), ("EROFS", "Read-only file system")],
)
def test_failed_writes_give_misconf_until_the_disk_works(tmp_path, faulty, errno_name, text):
    args = ["--appendonly", "yes"]
    misconf = Error(b"MISCONF Errors writing to the AOF file: " + text.encode())
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        first = c.command(b"ADDJOB", b"q", b"before", 0)
        faulty.write_text(f"write {errno_name}")
        # The record stays buffered; the reply is not held back (Disque's everysec).
        pending = c.command(b"ADDJOB", b"q", b"during", 0)
        assert isinstance(pending, Status)
        # A background fsync in flight postpones the write (up to 2 s, as Disque does).
        wait_for(lambda: info(c)["aof_last_write_status"] == "err", 10, what="write error")
        assert c.command(b"ADDJOB", b"q", b"refused", 0) == misconf
        assert c.command(b"PING") == misconf
        assert c.command(b"QLEN", b"q") == 2  # reads still work
        assert int(info(c)["aof_buffer_length"]) > 0
        assert f"Error writing to the AOF file: {text}" in log_text(tmp_path)
        faulty.unlink()
        wait_for(lambda: c.command(b"PING") == Status(b"PONG"), 10, what="recovery")
        assert info(c)["aof_last_write_status"] == "ok"
        assert "AOF write error looks solved, Disque can write again." in log_text(tmp_path)
        after = c.command(b"ADDJOB", b"q", b"after", 0)
        kill_once_written(srv, c)
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == {first, pending, after}


def test_failed_background_fsync_gives_misconf_until_an_fsync_works(tmp_path, faulty):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        faulty.write_text("fsync EIO")
        c.command(b"ADDJOB", b"q", b"x", 0)
        misconf = Error(b"MISCONF Errors writing to the AOF file: Input/output error")
        wait_for(lambda: c.command(b"PING") == misconf, 10, what="fsync error")
        assert "Error syncing the AOF file: Input/output error" in log_text(tmp_path)
        faulty.unlink()
        wait_for(lambda: c.command(b"PING") == Status(b"PONG"), 10, what="recovery")
        assert info(c)["aof_last_write_status"] == "ok"


def test_failed_write_with_appendfsync_always_is_fatal(tmp_path, faulty):
    srv = ServerProcess(tmp_path, ["--appendonly", "yes", "--appendfsync", "always"]).wait_ready()
    try:
        with RawConnection(srv.port) as c:
            c.command(b"ADDJOB", b"q", b"x", 0)
            faulty.write_text("write ENOSPC")
            c.send(encode(b"ADDJOB", b"q", b"y", 0))
            assert c.closed_by_server()  # no reply: the job may not be on disk
            assert c.buf == b""
        assert srv.proc.wait(10) == 1
        log = log_text(tmp_path)
        assert "Error writing to the AOF file: No space left on device" in log
        assert "Can't recover from AOF write error when the AOF fsync policy is 'always'. " \
            "Exiting..." in log  # fmt: skip
    finally:
        srv.stop()


def test_full_filesystem_gives_misconf_then_recovers(tmp_path, small_disk):
    args = ["--appendonly", "yes", "--dir", str(small_disk)]
    filler = small_disk / "filler"
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        acked = [c.command(b"ADDJOB", b"q", b"x" * 1000, 0)]
        free = shutil.disk_usage(small_disk).free
        filler.write_bytes(b"\0" * (free - 20_000))
        misconf = None
        for _ in range(200):
            reply = c.command(b"ADDJOB", b"q", b"x" * 1000, 0)
            if isinstance(reply, Error):
                misconf = reply
                break
            acked.append(reply)
        assert misconf == Error(b"MISCONF Errors writing to the AOF file: No space left on device")
        assert c.command(b"PING") == misconf
        filler.unlink()
        wait_for(lambda: c.command(b"PING") == Status(b"PONG"), 10, what="recovery")
        acked.append(c.command(b"ADDJOB", b"q", b"x", 0))
        kill_once_written(srv, c)
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        assert set(acked) <= job_ids(c)


def test_read_only_data_folder(tmp_path, small_disk):
    """A real read-only file system under ``dir``: every AOF operation that needs the
    folder fails with an error that says so, the node keeps serving, and it works again
    once the folder is writable. (A file system cannot be made read-only while the
    node has its AOF open for writing: failed appends are the injected EROFS above.)"""
    args = ["--dir", str(small_disk), "--cluster-config-file", str(tmp_path / "nodes.conf")]
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        ids = {c.command(b"ADDJOB", b"q", b"x", 0) for _ in range(10)}
        mount("-o", "remount,ro", str(small_disk))
        assert c.command(b"CONFIG", b"SET", b"appendonly", b"yes") == Error(
            b"ERR Unable to turn on AOF. Check server logs."
        )
        assert c.command(b"BGREWRITEAOF") == Error(b"ERR")
        assert info(c)["aof_last_bgrewrite_status"] == "err"
        assert c.command(b"SHUTDOWN", b"REWRITE-AOF") == Error(
            b"ERR Errors trying to SHUTDOWN. Check logs."
        )
        assert "Can't start the background AOF rewrite: Read-only file system" in log_text(tmp_path)
        assert "Error rewriting the append only file: Read-only file system" in log_text(tmp_path)
        ids.add(c.command(b"ADDJOB", b"q", b"x", 0))  # the AOF is off: no MISCONF
        mount("-o", "remount,rw", str(small_disk))
        assert c.command(b"CONFIG", b"SET", b"appendonly", b"yes") == Status(b"OK")
        wait_for(lambda: info(c)["aof_state"] == "on", 10, what="AOF on")
        assert info(c)["aof_last_bgrewrite_status"] == "ok"
        ids.add(c.command(b"ADDJOB", b"q", b"x", 0))
        kill_once_written(srv, c)
    mount("-o", "remount,ro", str(small_disk))
    srv = ServerProcess(tmp_path, [*args, "--appendonly", "yes"])
    try:
        assert srv.proc.wait(30) == 1  # refuses to start rather than run without its file
        assert "Can't open the append-only file: Read-only file system" in log_text(tmp_path)
    finally:
        srv.stop()
    mount("-o", "remount,rw", str(small_disk))
    with (
        running_server(tmp_path, [*args, "--appendonly", "yes"]) as srv,
        RawConnection(srv.port) as c,
    ):
        assert job_ids(c) == ids
