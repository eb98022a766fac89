"""Flow to disk on real servers: a backlog several times a node's memory, kept and
served in order; SIGKILL while spilling with ``appendfsync always``; the AOF as the
store; a full disk and a disk limit.

The backlogs here are sized for ``make test`` (tens of thousands of jobs against a
few megabytes of level); bench/flow_to_disk.py runs the issue's full size.
"""

from __future__ import annotations

import signal
import threading

import redis

from tests.support.raw import RawConnection
from tests.support.servers import ServerProcess, running_server, wait_for

BODY = 256


def body(i: int) -> bytes:
    head = b"job %09d " % i
    return head + bytes((i + k) % 251 for k in range(BODY - len(head)))


def flow(level: str = "2mb", *more: str) -> list[str]:
    return ["--maxmemory", "64mb", "--flow-to-disk", "yes", "--flow-to-disk-level", level, *more]


def info(r: redis.Redis, section: str = "flowtodisk") -> dict:
    return r.info(section)


def fill(r: redis.Redis, n: int, queue: str = "q", start: int = 0) -> list[bytes]:
    ids: list[bytes] = []
    for first in range(start, start + n, 500):
        pipe = r.pipeline(transaction=False)
        for i in range(first, min(first + 500, start + n)):
            pipe.execute_command("ADDJOB", queue, body(i), 0)
        ids += pipe.execute()
    return ids


def drain(r: redis.Redis, queue: str = "q") -> list[tuple[bytes, bytes]]:
    """(ID, body) of every job, GETJOB COUNT 300 then ACKJOB, until the queue is empty."""
    out: list[tuple[bytes, bytes]] = []
    while True:
        got = r.execute_command("GETJOB", "NOHANG", "COUNT", 300, "FROM", queue)
        if not got:
            return out
        out += [(job[1], job[2]) for job in got]
        r.execute_command("ACKJOB", *[job[1] for job in got])


