"""Versioned files on real processes: the AOF, nodes.conf, the aclfile, the spill log.

Each file this release writes says its format (core/aof.py, core/membership.py,
commands/acl.py, server/spill.py); a file of the previous release (no format) is
read; a file of a newer format stops the start with an error naming both versions,
before anything in it is read; ``disquette check-aof`` reports an AOF's format and
will not cut one of a newer format.
"""

from __future__ import annotations

import os
import subprocess
import sys

from disquette import __version__
from disquette.core.aof import FORMAT_RECORD, deljob_record, format_id
from tests.support.raw import RawConnection
from tests.support.servers import SRC, ServerProcess, running_server

AOF = "disque.aof"


def check_aof(path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-m", "disquette.cli.main", "check-aof", "--fix", "-y", str(path)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


def refused(tmp_path, args: list[str]) -> str:
    """Start a node that must refuse to start; its log."""
    server = ServerProcess(tmp_path, args)
    assert server.proc.wait(60) == 1
    server.stop()
    return server.log()


def test_the_aof_says_its_format_and_check_aof_reports_it(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        jid = c.command(b"ADDJOB", b"q", b"x", 0)
        assert c.command(b"BGREWRITEAOF").startswith(b"Background append only file")
    data = (tmp_path / AOF).read_bytes()
    assert data.startswith(FORMAT_RECORD)  # (the rewrite's file too)
    report = check_aof(tmp_path / AOF)
    assert report.returncode == 0 and "AOF format: 2 (disquette 0.2.0 or later" in report.stdout
    # Without its format record it is the previous release's file: read, and format 1.
    (tmp_path / AOF).write_bytes(data[len(FORMAT_RECORD) :])
    assert "AOF format: 1 (no format record" in check_aof(tmp_path / AOF).stdout
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as c:
        assert c.command(b"SHOW", jid) is not None


def test_a_newer_aof_stops_the_start_and_is_never_cut(tmp_path):
    newer = deljob_record(format_id(3))
    (tmp_path / AOF).write_bytes(newer)
    log = refused(tmp_path, ["--appendonly", "yes"])
    assert "in AOF format 3, written by a newer release than this one" in log
    assert f"(disquette {__version__} reads AOF formats 1 to 2)" in log
    report = check_aof(tmp_path / AOF)
    assert report.returncode == 1 and "AOF format: 3 (a release newer than" in report.stdout
    assert "not damage: --fix would lose jobs" in report.stdout
    assert (tmp_path / AOF).read_bytes() == newer  # not cut


def test_nodes_conf_says_its_format_and_a_newer_one_stops_the_start(tmp_path):
    with running_server(tmp_path):
        pass
    conf = (tmp_path / "nodes.conf").read_bytes()
    assert conf.startswith(b"vars nodes-conf-format 2 %s\n" % __version__.encode())
    (tmp_path / "nodes.conf").write_bytes(conf.replace(b"format 2 ", b"format 3 "))
    log = refused(tmp_path, [])
    assert "the cluster config file is in nodes.conf format 3, written by disquette" in log
    assert f"this release (disquette {__version__}) reads formats 1 to 2" in log


def test_the_aclfile_says_its_format_and_a_newer_one_stops_the_start(tmp_path):
    path = tmp_path / "users.acl"
    path.write_text("user seeded on nopass +ping\n")  # the previous release's (no format)
    with running_server(tmp_path, ["--aclfile", str(path)]) as srv, srv.client() as c:
        assert c.execute_command("ACL", "SAVE") == b"OK"
    text = path.read_text()
    assert text.startswith(f"# disquette aclfile format 2 (disquette {__version__})\n")
    assert "user seeded on nopass" in text
    newer = text.replace(f"format 2 (disquette {__version__})", "format 3 (disquette 9.9.9)")
    path.write_text(newer)
    log = refused(tmp_path, ["--aclfile", str(path)])
    assert "users.acl:1: the file is in aclfile format 3, written by disquette 9.9.9" in log


def test_the_spill_log_says_its_format(tmp_path):
    args = ["--flow-to-disk", "yes", "--flow-to-disk-dir", "spill"]
    with running_server(tmp_path, args):
        text = (tmp_path / "spill" / "spill-format").read_text()
        assert text == f"disquette spill log format 2 (disquette {__version__})\n"
    assert not (tmp_path / "spill" / "spill-format").exists()  # gone with the segments
