"""CONFIG, DEBUG, CLIENT, MONITOR, SLOWLOG, LATENCY and COMMAND against real
servers (reference sections 2 and 5.4-5.14): a test per reply shape and per
error text, with raw connections wherever the reply type matters, redis-py
for convenience and redis-cli for MONITOR."""

from __future__ import annotations

import queue
import re
import select
import signal
import subprocess
import threading
import time

import pytest
import redis

from tests.support.raw import Error, RawConnection, Status, encode
from tests.support.servers import running_server, wait_for

SYNTAX = Error(b"ERR syntax error")
NOT_INT = Error(b"ERR value is not an integer or out of range")
CONFIG_USAGE = Error(b"ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")
CLIENT_USAGE = Error(
    b"ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME connection-name)"
)
SLOWLOG_USAGE = Error(b"ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.")
COMMAND_USAGE = Error(b"ERR Unknown subcommand or wrong number of arguments.")
BAD_NAME = Error(b"ERR Client names cannot contain spaces, newlines or special characters.")

# Reference section 2: name -> (arity, flags in COMMAND's order).
FLAG_ORDER = ["write", "readonly", "denyoom", "admin", "random", "loading", "skip_monitor", "fast"]
LETTERS = {"w": "write", "r": "readonly", "m": "denyoom", "a": "admin", "l": "loading", "F": "fast"}
TABLE = {
    "auth": (2, "rlF"), "ping": (-1, "rF"), "info": (-1, "rl"), "shutdown": (-1, "arl"),
    "monitor": (1, "ar"), "debug": (-2, "a"), "config": (-2, "ar"), "cluster": (-2, "ar"),
    "client": (-2, "ar"), "slowlog": (-2, "r"), "time": (1, "rF"), "command": (0, "rl"),
    "latency": (-2, "arl"), "hello": (1, "rF"), "addjob": (-4, "wmF"), "getjob": (-2, "wF"),
    "ackjob": (-1, "wF"), "fastack": (-1, "wF"), "deljob": (-1, "wF"), "show": (2, "rF"),
    "loadjob": (2, "w"), "bgrewriteaof": (1, "ar"), "qlen": (2, "rF"), "qpeek": (3, "r"),
    "qstat": (2, "rF"), "qscan": (-1, "r"), "jscan": (-1, "r"), "enqueue": (-1, "mwF"),
    "nack": (-1, "mwF"), "dequeue": (-1, "wF"), "working": (2, "wF"), "pause": (-3, "rF"),
}  # fmt: skip
# Beyond Disque: disquette's own commands, listed by COMMAND after Disque's 32.
EXTENSIONS = {
    "qpolicy": (-2, "w"), "joblog": (2, "rF"), "cancel": (-2, "wF"), "waitjob": (-2, "r"),
    "cron": (-2, "w"), "observe": (-2, "r"), "acl": (-2, "a"),
}  # fmt: skip
COMMANDS = len(TABLE) + len(EXTENSIONS)


def expected_flags(letters: str) -> list[bytes]:
    names = {LETTERS[c] for c in letters}
    return [f.encode() for f in FLAG_ORDER if f in names]


@pytest.fixture
def raw(server):
    with RawConnection(server.port) as conn:
        yield conn


def addr_of(conn: RawConnection) -> bytes:
    host, port = conn.sock.getsockname()[:2]
    return f"{host}:{port}".encode()


def client_id(conn: RawConnection) -> int:
    """The id CLIENT LIST shows for ``conn``."""
    me = addr_of(conn)
    for line in conn.command(b"CLIENT", b"LIST").decode().splitlines():
        fields = dict(item.split("=", 1) for item in line.split(" "))
        if fields["addr"].encode() == me:
            return int(fields["id"])
    raise AssertionError("connection not listed")


def no_data_yet(conn: RawConnection, wait: float = 0.2) -> bool:
    """True if nothing arrived within ``wait`` (only ever a false pass when slow)."""
    if conn.buf:
        return False
    readable, _, _ = select.select([conn.sock], [], [], wait)
    return not readable


# ====================================================================== CONFIG


def test_config_get_is_a_flat_array_of_bulk_strings(raw, server):
    raw.send(encode(b"CONFIG", b"GET", b"port"))
    port = str(server.port).encode()
    assert raw.read_raw() == b"*2\r\n$4\r\nport\r\n$%d\r\n%s\r\n" % (len(port), port)


def test_config_get_glob_in_disque_order(raw):
    pairs = raw.command(b"CONFIG", b"GET", b"*")
    names = pairs[::2]
    assert names[:5] == [b"requirepass", b"unixsocket", b"logfile", b"pidfile", b"maxmemory"]
    assert all(type(x) is bytes for x in pairs)
    assert raw.command(b"CONFIG", b"GET", b"maxmemory*") == [
        b"maxmemory", b"1073741824", b"maxmemory-samples", b"5", b"maxmemory-policy", b"acks",
    ]  # fmt: skip


def test_config_get_without_match_is_an_empty_array(raw):
    raw.send(encode(b"CONFIG", b"GET", b"nosuchparameter"))
    assert raw.read_raw() == b"*0\r\n"


def test_config_set_then_get(raw):
    assert raw.command(b"CONFIG", b"SET", b"slowlog-max-len", b"7") == Status(b"OK")
    assert raw.command(b"CONFIG", b"GET", b"slowlog-max-len") == [b"slowlog-max-len", b"7"]
    assert raw.command(b"CONFIG", b"SET", b"LOGLEVEL", b"WARNING") == Status(b"OK")
    assert raw.command(b"CONFIG", b"GET", b"loglevel") == [b"loglevel", b"warning"]


