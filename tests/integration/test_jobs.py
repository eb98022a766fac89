"""Job commands against a real server: reply types, shapes and every error text
of reference section 3 (ADDJOB, GETJOB, ACKJOB, FASTACK, WORKING, NACK,
ENQUEUE, DEQUEUE, DELJOB, SHOW, JSCAN, LOADJOB)."""

from __future__ import annotations

import re
import threading

import pytest

from tests.support.raw import Error, RawConnection, Status
from tests.support.servers import wait_for

ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")
BADID = Error(b"BADID Invalid Job ID format.")
SYNTAX = Error(b"ERR syntax error")
DELAY_TOO_LONG = (
    b"ERR The specified DELAY is greater than TTL. Job refused since would never be delivered"
)
NOREPL = b"NOREPL Not enough reachable nodes for the requested replication level"
FAKE_ID = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"


def add(raw: RawConnection, queue: bytes, body: bytes = b"body", *opts) -> bytes:
    job_id = raw.command(b"ADDJOB", queue, body, 0, *opts)
    assert isinstance(job_id, Status), job_id
    return bytes(job_id)


def blocked_on(raw: RawConnection, queue: bytes) -> int:
    stat = raw.command(b"QSTAT", queue)
    return 0 if stat is None else stat[9]


# ---------------------------------------------------------------- ADDJOB


def test_addjob_replies_id_as_status(raw, queue, shared_server):
    wire = RawConnection(shared_server.port)
    wire.send(b"*4\r\n$6\r\nADDJOB\r\n$%d\r\n%s\r\n$1\r\nx\r\n$1\r\n0\r\n" % (len(queue), queue))
    data = wire.read_raw()
    wire.close()
    assert data.startswith(b"+D-") and data.endswith(b"\r\n") and len(data) == 43
    myid = raw.command(b"CLUSTER", b"MYID")
    assert ID_RE.match(data[1:-2])
    assert data[3:11] == myid[:8]


@pytest.mark.parametrize(
    ("ttl", "retry", "suffix"),
    [(5, 1, b"0001"), (5, 0, b"0000"), (86400, 300, b"05a1"), (86400, 0, b"05a0"),
     (3600, None, b"003d"), (10_000_000, 5, b"ffff")],
)  # fmt: skip
def test_addjob_id_carries_ttl_minutes_and_retry_parity(raw, queue, ttl, retry, suffix):
    opts = [b"TTL", ttl] + ([b"RETRY", retry] if retry is not None else [])
    opts += [b"REPLICATE", 1]
    assert add(raw, queue, b"b", *opts)[36:] == suffix


def test_addjob_defaults_visible_in_show(raw, queue):
    jid = add(raw, queue)
    show = dict(zip(*[iter(raw.command(b"SHOW", jid))] * 2, strict=True))
    assert show[b"repl"] == 1
    assert show[b"retry"] == 300
    assert 86399 <= show[b"ttl"] <= 86400
    assert show[b"delay"] == 0
    assert show[b"state"] == b"queued"


@pytest.mark.parametrize(
    ("opts", "error"),
    [
        ([b"REPLICATE", 0], b"ERR REPLICATE must be between 1 and 65535"),
        ([b"REPLICATE", 65536], b"ERR REPLICATE must be between 1 and 65535"),
        ([b"REPLICATE", b"x"], b"ERR REPLICATE must be between 1 and 65535"),
        ([b"TTL", 0], b"ERR TTL must be a number > 0"),
        ([b"TTL", b"1.5"], b"ERR TTL must be a number > 0"),
        ([b"RETRY", -1], b"ERR RETRY time must be a non negative number"),
        ([b"DELAY", -1], b"ERR DELAY time must be a non negative number"),
        ([b"MAXLEN", 0], b"ERR MAXLEN must be a positive number"),
        ([b"MAXLEN", -3], b"ERR MAXLEN must be a positive number"),
        ([b"BOGUS"], b"ERR syntax error"),
        ([b"TTL"], b"ERR syntax error"),
        ([b"RETRY", 0, b"REPLICATE", 2],
         b"ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)"),
        ([b"DELAY", 10, b"TTL", 10], DELAY_TOO_LONG),
        ([b"REPLICATE", 2], NOREPL),
    ],
)  # fmt: skip
def test_addjob_option_errors(raw, queue, opts, error):
    assert raw.command(b"ADDJOB", queue, b"b", 0, *opts) == Error(error)


