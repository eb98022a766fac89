"""``disquette-cli`` as a real process, compared with redis-cli where they overlap."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from disquette import Client
from disquette.cli.syntax import NAMES
from tests.support.servers import SRC, free_port, running_server, wait_for

REDIS_CLI = shutil.which("redis-cli")
ENV = dict(os.environ, PYTHONPATH=str(SRC))


def cli(
    port: int, *args: str, input: bytes | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "disquette.cli.cli_tool", "-p", str(port), *args],
        input=input if input is not None else b"",
        capture_output=True,
        env=ENV if env is None else env,
        timeout=60,
        check=False,
    )


def redis_cli(port: int, *args: str) -> bytes:
    assert REDIS_CLI, "these tests compare with redis-cli, which must be installed"
    return subprocess.run(
        [REDIS_CLI, "-p", str(port), *args], capture_output=True, timeout=60, check=True
    ).stdout


@pytest.fixture(scope="module")
def port(shared_server) -> int:
    """The shared node, with a queue of awkward bodies for the comparisons."""
    r = shared_server.client()
    for body in (b"plain", b'quote" back\\slash', b"\x00\x01\xff\n\r\t", "été".encode()):
        r.execute_command("ADDJOB", "cmp", body, 0)
    r.close()
    return shared_server.port


COMPARED = [
    ["ping"],
    ["ping", "hello world"],
    ["qlen", "cmp"],
    ["qpeek", "cmp", "10"],
    ["qpeek", "cmp", "-2"],
    ["qpeek", "nothing", "1"],
    ["getjob", "nohang", "from", "nothing-here"],
    ["show", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"],
    ["hello"],
    ["nosuchcommand", "x"],
    ["ackjob", "bad-id"],
    ["info", "jobs"],
    ["cluster", "nodes"],
    ["pause", "cmp", "state"],
]


@pytest.mark.parametrize("mode", ["--raw", "--no-raw"])
@pytest.mark.parametrize("command", COMPARED, ids=" ".join)
def test_replies_print_as_redis_cli_prints_them(port, mode, command):
    ours = cli(port, mode, *command)
    assert ours.returncode == 0
    assert ours.stdout == redis_cli(port, mode, *command)


def test_output_is_raw_when_not_a_terminal(port):
    assert cli(port, "qlen", "cmp").stdout == b"4\n"
    assert cli(port, "--no-raw", "qlen", "cmp").stdout == b"(integer) 4\n"


def test_commands_from_stdin_one_per_line(port):
    lines = b'ping\n\nqlen cmp\n"unbalanced\nping "two words"\n2 ping\nnosuch\n'
    result = cli(port, input=lines)
    assert result.returncode == 0
    assert result.stdout == redis_cli_lines(port, lines)


def redis_cli_lines(port: int, lines: bytes) -> bytes:
    assert REDIS_CLI
    return subprocess.run(
        [REDIS_CLI, "-p", str(port)], input=lines, capture_output=True, timeout=60, check=True
    ).stdout


def test_x_repeat_and_interval(port):
    assert cli(port, "-x", "ping", input=b"from stdin").stdout == b"from stdin\n"
    assert cli(port, "-r", "3", "-i", "0.01", "ping").stdout == b"PONG\n" * 3


def test_connection_refused():
    result = cli(1, "ping")
    assert result.returncode == 1
    assert result.stderr == (
        b"Could not connect to Disque at 127.0.0.1:1: "
        b"connection refused (no node listens on that port)\n"
    )


def test_the_http_port_and_the_bus_port_are_named(tmp_path):
    """A client pointed at a node's other ports said ``Server closed the connection``."""
    with running_server(tmp_path, http=True) as srv:
        http = cli(srv.http_port, "ping")
        assert http.returncode == 1
        assert http.stderr.decode() == (
            f"Error: 127.0.0.1:{srv.http_port} answered in HTTP: it is a node's HTTP port (the "
            "dashboard and the JSON API), not its client port (make run puts the HTTP port on "
            "the client port + 1000)\n"
        )
        bus = cli(srv.port + 10000, "ping")
        assert bus.returncode == 1
        assert bus.stderr.decode() == (
            f"Error: 127.0.0.1:{srv.port + 10000} closed the connection without a reply: it is "
            "not a Disque client port (a node's cluster bus, on its client port + 10000, closes "
            "what is not the bus's)\n"
        )


