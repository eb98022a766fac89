"""Delivery tags (GETJOB TAG, ACKJOB TAG, WORKING TAG) on real servers, with
redis-py (protocol 2) and a raw RESP connection: a reader run again with its tag
gets the same jobs back, the tag's jobs are acknowledged on every copy by name,
and bad arguments get clear errors."""

from __future__ import annotations

import redis

from tests.support.cluster import DEADLINE
from tests.support.cluster import running_cluster as cluster
from tests.support.raw import Error, RawConnection
from tests.support.servers import running_server, wait_for


def extensions(r: redis.Redis) -> dict:
    return r.info("extensions")


def test_a_tag_hands_its_jobs_back_and_acknowledges_them_by_name(tmp_path):
    with running_server(tmp_path) as srv:
        r = redis.Redis(port=srv.port, protocol=2)
        ids = [r.execute_command("ADDJOB", "tq", f"b{i}", 0).decode() for i in range(5)]
        getjob = ("GETJOB", "NOHANG", "COUNT", 3, "WITHCOUNTERS", "TAG", "spark:1:0")
        first = r.execute_command(*getjob, "FROM", "tq")
        assert [j[1].decode() for j in first] == ids[:3]
        again = r.execute_command(*getjob, "FROM", "tq")  # a retried reader
        assert [j[1].decode() for j in again] == ids[:3]
        assert r.execute_command("QLEN", "tq") == 2
        assert extensions(r)["job_tags"] == 1 and extensions(r)["job_tag_entries"] == 3
        assert r.execute_command("WORKING", "TAG", "spark:1:0") > 0
        assert r.execute_command("ACKJOB", "TAG", "spark:1:0") == 3
        assert r.execute_command("ACKJOB", "TAG", "spark:1:0") == 0
        assert extensions(r)["job_tags"] == 0
        assert r.execute_command("GETJOB", "NOHANG", "TAG", "empty", "FROM", "none") is None


def test_bad_tag_arguments_get_clear_errors(tmp_path):
    with running_server(tmp_path) as srv, RawConnection(srv.port) as raw:
        assert raw.command(b"GETJOB", b"TAG", b"t", b"FROM", b"q") == Error(
            b"ERR GETJOB TAG needs NOHANG"
        )
        long = Error(b"ERR TAG name must be 1 to 256 bytes long")
        assert raw.command(b"GETJOB", b"NOHANG", b"TAG", b"", b"FROM", b"q") == long
        assert raw.command(b"ACKJOB", b"TAG", b"x" * 257) == long
        assert raw.command(b"WORKING", b"TAG", b"") == long
        assert raw.command(b"GETJOB", b"NOHANG", b"TAG") == Error(b"ERR syntax error")
        # Disque's answer where no tag is named: TAG is not a job ID.
        assert raw.command(b"ACKJOB", b"TAG") == Error(b"BADID Invalid Job ID format.")


def test_ackjob_tag_reaches_every_copy(tmp_path):
    with cluster(tmp_path) as c:
        ids = [c.command(0, "ADDJOB", "tq", "b", 0, "REPLICATE", 3) for _ in range(4)]
        jobs = c.command(0, "GETJOB", "NOHANG", "COUNT", 10, "TAG", "t", "FROM", "tq")
        assert len(jobs) == 4
        assert c.command(0, "ACKJOB", "TAG", "t") == 4
        wait_for(lambda: all(c.acked_or_gone(i, range(3)) for i in ids), DEADLINE)
