"""INFO against a real server (reference section 5.3): the reply type, section
headers and order, every field of every section in order, the separators,
section selection (default, all, commandstats, unknown, case), the syntax
error, and the values that follow what the server does (clients, memory,
jobs, queues, persistence, stats, command statistics)."""

from __future__ import annotations

import os
import re
import socket
import subprocess

import pytest

from disquette import build
from disquette.core.memory import human_bytes
from tests.support.raw import Error, RawConnection
from tests.support.servers import running_server, wait_for

SECTIONS = ["Server", "Clients", "Memory", "Jobs", "Queues", "Persistence", "Stats", "CPU"]

FIELDS = {
    "Server": [
        "disque_version", "disque_git_sha1", "disque_git_dirty", "disque_build_id",
        "disquette_build", "os",
        "arch_bits", "multiplexing_api", "gcc_version", "process_id", "run_id", "tcp_port",
        "uptime_in_seconds", "uptime_in_days", "hz", "executable", "config_file",
        # Beyond Disque, after its fields: the release and its bus (core/dialect.py).
        "disquette_version", "bus_protocol_version", "bus_protocol_oldest", "bus_features",
    ],
    "Clients": [
        "connected_clients", "client_longest_output_list", "client_biggest_input_buf",
        "blocked_clients",
    ],
    "Memory": [
        "used_memory", "used_memory_human", "used_memory_rss", "used_memory_peak",
        "used_memory_peak_human", "mem_fragmentation_ratio", "mem_allocator",
        "mem_heap_trims", "mem_allocated_blocks",
    ],
    "Jobs": ["registered_jobs"],
    "Queues": ["registered_queues"],
    "Persistence": [
        "loading", "aof_enabled", "aof_state", "aof_rewrite_in_progress",
        "aof_rewrite_scheduled", "aof_last_rewrite_time_sec", "aof_current_rewrite_time_sec",
        "aof_last_bgrewrite_status", "aof_last_write_status",
    ],
    "Stats": [
        "total_connections_received", "total_commands_processed", "instantaneous_ops_per_sec",
        "total_net_input_bytes", "total_net_output_bytes", "instantaneous_input_kbps",
        "instantaneous_output_kbps", "rejected_connections", "latest_fork_usec",
    ],
    "CPU": ["used_cpu_sys", "used_cpu_user", "used_cpu_sys_children", "used_cpu_user_children"],
}  # fmt: skip

AOF_ON_FIELDS = [
    "aof_current_size", "aof_base_size", "aof_pending_rewrite", "aof_buffer_length",
    "aof_rewrite_buffer_length", "aof_pending_bio_fsync", "aof_delayed_fsync",
]  # fmt: skip

INT = re.compile(r"-?\d+\Z")
FLOAT2 = re.compile(r"-?\d+\.\d\d\Z")


@pytest.fixture
def raw(server):
    with RawConnection(server.port) as conn:
        yield conn


def info(raw: RawConnection, *section: str) -> bytes:
    text = raw.command(b"INFO", *section)
    assert isinstance(text, bytes) and not isinstance(text, Error), text
    return text


def parse(text: bytes) -> list[tuple[str, list[tuple[str, str]]]]:
    """``[(section, [(key, value), ...]), ...]`` checking the exact layout on the way."""
    assert text.endswith(b"\r\n")
    assert b"\n" not in text.replace(b"\r\n", b"")
    blocks = text.decode().split("\r\n\r\n")
    out = []
    for block in blocks:
        lines = block.split("\r\n")
        if lines[-1] == "":
            lines.pop()
        assert lines[0].startswith("# "), block
        fields = []
        for line in lines[1:]:
            key, sep, value = line.partition(":")
            assert sep and key and not key.startswith("#"), line
            fields.append((key, value))
        out.append((lines[0][2:], fields))
    return out