def test_error_replies_get_hints_and_exit_0_unless_e(port):
    """The reply keeps Disque's words (its clients may match them); the CLI says which
    argument was wrong, on standard error, and exits 0 as redis-cli does, 1 with -e."""
    result = cli(port, "ADDJOB", "orders", "x", "0", "RETRYY", "5")
    assert result.returncode == 0
    assert (
        result.stdout
        == b"ERR syntax error\n\n"
        == redis_cli(port, "ADDJOB", "orders", "x", "0", "RETRYY", "5")
    )
    assert result.stderr.decode().startswith(
        "hint: unknown option 'RETRYY' for ADDJOB (did you mean RETRY?)\n"
        "hint: usage: ADDJOB queue job ms-timeout [REPLICATE count] "
    )
    assert cli(port, "-e", "ADDJOB", "orders", "x", "0", "RETRYY", "5").returncode == 1
    assert cli(port, "-e", "PING").returncode == 0
    forgot = cli(port, "GETJOB", "orders")
    assert forgot.stderr.decode().startswith(
        "hint: GETJOB needs FROM before the queue names: GETJOB [options] FROM queue ...\n"
    )
    refused = cli(port, "CONFIG", "SET", "maxmemory", "100MBs")
    assert refused.stdout == b"ERR Invalid argument '100MBs' for CONFIG SET 'maxmemory'\n\n"
    assert refused.stderr.decode().startswith("hint: maxmemory '100MBs' is not a size; accepted: ")
    typo = cli(port, "CONFIG", "SET", "maxmemroy", "1gb")
    assert typo.stderr == (
        b"hint: maxmemroy is not a parameter CONFIG SET knows (did you mean maxmemory?)\n"
    )
    assert cli(port, "ADDJOBS", "q").stderr == b"hint: no command ADDJOBS (did you mean ADDJOB?)\n"


def test_options_after_from_are_queue_names_with_a_warning(port):
    cli(port, "ADDJOB", "warned", "x", "0")
    result = cli(port, "GETJOB", "FROM", "warned", "TIMEOUT", "100")
    assert result.stdout.startswith(b"warned\n")  # served all the same, as Disque does
    assert result.stderr == (
        b"warning: 'TIMEOUT' after FROM: GETJOB reads every word after FROM as a queue name "
        b"(as Disque does); put the options before FROM\n"
    )


def test_x_reads_addjobs_body(port):
    """-x appends standard input as the last argument, which for ADDJOB is the timeout:
    for ADDJOB it is the body instead. An empty timeout is refused, as abc is."""
    result = cli(port, "-x", "ADDJOB", "from-stdin", "0", input=b"a body\nof two lines")
    job_id = result.stdout.strip().decode()
    assert job_id.startswith("D-"), result
    with Client(f"127.0.0.1:{port}") as client:
        got = client.get_jobs("from-stdin", nohang=True)
    assert [(job.id, job.body) for job in got] == [(job_id, b"a body\nof two lines")]
    empty = cli(port, "ADDJOB", "from-stdin", "body", "")
    assert empty.stdout == b"ERR timeout is not an integer or out of range\n\n"
    tagged = cli(port, "-X", "BODY", "ADDJOB", "from-stdin", "BODY", "0", input=b"tagged")
    assert tagged.stdout.startswith(b"D-")


def test_shutdown_prints_nothing_and_succeeds_as_redis_cli_does(tmp_path):
    for name, run in (("ours", cli), ("redis-cli", None)):
        (tmp_path / name).mkdir()
        with running_server(tmp_path / name) as srv:
            if run is None:
                assert REDIS_CLI
                result = subprocess.run(
                    [REDIS_CLI, "-p", str(srv.port), "SHUTDOWN"],
                    capture_output=True, timeout=60, check=False,
                )  # fmt: skip
            else:
                result = run(srv.port, "SHUTDOWN")
            assert (result.returncode, result.stdout, result.stderr) == (0, b"", b""), name
            srv.proc.wait(30)