def test_config_subcommands_are_case_insensitive(raw):
    assert raw.command(b"config", b"get", b"hz") == [b"hz", b"10"]
    assert raw.command(b"CoNfIg", b"SeT", b"hz", b"11") == Status(b"OK")
    assert raw.command(b"CONFIG", b"ResetStat") == Status(b"OK")


def test_config_set_unsupported_parameter(raw):
    assert raw.command(b"CONFIG", b"SET", b"Port", b"1") == Error(
        b"ERR Unsupported CONFIG parameter: Port"
    )


def test_config_set_invalid_argument(raw):
    assert raw.command(b"CONFIG", b"SET", b"hz", b"abc") == Error(
        b"ERR Invalid argument 'abc' for CONFIG SET 'hz'"
    )


def test_config_set_maxmemory_reclaims_at_once(raw):
    # delivered at-most-once jobs are what the reclaim routine may evict
    for _ in range(20):
        job = raw.command(b"ADDJOB", b"reclaimq", b"x" * 1000, 0, b"RETRY", 0)
        assert raw.command(b"GETJOB", b"FROM", b"reclaimq")[0][1] == job
    assert b"registered_jobs:20\r\n" in raw.command(b"INFO", b"jobs")
    assert raw.command(b"CONFIG", b"SET", b"maxmemory", b"1") == Status(b"OK")
    assert raw.command(b"CONFIG", b"GET", b"maxmemory") == [b"maxmemory", b"1"]
    assert b"registered_jobs:20\r\n" not in raw.command(b"INFO", b"jobs")


@pytest.mark.parametrize(
    "argv",
    [
        [b"GET"],
        [b"get", b"a", b"b"],
        [b"SET", b"hz"],
        [b"Set", b"hz", b"10", b"x"],
        [b"RESETSTAT", b"x"],
        [b"rewrite", b"x"],
    ],
)
def test_config_wrong_number_of_arguments_names_the_subcommand_as_typed(raw, argv):
    assert raw.command(b"CONFIG", *argv) == Error(
        b"ERR Wrong number of arguments for CONFIG " + argv[0]
    )


@pytest.mark.parametrize("sub", [b"nosuch", b"GETALL", b"help"])
def test_config_unknown_subcommand(raw, sub):
    assert raw.command(b"CONFIG", sub) == CONFIG_USAGE
    assert raw.command(b"CONFIG", sub, b"x", b"y") == CONFIG_USAGE


def test_config_without_subcommand_is_an_arity_error(raw):
    assert raw.command(b"CONFIG") == Error(b"ERR wrong number of arguments for 'config' command")


def test_config_rewrite_without_config_file(raw):
    assert raw.command(b"CONFIG", b"REWRITE") == Error(
        b"ERR The server is running without a config file"
    )


