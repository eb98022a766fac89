"""Pipelined ADDJOBs on a real server. A run of ADDJOBs read together is made in one
go (ServerState.execute_run, Node.add_jobs); every reply, error, counter, log,
monitor line, blocked consumer and AOF record must be what one-by-one ADDJOBs give."""

from __future__ import annotations

import re
import threading

from tests.support.aof import info
from tests.support.raw import Error, RawConnection, Status, encode
from tests.support.servers import running_server, wait_for

ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


def pipeline(conn: RawConnection, *requests: tuple) -> list:
    conn.send(b"".join(encode(*r) for r in requests))
    return [conn.read() for _ in requests]


def adds(queue: bytes, n: int, *opts) -> list[tuple]:
    return [(b"ADDJOB", queue, b"body-%d" % i, 0, *opts) for i in range(n)]


def test_run_replies_ids_in_order_and_queues_in_order(raw, queue):
    replies = pipeline(raw, *adds(queue, 500))
    assert all(isinstance(r, Status) and ID_RE.match(r) for r in replies)
    assert len(set(replies)) == 500
    peeked = raw.command(b"QPEEK", queue, 500)
    assert [job[1] for job in peeked] == replies
    assert [job[2] for job in peeked] == [b"body-%d" % i for i in range(500)]
    show = dict(zip(*[iter(raw.command(b"SHOW", replies[-1]))] * 2, strict=True))
    assert show[b"state"] == b"queued"
    assert show[b"repl"] == 1
    assert show[b"retry"] == 300


def test_errors_and_other_commands_inside_a_run(raw, queue):
    replies = pipeline(
        raw,
        (b"ADDJOB", queue, b"a", 0),
        (b"addjob", queue, b"b", 0),
        (b"ADDJOB", queue, b"c", 0, b"TTL", 0),
        (b"AddJob", queue, b"d", 0),
        (b"ADDJOB", queue, b"e", b"abc"),
        (b"QLEN", queue),
        (b"ADDJOB", queue + b"-2", b"f", 0, b"RETRY", 5),
        (b"ADDJOB", queue, b"g", 0, b"RETRY", 5),
        (b"ADDJOB", queue, b"h", 0, b"DELAY", 10),
        (b"ADDJOB", queue, b"i"),
    )
    kinds = [type(r).__name__ for r in replies]
    assert kinds == [
        "Status", "Status", "Error", "Status", "Error", "int", "Status", "Status", "Status",
        "Error",
    ]  # fmt: skip
    assert replies[2] == Error(b"ERR TTL must be a number > 0")
    assert replies[4] == Error(b"ERR timeout is not an integer or out of range")
    assert replies[5] == 3
    assert replies[9] == Error(b"ERR wrong number of arguments for 'addjob' command")
    assert [job[2] for job in raw.command(b"QPEEK", queue, 10)] == [b"a", b"b", b"d", b"g"]


def test_run_stops_at_maxlen_and_at_a_paused_queue(raw, queue):
    replies = pipeline(raw, *adds(queue, 10, b"MAXLEN", 4))
    assert all(isinstance(r, Status) for r in replies[:4])
    assert (
        replies[4:]
        == [Error(b"MAXLEN Queue is already longer than the specified MAXLEN count")] * 6
    )
    assert raw.command(b"PAUSE", queue, b"in") == Status(b"in")
    assert pipeline(raw, *adds(queue, 3)) == [Error(b"PAUSED Queue paused in input, try later")] * 3
    assert raw.command(b"QLEN", queue) == 4
    raw.command(b"PAUSE", queue, b"none")


def test_run_stops_where_memory_runs_out(tmp_path):
    with running_server(tmp_path, ["--maxmemory", "2mb"]) as srv, RawConnection(srv.port) as c:
        replies = []
        while not replies or isinstance(replies[-1], Status):
            replies += pipeline(c, *adds(b"q", 200, b"REPLICATE", 1))
        accepted = [r for r in replies if isinstance(r, Status)]
        assert replies[: len(accepted)] == accepted  # every refusal after every job
        assert len(accepted) > 1000
        refusals = set(replies[len(accepted) :])
        assert refusals <= {
            Error(b"NOREPL Not enough reachable nodes for the requested replication level, "
                  b"since I'm unable to hold a copy of the message for the following "
                  b"reason: I'm out of memory"),
            Error(b"OOM command not allowed when used memory > 'maxmemory'."),
        }, refusals  # fmt: skip
        assert c.command(b"QLEN", b"q") == len(accepted)