def test_addjob_timeout_errors_come_after_option_errors(raw, queue):
    assert raw.command(b"ADDJOB", queue, b"b", b"abc") == Error(
        b"ERR timeout is not an integer or out of range"
    )
    assert raw.command(b"ADDJOB", queue, b"b", -5) == Error(b"ERR timeout is negative")
    assert raw.command(b"ADDJOB", queue, b"b", b"abc", b"TTL", 0) == Error(
        b"ERR TTL must be a number > 0"
    )


def test_addjob_options_case_insensitive_and_last_wins(raw, queue):
    jid = add(raw, queue, b"b", b"ttl", 100, b"TtL", 200, b"async", b"delay", 5)
    show = dict(zip(*[iter(raw.command(b"SHOW", jid))] * 2, strict=True))
    assert 199 <= show[b"ttl"] <= 200
    assert show[b"delay"] == 5
    assert show[b"state"] == b"active"


def test_addjob_maxlen_and_paused(raw, queue):
    add(raw, queue)
    add(raw, queue)
    assert raw.command(b"ADDJOB", queue, b"b", 0, b"MAXLEN", 2) == Error(
        b"MAXLEN Queue is already longer than the specified MAXLEN count"
    )
    add(raw, queue, b"b", b"MAXLEN", 3)
    assert raw.command(b"PAUSE", queue, b"in") == Status(b"in")
    assert raw.command(b"ADDJOB", queue, b"b", 0) == Error(
        b"PAUSED Queue paused in input, try later"
    )
    assert raw.command(b"PAUSE", queue, b"out") == Status(b"out")
    add(raw, queue)  # pause out does not stop producers
    raw.command(b"PAUSE", queue, b"none")


def test_addjob_empty_queue_and_body(raw):
    jid = add(raw, b"", b"")
    assert raw.command(b"GETJOB", b"FROM", b"") == [[b"", jid, b""]]


def test_addjob_binary_body_round_trip(raw, queue):
    body = bytes(range(256)) * 4 + b"\r\n\x00"
    jid = add(raw, queue, body)
    assert raw.command(b"GETJOB", b"FROM", queue) == [[queue, jid, body]]


# ---------------------------------------------------------------- GETJOB


def test_getjob_reply_shapes(raw, queue):
    jid = add(raw, queue, b"hello")
    assert raw.command(b"GETJOB", b"NOHANG", b"FROM", queue) == [[queue, jid, b"hello"]]
    assert raw.command(b"NACK", jid) == 1
    assert raw.command(b"GETJOB", b"WITHCOUNTERS", b"FROM", queue) == [
        [queue, jid, b"hello", b"nacks", 1, b"additional-deliveries", 0]
    ]


def test_getjob_nohang_on_empty_is_null_array_and_creates_queue(raw, queue):
    assert raw.command(b"QSTAT", queue) is None
    raw.send(b"*4\r\n$6\r\nGETJOB\r\n$6\r\nNOHANG\r\n$4\r\nFROM\r\n$%d\r\n%s\r\n" % (
        len(queue), queue))  # fmt: skip
    assert raw.read_raw() == b"*-1\r\n"
    assert raw.command(b"QSTAT", queue)[:2] == [b"name", queue]


def test_getjob_count_round_robin(raw, queue):
    q1, q2 = queue + b"1", queue + b"2"
    for q in (q1, q2):
        for i in range(3):
            add(raw, q, b"%d" % i)
    got = raw.command(b"GETJOB", b"COUNT", 5, b"FROM", q1, q2)
    assert [(j[0], j[2]) for j in got] == [
        (q1, b"0"),
        (q2, b"0"),
        (q1, b"1"),
        (q2, b"1"),
        (q1, b"2"),
    ]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([b"FROM"], SYNTAX),
        ([b"NOHANG"], SYNTAX),
        ([b"BOGUS", b"FROM", b"q"], SYNTAX),
        ([b"TIMEOUT"], SYNTAX),
        ([b"COUNT"], SYNTAX),
        ([b"COUNT", 0, b"FROM", b"q"], Error(b"ERR COUNT must be a number greater than zero")),
        ([b"COUNT", b"x", b"FROM", b"q"], Error(b"ERR COUNT must be a number greater than zero")),
        ([b"TIMEOUT", b"x", b"FROM", b"q"],
         Error(b"ERR timeout is not an integer or out of range")),
        ([b"TIMEOUT", -1, b"FROM", b"q"], Error(b"ERR timeout is negative")),
    ],
)  # fmt: skip
def test_getjob_errors(raw, args, error):
    assert raw.command(b"GETJOB", *args) == error