def test_config_rewrite_with_config_file(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text("# my comment\nhz 10\n")
    with running_server(tmp_path, config_file=conf) as srv, RawConnection(srv.port) as conn:
        assert conn.command(b"CONFIG", b"SET", b"hz", b"25") == Status(b"OK")
        assert conn.command(b"CONFIG", b"REWRITE") == Status(b"OK")
        text = conf.read_text()
        assert "# my comment" in text
        assert "hz 25" in text.splitlines()


def test_config_rewrite_error(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text("hz 10\n")
    with running_server(tmp_path, config_file=conf) as srv, RawConnection(srv.port) as conn:
        conf.unlink()
        conf.mkdir()  # the file became a directory: it cannot be rewritten
        reply = conn.command(b"CONFIG", b"REWRITE")
        assert isinstance(reply, Error)
        assert reply.startswith(b"ERR Rewriting config file: ")


def test_config_resetstat(raw, server):
    for _ in range(5):
        raw.command(b"PING")
    with RawConnection(server.port) as other:
        other.command(b"PING")
    assert raw.command(b"CONFIG", b"RESETSTAT") == Status(b"OK")
    info = raw.command(b"INFO", b"all").decode()
    fields = dict(line.split(":", 1) for line in info.split("\r\n") if ":" in line)
    # only CONFIG RESETSTAT itself ran since the reset (INFO counts after replying)
    assert fields["total_commands_processed"] == "1"
    assert fields["total_connections_received"] == "0"
    assert fields["rejected_connections"] == "0"
    cmdstats = [k for k in fields if k.startswith("cmdstat_")]
    assert cmdstats == ["cmdstat_config"]
    assert fields["cmdstat_config"].startswith("calls=1,")
    # not statistics: the slow log, the peak, the clients are untouched
    assert int(fields["connected_clients"]) >= 1


def test_config_resetstat_keeps_the_slowlog(raw):
    raw.command(b"CONFIG", b"SET", b"slowlog-log-slower-than", b"0")
    raw.command(b"PING")
    assert raw.command(b"SLOWLOG", b"LEN") >= 2
    raw.command(b"CONFIG", b"RESETSTAT")
    assert raw.command(b"SLOWLOG", b"LEN") >= 3


# ====================================================================== DEBUG


def test_debug_flushall(raw):
    raw.command(b"ADDJOB", b"fq", b"body", 0)
    raw.command(b"PAUSE", b"pausedq", b"all")
    assert raw.command(b"DEBUG", b"FLUSHALL") == Status(b"OK")
    info = raw.command(b"INFO", b"jobs") + raw.command(b"INFO", b"queues")
    assert b"registered_jobs:0\r\n" in info
    assert b"registered_queues:0\r\n" in info
    assert raw.command(b"QLEN", b"fq") == 0


def test_debug_flushall_releases_getjob_clients_with_null_array(raw, server):
    with RawConnection(server.port) as waiter:
        waiter.send(encode(b"GETJOB", b"FROM", b"flushq"))
        wait_for(lambda: b"blocked_clients:1" in raw.command(b"INFO", b"clients"), what="blocked")
        assert raw.command(b"DEBUG", b"FLUSHALL") == Status(b"OK")
        assert waiter.read_raw() == b"*-1\r\n"


def test_debug_sleep(raw):
    assert raw.command(b"DEBUG", b"SLEEP", b"0") == Status(b"OK")
    assert raw.command(b"DEBUG", b"SLEEP", b"0.01") == Status(b"OK")
    # strtod: no number is 0, a trailing garbage suffix is ignored, negative returns at once
    assert raw.command(b"DEBUG", b"SLEEP", b"abc") == Status(b"OK")
    assert raw.command(b"DEBUG", b"SLEEP", b"0.001xyz") == Status(b"OK")
    assert raw.command(b"DEBUG", b"SLEEP", b"-5") == Status(b"OK")
    assert raw.command(b"debug", b"sleep", b"inf") == Status(b"OK")


def test_debug_error_is_sent_verbatim(raw):
    raw.send(encode(b"DEBUG", b"ERROR", b"MYCODE something went wrong"))
    assert raw.read_raw() == b"-MYCODE something went wrong\r\n"
    raw.send(encode(b"DEBUG", b"ERROR", b"a\r\nb\nc"))
    assert raw.read_raw() == b"-a  b c\r\n"
    raw.send(encode(b"DEBUG", b"ERROR", b""))
    assert raw.read_raw() == b"-\r\n"


def test_debug_loadaof_without_aof_is_a_bare_err(raw):
    raw.command(b"ADDJOB", b"aofq", b"body", 0)
    raw.send(encode(b"DEBUG", b"LOADAOF"))
    assert raw.read_raw() == b"-ERR\r\n"


def test_debug_structsize(raw):
    raw.send(encode(b"DEBUG", b"STRUCTSIZE"))
    data = raw.read_raw()
    assert data.startswith(b"$")
    text = raw.command(b"DEBUG", b"structsize")
    assert re.fullmatch(rb"bits:(32|64) job:\d+ queue:\d+ client:\d+", text)


@pytest.mark.parametrize(
    "argv",
    [
        [b"nosuch"],
        [b"SLEEP"],
        [b"sleep", b"1", b"2"],
        [b"Error"],
        [b"ERROR", b"a", b"b"],
        [b"structsize", b"x"],
    ],
)
def test_debug_unknown_subcommand_or_wrong_arguments(raw, argv):
    assert raw.command(b"DEBUG", *argv) == Error(
        b"ERR Unknown DEBUG subcommand or wrong number of arguments for '" + argv[0] + b"'"
    )


def test_debug_without_subcommand_is_an_arity_error(raw):
    assert raw.command(b"DEBUG") == Error(b"ERR wrong number of arguments for 'debug' command")


def test_debug_restart_bad_delay(raw):
    assert raw.command(b"DEBUG", b"RESTART", b"soon") == NOT_INT
    assert raw.command(b"DEBUG", b"CRASH-AND-RECOVER", b"1.5") == NOT_INT


def run_id(server) -> str | None:
    try:
        client = server.client(socket_timeout=5)
        try:
            return client.info("server")["run_id"]
        finally:
            client.close()
    except redis.ConnectionError:
        return None


@pytest.mark.parametrize(
    ("command", "hz_after"),
    [
        # RESTART rewrites the config file first, then re-executes the server.
        ((b"DEBUG", b"RESTART"), 33),
        # CRASH-AND-RECOVER re-executes without a rewrite: the file's hz comes back.
        ((b"DEBUG", b"CRASH-AND-RECOVER", b"10"), 10),
    ],
    ids=["restart-rewrites-the-config", "crash-and-recover-does-not-rewrite"],
)
def test_debug_restart_and_crash_and_recover_reexec(tmp_path, command, hz_after):
    conf = tmp_path / "disque.conf"
    conf.write_text("hz 10\n")
    with running_server(tmp_path, config_file=conf) as srv:
        before = run_id(srv)
        with RawConnection(srv.port) as conn:
            assert conn.command(b"CONFIG", b"SET", b"hz", b"33") == Status(b"OK")
            conn.send(encode(*command))
            assert conn.closed_by_server()
            assert conn.buf == b""  # no reply
        wait_for(lambda: run_id(srv) not in (None, before), what="restarted server")
        assert srv.proc.poll() is None
        if hz_after == 33:
            assert "hz 33" in conf.read_text().splitlines()
        else:
            assert conf.read_text() == "hz 10\n"
        client = srv.client()
        try:
            assert client.info("server")["hz"] == hz_after
        finally:
            client.close()


def test_debug_restart_failure(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text("hz 10\n")
    with running_server(tmp_path, config_file=conf) as srv, RawConnection(srv.port) as conn:
        conf.unlink()
        conf.mkdir()  # the config rewrite RESTART does first must fail
        assert conn.command(b"DEBUG", b"RESTART") == Error(
            b"ERR failed to restart the server. Check server logs."
        )
        assert conn.command(b"PING") == Status(b"PONG")


@pytest.mark.parametrize(
    ("sub", "signals"),
    [
        (b"SEGFAULT", (signal.SIGSEGV, signal.SIGABRT)),
        (b"assert", (signal.SIGSEGV, signal.SIGABRT)),
        (b"oom", (signal.SIGABRT,)),
    ],
)
def test_debug_crashes(tmp_path, sub, signals):
    with running_server(tmp_path) as srv, RawConnection(srv.port) as conn:
        conn.send(encode(b"DEBUG", sub))
        assert conn.closed_by_server()
        assert conn.buf == b""
        srv.proc.wait(30)
        assert -srv.proc.returncode in signals


# ====================================================================== CLIENT

LIST_LINE = re.compile(
    r"id=(\d+) addr=(\S+) fd=(-?\d+) name=(\S*) age=(\d+) idle=(\d+) flags=([ObcuAUN]+) "
    r"qbuf=(\d+) qbuf-free=(\d+) obl=(\d+) oll=(\d+) omem=(\d+) events=(r?w?) cmd=(\S+)\Z"
)


def client_lines(conn: RawConnection) -> list[dict[str, str]]:
    text = conn.command(b"CLIENT", b"LIST")
    assert type(text) is bytes
    assert text.endswith(b"\n")
    out = []
    for line in text.decode().split("\n")[:-1]:
        assert LIST_LINE.match(line), line
        out.append(dict(item.split("=", 1) for item in line.split(" ")))
    return out


def test_client_list_is_a_bulk_string_with_fields_in_order(raw):
    raw.send(encode(b"CLIENT", b"LIST"))
    data = raw.read_raw()
    assert data.startswith(b"$")
    [line] = client_lines(raw)
    assert list(line) == [
        "id", "addr", "fd", "name", "age", "idle", "flags", "qbuf", "qbuf-free", "obl",
        "oll", "omem", "events", "cmd",
    ]  # fmt: skip
    assert line["addr"] == addr_of(raw).decode()
    assert line["flags"] == "N"
    assert line["events"] == "r"
    assert line["cmd"] == "client"
    assert line["name"] == ""


def test_client_list_one_line_per_client(raw, server):
    with RawConnection(server.port) as a, RawConnection(server.port) as b:
        a.command(b"PING")
        b.command(b"CLIENT", b"SETNAME", b"worker-b")
        lines = {line["addr"]: line for line in client_lines(raw)}
        assert set(lines) == {addr_of(c).decode() for c in (raw, a, b)}
        assert lines[addr_of(a).decode()]["cmd"] == "ping"
        assert lines[addr_of(b).decode()]["name"] == "worker-b"
        assert lines[addr_of(b).decode()]["cmd"] == "client"
        ids = [int(line["id"]) for line in lines.values()]
        assert len(set(ids)) == 3


def test_client_list_flags_for_blocked_and_monitor(raw, server):
    with RawConnection(server.port) as waiter, RawConnection(server.port) as mon:
        waiter.send(encode(b"GETJOB", b"FROM", b"listq"))
        assert mon.command(b"MONITOR") == Status(b"OK")
        wait_for(
            lambda: (
                {line["addr"]: line for line in client_lines(raw)}.get(
                    addr_of(waiter).decode(), {}
                ).get("flags")
                == "b"
            ),
            what="blocked flag",
        )
        lines = {line["addr"]: line for line in client_lines(raw)}
        assert lines[addr_of(mon).decode()]["flags"] == "O"
        assert lines[addr_of(waiter).decode()]["cmd"] == "getjob"


def test_client_list_shows_a_partial_request_in_qbuf(raw, server):
    with RawConnection(server.port) as partial:
        partial.send(b"*2\r\n$4\r\nPING\r\n$100\r\n" + b"x" * 40)

        def qbuf() -> int:
            lines = {line["addr"]: line for line in client_lines(raw)}
            return int(lines.get(addr_of(partial).decode(), {}).get("qbuf", 0))

        wait_for(lambda: qbuf() > 0, what="query buffer")


def test_client_reply_on(raw):
    raw.send(encode(b"CLIENT", b"REPLY", b"ON"))
    assert raw.read_raw() == b"+OK\r\n"


def test_client_reply_off_suppresses_until_on(raw):
    raw.send(
        encode(b"CLIENT", b"REPLY", b"OFF")
        + encode(b"PING")
        + encode(b"QLEN", b"q")
        + encode(b"CLIENT", b"REPLY", b"ON")
        + encode(b"PING", b"after")
    )
    assert raw.read() == Status(b"OK")
    assert raw.read() == b"after"


def test_client_reply_skip_suppresses_only_the_next_reply(raw):
    raw.send(
        encode(b"CLIENT", b"REPLY", b"SKIP")
        + encode(b"PING", b"skipped")
        + encode(b"PING", b"seen")
        + encode(b"PING", b"also seen")
    )
    assert raw.read() == b"seen"
    assert raw.read() == b"also seen"


def test_client_reply_skip_while_off_stays_off(raw):
    raw.send(
        encode(b"CLIENT", b"REPLY", b"OFF")
        + encode(b"CLIENT", b"REPLY", b"SKIP")
        + encode(b"PING", b"one")
        + encode(b"PING", b"two")
        + encode(b"CLIENT", b"REPLY", b"ON")
    )
    assert raw.read() == Status(b"OK")


def test_client_reply_bad_mode(raw):
    assert raw.command(b"CLIENT", b"REPLY", b"MAYBE") == SYNTAX
    assert raw.command(b"client", b"reply", b"on") == Status(b"OK")


def test_client_kill_old_form(raw, server):
    with RawConnection(server.port) as victim:
        victim.command(b"PING")  # accepted by the server
        assert raw.command(b"CLIENT", b"KILL", addr_of(victim)) == Status(b"OK")
        assert victim.closed_by_server()


def test_client_kill_old_form_unknown_address(raw):
    assert raw.command(b"CLIENT", b"KILL", b"1.2.3.4:5") == Error(b"ERR No such client")
    assert raw.command(b"CLIENT", b"KILL", b"ID") == Error(b"ERR No such client")


def test_client_kill_old_form_can_kill_the_caller_after_the_reply(raw):
    raw.send(encode(b"CLIENT", b"KILL", addr_of(raw)))
    assert raw.read() == Status(b"OK")
    assert raw.closed_by_server()


def test_client_kill_by_id_replies_an_integer(raw, server):
    with RawConnection(server.port) as victim:
        victim_id = client_id(victim)
        raw.send(encode(b"CLIENT", b"KILL", b"ID", victim_id))
        assert raw.read_raw() == b":1\r\n"
        assert victim.closed_by_server()
        assert raw.command(b"CLIENT", b"KILL", b"ID", victim_id) == 0


def test_client_kill_by_addr(raw, server):
    with RawConnection(server.port) as victim:
        victim.command(b"PING")  # accepted by the server
        assert raw.command(b"CLIENT", b"KILL", b"ADDR", addr_of(victim)) == 1
        assert victim.closed_by_server()
    assert raw.command(b"CLIENT", b"KILL", b"ADDR", b"1.2.3.4:5") == 0


def test_client_kill_skipme(raw, server):
    with RawConnection(server.port) as a, RawConnection(server.port) as b:
        a.command(b"PING")
        b.command(b"PING")
        # skipme defaults to yes: every other client, not the caller
        assert raw.command(b"CLIENT", b"KILL", b"TYPE", b"normal") == 2
        assert a.closed_by_server() and b.closed_by_server()
    assert raw.command(b"PING") == Status(b"PONG")
    assert raw.command(b"CLIENT", b"KILL", b"ADDR", addr_of(raw), b"SKIPME", b"yes") == 0
    raw.send(encode(b"CLIENT", b"KILL", b"ADDR", addr_of(raw), b"SKIPME", b"no"))
    assert raw.read() == 1
    assert raw.closed_by_server()


def test_client_kill_filters_combine(raw, server):
    with RawConnection(server.port) as victim:
        victim_id = client_id(victim)
        assert raw.command(b"CLIENT", b"KILL", b"ID", victim_id, b"ADDR", addr_of(raw)) == 0
        assert raw.command(b"CLIENT", b"KILL", b"id", victim_id, b"type", b"NORMAL") == 1


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], SYNTAX),
        ([b"TYPE", b"master"], Error(b"ERR Unknown client type 'master'")),
        ([b"TYPE", b"pubsub"], Error(b"ERR Unknown client type 'pubsub'")),
        ([b"SKIPME", b"maybe"], SYNTAX),
        ([b"ID", b"abc"], NOT_INT),
        ([b"NOSUCH", b"x"], SYNTAX),
        ([b"ID", b"1", b"TYPE"], SYNTAX),
    ],
)
def test_client_kill_errors(raw, args, error):
    assert raw.command(b"CLIENT", b"KILL", *args) == error