def test_a_backlog_larger_than_memory_is_served_in_order_byte_for_byte(tmp_path):
    n = 40_000  # ~10 MB of bodies alone against a 2 MB level
    with running_server(tmp_path, flow()) as srv:
        r = srv.client()
        ids = fill(r, n)
        state = info(r)
        assert state["jobs_on_disk"] > n * 3 // 4
        assert r.info("memory")["used_memory"] < 4 << 20  # the level, not the backlog
        assert state["spill_index_bytes"] > 0 and state["disk_used"] > n * BODY
        assert r.execute_command("QLEN", "q") == n
        stat = r.execute_command("QSTAT", "q")
        assert stat[stat.index(b"jobs-on-disk") + 1] == state["jobs_on_disk"]
        # Commands that only look, at jobs on disk: SHOW, QPEEK (both ends), JSCAN.
        shown = r.execute_command("SHOW", ids[n // 2])
        assert shown[shown.index(b"body") + 1] == body(n // 2)
        assert [j[1] for j in r.execute_command("QPEEK", "q", -3)] == ids[-1:-4:-1]
        cursor, seen = b"0", set()
        while True:
            cursor, found = r.execute_command("JSCAN", cursor, "COUNT", 1000)
            seen.update(found)
            if cursor == b"0":
                break
        assert seen == set(ids)
        served = drain(r)
        assert [job_id for job_id, _ in served] == ids
        assert all(b == body(i) for i, (_, b) in enumerate(served))
        state = info(r)
        assert state["jobs_on_disk"] == 0 and state["spill_read_errors"] == 0
        assert state["readahead_hits"] > state["readahead_misses"]
        assert state["disk_used"] < 2 << 20  # the dead segments are gone


def test_a_spilled_job_answers_every_command_as_one_in_memory(tmp_path):
    with running_server(tmp_path, flow("1mb")) as srv:
        r = srv.client()
        ids = fill(r, 8000)
        assert info(r)["jobs_on_disk"] > 6000
        far = ids[-100:]  # on disk: the far end of the queue
        assert r.execute_command("DEQUEUE", *far[:10]) == 10
        assert r.execute_command("ENQUEUE", *far[:10]) == 10
        assert r.execute_command("WORKING", far[10]) > 0
        assert r.execute_command("NACK", far[11]) == 0  # queued already, as in memory
        assert r.execute_command("FASTACK", far[12]) == 1
        assert r.execute_command("ACKJOB", far[13]) == 1
        assert r.execute_command("DELJOB", far[14]) == 1
        assert r.execute_command("SHOW", far[14]) is None
        assert r.execute_command("QLEN", "q") == 8000 - 4  # WORKING took one out too
        served = [job_id for job_id, _ in drain(r)]
        assert set(served) == set(ids) - {far[10], far[12], far[13], far[14]}


def test_sigkill_while_spilling_with_appendfsync_always_loses_nothing_acknowledged(tmp_path):
    args = flow("2mb", "--appendonly", "yes", "--appendfsync", "always",
                "--aof-enqueue-jobs-once", "yes")  # fmt: skip
    srv = ServerProcess(tmp_path, args).wait_ready()
    acknowledged: dict[bytes, int] = {}
    stop = threading.Event()

    def producer() -> None:
        conn = RawConnection(srv.port)
        i = 0
        try:
            while not stop.is_set():
                acknowledged[conn.command(b"ADDJOB", b"q", body(i), b"0")] = i
                i += 1
        except (OSError, ConnectionError, EOFError):
            pass  # the kill

    thread = threading.Thread(target=producer)
    thread.start()
    try:
        r = srv.client()
        wait_for(lambda: info(r)["jobs_on_disk"] > 5000, 120, what="spilling under load")
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait()
        stop.set()
        thread.join()
    finally:
        stop.set()
        srv.stop()
    with running_server(tmp_path, args, port=srv.port) as again:
        r = again.client()
        wait_for(lambda: r.info("persistence")["loading"] == 0, 120, what="the AOF loaded")
        assert info(r)["jobs_on_disk"] > 0  # the reload spilled too
        served = dict(drain(r))
        missing = [job_id for job_id in acknowledged if job_id not in served]
        assert not missing, f"{len(missing)} acknowledged jobs lost"
        assert all(served[job_id] == body(i) for job_id, i in acknowledged.items())


def test_with_the_aof_on_queued_jobs_are_read_back_from_it(tmp_path):
    with running_server(tmp_path, flow("2mb", "--appendonly", "yes")) as srv:
        r = srv.client()
        ids = fill(r, 30_000)
        state = info(r)
        assert state["jobs_on_disk"] > 20_000
        # Their records are in the AOF: the spill log holds next to nothing (the jobs
        # spilled before their AOF record was written: more on a busy machine).
        assert state["bytes_on_disk"] > 20_000 * BODY > 5 * state["disk_used"]
        # A rewrite replaces the file: the jobs are read from the old one (kept open
        # until they are gone), and the new one has them all.
        assert r.execute_command("BGREWRITEAOF")
        wait_for(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0, 60,
                 what="the rewrite")  # fmt: skip
        more = fill(r, 5000, start=30_000)
        served = drain(r)
        assert [job_id for job_id, _ in served] == ids + more
        assert all(b == body(i) for i, (_, b) in enumerate(served))
        assert info(r)["spill_read_errors"] == 0


def test_the_disk_limit_refuses_addjob_with_disques_oom_error(tmp_path):
    with running_server(tmp_path, flow("1mb", "--flow-to-disk-max-size", "2mb")) as srv:
        r = srv.client()
        refused = None
        for i in range(0, 200_000, 500):
            try:
                fill(r, 500, start=i)
            except redis.exceptions.OutOfMemoryError as e:  # -OOM, as Disque says it
                refused = str(e)
                break
        assert refused is not None and "used memory > 'maxmemory'" in refused
        assert info(r)["disk_used"] >= 2 << 20
        assert len(drain(r)) > 5000  # everything accepted is there


def test_a_full_disk_stops_spilling_says_why_and_loses_nothing(tmp_path, small_disk):
    args = flow("1mb", "--flow-to-disk-dir", str(small_disk))
    with running_server(tmp_path, args) as srv:
        r = srv.client()
        ids = fill(r, 6000)  # ~1.6 MB of bodies: past the 512 KiB disk
        wait_for(lambda: info(r)["flow_to_disk_status"] == "err", 30, what="the write error")
        state = info(r)
        assert "No space left on device" in state["flow_to_disk_last_error"]
        wait_for(lambda: "Flow to disk stopped" in srv.log(), 10, what="the log line")
        served = drain(r)
        assert [job_id for job_id, _ in served] == ids
        assert all(b == body(i) for i, (_, b) in enumerate(served))
        # The space came back with the jobs: spilling works again.
        wait_for(lambda: info(r)["flow_to_disk_status"] == "ok", 30, what="recovery")
        more = fill(r, 3000, start=6000)
        assert [job_id for job_id, _ in drain(r)] == more