def test_password_option_warns_and_auth_failure_is_reported(port):
    result = cli(port, "-a", "pw", "ping")
    assert b"Warning: Using a password with '-a'" in result.stderr
    assert b"AUTH failed: ERR Client sent AUTH, but no password is set" in result.stderr
    assert result.stdout == b"PONG\n"
    assert b"Warning" not in cli(port, "-a", "pw", "--no-auth-warning", "ping").stderr


def test_host_option(port):
    assert cli(port, "-h", "127.0.0.1", "ping").stdout == b"PONG\n"
    elsewhere = cli(port, "-h", "127.0.0.2", "ping")  # the node binds 127.0.0.1 only
    assert elsewhere.returncode == 1
    assert elsewhere.stderr.startswith(f"Could not connect to Disque at 127.0.0.2:{port}".encode())


def test_password_opens_a_protected_node(tmp_path):
    with running_server(tmp_path, ["--requirepass", "s3cret"]) as srv:
        assert b"NOAUTH" in cli(srv.port, "ping").stdout
        authed = cli(srv.port, "-a", "s3cret", "ping")
        assert (authed.returncode, authed.stdout) == (0, b"PONG\n")
        from_env = cli(srv.port, "ping", env=dict(ENV, DISQUETTECLI_AUTH="s3cret"))
        assert (from_env.stdout, from_env.stderr) == (b"PONG\n", b"")  # no -a, no warning
        options = ("-a", "s3cret", "--no-auth-warning")
        added = cli(srv.port, *options, "--add-jobs", "locked", input=b"a\nb\n")
        assert added.returncode == 0, added.stderr
        assert cli(srv.port, *options, "--drain", "locked").stdout == b"a\nb\n"
        stat = cli(srv.port, *options, "--stat", "-r", "1").stdout.decode().splitlines()
        assert stat[1].split()[:2] == [f"127.0.0.1:{srv.port}", "0"]


def test_help_and_version(port):
    assert b"Usage: disquette-cli [OPTIONS]" in cli(port, "--help").stdout
    assert cli(port, "--version").stdout.startswith(b"disquette-cli ")


