"""How large a job may be, against real servers: job-max-size (a directive with a
default, refused with an error naming it, one by one and pipelined) and a job that
cannot fit in what maxmemory leaves (refused with why, the node still taking jobs
after it), and the empty timeout refused as ``abc`` is."""

from __future__ import annotations

import pytest

from disquette import Client
from disquette.client.errors import OutOfMemoryError
from tests.support.raw import Error, RawConnection, Status, encode
from tests.support.servers import running_server, wait_for


def test_job_max_size_has_a_default_and_is_settable(raw):
    assert raw.command(b"CONFIG", b"GET", b"job-max-size") == [b"job-max-size", b"16777216"]
    assert raw.command(b"CONFIG", b"SET", b"job-max-size", b"1kb") == Status(b"OK")
    try:
        assert isinstance(raw.command(b"ADDJOB", b"sized", b"x" * 1024, 0), Status)
        assert raw.command(b"ADDJOB", b"sized", b"x" * 1025, 0, b"TTL", 60) == Error(
            b"ERR job too large: its body is 1025 bytes, more than job-max-size (1024 bytes)"
        )
        # Pipelined ADDJOBs (made together by the node): the large one alone is refused.
        raw.send(
            b"".join(encode(b"ADDJOB", b"sized", body, 0) for body in (b"a", b"x" * 2000, b"b"))
        )
        first, refused, last = (raw.read() for _ in range(3))
        assert isinstance(first, Status) and isinstance(last, Status)
        assert refused == Error(
            b"ERR job too large: its body is 2000 bytes, more than job-max-size (1024 bytes)"
        )
        assert raw.command(b"CONFIG", b"SET", b"job-max-size", b"64mb") == Error(
            b"ERR Invalid argument '64mb' for CONFIG SET 'job-max-size'"
        )
    finally:
        raw.command(b"CONFIG", b"SET", b"job-max-size", b"16mb")


def test_a_job_larger_than_what_maxmemory_leaves_is_refused_with_why(tmp_path):
    """A 20 MB body on a node of 10 MB went in, and every later ADDJOB got an OOM that
    said nothing about why; now that job is refused, saying it, and the node goes on."""
    args = ["--maxmemory", "10mb", "--job-max-size", "63mb"]
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as raw:
        reply = raw.command(b"ADDJOB", b"big", b"x" * (20 << 20), 0)
        assert isinstance(reply, Error)
        assert bytes(reply).startswith(
            b"OOM job cannot fit in memory: it needs 20.00M, maxmemory (10.00M) leaves "
        )
        assert bytes(reply).endswith(b" under its 95 % limit")
        # The node goes on taking jobs (once its client cron, 10 times a second, has seen
        # that the clients' buffers no longer hold the 20 MB that arrived, as in Disque).
        wait_for(
            lambda: isinstance(raw.command(b"ADDJOB", b"big", b"small", 0), Status),
            what="a small job taken",
        )
        with (
            Client(f"127.0.0.1:{srv.port}") as client,
            pytest.raises(OutOfMemoryError, match="cannot fit"),
        ):
            client.add_job("big", b"y" * (12 << 20))


def test_an_empty_timeout_is_refused_as_abc_is(raw):
    """Disque reads an empty timeout as 0 (wait forever): ``disquette-cli -x ADDJOB q b``
    with empty input made a job; refused now, in Disque's words for ``abc``."""
    for args in ([b"ADDJOB", b"q", b"body", b""], [b"GETJOB", b"TIMEOUT", b"", b"FROM", b"q"]):
        assert raw.command(*args) == Error(b"ERR timeout is not an integer or out of range")


def test_the_python_client_takes_timeout_0_as_the_command_line_does(shared_server):
    with Client(f"127.0.0.1:{shared_server.port}") as client:
        job_id = client.add_job("zero", b"body", timeout=0)
        assert [job.id for job in client.get_jobs("zero", nohang=True)] == [job_id]
