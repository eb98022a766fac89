"""The AOF on real processes: loading and its errors, restarts, rewrites, INFO
persistence, BGREWRITEAOF, DEBUG LOADAOF, CONFIG SET appendonly, SHUTDOWN and the
``disquette check-aof`` tool (reference sections 12, 5.3, 5.5, 5.6, 5.15)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from disquette.core.aof import FORMAT_RECORD, deljob_record, loadjob_record
from disquette.core.job import ACTIVE, QUEUED, Job
from tests.support.aof import info, job_ids, kill_once_written
from tests.support.raw import Error, RawConnection, Status, encode
from tests.support.servers import SRC, ServerProcess, running_server, wait_for

AOF = "disque.aof"
NODE = b"a" * 40


def make_job(n: int, queue: bytes = b"q", state: int = QUEUED, retry: int = 30, **kw) -> Job:
    jid = b"D-aaaaaaaa-" + (b"%024d" % n) + (b"-05a1" if retry else b"-05a0")
    job = Job(jid, queue, b"body %d" % n, state, 1, 1_700_000_000_000_000_000 + n,
              int(time.time()) + 3600, 0, retry)  # fmt: skip
    job.nodes_delivered = (NODE,)
    for k, v in kw.items():
        setattr(job, k, v)
    return job


def write_aof(path: Path, *parts: bytes) -> bytes:
    data = b"".join(parts)
    path.write_bytes(data)
    return data


def show_field(conn: RawConnection, jid: bytes, field: bytes) -> object:
    show = conn.command(b"SHOW", jid)
    return dict(zip(show[::2], show[1::2], strict=True))[field]


def state_of(conn: RawConnection, jid: bytes) -> object:
    return show_field(conn, jid, b"state")


def log_text(workdir: Path) -> str:
    return (workdir / "server.log").read_text(errors="replace")


def exits(server: ServerProcess, timeout: float = 30) -> int:
    return server.proc.wait(timeout)


def check_aof(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-m", "disquette.cli.main", "check-aof", *args],
        input=stdin, capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


# ---------------------------------------------------------------- loading at start-up


def test_jobs_survive_a_restart_as_active_jobs(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        queued = c.command(b"ADDJOB", b"q", b"a", 0)
        fetched = c.command(b"ADDJOB", b"q", b"b", 0)
        acked = c.command(b"ADDJOB", b"q", b"c", 0)
        c.command(b"GETJOB", b"FROM", b"q")
        c.command(b"ACKJOB", acked)
        assert c.command(b"QLEN", b"q") == 1
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == {queued, fetched}
        assert state_of(c, queued) == b"active"  # requeued by its retry timer later
        assert c.command(b"QLEN", b"q") == 0


def test_appendfilename_names_the_file_written_rewritten_and_loaded(tmp_path):
    args = ["--appendonly", "yes", "--appendfilename", "jobs.aof"]
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        ids = {c.command(b"ADDJOB", b"q", b"x", 0) for _ in range(3)}
        assert c.command(b"BGREWRITEAOF") == Status(
            b"Background append only file rewriting started"
        )
        wait_for(lambda: info(c)["aof_rewrite_in_progress"] == "0", 10, what="rewrite")
        ids.add(c.command(b"ADDJOB", b"q", b"y", 0))
    assert (tmp_path / "jobs.aof").stat().st_size > 0
    assert not (tmp_path / AOF).exists()
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == ids


def test_empty_aof_loads_nothing(tmp_path):
    (tmp_path / AOF).write_bytes(b"")
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == set()
        assert info(c)["aof_current_size"] == "0"
    assert "DB loaded" not in log_text(tmp_path)


def test_missing_aof_is_created_when_the_aof_is_on(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        assert (tmp_path / AOF).exists()
        assert info(c)["aof_state"] == "on"


def test_missing_aof_is_fatal_for_enqueue_jobs_once_with_the_aof_off(tmp_path):
    srv = ServerProcess(tmp_path, ["--aof-enqueue-jobs-once", "yes"])
    assert exits(srv) == 1
    assert "Fatal error: can't open the append log file for reading: No such file or " \
        "directory" in log_text(tmp_path)  # fmt: skip
    srv.stop()


def test_torn_tail_is_cut_with_a_warning(tmp_path):
    good = write_aof(tmp_path / AOF, loadjob_record(make_job(1)), loadjob_record(make_job(2)))
    with open(tmp_path / AOF, "ab") as f:
        f.write(loadjob_record(make_job(3))[:-9])
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == {make_job(1).id, make_job(2).id}
        assert (tmp_path / AOF).stat().st_size == len(good)
        log = log_text(tmp_path)
        assert f"!!! Truncating the AOF at offset {len(good)} !!!" in log
        assert "AOF loaded anyway because aof-load-truncated is enabled" in log
        c.command(b"ADDJOB", b"q", b"after", 0)
    assert check_aof(str(tmp_path / AOF)).returncode == 0  # appends follow the cut


def test_torn_tail_refuses_to_start_without_aof_load_truncated(tmp_path):
    good = write_aof(tmp_path / AOF, loadjob_record(make_job(1)), b"*2\r\n$6\r\nDELJ")
    srv = ServerProcess(tmp_path, ["--appendonly", "yes", "--aof-load-truncated", "no"])
    assert exits(srv) == 1
    offset = len(loadjob_record(make_job(1)))
    assert f"Unexpected end of file reading the append only file {AOF} at offset {offset}" \
        in log_text(tmp_path)  # fmt: skip
    assert (tmp_path / AOF).read_bytes() == good  # untouched
    srv.stop()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (b"garbage\r\n", "Bad file format reading the append only file disque.aof at offset"),
        (b"*2\r\n$3\r\nSET\r\n$1\r\nx\r\n", "Unknown command 'SET' reading the append only file"),
        (
            b"*2\r\n$7\r\nLOADJOB\r\n$5\r\n\x01\x00\x00\x00x\r\n",
            "Unrecoverable error loading AOF: corrupted LOADJOB data",
        ),
    ],
)
def test_damage_refuses_to_start_and_names_the_offset(tmp_path, damage, message):
    first = loadjob_record(make_job(1))
    write_aof(tmp_path / AOF, first, damage, loadjob_record(make_job(2)))
    srv = ServerProcess(tmp_path, ["--appendonly", "yes"])
    assert exits(srv) == 1
    log = log_text(tmp_path)
    assert message in log
    assert f"Nothing after offset {len(first)} was loaded" in log
    assert "ready to accept connections" not in log
    srv.stop()


def test_clients_get_loading_errors_while_a_big_aof_loads(tmp_path):
    records = [loadjob_record(make_job(i)) for i in range(300_000)]
    write_aof(tmp_path / AOF, *records)
    srv = ServerProcess(tmp_path, ["--appendonly", "yes"])
    try:
        srv.wait_ready()
        with RawConnection(srv.port) as c:
            seen_loading = False
            loading_error = Error(b"LOADING Disque is loading the dataset in memory")
            pings = []
            while True:
                fields = info(c)
                if fields["loading"] == "0":
                    break
                seen_loading = True
                assert int(fields["loading_total_bytes"]) == sum(map(len, records))
                assert (
                    0 <= int(fields["loading_loaded_bytes"]) <= int(fields["loading_total_bytes"])
                )
                assert re.fullmatch(r"\d+\.\d\d", fields["loading_loaded_perc"])
                assert int(fields["loading_start_time"]) <= time.time()
                assert int(fields["loading_eta_seconds"]) >= 0
                # Loading may end between INFO and these: then they run.
                pings.append(c.command(b"PING"))
                qlen = c.command(b"QLEN", b"q")
                if qlen != loading_error:  # it ran: the load ended after the INFO
                    assert isinstance(qlen, int) and info(c)["loading"] == "0", qlen
                assert c.command(b"AUTH", b"x") == Error(
                    b"ERR Client sent AUTH, but no password is set"
                )
                time.sleep(0.05)
            assert seen_loading
            assert loading_error in pings and set(pings) <= {loading_error, Status(b"PONG")}
            assert c.command(b"INFO", b"jobs") == b"# Jobs\r\nregistered_jobs:300000\r\n"
            assert c.command(b"PING") == Status(b"PONG")
    finally:
        srv.stop()


def test_sigterm_while_loading_exits_at_once(tmp_path):
    write_aof(tmp_path / AOF, *(loadjob_record(make_job(i)) for i in range(300_000)))
    srv = ServerProcess(tmp_path, ["--appendonly", "yes"])
    srv.wait_ready()
    with RawConnection(srv.port) as c:
        assert info(c)["loading"] == "1"
    srv.proc.send_signal(signal.SIGTERM)
    assert exits(srv, 10) == 0
    srv.stop()


# ---------------------------------------------------------------- controlled restarts


@pytest.mark.parametrize("appendonly", ["yes", "no"])
def test_controlled_restart_keeps_queues_and_their_order(tmp_path, appendonly):
    config = tmp_path / "disque.conf"
    config.write_text(f"appendonly {appendonly}\n")
    with running_server(tmp_path, config_file=config) as srv, RawConnection(srv.port) as c:
        ids = {name: [c.command(b"ADDJOB", name, b"%s %d" % (name, i), 0) for i in range(20)]
               for name in (b"a", b"b")}  # fmt: skip
        at_most_once = c.command(b"ADDJOB", b"a", b"once", 0, b"RETRY", 0)
        delivered = c.command(b"GETJOB", b"FROM", b"b")[0][1]
        nacked = c.command(b"GETJOB", b"FROM", b"a")[0][1]
        assert c.command(b"NACK", nacked) == 1  # back in its queue, in ctime order
        before = {q: [e[1] for e in c.command(b"QPEEK", q, 100)] for q in (b"a", b"b")}
        assert before[b"a"] == [*ids[b"a"], at_most_once]
        assert c.command(b"CONFIG", b"SET", b"aof-enqueue-jobs-once", b"yes") == Status(b"OK")
        assert c.command(b"CONFIG", b"REWRITE") == Status(b"OK")
        c.send(encode(b"SHUTDOWN", b"REWRITE-AOF"))
        assert c.closed_by_server()
        # Still inside: leaving the block would SIGTERM a server that is still exiting.
        assert exits(srv) == 0
    assert "SYNC append only file rewrite performed" in log_text(tmp_path)
    with running_server(tmp_path, config_file=config) as srv, RawConnection(srv.port) as c:
        after = {q: [e[1] for e in c.command(b"QPEEK", q, 100)] for q in (b"a", b"b")}
        assert after[b"a"] == ids[b"a"]  # the retry-0 job is not queued again
        assert after[b"b"] == before[b"b"]
        assert state_of(c, at_most_once) == b"active"
        assert state_of(c, delivered) == b"active"
        assert show_field(c, nacked, b"nacks") == 1
        assert c.command(b"CONFIG", b"GET", b"aof-enqueue-jobs-once") == [
            b"aof-enqueue-jobs-once", b"no"
        ]  # fmt: skip
    assert "aof-enqueue-jobs-once yes" not in config.read_text()


def test_sigterm_flushes_and_syncs(tmp_path):
    args = ["--appendonly", "yes", "--appendfsync", "no"]
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        jid = c.command(b"ADDJOB", b"q", b"x", 0)
        srv.proc.send_signal(signal.SIGTERM)
        assert exits(srv) == 0
    assert "Calling fsync() on the AOF file." in log_text(tmp_path)
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == {jid}


def test_shutdown_refused_while_the_initial_aof_is_written(tmp_path):
    with running_server(tmp_path) as srv, RawConnection(srv.port) as c:
        c.send(encode(b"CONFIG", b"SET", b"appendonly", b"yes") + encode(b"SHUTDOWN"))
        assert c.read() == Status(b"OK")
        assert c.read() == Error(b"ERR Errors trying to SHUTDOWN. Check logs.")
        assert "Writing initial AOF, can't exit." in log_text(tmp_path)
        wait_for(lambda: info(c)["aof_state"] == "on", 10, what="AOF on")


# ---------------------------------------------------------------- rewrites


def test_bgrewriteaof_replies_and_compacts(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        kept = [c.command(b"ADDJOB", b"q", b"x" * 100, 0) for _ in range(50)]
        for _ in range(50):
            c.command(b"ACKJOB", c.command(b"ADDJOB", b"q", b"y" * 100, 0))
        assert info(c)["aof_last_rewrite_time_sec"] == "-1"
        big = int(info(c)["aof_current_size"])
        c.send(encode(b"BGREWRITEAOF") + encode(b"BGREWRITEAOF"))
        assert c.read_raw() == b"+Background append only file rewriting started\r\n"
        assert c.read_raw() == \
            b"-ERR Background append only file rewriting already in progress\r\n"  # fmt: skip
        wait_for(lambda: info(c)["aof_rewrite_in_progress"] == "0", 10, what="rewrite")
        fields = info(c)
        assert fields["aof_last_bgrewrite_status"] == "ok"
        assert fields["aof_last_rewrite_time_sec"] == "0"
        size = (tmp_path / AOF).stat().st_size
        assert fields["aof_current_size"] == fields["aof_base_size"] == str(size)
        records = sum(len(loadjob_record_of(c, j)) for j in kept)
        assert size == len(FORMAT_RECORD) + records < big  # (the file's format first)
        assert not list(tmp_path.glob("temp-rewriteaof-*"))
        extra = c.command(b"ADDJOB", b"q", b"after", 0)
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == {*kept, extra}


def loadjob_record_of(c: RawConnection, jid: bytes) -> bytes:
    """The size-relevant record of a job as the server has it (SHOW gives the body)."""
    show = dict(zip(*[iter(c.command(b"SHOW", jid))] * 2, strict=True))
    job = Job(jid, show[b"queue"], show[b"body"])
    job.nodes_delivered = tuple(show[b"nodes-delivered"])
    return loadjob_record(job)


def test_bgrewriteaof_with_the_aof_off_writes_the_file(tmp_path):
    with running_server(tmp_path) as srv, RawConnection(srv.port) as c:
        ids = {c.command(b"ADDJOB", b"q", b"x", 0) for _ in range(10)}
        assert c.command(b"BGREWRITEAOF") == Status(
            b"Background append only file rewriting started"
        )
        wait_for(lambda: info(c)["aof_rewrite_in_progress"] == "0", 10, what="rewrite")
        assert info(c)["aof_state"] == "off"
    result = check_aof(str(tmp_path / AOF))
    assert result.returncode == 0, result.stdout
    # One record a job, and once more for a job that went to disk or came back while
    # the rewrite ran (flow to disk: core/aof.py's moved()); loading it gives the ten.
    records = int(re.search(r"records=(\d+)", result.stdout)[1])
    assert 10 <= records <= 20, result.stdout
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == ids


def test_config_set_appendonly_yes_at_run_time(tmp_path):
    with running_server(tmp_path) as srv, RawConnection(srv.port) as c:
        before = {c.command(b"ADDJOB", b"q", b"x", 0) for _ in range(30)}
        assert info(c)["aof_enabled"] == "0"
        c.send(encode(b"CONFIG", b"SET", b"appendonly", b"yes") + encode(b"INFO", b"persistence"))
        assert c.read() == Status(b"OK")
        assert b"aof_state:wait-rewrite\r\n" in c.read()
        wait_for(lambda: info(c)["aof_state"] == "on", 10, what="AOF on")
        assert c.command(b"CONFIG", b"GET", b"appendonly") == [b"appendonly", b"yes"]
        after = {c.command(b"ADDJOB", b"q", b"y", 0) for _ in range(5)}
        kill_once_written(srv, c)
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == before | after


def test_config_set_appendonly_no_stops_writing(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        c.command(b"ADDJOB", b"q", b"x", 0)
        assert c.command(b"CONFIG", b"SET", b"appendonly", b"no") == Status(b"OK")
        size = (tmp_path / AOF).stat().st_size
        c.command(b"ADDJOB", b"q", b"y", 0)
        fields = info(c)
        assert (fields["aof_enabled"], fields["aof_state"]) == ("0", "off")
        assert "aof_current_size" not in fields
        assert (tmp_path / AOF).stat().st_size == size


def test_automatic_rewrite_on_growth(tmp_path):
    args = ["--appendonly", "yes", "--auto-aof-rewrite-min-size", "4kb",
            "--auto-aof-rewrite-percentage", "100"]  # fmt: skip
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        for _ in range(40):
            c.command(b"ACKJOB", c.command(b"ADDJOB", b"q", b"x" * 100, 0))
        wait_for(lambda: info(c)["aof_last_rewrite_time_sec"] != "-1", 60, what="auto rewrite")
        assert "Starting automatic rewriting of AOF on" in log_text(tmp_path)

        # Compacted: on a slow machine the first rewrite starts before the loop ends,
        # and the records written after it (jobs that cancel out) start the next one
        # once the file has grown past the minimum and twice its base again (a base
        # written while jobs were live may leave the file above the minimum but under
        # twice that base: no rewrite is due then).
        def compacted() -> bool:
            fields = info(c)
            size, base = int(fields["aof_current_size"]), int(fields["aof_base_size"])
            return fields["aof_rewrite_in_progress"] == "0" and (size < 4096 or size < 2 * base)

        wait_for(compacted, 60, what="the file compacted")
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        assert job_ids(c) == set()  # every job was acknowledged


# ---------------------------------------------------------------- DEBUG LOADAOF and INFO


def test_debug_loadaof_reloads_the_file(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        ids = {c.command(b"ADDJOB", b"q", b"x", 0) for _ in range(5)}
        c.command(b"ACKJOB", ids.pop())
        assert c.command(b"DEBUG", b"LOADAOF") == Status(b"OK")
        assert job_ids(c) == ids
        assert {state_of(c, j) for j in ids} == {b"active"}
        assert c.command(b"DEBUG", b"LOADAOF") == Status(b"OK")  # nothing was lost: no DELJOB
        assert job_ids(c) == ids


def test_debug_loadaof_with_an_empty_file(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        c.send(encode(b"DEBUG", b"LOADAOF"))
        assert c.read_raw() == b"-ERR\r\n"


def test_info_persistence_sizes_follow_the_file(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        fields = info(c)
        assert (fields["aof_current_size"], fields["aof_base_size"]) == ("0", "0")
        assert fields["aof_pending_bio_fsync"] in ("0", "1")
        for key in ("aof_buffer_length", "aof_rewrite_buffer_length", "aof_delayed_fsync",
                    "aof_pending_rewrite"):  # fmt: skip
            assert fields[key] == "0"
        jid = c.command(b"ADDJOB", b"q", b"x", 0)
        size = (tmp_path / AOF).stat().st_size
        assert info(c)["aof_current_size"] == str(size)
        c.command(b"ACKJOB", jid)
        # With appendfsync everysec the DELJOB's write waits while the ADDJOB's background
        # fsync runs (Redis's postponed write), and the reply does not wait for it.
        after_ack = str(size + len(deljob_record(jid)))
        wait_for(lambda: info(c)["aof_current_size"] == after_ack, 10, what="DELJOB written")
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        fields = info(c)
        assert (
            fields["aof_base_size"]
            == fields["aof_current_size"]
            == str(size + len(deljob_record(jid)))
        )


def test_loaded_active_jobs_are_requeued_by_their_timer(tmp_path):
    write_aof(tmp_path / AOF, loadjob_record(make_job(1, retry=1)),
              loadjob_record(make_job(2, state=ACTIVE, retry=1)),
              loadjob_record(make_job(3, retry=0)))  # fmt: skip
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        assert c.command(b"QLEN", b"q") == 0
        wait_for(lambda: c.command(b"QLEN", b"q") == 2, 10, what="requeue")
        assert state_of(c, make_job(3, retry=0).id) == b"active"


# ---------------------------------------------------------------- check-aof


def test_check_aof_valid_file(tmp_path):
    write_aof(tmp_path / AOF, loadjob_record(make_job(1)), deljob_record(make_job(1).id))
    result = check_aof(str(tmp_path / AOF))
    assert result.returncode == 0
    size = (tmp_path / AOF).stat().st_size
    assert result.stdout == (
        "AOF format: 1 (no format record: disquette 0.1.0 or Disque wrote it; every release "
        f"reads it)\nAOF analyzed: size={size}, ok_up_to={size}, diff=0, records=2\n"
        "AOF is valid\n"
    )


def test_check_aof_torn_tail_and_fix(tmp_path):
    good = write_aof(tmp_path / AOF, loadjob_record(make_job(1)))
    with open(tmp_path / AOF, "ab") as f:
        f.write(b"*2\r\n$6\r\nDEL")
    path = str(tmp_path / AOF)
    size = len(good) + 11
    result = check_aof(path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"0x{len(good):016x}: unexpected end of file in the last record",
        "AOF format: 1 (no format record: disquette 0.1.0 or Disque wrote it; every release "
        "reads it)",
        f"AOF analyzed: size={size}, ok_up_to={len(good)}, diff=11, records=1",
        "AOF is not valid: its last record is incomplete (a torn tail).",
        "Use the --fix option to try fixing it.",
    ]
    result = check_aof("--fix", path, stdin="n\n")
    assert result.returncode == 1 and result.stdout.endswith("Continue? [y/N]: Aborting...\n")
    assert (tmp_path / AOF).stat().st_size == size
    result = check_aof("--fix", path, stdin="y\n")
    assert result.returncode == 0
    assert f"This will shrink the AOF from {size} bytes, with 11 bytes, to {len(good)} bytes" \
        in result.stdout  # fmt: skip
    assert result.stdout.endswith("Successfully truncated AOF\n")
    assert (tmp_path / AOF).read_bytes() == good
    assert check_aof(path).returncode == 0


def test_check_aof_damage_in_the_middle(tmp_path):
    first = loadjob_record(make_job(1))
    write_aof(tmp_path / AOF, first, b"*2\r\n$6\r\nDELJOB\r\n$3\r\n",
              loadjob_record(make_job(2)), deljob_record(make_job(2).id))  # fmt: skip
    path = str(tmp_path / AOF)
    result = check_aof(path)
    assert result.returncode == 1
    assert f"0x{len(first):016x}: DELJOB argument of 3 bytes is not a job ID" in result.stdout
    assert f"AOF is not valid: bad record at offset {len(first)}." in result.stdout
    result = check_aof("--fix", "-y", path)
    assert result.returncode == 0
    assert "where 2 complete valid record(s) were found. They would be lost." in result.stdout
    assert (tmp_path / AOF).read_bytes() == first


def test_check_aof_missing_file(tmp_path):
    result = check_aof(str(tmp_path / "nope.aof"))
    assert result.returncode == 1
    assert result.stdout.startswith("Cannot open file:")
