"""The server process's command line, as disque-server's: config file, ``-`` for
standard input, ``--directive value`` options, ``include``, ``--version`` and
``--help``, and the fatal banner with exit status 1 on a bad line."""

from __future__ import annotations

import subprocess
import sys

from tests.support.raw import RawConnection
from tests.support.servers import SRC, free_port, running_server

ENV = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}


def run_server(*args: str, stdin: bytes = b"", cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "disquette.server", *args],
        input=stdin, capture_output=True, timeout=60, env=ENV, cwd=cwd,
    )  # fmt: skip


def test_version_and_help():
    version = run_server("--version")
    assert version.returncode == 0
    assert version.stdout.decode().startswith("Disque server v=1.0-rc1")
    assert run_server("-v").stdout == version.stdout
    usage = run_server("--help")
    assert usage.returncode == 1
    assert b"Usage:" in usage.stderr and b"--port" in usage.stderr


def test_bad_option_prints_the_fatal_banner_and_exits_1(tmp_path):
    result = run_server("--port", "99999", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.decode() == (
        "\n*** FATAL CONFIG FILE ERROR ***\n"
        "Reading the command line, at option --port\n"  # beyond Disque: the command line
        ">>> 'port \"99999\"'\n"  # option values are appended quoted, as Redis does
        "Invalid port: port '99999' is out of range; accepted: a whole number from 0 to 65535\n"
    )


def test_a_size_it_cannot_read_stops_the_start(tmp_path):
    """``--maxmemory 100MBs`` was 100 bytes, silently, in the file as on the command
    line; it stops the start now, naming the directive, the value and what is read."""
    conf = tmp_path / "disque.conf"
    conf.write_text("port 7711\nmaxmemory 100MBs\n")
    for args in (["--maxmemory", "100MBs"], [str(conf)]):
        result = run_server(*args, cwd=tmp_path)
        assert result.returncode == 1
        assert (
            "maxmemory '100MBs' is not a size; accepted: a number of bytes, or a number with a "
            "unit: k (1000), kb (1024), m, mb, g or gb, in any case (such as 100mb), above 0\n"
        ) in result.stderr.decode()
    assert f"Reading the configuration file {conf}, at line 2\n" in result.stderr.decode()


def test_bad_line_in_a_file_names_its_line(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text("# comment\nport 7711\nmaxmemory-policy sometimes\n")
    result = run_server(str(conf), cwd=tmp_path)
    assert result.returncode == 1
    assert "at line 3\n>>> 'maxmemory-policy sometimes'\nInvalid maxmemory policy" in (
        result.stderr.decode()
    )


def test_unknown_directive_and_unbalanced_quotes(tmp_path):
    result = run_server("--maxmemroy", "1gb", cwd=tmp_path)
    assert result.returncode == 1
    assert (
        "Bad directive or wrong number of arguments: unknown directive 'maxmemroy'; "
        "did you mean 'maxmemory'?\n"
    ) in result.stderr.decode()
    conf = tmp_path / "q.conf"
    conf.write_text('requirepass "abc\n')
    result = run_server(str(conf), cwd=tmp_path)
    assert "Unbalanced quotes in configuration line" in result.stderr.decode()


def test_missing_config_file(tmp_path):
    result = run_server(str(tmp_path / "nope.conf"), cwd=tmp_path)
    assert result.returncode == 1
    assert "Fatal error, can't open config file" in (result.stdout + result.stderr).decode()


def test_port_must_leave_room_for_the_bus(tmp_path):
    result = run_server("--port", "60000", cwd=tmp_path)
    assert result.returncode == 1
    assert "must be <= 55535" in result.stdout.decode()


def test_config_file_include_and_option_override(tmp_path):
    port = free_port()
    (tmp_path / "extra.conf").write_text("requirepass sesame\nhz 20\n")
    conf = tmp_path / "disque.conf"
    conf.write_text(f"port 1\ninclude {tmp_path / 'extra.conf'}\nmaxclients 77\n")
    with running_server(tmp_path, config_file=conf, port=port) as srv, RawConnection(srv.port) as c:
        assert c.command(b"AUTH", b"sesame") == b"OK"
        assert c.command(b"CONFIG", b"GET", b"hz") == [b"hz", b"20"]
        assert c.command(b"CONFIG", b"GET", b"maxclients") == [b"maxclients", b"77"]
        assert c.command(b"CONFIG", b"GET", b"port") == [b"port", str(port).encode()]
        assert f"config_file:{conf}" in c.command(b"INFO", b"server").decode()


def test_config_from_standard_input(tmp_path):
    stdin = b"maxclients 55\nslowlog-max-len 7\n"
    with running_server(tmp_path, stdin=stdin) as srv, RawConnection(srv.port) as c:
        assert c.command(b"CONFIG", b"GET", b"maxclients") == [b"maxclients", b"55"]
        assert c.command(b"CONFIG", b"GET", b"slowlog-max-len") == [b"slowlog-max-len", b"7"]


def test_config_rewrite_round_trip_across_a_restart(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text("# my settings\nhz 10\n")
    with running_server(tmp_path, config_file=conf) as srv, RawConnection(srv.port) as c:
        assert c.command(b"CONFIG", b"SET", b"hz", b"25") == b"OK"
        assert c.command(b"CONFIG", b"SET", b"maxmemory", b"2mb") == b"OK"
        assert c.command(b"CONFIG", b"REWRITE") == b"OK"
        port = srv.port
    text = conf.read_text()
    assert text.startswith("# my settings\nhz 25\n")
    assert "maxmemory 2mb" in text
    with running_server(tmp_path, config_file=conf, port=port) as srv, RawConnection(srv.port) as c:
        assert c.command(b"CONFIG", b"GET", b"hz") == [b"hz", b"25"]
        assert c.command(b"CONFIG", b"GET", b"maxmemory") == [b"maxmemory", b"2097152"]


def test_the_unix_socket_serves_beside_the_port(tmp_path):
    """Every listener (port, unixsocket, tls-port) starts serving at once, the socket too."""
    path = tmp_path / "disque.sock"
    with running_server(tmp_path, ["--unixsocket", str(path)]) as srv:
        over_socket = subprocess.run(["redis-cli", "-s", str(path), "ADDJOB", "q", "x", "0"],
                                     capture_output=True, text=True, timeout=30)  # fmt: skip
        assert over_socket.stdout.startswith("D-"), over_socket
        with RawConnection(srv.port) as c:
            assert c.command(b"QLEN", b"q") == 1