def test_client_setname_getname(raw):
    raw.send(encode(b"CLIENT", b"GETNAME"))
    assert raw.read_raw() == b"$-1\r\n"
    assert raw.command(b"CLIENT", b"SETNAME", b"my-worker!~") == Status(b"OK")
    raw.send(encode(b"CLIENT", b"GETNAME"))
    assert raw.read_raw() == b"$11\r\nmy-worker!~\r\n"
    assert client_lines(raw)[0]["name"] == "my-worker!~"
    assert raw.command(b"CLIENT", b"SETNAME", b"") == Status(b"OK")
    assert raw.command(b"CLIENT", b"GETNAME") is None


@pytest.mark.parametrize("name", [b"a b", b"a\nb", b"tab\t", b"\x7f", b"caf\xc3\xa9"])
def test_client_setname_rejects_special_characters(raw, name):
    assert raw.command(b"CLIENT", b"SETNAME", b"ok") == Status(b"OK")
    assert raw.command(b"CLIENT", b"SETNAME", name) == BAD_NAME
    assert raw.command(b"CLIENT", b"GETNAME") == b"ok"


def test_client_pause_holds_other_clients(raw, server):
    with RawConnection(server.port) as other:
        assert raw.command(b"CLIENT", b"PAUSE", b"1000") == Status(b"OK")
        other.send(b"PING\r\n")
        assert no_data_yet(other)
        assert other.read() == Status(b"PONG")