def fields(raw: RawConnection, section: str) -> dict[str, str]:
    [(name, pairs)] = parse(info(raw, section))
    assert name.lower() == section.lower()
    return dict(pairs)


# ---------------------------------------------------------------- layout


def test_info_is_a_bulk_string(raw):
    raw.send(b"INFO\r\n")
    data = raw.read_raw()
    assert data.startswith(b"$")
    header, body = data.split(b"\r\n", 1)
    assert int(header[1:]) == len(body) - 2


def test_default_has_every_section_but_commandstats_in_order(raw):
    parsed = parse(info(raw))
    assert [name for name, _ in parsed] == SECTIONS


def test_every_field_in_order(raw):
    for name, pairs in parse(info(raw)):
        assert [key for key, _ in pairs] == FIELDS[name], name


def test_sections_are_separated_by_one_blank_line(raw):
    text = info(raw).decode()
    assert text.startswith("# Server\r\ndisque_version:1.0-rc1\r\n")
    for name in SECTIONS[1:]:
        assert f"\r\n\r\n# {name}\r\n" in text
    assert "\r\n\r\n\r\n" not in text
    assert not text.endswith("\r\n\r\n")


def test_default_section_name_equals_no_argument(raw):
    no_arg = [n for n, _ in parse(info(raw))]
    assert [n for n, _ in parse(info(raw, "default"))] == no_arg
    assert [n for n, _ in parse(info(raw, "DeFaUlT"))] == no_arg


def test_all_adds_commandstats_last(raw):
    raw.command(b"PING")
    parsed = parse(info(raw, "all"))
    assert [n for n, _ in parsed] == [*SECTIONS, "Commandstats"]
    assert [n for n, _ in parse(info(raw, "ALL"))][-1] == "Commandstats"


@pytest.mark.parametrize("section", [s.lower() for s in SECTIONS])
def test_single_section(raw, section):
    parsed = parse(info(raw, section))
    assert len(parsed) == 1
    name, pairs = parsed[0]
    assert name.lower() == section
    assert [k for k, _ in pairs] == FIELDS[name]


@pytest.mark.parametrize("section", ["SERVER", "Clients", "mEmOrY", "JOBS", "Cpu"])
def test_section_names_are_case_insensitive(raw, section):
    [(name, _)] = parse(info(raw, section))
    assert name.lower() == section.lower()


@pytest.mark.parametrize("section", ["nosuchsection", "", "server,clients", "keyspace"])
def test_unknown_section_is_an_empty_bulk(raw, section):
    raw.send(b"*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n" % (len(section), section.encode()))
    assert raw.read_raw() == b"$0\r\n\r\n"


def test_more_than_one_argument_is_a_syntax_error(raw):
    assert raw.command(b"INFO", b"server", b"clients") == Error(b"ERR syntax error")
    assert raw.command(b"INFO", b"a", b"b", b"c") == Error(b"ERR syntax error")


# ---------------------------------------------------------------- server


def test_server_fields(raw, server):
    f = fields(raw, "server")
    uname = os.uname()
    assert f["disque_version"] == "1.0-rc1"
    assert re.fullmatch(r"[0-9a-f]+", f["disque_git_sha1"])
    assert f["disque_git_dirty"] in ("0", "1")
    assert re.fullmatch(r"[0-9a-f]+", f["disque_build_id"])
    assert f["disquette_build"] == build.current()  # the server runs what this process does
    assert f["os"] == f"{uname.sysname} {uname.release} {uname.machine}"
    assert f["arch_bits"] in ("32", "64")
    assert f["multiplexing_api"] == "epoll"
    assert re.fullmatch(r"\d+\.\d+\.\d+", f["gcc_version"])
    assert f["process_id"] == str(server.proc.pid)
    assert re.fullmatch(r"[0-9a-f]{40}", f["run_id"])
    assert f["tcp_port"] == str(server.port)
    assert INT.match(f["uptime_in_seconds"]) and int(f["uptime_in_seconds"]) >= 0
    assert int(f["uptime_in_days"]) == int(f["uptime_in_seconds"]) // 86400
    assert f["hz"] == "10"
    assert f["executable"] == "" or os.path.isabs(f["executable"])
    assert f["config_file"] == ""