def test_getjob_from_ends_options(raw, queue):
    jid = add(raw, b"NOHANG")
    assert raw.command(b"GETJOB", b"FROM", b"NOHANG") == [[b"NOHANG", jid, b"body"]]


def test_getjob_blocks_until_a_job_arrives(shared_server, raw, queue):
    results = []

    def consume():
        with RawConnection(shared_server.port) as c:
            results.append(c.command(b"GETJOB", b"COUNT", 10, b"FROM", queue))

    t = threading.Thread(target=consume)
    t.start()
    wait_for(lambda: blocked_on(raw, queue) == 1, what="consumer blocked")
    jid1 = add(raw, queue, b"one")
    add(raw, queue, b"two")
    t.join(30)
    assert results == [[[queue, jid1, b"one"]]]  # COUNT is ignored once blocked


def test_getjob_timeout_replies_null_array(raw, queue):
    raw.send(b"*5\r\n$6\r\nGETJOB\r\n$7\r\nTIMEOUT\r\n$2\r\n50\r\n$4\r\nFROM\r\n$%d\r\n%s\r\n" % (
        len(queue), queue))  # fmt: skip
    assert raw.read_raw() == b"*-1\r\n"


def test_blocked_client_keeps_its_pipelined_requests(shared_server, raw, queue):
    with RawConnection(shared_server.port) as c:
        c.send(b"*3\r\n$6\r\nGETJOB\r\n$4\r\nFROM\r\n$%d\r\n%s\r\n*1\r\n$4\r\nPING\r\n" % (
            len(queue), queue))  # fmt: skip
        wait_for(lambda: blocked_on(raw, queue) == 1, what="consumer blocked")
        jid = add(raw, queue)
        assert c.read() == [[queue, jid, b"body"]]
        assert c.read() == Status(b"PONG")


# ---------------------------------------------------------------- IDs


@pytest.mark.parametrize(
    "cmd", [b"ACKJOB", b"FASTACK", b"NACK", b"ENQUEUE", b"DEQUEUE", b"DELJOB", b"WORKING", b"SHOW"]
)
def test_bad_ids_are_rejected_before_anything_is_done(raw, queue, cmd):
    jid = add(raw, queue)
    bad = [b"x", b"D-" + b"0" * 38, b"E" + jid[1:], jid[:39], jid + b"0"]
    for b in bad:
        assert raw.command(cmd, b) == BADID
    if cmd not in (b"WORKING", b"SHOW"):
        assert raw.command(cmd, jid, b"bad") == BADID
        assert raw.command(b"QLEN", queue) == 1


@pytest.mark.parametrize("cmd", [b"ACKJOB", b"FASTACK", b"NACK", b"ENQUEUE", b"DEQUEUE", b"DELJOB"])
def test_id_list_commands_without_ids_reply_zero(raw, cmd):
    assert raw.command(cmd) == 0


def test_any_content_passes_the_id_check(raw):
    assert raw.command(b"ACKJOB", b"D-" + b"?" * 8 + b"-" + b"!" * 24 + b"-zzzz") == 0


# ---------------------------------------------------------------- ACK and friends


def test_ackjob_counts_known_unacked_jobs(raw, queue):
    a, b = add(raw, queue), add(raw, queue)
    assert raw.command(b"ACKJOB", a, b, FAKE_ID) == 2
    assert raw.command(b"SHOW", a) is None
    assert raw.command(b"ACKJOB", a) == 0
    assert raw.command(b"QLEN", queue) == 0


def test_fastack(raw, queue):
    a = add(raw, queue)
    assert raw.command(b"FASTACK", a, FAKE_ID) == 1
    assert raw.command(b"SHOW", a) is None


def test_working(raw, queue):
    jid = add(raw, queue, b"b", b"RETRY", 7)
    assert raw.command(b"WORKING", jid) == 7
    assert raw.command(b"QLEN", queue) == 0  # dequeued
    assert raw.command(b"WORKING", FAKE_ID) == Error(
        b"NOJOB Job not known in the context of this node."
    )


def test_nack_enqueue_dequeue(raw, queue):
    jid = add(raw, queue)
    assert raw.command(b"NACK", jid) == 0  # queued, not active
    assert raw.command(b"DEQUEUE", jid) == 1
    assert raw.command(b"DEQUEUE", jid) == 0
    assert raw.command(b"ENQUEUE", jid) == 1
    assert raw.command(b"QLEN", queue) == 1
    raw.command(b"GETJOB", b"FROM", queue)
    assert raw.command(b"NACK", jid, jid) == 1