def test_a_run_while_clients_hold_buffers_without_flow_to_disk(tmp_path, monkeypatch):
    """Clients' buffers counted (a partial request) and flow to disk off: a run longer
    than a queue's head window stays in memory (it went to the spill log, which is
    not there, and the node closed the connection with no reply). Flow to disk stays
    off in make test's flow-to-disk run too."""
    monkeypatch.delenv("DISQUETTE_TEST_SERVER_ARGS", raising=False)
    with (
        running_server(tmp_path) as srv,
        RawConnection(srv.port) as c,
        RawConnection(srv.port) as partial,
    ):
        partial.send(b"*2\r\n$4\r\nECHO\r\n$100000\r\n" + b"x" * 50_000)

        def client_memory() -> int:
            used = int(info(c, "memory")["used_memory"])
            return used - int(info(c, "flowtodisk")["bytes_in_memory"])

        wait_for(lambda: client_memory() > 0, what="the client buffers counted")
        replies = pipeline(c, *adds(b"q", 1000))
        assert all(isinstance(r, Status) and ID_RE.match(r) for r in replies), replies[-1]
        assert c.command(b"QLEN", b"q") == 1000
        assert info(c, "flowtodisk")["jobs_on_disk"] == "0"


def test_commandstats_and_slowlog_count_every_job_of_a_run(tmp_path):
    args = ["--slowlog-log-slower-than", "0", "--slowlog-max-len", "1000"]
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        c.command(b"SLOWLOG", b"RESET")
        pipeline(c, *adds(b"q", 300))
        stats = info(c, "commandstats")
        assert stats["cmdstat_addjob"].startswith("calls=300,")
        logged = [entry[3] for entry in c.command(b"SLOWLOG", b"GET", 1000)]
        added = [argv for argv in logged if argv[0] == b"ADDJOB"]
        assert sorted(argv[2] for argv in added) == sorted(b"body-%d" % i for i in range(300))
        assert int(info(c, "stats")["total_commands_processed"]) >= 300


def test_monitor_sees_every_job_of_a_run(shared_server, raw, queue):
    with RawConnection(shared_server.port) as monitor:
        assert monitor.command(b"MONITOR") == Status(b"OK")
        pipeline(raw, *adds(queue, 50))
        lines = [monitor.read() for _ in range(50)]
        assert [line.split(b'"')[5] for line in lines] == [b"body-%d" % i for i in range(50)]


def test_blocked_consumer_gets_a_job_of_a_run(shared_server, raw, queue):
    got = []
    with RawConnection(shared_server.port) as consumer:

        def consume():
            got.append(consumer.command(b"GETJOB", b"TIMEOUT", 30000, b"FROM", queue))

        thread = threading.Thread(target=consume)
        thread.start()
        wait_for(lambda: (raw.command(b"QSTAT", queue) or [0] * 10)[9] == 1, what="blocked")
        replies = pipeline(raw, *adds(queue, 20))
        thread.join(30)
    assert got[0][0][1] == replies[0]
    assert raw.command(b"QLEN", queue) == 19


def test_client_reply_off_suppresses_the_replies_of_a_run(shared_server, queue):
    with RawConnection(shared_server.port) as c:
        requests = [(b"CLIENT", b"REPLY", b"OFF"), *adds(queue, 30), (b"CLIENT", b"REPLY", b"ON")]
        c.send(b"".join(encode(*r) for r in requests))
        assert c.read() == Status(b"OK")
        assert c.command(b"QLEN", queue) == 30


def test_a_run_is_in_the_aof(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        ids = pipeline(c, *adds(b"q", 400))
        assert c.command(b"DEBUG", b"LOADAOF") == Status(b"OK")
        assert c.command(b"QLEN", b"q") == 0  # reloaded jobs are active, requeued by retry
        assert all(c.command(b"SHOW", jid) is not None for jid in ids)
