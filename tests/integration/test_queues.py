"""Queue commands against a real server (reference section 4): QLEN, QSTAT,
QPEEK, QSCAN and PAUSE, with their reply shapes and errors."""

from __future__ import annotations

import threading

import pytest

from tests.support.raw import Error, RawConnection, Status
from tests.support.servers import wait_for


def add(raw: RawConnection, queue: bytes, body: bytes = b"b") -> bytes:
    return bytes(raw.command(b"ADDJOB", queue, body, 0))


def test_qlen(raw, queue):
    assert raw.command(b"QLEN", queue) == 0
    add(raw, queue)
    add(raw, queue)
    assert raw.command(b"QLEN", queue) == 2
    assert raw.command(b"QSTAT", queue + b"-never") is None  # QLEN did not create it
    assert raw.command(b"QLEN") == Error(b"ERR wrong number of arguments for 'qlen' command")


def test_qstat_shape(raw, queue):
    add(raw, queue)
    raw.command(b"GETJOB", b"FROM", queue)
    add(raw, queue)
    stat = raw.command(b"QSTAT", queue)
    assert stat[0::2] == [b"name", b"len", b"age", b"idle", b"blocked", b"import-from",
                          b"import-rate", b"jobs-in", b"jobs-out", b"pause"]  # fmt: skip
    values = dict(zip(stat[0::2], stat[1::2], strict=True))
    assert values[b"name"] == queue
    assert values[b"len"] == 1
    assert values[b"blocked"] == 0
    assert values[b"import-from"] == []
    assert values[b"import-rate"] == 0
    assert values[b"jobs-in"] == 2
    assert values[b"jobs-out"] == 1
    assert values[b"pause"] == b"none"
    assert 0 <= values[b"age"] <= 5 and 0 <= values[b"idle"] <= 5


def test_qstat_missing_queue_is_null_array(raw, queue):
    raw.send(b"*2\r\n$5\r\nQSTAT\r\n$%d\r\n%s\r\n" % (len(queue), queue))
    assert raw.read_raw() == b"*-1\r\n"


def test_qpeek(raw, queue):
    ids = [add(raw, queue, b"%d" % i) for i in range(5)]
    assert raw.command(b"QPEEK", queue, 2) == [[queue, ids[0], b"0"], [queue, ids[1], b"1"]]
    assert raw.command(b"QPEEK", queue, -2) == [[queue, ids[4], b"4"], [queue, ids[3], b"3"]]
    assert len(raw.command(b"QPEEK", queue, 100)) == 5
    assert raw.command(b"QPEEK", queue, 0) == []
    assert raw.command(b"QPEEK", queue + b"-none", 3) == []
    assert raw.command(b"QPEEK", queue, b"x") == Error(
        b"ERR value is not an integer or out of range"
    )
    assert raw.command(b"QLEN", queue) == 5  # peeking removes nothing


def test_qpeek_shows_requeued_job_in_ctime_order(raw, queue):
    first = add(raw, queue, b"first")
    add(raw, queue, b"second")
    raw.command(b"GETJOB", b"FROM", queue)
    raw.command(b"ENQUEUE", first)
    assert [j[2] for j in raw.command(b"QPEEK", queue, 10)] == [b"first", b"second"]


def test_qscan_iterates_all_queues_with_filters(raw, queue):
    names = [queue + b"-%d" % i for i in range(12)]
    for i, name in enumerate(names):
        for _ in range(i):
            add(raw, name)
    seen: set[bytes] = set()
    cursor = b"0"
    while True:
        cursor, items = raw.command(b"QSCAN", cursor, b"COUNT", 3, b"MINLEN", 5)
        seen.update(items)
        if cursor == b"0":
            break
    assert {n for n in names if n in seen} == set(names[5:])
    cursor, items = raw.command(b"QSCAN", b"BUSYLOOP", b"MINLEN", 3, b"MAXLEN", 4)
    assert cursor == b"0"
    assert {n for n in items if n.startswith(queue)} == {names[3], names[4]}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([b"COUNT", b"x"], b"ERR value is not an integer or out of range"),
        ([b"MINLEN", b"x"], b"ERR value is not an integer or out of range"),
        ([b"nope"], b"ERR invalid cursor or option name"),
        ([b"1", b"2"], b"ERR syntax error"),
    ],
)
def test_qscan_errors(raw, args, error):
    assert raw.command(b"QSCAN", *args) == Error(error)


def test_pause_states(raw, queue):
    assert raw.command(b"PAUSE", queue, b"state") == Status(b"none")
    assert raw.command(b"QSTAT", queue) is None  # state alone creates nothing
    assert raw.command(b"PAUSE", queue, b"in") == Status(b"in")
    assert raw.command(b"PAUSE", queue, b"out") == Status(b"out")  # replaced, not added
    assert raw.command(b"PAUSE", queue, b"in", b"out") == Status(b"all")
    assert raw.command(b"PAUSE", queue, b"in", b"none") == Status(b"none")
    assert raw.command(b"PAUSE", queue, b"none", b"in") == Status(b"in")
    assert raw.command(b"PAUSE", queue, b"ALL") == Status(b"all")
    assert raw.command(b"PAUSE", queue, b"state") == Status(b"all")
    assert raw.command(b"PAUSE", queue, b"bcast") == Status(b"all")
    assert raw.command(b"QSTAT", queue)[-1] == b"all"
    assert raw.command(b"PAUSE", queue, b"in", b"bogus") == Error(b"ERR syntax error")
    assert raw.command(b"PAUSE", queue, b"state") == Status(b"all")  # nothing changed
    assert raw.command(b"PAUSE", queue) == Error(
        b"ERR wrong number of arguments for 'pause' command"
    )
    raw.command(b"PAUSE", queue, b"none")


def test_pause_out_blocks_consumers_until_cleared(shared_server, raw, queue):
    raw.command(b"PAUSE", queue, b"out")
    jid = add(raw, queue)
    assert raw.command(b"GETJOB", b"NOHANG", b"FROM", queue) is None
    got = []

    def consume():
        with RawConnection(shared_server.port) as c:
            got.append(c.command(b"GETJOB", b"FROM", queue))

    t = threading.Thread(target=consume)
    t.start()
    wait_for(lambda: raw.command(b"QSTAT", queue)[9] == 1, what="consumer blocked")
    assert got == []
    raw.command(b"PAUSE", queue, b"none")
    t.join(30)
    assert got == [[[queue, jid, b"b"]]]


def test_scans_of_a_small_dataset_complete_in_one_call(tmp_path):
    """Disque's tables are sized to their contents: few items come back at once."""
    from tests.support.servers import running_server

    with running_server(tmp_path) as srv, RawConnection(srv.port) as c:
        ids = {bytes(c.command(b"ADDJOB", b"q%d" % i, b"x", 0)) for i in range(5)}
        cursor, queues = c.command(b"QSCAN")
        assert cursor == b"0" and sorted(queues) == [b"q%d" % i for i in range(5)]
        cursor, jobs = c.command(b"JSCAN", b"0")
        assert cursor == b"0" and set(jobs) == ids