def test_client_pause_zero_does_not_pause(raw, server):
    with RawConnection(server.port) as other:
        assert raw.command(b"CLIENT", b"PAUSE", b"0") == Status(b"OK")
        assert other.command(b"PING") == Status(b"PONG")


def test_client_pause_errors(raw):
    assert raw.command(b"CLIENT", b"PAUSE", b"-1") == Error(b"ERR timeout is negative")
    assert raw.command(b"CLIENT", b"PAUSE", b"1s") == Error(
        b"ERR timeout is not an integer or out of range"
    )


@pytest.mark.parametrize(
    "args",
    [
        [b"NOSUCH"],
        [b"LIST", b"x"],
        [b"GETNAME", b"x"],
        [b"SETNAME"],
        [b"SETNAME", b"a", b"b"],
        [b"PAUSE"],
        [b"PAUSE", b"1", b"2"],
        [b"REPLY"],
        [b"REPLY", b"ON", b"x"],
    ],
)
def test_client_usage_error(raw, args):
    assert raw.command(b"CLIENT", *args) == CLIENT_USAGE


def test_client_without_subcommand_is_an_arity_error(raw):
    assert raw.command(b"CLIENT") == Error(b"ERR wrong number of arguments for 'client' command")


# ====================================================================== MONITOR

