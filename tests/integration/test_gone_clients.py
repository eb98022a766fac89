"""A blocked client whose connection has ended is never answered (issue 41).

A consumer blocks in GETJOB (or WAITJOB), then its connection ends: closed (end of
file) or reset. A producer's ADDJOB (or ACKJOB) follows at once, with no pause, so
the server often reads the end of the consumer's connection and the producer's
request in the same event-loop turn. Disque frees a client as soon as its read
returns 0; so must disquette: the job stays queued for the next consumer (SHOW
``queued``, never handed out), and a WAITJOB answer is written nowhere (the node's
output byte count does not move for it). Each case is tried many times, because
the race it guards against lost about 8 of 10 tries. A consumer closed by the node
itself (CLIENT KILL, in the same read as the ADDJOB that follows) is forgotten as
it is closed: its socket ends with nothing written to it.
"""

from __future__ import annotations

import socket
import struct

import pytest

from tests.support.raw import RawConnection, Status, encode
from tests.support.servers import wait_for

TRIES = 40


def _end(conn: RawConnection, how: str) -> None:
    """End a connection: ``close`` (end of file) or ``reset`` (RST, SO_LINGER 0)."""
    if how == "reset":
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def _blocked_on(raw: RawConnection, queue: bytes) -> int:
    stat = raw.command(b"QSTAT", queue)
    return 0 if stat is None else stat[9]


def _info(raw: RawConnection, section: bytes) -> tuple[dict[bytes, bytes], int]:
    """An INFO section's fields, and how many bytes its reply took on the wire."""
    text = raw.command(b"INFO", section)
    fields = dict(line.split(b":", 1) for line in text.split(b"\r\n") if b":" in line)
    return fields, len(b"$%d\r\n\r\n" % len(text)) + len(text)


def _waiters(raw: RawConnection) -> int:
    return int(_info(raw, b"extensions")[0][b"waitjob_clients"])


@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize("count", [None, 3], ids=["getjob", "getjob-count"])
def test_a_job_never_goes_to_a_consumer_that_left(shared_server, raw, queue, how, count):
    getjob = [b"GETJOB"] + ([b"COUNT", count] if count else []) + [b"FROM", queue]
    with RawConnection(shared_server.port) as producer:
        handed = []
        for _ in range(TRIES):
            consumer = RawConnection(shared_server.port)
            consumer.send(encode(*getjob))
            wait_for(lambda: _blocked_on(raw, queue) == 1, what="consumer blocked")
            _end(consumer, how)
            job_id = producer.command(b"ADDJOB", queue, b"x", 0, b"RETRY", 2)
            assert isinstance(job_id, Status), job_id
            handed += _handed(raw, queue, job_id)
            wait_for(lambda: _blocked_on(raw, queue) == 0, what="consumer gone")
        assert handed == []


def _handed(raw: RawConnection, queue: bytes, job_id: bytes) -> list[bytes]:
    """The job's state if it left its queue (handed to someone), then deleted."""
    show = raw.command(b"SHOW", job_id)
    fields = dict(zip(show[::2], show[1::2], strict=True))
    handed = fields[b"state"] != b"queued" or raw.command(b"QLEN", queue) != 1
    raw.command(b"DELJOB", job_id)
    return [fields[b"state"]] if handed else []


def test_a_job_never_goes_to_a_consumer_killed_by_client_kill(shared_server, raw, queue):
    """CLIENT KILL then ADDJOB in one write: the node runs both in one turn, and the
    killed consumer's socket ends without a reply."""
    with RawConnection(shared_server.port) as producer:
        handed = []
        for _ in range(TRIES):
            consumer = RawConnection(shared_server.port)
            consumer.send(encode(b"GETJOB", b"FROM", queue))
            wait_for(lambda: _blocked_on(raw, queue) == 1, what="consumer blocked")
            host, port = consumer.sock.getsockname()[:2]
            kill = encode(b"CLIENT", b"KILL", b"ADDR", f"{host}:{port}".encode())
            producer.send(kill + encode(b"ADDJOB", queue, b"x", 0, b"RETRY", 2))
            assert producer.read() == 1
            job_id = producer.read()
            assert isinstance(job_id, Status), job_id
            assert consumer.sock.recv(4096) == b""  # closed, and nothing written to it
            consumer.close()
            handed += _handed(raw, queue, job_id)
        assert handed == []


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_waitjob_answer_never_goes_to_a_waiter_that_left(shared_server, raw, queue, how):
    with RawConnection(shared_server.port) as producer:
        written = []
        for _ in range(TRIES):
            job_id = bytes(producer.command(b"ADDJOB", queue, b"x", 0))
            waiter = RawConnection(shared_server.port)
            waiter.send(encode(b"WAITJOB", job_id))
            wait_for(lambda: _waiters(raw) == 1, what="waiter blocked")
            fields, info_bytes = _info(raw, b"stats")
            _end(waiter, how)
            assert producer.command(b"ACKJOB", job_id) == 1
            # Written since: that INFO's reply and ACKJOB's, nothing to the waiter.
            after = int(_info(raw, b"stats")[0][b"total_net_output_bytes"])
            written.append(after - int(fields[b"total_net_output_bytes"]) - info_bytes - 4)
            wait_for(lambda: _waiters(raw) == 0, what="waiter gone")
        assert set(written) == {0}