def test_deljob(raw, queue):
    jid = add(raw, queue)
    assert raw.command(b"DELJOB", jid, FAKE_ID) == 1
    assert raw.command(b"QLEN", queue) == 0
    assert raw.command(b"SHOW", jid) is None


# ---------------------------------------------------------------- SHOW


def test_show_shape(raw, queue, shared_server):
    jid = add(raw, queue, b"payload", b"RETRY", 30, b"TTL", 600)
    fields = raw.command(b"SHOW", jid)
    assert len(fields) == 32  # Disque's 30, then live-copies (beyond Disque)
    names = fields[0::2]
    assert names == [b"id", b"queue", b"state", b"repl", b"ttl", b"ctime", b"delay", b"retry",
                     b"nacks", b"additional-deliveries", b"nodes-delivered", b"nodes-confirmed",
                     b"next-requeue-within", b"next-awake-within", b"body",
                     b"live-copies"]  # fmt: skip
    show = dict(zip(names, fields[1::2], strict=True))
    assert show[b"id"] == jid and show[b"queue"] == queue and show[b"body"] == b"payload"
    assert show[b"nodes-delivered"] == [raw.command(b"CLUSTER", b"MYID")]
    assert show[b"nodes-confirmed"] == []
    assert 29_000 <= show[b"next-requeue-within"] <= 30_250
    assert show[b"ctime"] > 10**18
    assert show[b"live-copies"] == 1
    # Types on the wire: integers as integers, names and strings as bulk.
    raw.send(b"*2\r\n$4\r\nSHOW\r\n$40\r\n%s\r\n" % jid)
    wire = raw.read_raw()
    assert b"$4\r\nrepl\r\n:1\r\n" in wire and b"$5\r\nretry\r\n:30\r\n" in wire


def test_show_unknown_is_null_bulk(raw):
    raw.send(b"*2\r\n$4\r\nSHOW\r\n$40\r\n%s\r\n" % FAKE_ID)
    assert raw.read_raw() == b"$-1\r\n"


def test_show_retry_zero_job_after_delivery_has_no_requeue(raw, queue):
    jid = add(raw, queue, b"b", b"RETRY", 0)
    raw.command(b"GETJOB", b"FROM", queue)
    show = dict(zip(*[iter(raw.command(b"SHOW", jid))] * 2, strict=True))
    assert show[b"next-requeue-within"] is None
    assert show[b"state"] == b"active"


# ---------------------------------------------------------------- JSCAN


def test_jscan_iterates_everything(raw, queue):
    ids = {add(raw, queue) for _ in range(30)}
    seen: set[bytes] = set()
    cursor = b"0"
    while True:
        cursor, items = raw.command(b"JSCAN", cursor, b"COUNT", 5, b"QUEUE", queue)
        assert all(isinstance(i, Status) for i in items)
        seen.update(items)
        if cursor == b"0":
            break
    assert seen == ids


def test_jscan_busyloop_state_and_reply_all(raw, queue):
    a = add(raw, queue)
    b = add(raw, queue)
    raw.command(b"DEQUEUE", b)
    cursor, items = raw.command(b"JSCAN", b"BUSYLOOP", b"QUEUE", queue, b"STATE", b"ACTIVE")
    assert cursor == b"0" and items == [b]
    _, items = raw.command(b"JSCAN", b"BUSYLOOP", b"QUEUE", queue, b"STATE", b"active",
                           b"STATE", b"queued", b"REPLY", b"all")  # fmt: skip
    assert sorted(item[1] for item in items) == sorted([a, b])
    assert all(len(item) == 32 for item in items)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([b"STATE", b"nope"], b"ERR Invalid job state name"),
        ([b"REPLY", b"some"], b"ERR Invalid REPLY type, try ID or ALL"),
        ([b"COUNT", b"x"], b"ERR value is not an integer or out of range"),
        ([b"abc"], b"ERR invalid cursor or option name"),
        ([b" 1"], b"ERR invalid cursor or option name"),
        ([b"0", b"0"], b"ERR syntax error"),
        ([b"COUNT"], b"ERR invalid cursor or option name"),
    ],
)
def test_jscan_errors(raw, args, error):
    assert raw.command(b"JSCAN", *args) == Error(error)


def test_loadjob_from_a_client(raw):
    assert raw.command(b"LOADJOB", b"x") == Error(
        b"ERR LOADJOB is a special command only processed from AOF"
    )