def test_run_id_is_stable_per_process_and_random_per_process(raw, tmp_path):
    first = fields(raw, "server")["run_id"]
    assert fields(raw, "server")["run_id"] == first
    other_dir = tmp_path / "other"  # a node of its own: nodes.conf is locked per process
    other_dir.mkdir()
    with running_server(other_dir) as other, RawConnection(other.port) as conn:
        assert fields(conn, "server")["run_id"] != first


def test_hz_follows_config_set(raw):
    assert raw.command(b"CONFIG", b"SET", b"hz", b"42") == b"OK"
    assert fields(raw, "server")["hz"] == "42"


def test_config_file_is_the_absolute_path(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text("hz 10\n")
    with running_server(tmp_path, config_file=conf) as srv, RawConnection(srv.port) as conn:
        f = fields(conn, "server")
        assert os.path.isabs(f["config_file"])
        assert os.path.samefile(f["config_file"], conf)


# ---------------------------------------------------------------- clients


def test_connected_clients_counts_connections(raw, server):
    base = int(fields(raw, "clients")["connected_clients"])
    extra = [RawConnection(server.port) for _ in range(3)]
    try:
        for conn in extra:
            conn.command(b"PING")
        assert int(fields(raw, "clients")["connected_clients"]) == base + 3
    finally:
        for conn in extra:
            conn.close()
    wait_for(lambda: int(fields(raw, "clients")["connected_clients"]) == base, what="closed")


def test_blocked_clients_counts_getjob_waiters(raw, server):
    assert fields(raw, "clients")["blocked_clients"] == "0"
    waiter = RawConnection(server.port)
    try:
        waiter.send(b"GETJOB FROM info-blocked-q\r\n")
        wait_for(lambda: fields(raw, "clients")["blocked_clients"] == "1", what="blocked")
    finally:
        waiter.close()
    wait_for(lambda: fields(raw, "clients")["blocked_clients"] == "0", what="unblocked")


def test_client_biggest_input_buf_sees_a_partial_request(raw, server):
    assert fields(raw, "clients")["client_biggest_input_buf"] == "0"
    with RawConnection(server.port) as partial:
        partial.send(b"*3\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$1000\r\n" + b"x" * 500)
        wait_for(
            lambda: int(fields(raw, "clients")["client_biggest_input_buf"]) > 0,
            what="query buffer",
        )


def test_clients_values_are_integers(raw):
    for value in fields(raw, "clients").values():
        assert INT.match(value)


# ---------------------------------------------------------------- memory


def test_memory_fields(raw):
    f = fields(raw, "memory")
    for key in ("used_memory", "used_memory_rss", "used_memory_peak"):
        assert INT.match(f[key]), key
    assert int(f["used_memory_rss"]) > 0
    assert int(f["used_memory_peak"]) >= int(f["used_memory"])
    assert f["used_memory_human"] == human_bytes(int(f["used_memory"]))
    assert f["used_memory_peak_human"] == human_bytes(int(f["used_memory_peak"]))
    assert FLOAT2.match(f["mem_fragmentation_ratio"])
    assert f["mem_allocator"] in ("libc", "pymalloc")


def test_used_memory_grows_with_jobs_and_the_peak_stays(raw):
    before = int(fields(raw, "memory")["used_memory"])
    body = b"x" * 10_000
    for _ in range(20):
        assert raw.command(b"ADDJOB", b"memq", body, 0).startswith(b"D-")
    during = fields(raw, "memory")
    assert int(during["used_memory"]) >= before + 20 * len(body)
    assert raw.command(b"DEBUG", b"FLUSHALL") == b"OK"
    after = fields(raw, "memory")
    assert int(after["used_memory"]) < int(during["used_memory"])
    assert int(after["used_memory_peak"]) >= int(during["used_memory"])


# ---------------------------------------------------------------- jobs, queues


def test_registered_jobs_and_queues(raw):
    assert fields(raw, "jobs") == {"registered_jobs": "0"}
    assert fields(raw, "queues") == {"registered_queues": "0"}
    for queue in (b"qa", b"qa", b"qb"):
        raw.command(b"ADDJOB", queue, b"body", 0)
    assert fields(raw, "jobs") == {"registered_jobs": "3"}
    assert fields(raw, "queues") == {"registered_queues": "2"}
    assert raw.command(b"DEBUG", b"FLUSHALL") == b"OK"
    assert fields(raw, "jobs") == {"registered_jobs": "0"}
    assert fields(raw, "queues") == {"registered_queues": "0"}


def test_registered_queues_counts_empty_queues(raw):
    job_id = raw.command(b"ADDJOB", b"emptied", b"body", 0)
    assert raw.command(b"GETJOB", b"FROM", b"emptied")[0][1] == job_id
    assert raw.command(b"QLEN", b"emptied") == 0
    assert fields(raw, "queues") == {"registered_queues": "1"}


# ---------------------------------------------------------------- persistence


def test_persistence_with_aof_off(raw):
    f = fields(raw, "persistence")
    assert list(f) == FIELDS["Persistence"]
    assert f["loading"] == "0"
    assert f["aof_enabled"] == "0"
    assert f["aof_state"] == "off"
    assert f["aof_rewrite_in_progress"] == "0"
    assert f["aof_rewrite_scheduled"] == "0"
    assert f["aof_last_rewrite_time_sec"] == "-1"
    assert f["aof_current_rewrite_time_sec"] == "-1"
    assert f["aof_last_bgrewrite_status"] == "ok"
    assert f["aof_last_write_status"] == "ok"


def test_persistence_with_aof_on_has_the_extra_fields(tmp_path):
    with running_server(tmp_path, ["--appendonly", "yes"]) as srv, RawConnection(srv.port) as conn:
        f = fields(conn, "persistence")
        assert list(f) == FIELDS["Persistence"] + AOF_ON_FIELDS
        assert f["aof_enabled"] == "1"
        assert f["aof_state"] in ("on", "wait-rewrite")
        for key in AOF_ON_FIELDS:
            assert INT.match(f[key]), key


# ---------------------------------------------------------------- stats


def test_stats_counters(raw, server):
    f = fields(raw, "stats")
    for key in FIELDS["Stats"]:
        pattern = FLOAT2 if key.endswith("_kbps") else INT
        assert pattern.match(f[key]), key
    commands = int(f["total_commands_processed"])
    connections = int(f["total_connections_received"])
    net_in = int(f["total_net_input_bytes"])
    net_out = int(f["total_net_output_bytes"])
    with RawConnection(server.port) as other:
        other.command(b"PING")
        other.command(b"PING")
    g = fields(raw, "stats")
    assert int(g["total_connections_received"]) == connections + 1
    # the two PINGs and the previous INFO
    assert int(g["total_commands_processed"]) == commands + 3
    assert int(g["total_net_input_bytes"]) > net_in
    assert int(g["total_net_output_bytes"]) > net_out
    assert g["rejected_connections"] == "0"
    assert g["latest_fork_usec"] == "0"


def test_rejected_connections(tmp_path):
    with running_server(tmp_path, ["--maxclients", "1"]) as srv, RawConnection(srv.port) as conn:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as extra:
            data = b""
            while not data.endswith(b"\r\n"):
                chunk = extra.recv(100)
                if not chunk:
                    break
                data += chunk
            assert data == b"-ERR max number of clients reached\r\n"
        assert fields(conn, "stats")["rejected_connections"] == "1"


def test_instantaneous_ops_per_sec_rises_under_load(raw):
    def busy() -> bool:
        for _ in range(50):
            raw.command(b"PING")
        return int(fields(raw, "stats")["instantaneous_ops_per_sec"]) > 0

    wait_for(busy, what="ops/sec sample")


# ---------------------------------------------------------------- cpu


def test_cpu_fields_are_two_decimal_floats(raw):
    f = fields(raw, "cpu")
    assert list(f) == FIELDS["CPU"]
    for value in f.values():
        assert FLOAT2.match(value)


# ---------------------------------------------------------------- commandstats


CMDSTAT = re.compile(r"cmdstat_([a-z]+):calls=(\d+),usec=(\d+),usec_per_call=(\d+\.\d\d)\Z")


def commandstats(raw: RawConnection) -> dict[str, tuple[int, int, str]]:
    [(name, pairs)] = parse(info(raw, "commandstats"))
    assert name == "Commandstats"
    out = {}
    for key, value in pairs:
        m = CMDSTAT.match(f"{key}:{value}")
        assert m, (key, value)
        out[m.group(1)] = (int(m.group(2)), int(m.group(3)), m.group(4))
    return out


def test_commandstats_lists_only_called_commands(raw):
    stats = commandstats(raw)
    # only the readiness probe's PINGs ran before; INFO is counted after it replies
    assert set(stats) <= {"ping"}
    pings = stats.get("ping", (0,))[0]
    for _ in range(3):
        raw.command(b"PING")
    raw.command(b"QLEN", b"q")
    stats = commandstats(raw)
    assert stats["info"][0] == 1
    assert stats["ping"][0] == pings + 3
    assert stats["qlen"][0] == 1
    assert "addjob" not in stats


def test_commandstats_usec_per_call(raw):
    raw.command(b"DEBUG", b"SLEEP", b"0.01")
    calls, usec, per_call = commandstats(raw)["debug"]
    assert calls == 1
    assert usec >= 10_000
    assert per_call == f"{usec / calls:.2f}"


def test_commandstats_in_command_table_order(raw):
    for cmd in (b"QLEN q", b"HELLO", b"PING", b"TIME"):
        raw.send(cmd + b"\r\n")
        raw.read()
    names = list(commandstats(raw))
    order = ["ping", "time", "hello", "qlen"]
    assert [n for n in names if n in order] == order


def test_commandstats_not_in_default(raw):
    raw.command(b"PING")
    assert b"cmdstat_" not in info(raw)


def test_errors_before_execution_are_not_counted(raw):
    raw.command(b"QLEN")  # arity error
    raw.command(b"NOSUCHCOMMAND")
    assert "qlen" not in commandstats(raw)


# ---------------------------------------------------------------- clients


def test_redis_py_parses_info(server):
    client = server.client()
    try:
        parsed = client.info()
        assert parsed["disque_version"] == "1.0-rc1"
        assert parsed["tcp_port"] == server.port
        assert parsed["aof_state"] == "off"
        assert "used_cpu_user" in parsed
        assert client.info("jobs") == {"registered_jobs": 0}
    finally:
        client.close()


def test_redis_cli_info(server):
    out = subprocess.run(
        ["redis-cli", "-p", str(server.port), "INFO", "server"],
        capture_output=True,
        timeout=30,
        check=True,
    ).stdout.decode()
    lines = [line.rstrip("\r") for line in out.splitlines()]
    assert lines[0] == "# Server"
    assert "disque_version:1.0-rc1" in lines
    assert f"tcp_port:{server.port}" in lines


def test_the_pure_switch_shows_in_info_and_the_log(tmp_path, monkeypatch):
    monkeypatch.setenv(build.PURE_SWITCH, "1")
    with running_server(tmp_path) as server:
        assert server.client().info("server")["disquette_build"] == "pure"
        log = server.log()
    assert "(disquette " in log and ", pure build)" in log
    assert "The pure build runs: DISQUETTE_PURE is set" in log