MONITOR_LINE = re.compile(rb"\d+\.\d{6} \[127\.0\.0\.1:\d+\] (.*)\Z")


def test_monitor_replies_ok_then_streams_commands(raw, server):
    raw.send(encode(b"MONITOR"))
    assert raw.read_raw() == b"+OK\r\n"
    with RawConnection(server.port) as other:
        other.command(b"PING")
        other.command(b"ackjob", b"sp ace", b'quo"te', b"\x00\xff\n")
        first = raw.read()
        second = raw.read()
        assert addr_of(other) in first
    assert type(first) is Status and type(second) is Status
    m1 = MONITOR_LINE.match(first)
    m2 = MONITOR_LINE.match(second)
    assert m1 and m2
    assert m1.group(1) == b'"PING"'
    assert m2.group(1) == b'"ackjob" "sp ace" "quo\\"te" "\\x00\\xff\\n"'


def test_monitor_sees_errors_and_its_own_later_commands(raw, server):
    assert raw.command(b"MONITOR") == Status(b"OK")
    with RawConnection(server.port) as other:
        assert other.command(b"QLEN") == Error(b"ERR wrong number of arguments for 'qlen' command")
        other.command(b"NOSUCHCMD")
        # arity and unknown-command errors are not fed (they fail before execution)
        other.command(b"PING", b"marker")
        line = raw.read()
    assert line.endswith(b'"PING" "marker"')


def test_second_monitor_is_ignored_without_reply(raw, server):
    assert raw.command(b"MONITOR") == Status(b"OK")
    raw.send(encode(b"MONITOR"))
    with RawConnection(server.port) as other:
        other.command(b"PING", b"next")
    # the second MONITOR is fed to the monitors before it runs, then answers nothing
    assert raw.read().endswith(b'"MONITOR"')
    assert raw.read().endswith(b'"PING" "next"')