def run_in_pty(
    argv: list[str], script: list[tuple[bytes, bytes | Callable[[], bytes]]], env: dict
) -> bytes:
    """Run ``argv`` on a terminal; for each (wait_for_text, then_type) step, wait for the
    text to appear after the previous step's typing, then type (a callable is called
    first and returns what to type)."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execvpe(argv[0], argv, env)
    out = b""
    try:
        for expected, typed in script:
            deadline = time.monotonic() + 60
            start = len(out)
            while expected not in out[start:]:
                assert time.monotonic() < deadline, f"no {expected!r} in {out!r}"
                ready, _, _ = select.select([fd], [], [], 0.1)
                if ready:
                    try:
                        out += os.read(fd, 4096)
                    except OSError:
                        break
            os.write(fd, typed() if callable(typed) else typed)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    return out


def test_interactive_prompt_formats_and_keeps_history(port, tmp_path):
    history = tmp_path / "history"
    env = dict(ENV, DISQUETTECLI_HISTFILE=str(history))
    prompt = f"127.0.0.1:{port}> ".encode()
    out = run_in_pty(
        [sys.executable, "-m", "disquette.cli.cli_tool", "-p", str(port)],
        [
            (prompt, b"qlen cmp\r"),
            (b"(integer) 4", b"hello\r"),
            (b'4) "1"', b"quit\r"),
        ],
        env,
    )
    assert b"(integer) 4" in out
    assert b'2) "' in out and b"3) 1) " in out  # nested arrays, indented like redis-cli
    assert history.read_text().splitlines()[-3:] == ["qlen cmp", "hello", "quit"]


def test_interactive_prompt_reconnects_when_the_node_comes_back(tmp_path):
    port = free_port()
    prompt = f"127.0.0.1:{port}> ".encode()
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(running_server(tmp_path / "first", port=port))

        def stop_node() -> bytes:
            first.stop()
            return b"ping\r"

        def start_again() -> bytes:
            stack.enter_context(running_server(tmp_path / "second", port=port))
            return b"ping again\r"

        out = run_in_pty(
            [sys.executable, "-m", "disquette.cli.cli_tool", "-p", str(port)],
            [
                (prompt, b"ping\r"),
                (b"PONG", stop_node),
                (b"not connected> ", start_again),
                (b'"again"', b"quit\r"),
            ],
            dict(ENV, DISQUETTECLI_HISTFILE=os.devnull),
        )
    assert f"Error: the node at 127.0.0.1:{port} closed the connection".encode() in out
    assert out.count(b"PONG") == 1  # the ping after the stop did not get one


def test_stat_prints_a_line_per_node_per_interval(port):
    result = cli(port, "--stat", "-r", "3", "-i", "0.05")
    lines = result.stdout.decode().splitlines()
    assert lines[0].split() == [
        "node",
        "jobs",
        "queues",
        "mem",
        "clients",
        "blocked",
        "requests",
        "ops/s",
    ]
    assert len(lines) == 4
    assert all(line.startswith(f"127.0.0.1:{port}") for line in lines[1:])
    assert "(+" in lines[2]


def test_pipe_sends_protocol_or_lines(port):
    data = b"ping\n*2\r\n$4\r\nQLEN\r\n$3\r\ncmp\r\nnosuch\n"
    result = cli(port, "--pipe", input=data)
    assert result.returncode == 1
    assert result.stderr == b"ERR unknown command 'nosuch'\nerrors: 1, replies: 3\n"


def test_add_jobs_and_drain(port, tmp_path):
    bodies = [b"job %d" % n for n in range(3000)]
    result = cli(port, "--add-jobs", "bulk", "--retry", "30", input=b"\n".join(bodies) + b"\n")
    assert result.returncode == 0
    assert result.stderr.startswith(b"adding to bulk: 3,000 jobs in ")
    assert b"\r" not in result.stderr  # no progress bar off a terminal
    source = tmp_path / "bodies.txt"
    source.write_bytes(b"from file\r\nsecond\n")
    assert cli(port, "--add-jobs", "bulk", "--input", str(source)).returncode == 0
    assert cli(port, "qlen", "bulk").stdout == b"3002\n"
    drained = cli(port, "--drain", "bulk")
    assert drained.returncode == 0
    assert drained.stdout.splitlines() == [*bodies, b"from file", b"second"]
    assert drained.stderr.startswith(b"draining bulk: 3,002 jobs")
    assert cli(port, "qlen", "bulk").stdout == b"0\n"


def test_add_jobs_reports_an_error_and_what_was_added(port):
    result = cli(port, "--add-jobs", "capped", "--maxlen", "2", input=b"a\nb\nc\nd\n")
    assert result.returncode == 1
    assert b"added 2 jobs to capped, then: MAXLEN" in result.stderr


def test_progress_bar_on_a_terminal(port, tmp_path):
    source = tmp_path / "bodies.txt"
    source.write_text("\n".join(f"body {n}" for n in range(50000)))
    out = run_in_pty(
        ["/bin/sh", "-c",
         f"{sys.executable} -m disquette.cli.cli_tool -p {port} --add-jobs bar --async "
         f"--window 8 < {source}"],
        [],
        ENV,
    )  # fmt: skip
    assert b"adding to bar: 50,000 jobs" in out
    assert re.search(rb"\radding to bar +[\d,]+ jobs +[\d,]+/s", out)  # the bar, drawn in place
    out = run_in_pty(
        ["/bin/sh", "-c",
         f"{sys.executable} -m disquette.cli.cli_tool -p {port} --drain bar > /dev/null"],
        [],
        ENV,
    )  # fmt: skip
    assert re.search(rb"\rdraining bar +\[[#.]+\] +\d+%  [\d,]+/50,000 jobs", out)
    assert b"draining bar: 50,000 jobs" in out


def test_monitor_streams(port, shared_server):
    proc = subprocess.Popen(
        [sys.executable, "-m", "disquette.cli.cli_tool", "-p", str(port), "monitor"],
        stdout=subprocess.PIPE,
        env=ENV,
    )
    try:
        first = proc.stdout.readline()
        assert first == b"OK\n"

        def seen() -> bool:
            r = shared_server.client()
            r.execute_command("QLEN", "monitored")
            r.close()
            ready, _, _ = select.select([proc.stdout], [], [], 0.1)
            return bool(ready) and b'"QLEN" "monitored"' in proc.stdout.readline()

        wait_for(seen, what="a monitored command")
    finally:
        proc.kill()
        proc.wait()


def test_help_for_a_command_and_the_extensions(port):
    result = cli(port, input=b"help qpolicy set\nhelp ADDJOB\nhelp nosuch\n")
    assert result.returncode == 0
    out = result.stdout.decode()
    assert "\n  QPOLICY SET name pattern [REPLICATE count]" in out and "[MAX-NACKS count]" in out
    assert "[PRIORITY 0-9] [DEDUP key]" in out
    assert "no help for 'nosuch'" in out


def test_add_jobs_with_a_priority_and_dedup_keys(port):
    result = cli(port, "--add-jobs", "ranked", "--priority", "7", "--dedup", input=b"a\nb\n")
    assert result.returncode == 0
    peeked = cli(port, "--raw", "qpeek", "ranked", "2").stdout.split(b"\n")
    job_id = peeked[1].decode()
    shown = cli(port, "--raw", "show", job_id).stdout.split(b"\n")
    fields = dict(zip(shown[::2], shown[1::2], strict=False))
    assert fields[b"priority"] == b"7" and len(fields[b"dedup"]) == 32


def test_add_jobs_with_a_backoff(port):
    result = cli(port, "--add-jobs", "backing-off", "--backoff", "fixed:600", input=b"a\n")
    assert result.returncode == 0
    with Client(f"127.0.0.1:{port}") as c:
        (job,) = c.get_jobs("backing-off", timeout=10)
        c.nack(job)
        assert c.get_jobs("backing-off", nohang=True) == []  # postponed by its backoff
        assert c.show(job.id).state == "active"
        c.ack(job)
    bad = cli(port, "--add-jobs", "backing-off", "--backoff", "linear:3", input=b"a\n")
    assert bad.returncode == 2 and b"invalid backoff value: 'linear:3'" in bad.stderr


def test_the_help_table_knows_every_command_of_the_node(port):
    with Client(f"127.0.0.1:{port}") as c:
        names = {entry[0].decode().upper() for entry in c.execute("COMMAND")}
    assert names - set(NAMES) == set()


def test_help_for_the_coordination_commands(port):
    result = cli(port, input=b"help joblog\nhelp working\nhelp ackjob\nhelp waitjob\n")
    out = result.stdout.decode()
    assert "\n  JOBLOG id\n" in out and "\n  WORKING id [CLAIM n] [text]\n" in out
    assert "\n  ACKJOB id [CLAIM n] [RESULT value] [id [CLAIM n] [RESULT value] ...]\n" in out
    assert "\n  WAITJOB id [TIMEOUT ms]\n" in out


def test_joblog_and_a_stale_claim_print_as_redis_cli_prints_them(port, qname):
    with Client(f"127.0.0.1:{port}") as c:
        job_id = c.add_job(qname, b"lease", retry=60)
        (first,) = c.get_jobs(qname, timeout=10, with_claim=True)
    working = cli(port, "working", job_id, "CLAIM", str(first.claim), "halfway, 50%")
    assert working.returncode == 0 and working.stdout == b"60\n"
    with Client(f"127.0.0.1:{port}") as c:
        c.enqueue(job_id)
        (second,) = c.get_jobs(qname, timeout=10, with_claim=True)
    stale = ["ackjob", job_id, "CLAIM", str(first.claim)]
    for command in (["joblog", job_id], stale):
        for mode in ("--raw", "--no-raw"):
            ours = cli(port, mode, *command)
            assert ours.returncode == 0 and ours.stdout == redis_cli(port, mode, *command)
    tty = cli(port, "--no-raw", "joblog", job_id).stdout.decode()
    assert re.fullmatch(
        r'1\) 1\) \(integer\) \d{13}\n   2\) "[0-9a-f]{40}"\n   3\) "halfway, 50%"\n', tty
    )
    refused = cli(port, "--no-raw", *stale).stdout.decode()
    assert refused.startswith(f"(error) STALECLAIM Job {job_id} was delivered again since claim")
    done = cli(port, "ackjob", job_id, "CLAIM", str(second.claim))
    assert done.stdout == b"1\n"


def test_waitjob_and_cancel_print_as_redis_cli_prints_them(port):
    with Client(f"127.0.0.1:{port}") as c:
        done = c.add_job("outcomes", b"a", retry=60)
        c.ack(done, result='4,096 "rows"\n')
        cancelled = c.add_job("outcomes", b"b", retry=60)
        pending = c.add_job("outcomes", b"c", retry=60)
    assert cli(port, "cancel", cancelled).stdout == b"1\n"
    commands = (
        ["waitjob", done],
        ["waitjob", cancelled],
        ["waitjob", pending, "TIMEOUT", "10"],
        ["cancel", cancelled],
        ["nack", pending, "DELAY", "-1"],
    )
    for command in commands:
        for mode in ("--raw", "--no-raw"):
            ours = cli(port, mode, *command)
            assert ours.returncode == 0 and ours.stdout == redis_cli(port, mode, *command)
    tty = cli(port, "--no-raw", "waitjob", done).stdout
    assert tty == b'1) "acked"\n2) "4,096 \\"rows\\"\\n"\n'
    assert cli(port, "--no-raw", "waitjob", cancelled).stdout == b'1) "cancelled"\n2) (nil)\n'


def test_cron_and_rate_limits_print_as_redis_cli_prints_them(port, qname):
    tick = ["SCHEDULE", "0 0 1 1 *"]  # yearly: its next tick does not move during the test
    setting = ["cron", "set", qname, qname, 'a "body"\n', *tick, "RETRY", "60", "ASYNC"]
    limit = ["qpolicy", "set", qname, qname + "*", "rate", "5", "concurrency", "2"]
    assert cli(port, *setting).stdout == cli(port, *limit).stdout == b"OK\n"
    commands = (
        setting,
        ["cron", "get", qname],
        ["cron", "list"],
        ["cron", "get", "nosuch"],
        ["cron", "set", qname, qname, "b", "EVERY", "0"],
        limit,
        ["qpolicy", "get", qname],
    )
    for command in commands:
        for mode in ("--raw", "--no-raw"):
            ours = cli(port, mode, *command)
            assert ours.returncode == 0 and ours.stdout == redis_cli(port, mode, *command)
    tty = cli(port, "--no-raw", "cron", "get", qname).stdout.decode()
    assert tty.startswith(f'1) "{qname}"\n2) "{qname}"\n3) "a \\"body\\"\\n"\n4) "schedule"\n')
    assert '\n6) 1) "retry"\n   2) (integer) 60\n   3) "async"\n   4) (integer) 1\n' in tty
    assert tty.endswith("\n8) (integer) 0\n")
    assert cli(port, "cron", "del", qname).stdout == b"1\n"
    assert cli(port, "cron", "del", qname).stdout == b"0\n"
    assert cli(port, "qpolicy", "del", qname).stdout == b"1\n"


def test_help_for_cron_and_the_limits(port):
    result = cli(port, input=b"help cron set\nhelp qpolicy set\nhelp cron get\n")
    out = result.stdout.decode()
    assert "\n  CRON SET name queue body (EVERY sec|SCHEDULE expr) [REPLICATE count]" in out
    assert "[RATE jobs-per-sec] [CONCURRENCY count]" in out
    assert "\n  CRON GET name\n" in out
