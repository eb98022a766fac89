"""Redis tooling works unchanged: redis-cli (one-shot, inline and pipe modes) and
redis-benchmark with Disque commands, against a real server."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.raw import RawConnection


@pytest.fixture(autouse=True)
def _redis_tools() -> None:
    missing = [t for t in ("redis-cli", "redis-benchmark") if shutil.which(t) is None]
    assert not missing, f"{missing} not installed: `make tools` (run by `make test`) installs them"


def cli(port: int, *args: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(
        ["redis-cli", "-p", str(port), *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=True,
    )
    return result.stdout.decode()


def test_redis_cli_job_round_trip(shared_server):
    port = shared_server.port
    job_id = cli(port, "ADDJOB", "cliq", "hello world", "0").strip()
    assert job_id.startswith("D-") and len(job_id) == 40
    assert cli(port, "QLEN", "cliq").strip() == "1"
    assert cli(port, "--raw", "GETJOB", "FROM", "cliq").split("\n")[:3] == [
        "cliq",
        job_id,
        "hello world",
    ]
    assert cli(port, "ACKJOB", job_id).strip() == "1"
    assert cli(port, "SHOW", job_id).strip() == ""  # nil in --no-raw mode prints nothing


def test_redis_cli_formats_disque_replies(shared_server):
    port = shared_server.port
    job_id = cli(port, "ADDJOB", "fmtq", "x", "0").strip()
    shown = cli(port, "--no-raw", "SHOW", job_id)
    assert ' 1) "id"' in shown and '"nodes-delivered"' in shown
    assert cli(port, "--no-raw", "HELLO").startswith("1) (integer) 1")
    assert "(error) BADID Invalid Job ID format." in cli(port, "--no-raw", "ACKJOB", "nope")


def test_redis_cli_reads_commands_from_stdin(shared_server):
    # (redis-cli --pipe needs ECHO, which Disque does not have; plain stdin works.)
    commands = b"".join(b"ADDJOB stdinq job-%d 0\n" % i for i in range(200))
    out = cli(shared_server.port, stdin=commands)
    assert sum(line.startswith("D-") for line in out.splitlines()) == 200
    with RawConnection(shared_server.port) as c:
        assert c.command(b"QLEN", b"stdinq") == 200


def test_redis_benchmark_with_disque_commands(shared_server):
    port = str(shared_server.port)
    subprocess.run(
        ["redis-benchmark", "-p", port, "-c", "10", "-n", "2000", "-q",
         "ADDJOB", "benchq", "payload", "0"],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    with RawConnection(shared_server.port) as c:
        assert c.command(b"QLEN", b"benchq") == 2000
    subprocess.run(
        ["redis-benchmark", "-p", port, "-c", "10", "-n", "2000", "-P", "16", "-q",
         "GETJOB", "NOHANG", "FROM", "benchq"],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    with RawConnection(shared_server.port) as c:
        assert c.command(b"QLEN", b"benchq") == 0
        assert c.command(b"QSTAT", b"benchq")[17] == 2000  # jobs-out


def test_redis_benchmark_ping_suite(shared_server):
    result = subprocess.run(
        ["redis-benchmark", "-p", str(shared_server.port), "-c", "20", "-n", "5000",
         "-t", "ping", "-q"],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    out = result.stdout.decode(errors="replace")
    assert "PING_INLINE" in out and "PING_MBULK" in out