def test_monitor_with_redis_cli(server):
    proc = subprocess.Popen(
        ["redis-cli", "-p", str(server.port), "MONITOR"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    lines: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert lines.get(timeout=30).strip() == b"OK"
        client = server.client()
        try:
            client.execute_command("PING", "from-redis-py")
        finally:
            client.close()
        # redis-py introduces itself first (CLIENT SETINFO): skip to the PING
        line = lines.get(timeout=30).strip()
        while b'"PING"' not in line:
            line = lines.get(timeout=30).strip()
        assert re.fullmatch(rb'\d+\.\d{6} \[127\.0\.0\.1:\d+\] "PING" "from-redis-py"', line)
    finally:
        proc.terminate()
        proc.wait(10)


def test_closed_monitor_is_forgotten(raw, server):
    with RawConnection(server.port) as mon:
        assert mon.command(b"MONITOR") == Status(b"OK")
    wait_for(lambda: len(client_lines(raw)) == 1, what="monitor gone")
    assert raw.command(b"PING") == Status(b"PONG")


# ====================================================================== SLOWLOG


@pytest.fixture
def slow(raw):
    """Log every command."""
    assert raw.command(b"CONFIG", b"SET", b"slowlog-log-slower-than", b"0") == Status(b"OK")
    assert raw.command(b"SLOWLOG", b"RESET") == Status(b"OK")
    return raw


def test_slowlog_get_entry_shape(slow):
    slow.command(b"PING", b"hello")
    slow.send(encode(b"SLOWLOG", b"GET", b"1"))
    data = slow.read_raw()
    m = re.fullmatch(
        rb"\*1\r\n\*4\r\n:(\d+)\r\n:(\d+)\r\n:(\d+)\r\n\*2\r\n\$4\r\nPING\r\n\$5\r\nhello\r\n",
        data,
    )
    assert m, data
    assert abs(int(m.group(2)) - time.time()) < 3600


def test_slowlog_newest_first_with_increasing_ids(slow):
    for word in (b"one", b"two", b"three"):
        slow.command(b"PING", word)
    entries = slow.command(b"SLOWLOG", b"GET", b"3")
    assert [e[3] for e in entries] == [[b"PING", b"three"], [b"PING", b"two"], [b"PING", b"one"]]
    ids = [e[0] for e in entries]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 3


def test_slowlog_get_count(slow):
    for _ in range(15):
        slow.command(b"PING")
    assert len(slow.command(b"SLOWLOG", b"GET")) == 10
    assert len(slow.command(b"SLOWLOG", b"GET", b"2")) == 2
    assert slow.command(b"SLOWLOG", b"GET", b"0") == []
    assert len(slow.command(b"SLOWLOG", b"GET", b"-1")) >= 18
    assert len(slow.command(b"SLOWLOG", b"GET", b"1000")) >= 19


def test_slowlog_len_and_reset(slow):
    # the RESET of the fixture was logged after the log was emptied
    assert slow.command(b"SLOWLOG", b"LEN") == 1
    slow.command(b"PING")
    assert slow.command(b"SLOWLOG", b"LEN") == 3
    slow.send(encode(b"SLOWLOG", b"RESET"))
    assert slow.read_raw() == b"+OK\r\n"
    slow.send(encode(b"slowlog", b"len"))
    assert slow.read_raw() == b":1\r\n"


def test_slowlog_truncates_arguments(slow):
    argv = [b"PING"] + [b"a%d" % i for i in range(39)]
    slow.command(*argv)  # an arity error still runs through the pipeline? no: PING -1
    [entry] = slow.command(b"SLOWLOG", b"GET", b"1")
    args = entry[3]
    assert len(args) == 32
    assert args[:31] == argv[:31]
    assert args[31] == b"... (9 more arguments)"


def test_slowlog_truncates_long_strings(slow):
    slow.command(b"PING", b"x" * 200)
    [entry] = slow.command(b"SLOWLOG", b"GET", b"1")
    assert entry[3] == [b"PING", b"x" * 128 + b"... (72 more bytes)"]


def test_slowlog_max_len(slow):
    assert slow.command(b"CONFIG", b"SET", b"slowlog-max-len", b"3") == Status(b"OK")
    for _ in range(10):
        slow.command(b"PING")
    assert slow.command(b"SLOWLOG", b"LEN") == 3


def test_slowlog_negative_threshold_disables(tmp_path):
    # CONFIG SET refuses negative values; the config file accepts them
    conf = tmp_path / "disque.conf"
    conf.write_text("slowlog-log-slower-than -1\n")
    with running_server(tmp_path, config_file=conf) as srv, RawConnection(srv.port) as conn:
        conn.command(b"DEBUG", b"SLEEP", b"0.02")
        conn.command(b"PING")
        assert conn.command(b"SLOWLOG", b"LEN") == 0


def test_slowlog_config_set_refuses_negative_threshold(raw):
    assert raw.command(b"CONFIG", b"SET", b"slowlog-log-slower-than", b"-1") == Error(
        b"ERR Invalid argument '-1' for CONFIG SET 'slowlog-log-slower-than'"
    )


def test_slowlog_threshold(raw):
    raw.command(b"CONFIG", b"SET", b"slowlog-log-slower-than", b"5000")
    raw.command(b"SLOWLOG", b"RESET")
    raw.command(b"DEBUG", b"SLEEP", b"0.02")
    [entry] = raw.command(b"SLOWLOG", b"GET")
    assert entry[2] >= 20_000
    assert entry[3] == [b"DEBUG", b"SLEEP", b"0.02"]


@pytest.mark.parametrize(
    "args", [[b"NOSUCH"], [b"LEN", b"x"], [b"RESET", b"x"], [b"GET", b"1", b"2"]]
)
def test_slowlog_usage_error(raw, args):
    assert raw.command(b"SLOWLOG", *args) == SLOWLOG_USAGE


def test_slowlog_get_not_an_integer(raw):
    assert raw.command(b"SLOWLOG", b"GET", b"many") == NOT_INT


def test_slowlog_without_subcommand_is_an_arity_error(raw):
    assert raw.command(b"SLOWLOG") == Error(b"ERR wrong number of arguments for 'slowlog' command")


# ====================================================================== LATENCY


@pytest.fixture
def spiked(raw):
    """A ``command`` latency event of at least 20 ms."""
    assert raw.command(b"CONFIG", b"SET", b"latency-monitor-threshold", b"1") == Status(b"OK")
    assert raw.command(b"DEBUG", b"SLEEP", b"0.02") == Status(b"OK")
    return raw


def test_latency_nothing_sampled_when_disabled(raw):
    raw.command(b"DEBUG", b"SLEEP", b"0.02")
    raw.send(encode(b"LATENCY", b"LATEST"))
    assert raw.read_raw() == b"*0\r\n"


def test_latency_latest_shape(spiked):
    spiked.send(encode(b"LATENCY", b"LATEST"))
    data = spiked.read_raw()
    m = re.fullmatch(rb"\*1\r\n\*4\r\n\$7\r\ncommand\r\n:(\d+)\r\n:(\d+)\r\n:(\d+)\r\n", data)
    assert m, data
    assert int(m.group(2)) >= 20
    assert int(m.group(3)) >= int(m.group(2))


def test_latency_history_shape(spiked):
    spiked.send(encode(b"LATENCY", b"HISTORY", b"command"))
    data = spiked.read_raw()
    assert re.fullmatch(rb"\*1\r\n\*2\r\n:\d+\r\n:\d+\r\n", data), data
    spiked.send(encode(b"LATENCY", b"HISTORY", b"nosuchevent"))
    assert spiked.read_raw() == b"*0\r\n"


def test_latency_history_event_names_are_case_sensitive(spiked):
    assert spiked.command(b"LATENCY", b"HISTORY", b"COMMAND") == []


def test_latency_graph(spiked):
    spiked.send(encode(b"LATENCY", b"GRAPH", b"command"))
    data = spiked.read_raw()
    assert data.startswith(b"$")
    graph = spiked.command(b"LATENCY", b"GRAPH", b"command").decode()
    lines = graph.split("\n")
    assert re.fullmatch(r"command - high \d+ ms, low \d+ ms \(all time high \d+ ms\)", lines[0])
    assert lines[1] == "-" * 80
    assert lines[5] == "_"  # one sample: the lowest mark on the last graph row
    assert lines[7].endswith("s") or lines[7].isdigit()


def test_latency_graph_without_samples(raw):
    assert raw.command(b"LATENCY", b"GRAPH", b"nosuchevent") == Error(
        b"ERR No samples available for event 'nosuchevent'"
    )


def test_latency_doctor_disabled(raw):
    report = raw.command(b"LATENCY", b"DOCTOR")
    assert type(report) is bytes
    assert b"Latency monitoring is disabled" in report


def test_latency_doctor_no_spikes(raw):
    raw.command(b"CONFIG", b"SET", b"latency-monitor-threshold", b"1000")
    assert b"no latency spike was observed" in raw.command(b"LATENCY", b"DOCTOR")


def test_latency_doctor_reports_events(spiked):
    report = spiked.command(b"LATENCY", b"DOCTOR").decode()
    assert "1. command: 1 latency spikes" in report
    assert "Worst all time event" in report


def test_latency_reset(spiked):
    # 10 ms from here: a loaded machine's own pauses (a command or a cron tick a few ms
    # late) stay under it, the 20 ms sleeps do not.
    spiked.command(b"CONFIG", b"SET", b"latency-monitor-threshold", b"10")
    spiked.send(encode(b"LATENCY", b"RESET", b"nosuchevent"))
    assert spiked.read_raw() == b":0\r\n"
    assert spiked.command(b"LATENCY", b"RESET", b"command", b"command") == 1
    assert spiked.command(b"LATENCY", b"LATEST") == []
    spiked.command(b"DEBUG", b"SLEEP", b"0.02")
    events = [row[0] for row in spiked.command(b"LATENCY", b"LATEST")]
    assert b"command" in events
    assert spiked.command(b"LATENCY", b"RESET") == len(events)
    assert spiked.command(b"LATENCY", b"RESET") == 0


@pytest.mark.parametrize(
    "args",
    [
        [b"NOSUCH"],
        [b"LATEST", b"x"],
        [b"DOCTOR", b"x"],
        [b"HISTORY"],
        [b"HISTORY", b"a", b"b"],
        [b"GRAPH"],
    ],
)
def test_latency_syntax_error(raw, args):
    assert raw.command(b"LATENCY", *args) == SYNTAX


def test_latency_without_subcommand_is_an_arity_error(raw):
    assert raw.command(b"LATENCY") == Error(b"ERR wrong number of arguments for 'latency' command")


# ====================================================================== COMMAND


def test_command_count(raw):
    raw.send(encode(b"COMMAND", b"COUNT"))
    assert raw.read_raw() == b":%d\r\n" % COMMANDS


def test_command_lists_every_command(raw):
    entries = raw.command(b"COMMAND")
    assert len(entries) == COMMANDS
    got = {e[0].decode(): (e[1], e[2]) for e in entries}
    assert set(got) == set(TABLE) | set(EXTENSIONS)
    for name, (arity, letters) in (TABLE | EXTENSIONS).items():
        assert got[name] == (arity, expected_flags(letters)), name
    for entry in entries:
        assert entry[3:] == [0, 0, 0]


def test_command_entry_wire_format(raw):
    raw.send(encode(b"COMMAND", b"INFO", b"addjob"))
    assert raw.read_raw() == (
        b"*1\r\n*6\r\n$6\r\naddjob\r\n:-4\r\n*3\r\n+write\r\n+denyoom\r\n+fast\r\n"
        b":0\r\n:0\r\n:0\r\n"
    )


def test_command_info(raw):
    entries = raw.command(b"COMMAND", b"INFO", b"info", b"NOSUCH", b"LaTeNcY")
    assert entries[0] == [b"info", -1, [b"readonly", b"loading"], 0, 0, 0]
    assert entries[1] is None
    assert entries[2] == [b"latency", -2, [b"readonly", b"admin", b"loading"], 0, 0, 0]
    raw.send(encode(b"COMMAND", b"INFO", b"nosuch"))
    assert raw.read_raw() == b"*1\r\n$-1\r\n"
    raw.send(encode(b"COMMAND", b"INFO"))
    assert raw.read_raw() == b"*0\r\n"


@pytest.mark.parametrize("args", [[b"NOSUCH"], [b"COUNT", b"x"], [b"help"]])
def test_command_usage_error(raw, args):
    assert raw.command(b"COMMAND", *args) == COMMAND_USAGE


def test_command_with_renamed_commands(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text('rename-command info myinfo\nrename-command hello ""\n')
    with running_server(tmp_path, config_file=conf) as srv, RawConnection(srv.port) as conn:
        assert conn.command(b"COMMAND", b"COUNT") == COMMANDS - 1
        [entry, gone] = conn.command(b"COMMAND", b"INFO", b"myinfo", b"hello")
        assert entry[0] == b"info"
        assert gone is None
        conn.command(b"MYINFO")
        stats = conn.command(b"MYINFO", b"commandstats")
        assert b"cmdstat_info:calls=1," in stats


def test_redis_py_command(server):
    client = server.client()
    try:
        assert client.command_count() == COMMANDS
        assert client.command()["addjob"]["arity"] == -4
    finally:
        client.close()
