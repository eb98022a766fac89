"""CONFIG GET, CONFIG SET and CONFIG REWRITE on a Config."""

from __future__ import annotations

import os

import pytest

from disquette.config import (
    GET_ORDER,
    PARAMS,
    REWRITE_ORDER,
    SETTABLE,
    ClientLimit,
    Config,
    ConfigRewriteError,
    ConfigSetError,
    config_get,
    config_rewrite,
    config_set,
    load_config_file,
    load_config_text,
    rewrite_config_text,
)
from disquette.config.model import Config as ModelConfig
from disquette.config.table import TLS_NAMES, flow_to_disk_threshold


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def get(config: Config, pattern: bytes) -> dict[bytes, bytes]:
    return dict(config_get(config, pattern))


def set_error(config: Config, name: bytes, value: bytes) -> str:
    with pytest.raises(ConfigSetError) as info:
        config_set(config, name, value)
    return info.value.message


# ---------------------------------------------------------------- the table


def test_orders_cover_exactly_the_table_columns():
    assert len(GET_ORDER) == len(set(GET_ORDER))
    assert set(GET_ORDER) == {p.name for p in PARAMS if p.get is not None}
    assert len(REWRITE_ORDER) == len(set(REWRITE_ORDER))
    assert set(REWRITE_ORDER) == {p.name for p in PARAMS if p.rewrite is not None}


def test_config_attributes_are_annotated():
    annotated = set(ModelConfig.__annotations__)
    assert {p.attr for p in PARAMS} | {"config_file", "on_change"} == annotated


# ---------------------------------------------------------------- GET


#: The TLS directives unset by default (CONFIG GET shows "").
TLS_UNSET = [f"tls-{name}".encode() for name in (
    "cert-file", "key-file", "key-file-pass", "ca-cert-file", "ca-cert-dir", "protocols",
    "ciphers", "ciphersuites",
)]  # fmt: skip

EXPECTED_GET_ORDER = [
    "requirepass", "unixsocket", "logfile", "pidfile", "maxmemory", "maxmemory-samples",
    "timeout", "auto-aof-rewrite-percentage", "auto-aof-rewrite-min-size",
    "slowlog-log-slower-than", "latency-monitor-threshold", "slowlog-max-len", "port",
    "tcp-backlog", "databases", "maxclients", "watchdog-period", "hz", "cluster-node-timeout",
    "tcp-keepalive", "no-appendfsync-on-rewrite", "daemonize", "activerehashing",
    "aof-rewrite-incremental-fsync", "aof-load-truncated", "aof-enqueue-jobs-once",
    "maxmemory-policy", "loglevel", "appendfsync", "syslog-facility", "appendonly", "dir",
    "client-output-buffer-limit", "unixsocketperm", "bind", "aclfile", "acllog-max-len",
    "protected-mode", "cluster-secret",
    "replica-repair", "replica-repair-delay", "cluster-announce-ip", "cluster-announce-port",
    "cluster-announce-bus-port", "cluster-seeds", "clock-skew-warn-ms", "flow-to-disk",
    "flow-to-disk-level", "flow-to-disk-dir", "flow-to-disk-max-size", "flow-to-disk-readahead",
    "result-ttl", "job-max-size", "http-port", "http-bind", "metrics-queues-max", "tls-port",
    "tls-cert-file",
    "tls-key-file", "tls-key-file-pass", "tls-ca-cert-file", "tls-ca-cert-dir",
    "tls-auth-clients", "tls-protocols", "tls-ciphers", "tls-ciphersuites",
    "tls-prefer-server-ciphers", "tls-session-caching", "tls-cluster", "tls-http",
]  # fmt: skip


def test_get_all_in_order_with_defaults(tmp_path):
    pairs = config_get(Config(), b"*")
    assert [name.decode() for name, _ in pairs] == EXPECTED_GET_ORDER
    assert dict(pairs) == {
        b"requirepass": b"",
        b"unixsocket": b"",
        b"logfile": b"",
        b"pidfile": b"/var/run/disque.pid",
        b"maxmemory": b"1073741824",
        b"maxmemory-samples": b"5",
        b"timeout": b"0",
        b"auto-aof-rewrite-percentage": b"100",
        b"auto-aof-rewrite-min-size": b"67108864",
        b"slowlog-log-slower-than": b"10000",
        b"latency-monitor-threshold": b"0",
        b"slowlog-max-len": b"128",
        b"port": b"7711",
        b"tcp-backlog": b"511",
        b"databases": b"16",
        b"maxclients": b"10000",
        b"watchdog-period": b"0",
        b"hz": b"10",
        b"cluster-node-timeout": b"15000",
        b"tcp-keepalive": b"no",
        b"no-appendfsync-on-rewrite": b"no",
        b"daemonize": b"no",
        b"activerehashing": b"yes",
        b"aof-rewrite-incremental-fsync": b"yes",
        b"aof-load-truncated": b"yes",
        b"aof-enqueue-jobs-once": b"no",
        b"maxmemory-policy": b"acks",
        b"loglevel": b"notice",
        b"appendfsync": b"everysec",
        b"syslog-facility": b"local0",
        b"appendonly": b"no",
        b"dir": str(tmp_path).encode(),
        b"client-output-buffer-limit": b"normal 0 0 0",
        b"unixsocketperm": b"0",
        b"bind": b"",
        b"aclfile": b"",
        b"acllog-max-len": b"128",
        b"protected-mode": b"yes",
        b"cluster-secret": b"",
        b"replica-repair": b"yes",
        b"replica-repair-delay": b"0",
        b"cluster-announce-ip": b"",
        b"cluster-announce-port": b"0",
        b"cluster-announce-bus-port": b"0",
        b"cluster-seeds": b"",
        b"clock-skew-warn-ms": b"500",
        b"flow-to-disk": b"no",
        b"flow-to-disk-level": b"60%",
        b"flow-to-disk-dir": b"spill",
        b"flow-to-disk-max-size": b"0",
        b"flow-to-disk-readahead": b"256",
        b"result-ttl": b"3600",
        b"job-max-size": b"16777216",
        b"http-port": b"0",
        b"http-bind": b"",
        b"metrics-queues-max": b"1000",
        **dict.fromkeys(TLS_UNSET, b""),
        b"tls-port": b"0",
        b"tls-auth-clients": b"yes",
        b"tls-prefer-server-ciphers": b"no",
        b"tls-session-caching": b"yes",
        b"tls-cluster": b"no",
        b"tls-http": b"no",
    }


def test_get_formats_loaded_values(tmp_path):
    c = load_config_text(
        "requirepass pw\nunixsocket /tmp/s\nunixsocketperm 755\nbind 127.0.0.1 ::1\n"
        "tcp-keepalive 60\nappendonly yes\nclient-output-buffer-limit normal 1mb 2kb 3\n"
        "maxmemory 2gb\nloglevel WARNING\nsyslog-facility LOCAL3\n"
    )
    got = get(c, b"*")
    assert got[b"requirepass"] == b"pw"
    assert got[b"unixsocket"] == b"/tmp/s"
    assert got[b"unixsocketperm"] == b"755"
    assert got[b"bind"] == b"127.0.0.1 ::1"
    assert got[b"tcp-keepalive"] == b"yes"
    assert got[b"appendonly"] == b"yes"
    assert got[b"client-output-buffer-limit"] == b"normal 1048576 2048 3"
    assert got[b"maxmemory"] == b"2147483648"
    assert got[b"loglevel"] == b"warning"
    assert got[b"syslog-facility"] == b"local3"


def test_get_hides_options_not_in_disques_list():
    names = get(Config(), b"*")
    for hidden in (b"syslog-enabled", b"syslog-ident", b"appendfilename", b"cluster-config-file"):
        assert hidden not in names


def test_get_dir_is_the_current_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    c = Config()
    os.chdir("sub")
    assert get(c, b"dir") == {b"dir": str(tmp_path / "sub").encode()}


@pytest.mark.parametrize(
    "pattern, names",
    [
        (b"port", [b"port"]),
        (b"PORT", []),
        (b"nosuch", []),
        (b"max*", [b"maxmemory", b"maxmemory-samples", b"maxclients", b"maxmemory-policy"]),
        (b"*policy", [b"maxmemory-policy"]),
        (b"?ir", [b"dir"]),
        (b"[bp]*", [b"pidfile", b"port", b"bind", b"protected-mode"]),
        (b"[^a-s]*", [b"unixsocket", b"timeout", b"tcp-backlog", b"watchdog-period",
                      b"tcp-keepalive", b"unixsocketperm",
                      *(name.encode() for name in TLS_NAMES)]),
        (b"aof-*", [b"aof-rewrite-incremental-fsync", b"aof-load-truncated",
                    b"aof-enqueue-jobs-once"]),
        (b"hz\x00junk", [b"hz"]),
    ],
)  # fmt: skip
def test_get_glob(pattern, names):
    assert [name for name, _ in config_get(Config(), pattern)] == names


# ---------------------------------------------------------------- SET


def test_set_unsupported():
    c = Config()
    for name in (b"nosuch", b"port", b"bind", b"databases", b"daemonize", b"pidfile",
                 b"logfile", b"unixsocket", b"appendfilename", b"cluster-config-file",
                 b"syslog-facility", b"no-appendfsync-on-rewrite", b"rename-command",
                 b"include", b"tcp-backlog", b"unixsocketperm"):  # fmt: skip
        assert set_error(c, name, b"1") == f"Unsupported CONFIG parameter: {name.decode()}"
    assert set_error(c, b"PoRt", b"1") == "Unsupported CONFIG parameter: PoRt"


def test_settable_list():
    assert set(SETTABLE) == {
        "requirepass", "maxclients", "appendonly", "dir", "client-output-buffer-limit",
        "aof-rewrite-incremental-fsync", "aof-load-truncated", "activerehashing",
        "tcp-keepalive", "aof-enqueue-jobs-once", "maxmemory-samples", "timeout",
        "auto-aof-rewrite-percentage", "auto-aof-rewrite-min-size", "slowlog-log-slower-than",
        "slowlog-max-len", "latency-monitor-threshold", "cluster-node-timeout", "hz",
        "watchdog-period", "maxmemory", "loglevel", "maxmemory-policy", "appendfsync",
        "protected-mode", "acllog-max-len", "replica-repair", "replica-repair-delay",
        "cluster-announce-ip", "cluster-announce-port", "cluster-announce-bus-port",
        "cluster-seeds", "clock-skew-warn-ms",
        "flow-to-disk", "flow-to-disk-level", "flow-to-disk-dir", "flow-to-disk-max-size",
        "flow-to-disk-readahead", "result-ttl", "job-max-size", "http-port", "http-bind",
        "metrics-queues-max", "tls-cert-file", "tls-key-file", "tls-key-file-pass",
        "tls-ca-cert-file", "tls-ca-cert-dir", "tls-auth-clients", "tls-protocols", "tls-ciphers",
        "tls-ciphersuites",
        "tls-prefer-server-ciphers", "tls-session-caching", "tls-http",
    }  # fmt: skip


def test_set_invalid_argument_text_keeps_typed_name_and_value():
    c = Config()
    assert set_error(c, b"MaxClients", b"zero") == (
        "Invalid argument 'zero' for CONFIG SET 'MaxClients'"
    )
    assert set_error(c, b"hz", b"1x\x00tail") == "Invalid argument '1x' for CONFIG SET 'hz'"


def test_set_name_is_case_insensitive():
    c = Config()
    config_set(c, b"HZ", b"20")
    config_set(c, b"MaxMemory-Policy", b"NOEVICTION")
    assert (c.hz, c.maxmemory_policy) == (20, "noeviction")


@pytest.mark.parametrize(
    "name, lo",
    [
        ("maxmemory-samples", 1),
        ("timeout", 0),
        ("auto-aof-rewrite-percentage", 0),
        ("slowlog-log-slower-than", 0),
        ("slowlog-max-len", 0),
        ("latency-monitor-threshold", 0),
        ("cluster-node-timeout", 0),
        ("watchdog-period", 0),
        ("maxclients", 1),
        ("auto-aof-rewrite-min-size", 0),
        ("replica-repair-delay", 0),
        ("clock-skew-warn-ms", 0),
        ("cluster-announce-port", 0),
        ("cluster-announce-bus-port", 0),
    ],
)
def test_set_integers(name, lo):
    c = Config()
    attr = name.replace("-", "_")
    config_set(c, name.encode(), str(lo).encode())
    assert getattr(c, attr) == lo
    config_set(c, name.encode(), b"+0012345")
    assert getattr(c, attr) == 12345
    for bad in (
        str(lo - 1).encode(),
        b"1x",
        b" 5",
        b"5 ",
        b"x",
        b"1.5",
        b"-",
        b"",  # Disque's strict integer reads "" as 0: refused here, as in the file
        b"99999999999999999999",
    ):
        assert set_error(c, name.encode(), bad) == (
            f"Invalid argument '{bad.decode()}' for CONFIG SET '{name}'"
        )
        assert getattr(c, attr) == 12345


@pytest.mark.parametrize(
    "name", ["timeout", "maxclients", "maxmemory-samples", "auto-aof-rewrite-percentage",
             "watchdog-period"],
)  # fmt: skip
def test_set_c_int_fields_refuse_values_beyond_int(name):
    c = Config()
    config_set(c, name.encode(), b"2147483647")
    assert set_error(c, name.encode(), b"2147483648").startswith("Invalid argument")


def test_set_large_integers_where_c_uses_long_long():
    c = Config()
    config_set(c, b"slowlog-log-slower-than", b"9223372036854775807")
    config_set(c, b"auto-aof-rewrite-min-size", b"9223372036854775807")
    assert c.slowlog_log_slower_than == c.auto_aof_rewrite_min_size == 2**63 - 1


def test_set_reads_values_as_the_file_does():
    """One parser per kind: units of sizes and durations in CONFIG SET too."""
    c = Config()
    config_set(c, b"auto-aof-rewrite-min-size", b"64mb")
    config_set(c, b"cluster-node-timeout", b"20s")
    config_set(c, b"job-max-size", b"1mb")
    assert (c.auto_aof_rewrite_min_size, c.cluster_node_timeout, c.job_max_size) == (
        64 << 20,
        20_000,
        1 << 20,
    )
    for name, bad in ((b"maxmemory", b"100MBs"), (b"timeout", b"1ms"), (b"job-max-size", b"64mb"),
                      (b"job-max-size", b"0"), (b"slowlog-max-len", b"10k")):  # fmt: skip
        assert set_error(c, name, bad).startswith("Invalid argument")


def test_set_hz_clamped():
    c = Config()
    for value, expected in ((b"0", 1), (b"1", 1), (b"500", 500), (b"501", 500), (b"99999999", 500)):
        config_set(c, b"hz", value)
        assert c.hz == expected
    assert set_error(c, b"hz", b"-1") == "Invalid argument '-1' for CONFIG SET 'hz'"


def test_set_maxmemory_with_units():
    c = Config()
    for value, expected in ((b"100mb", 100 << 20), (b"1GB", 1 << 30), (b"5k", 5000), (b"0", 0),
                            (b"123", 123), (b"+5", 5), (b"7b", 7)):  # fmt: skip
        config_set(c, b"maxmemory", value)
        assert c.maxmemory == expected
    for bad in (b"-1", b"10xb", b"1.5gb", b"", b"abc", b"100MBs"):
        assert set_error(c, b"maxmemory", bad).startswith("Invalid argument")
        assert c.maxmemory == 7


@pytest.mark.parametrize(
    "name",
    ["aof-rewrite-incremental-fsync", "aof-load-truncated", "activerehashing",
     "aof-enqueue-jobs-once", "appendonly", "protected-mode", "replica-repair", "flow-to-disk"],
)  # fmt: skip
def test_set_booleans(name):
    c = Config()
    attr = name.replace("-", "_")
    config_set(c, name.encode(), b"YES")
    assert getattr(c, attr) is True
    config_set(c, name.encode(), b"no")
    assert getattr(c, attr) is False
    assert set_error(c, name.encode(), b"1") == f"Invalid argument '1' for CONFIG SET '{name}'"


def test_set_tcp_keepalive_is_a_boolean_stored_as_1_or_0():
    c = load_config_text("tcp-keepalive 300")
    assert get(c, b"tcp-keepalive") == {b"tcp-keepalive": b"yes"}
    config_set(c, b"tcp-keepalive", b"no")
    assert c.tcp_keepalive == 0
    config_set(c, b"tcp-keepalive", b"yes")
    assert c.tcp_keepalive == 1
    assert set_error(c, b"tcp-keepalive", b"60").startswith("Invalid argument")


@pytest.mark.parametrize(
    "name, values",
    [
        ("loglevel", ["debug", "verbose", "notice", "warning"]),
        ("maxmemory-policy", ["acks", "noeviction"]),
        ("appendfsync", ["always", "everysec", "no"]),
    ],
)
def test_set_enums(name, values):
    c = Config()
    attr = name.replace("-", "_")
    for value in values:
        config_set(c, name.encode(), value.upper().encode())
        assert getattr(c, attr) == value
    assert set_error(c, name.encode(), b"bogus") == (
        f"Invalid argument 'bogus' for CONFIG SET '{name}'"
    )
    assert getattr(c, attr) == values[-1]


def test_set_flow_to_disk_level():
    c = Config()
    for value, stored in ((b"1%", "1%"), (b"95%", "95%"), (b"060%", "60%"), (b"512mb", "536870912"),
                          (b"2GB", "2147483648"), (b"5k", "5000"), (b"123", "123")):  # fmt: skip
        config_set(c, b"flow-to-disk-level", value)
        assert c.flow_to_disk_level == stored
        assert get(c, b"flow-to-disk-level") == {b"flow-to-disk-level": stored.encode()}
    for bad in (b"0%", b"96%", b"100%", b"-5%", b"%", b"5.5%", b" 60%", b"60 %", b"0", b"-1",
                b"", b"10xb", b"1.5gb", b"abc"):  # fmt: skip
        assert set_error(c, b"flow-to-disk-level", bad) == (
            f"Invalid argument '{bad.decode()}' for CONFIG SET 'flow-to-disk-level'"
        )
        assert c.flow_to_disk_level == "123"


def test_flow_to_disk_threshold_follows_maxmemory():
    c = Config()
    assert flow_to_disk_threshold(c) == (1 << 30) // 100 * 60  # 60% of 1gb
    config_set(c, b"maxmemory", b"100mb")
    assert flow_to_disk_threshold(c) == (100 << 20) // 100 * 60
    config_set(c, b"flow-to-disk-level", b"95%")
    assert flow_to_disk_threshold(c) == (100 << 20) // 100 * 95
    config_set(c, b"maxmemory", b"0")  # a share of no limit: never spill
    assert flow_to_disk_threshold(c) == 0
    config_set(c, b"flow-to-disk-level", b"512mb")  # a size does not depend on maxmemory
    assert flow_to_disk_threshold(c) == 512 << 20
    config_set(c, b"maxmemory", b"1gb")
    assert flow_to_disk_threshold(c) == 512 << 20


def test_set_flow_to_disk_max_size_and_dir():
    c = Config()
    config_set(c, b"flow-to-disk-max-size", b"10gb")
    assert c.flow_to_disk_max_size == 10 << 30
    config_set(c, b"flow-to-disk-max-size", b"0")
    assert c.flow_to_disk_max_size == 0
    for bad in (b"-1", b"10xb", b"abc"):
        assert set_error(c, b"flow-to-disk-max-size", bad).startswith("Invalid argument")
    config_set(c, b"flow-to-disk-readahead", b"32")
    assert c.flow_to_disk_readahead == 32
    for bad in (b"0", b"100001", b"x"):
        assert set_error(c, b"flow-to-disk-readahead", bad).startswith("Invalid argument")
    config_set(c, b"flow-to-disk-dir", b"/var/spool/disquette spill")
    assert get(c, b"flow-to-disk-dir") == {b"flow-to-disk-dir": b"/var/spool/disquette spill"}
    assert set_error(c, b"flow-to-disk-dir", b"") == (
        "Invalid argument '' for CONFIG SET 'flow-to-disk-dir'"
    )
    assert c.flow_to_disk_dir == "/var/spool/disquette spill"


def test_set_http_directives():
    c = Config()
    config_set(c, b"http-port", b"8711")
    config_set(c, b"http-bind", b"127.0.0.1  ::1")
    assert get(c, b"http-*") == {b"http-port": b"8711", b"http-bind": b"127.0.0.1 ::1"}
    for bad in (b"-1", b"65536", b"x"):
        assert (
            set_error(c, b"http-port", bad)
            == f"Invalid argument '{bad.decode()}' for CONFIG SET 'http-port'"
        )
    many = " ".join(f"10.0.0.{i}" for i in range(17)).encode()
    assert set_error(c, b"http-bind", many).startswith("Invalid argument")
    config_set(c, b"http-bind", b"")
    assert (c.http_port, c.http_bind) == (8711, [])


def test_set_requirepass():
    c = Config()
    config_set(c, b"requirepass", b"x" * 512)
    assert c.requirepass == "x" * 512
    assert set_error(c, b"requirepass", b"x" * 513).startswith("Invalid argument")
    config_set(c, b"requirepass", b"")
    assert c.requirepass is None
    config_set(c, b"requirepass", b"a\x00b")
    assert c.requirepass == "a"


def test_set_dir(tmp_path):
    (tmp_path / "sub").mkdir()
    c = Config()
    config_set(c, b"dir", b"sub")
    assert os.getcwd() == str(tmp_path / "sub") == c.dir
    assert set_error(c, b"dir", b"/nonexistent/x") == (
        "Changing directory: No such file or directory"
    )
    assert os.getcwd() == str(tmp_path / "sub")


def test_set_client_output_buffer_limit():
    c = Config()
    config_set(c, b"client-output-buffer-limit", b"normal 100 200 30")
    assert c.client_output_buffer_limit == ClientLimit(100, 200, 30)
    config_set(c, b"client-output-buffer-limit", b"NORMAL 1 2 3 normal 4 5 6")
    assert c.client_output_buffer_limit == ClientLimit(4, 5, 6)
    config_set(c, b"client-output-buffer-limit", b"")  # nothing to apply
    assert c.client_output_buffer_limit == ClientLimit(4, 5, 6)
    for bad in (
        b"normal 1 2",
        b"slave 1 2 3",
        b"pubsub 1 2 3",
        b"normal -1 2 3",
        b"normal 1 2 -3",
        b"normal 1 2 3 ",
        b"normal 1 2 x",
        b"normal 1 2 3 slave 1 2 3",  # all or nothing
        b"normal 1 2 2147483648",
    ):
        assert set_error(c, b"client-output-buffer-limit", bad).startswith("Invalid argument")
        assert c.client_output_buffer_limit == ClientLimit(4, 5, 6)
    # split on single spaces: an empty word is no size
    assert set_error(c, b"client-output-buffer-limit", b"normal  0 0").startswith("Invalid")
    config_set(c, b"client-output-buffer-limit", b"normal 1mb 2kb 3")  # sizes, as in the file
    assert c.client_output_buffer_limit == ClientLimit(1 << 20, 2048, 3)


# ---------------------------------------------------------------- the hook


def test_hook_sees_new_value_and_gets_old_one():
    c = Config()
    seen = []

    def hook(name: str, old: object) -> str | None:
        seen.append((name, old, c.maxclients))
        return None

    c.on_change = hook
    config_set(c, b"MAXCLIENTS", b"50")
    assert seen == [("maxclients", 10000, 50)]


def test_hook_veto_restores_old_value():
    c = Config()
    c.on_change = lambda name, old: "Unable to turn on AOF. Check server logs."
    assert set_error(c, b"appendonly", b"yes") == "Unable to turn on AOF. Check server logs."
    assert c.appendonly is False


def test_hook_veto_on_dir_goes_back(tmp_path):
    (tmp_path / "sub").mkdir()
    c = Config()
    c.on_change = lambda name, old: "no"
    assert set_error(c, b"dir", b"sub") == "no"
    assert os.getcwd() == str(tmp_path) == c.dir


def test_hook_not_called_on_invalid_value():
    c = Config()
    calls = []
    c.on_change = lambda name, old: calls.append(name)
    set_error(c, b"maxmemory", b"bad")
    assert calls == []


# ---------------------------------------------------------------- REWRITE


def test_rewrite_without_config_file():
    with pytest.raises(ConfigRewriteError) as info:
        config_rewrite(Config())
    assert info.value.message == "The server is running without a config file"


def test_rewrite_defaults_into_empty_file_adds_only_dir(tmp_path):
    assert rewrite_config_text(None, Config()) == (
        b'# Generated by CONFIG REWRITE\ndir "%s"\n' % str(tmp_path).encode()
    )


def test_rewrite_writes_the_repair_directives_once_changed(tmp_path):
    c = Config()
    config_set(c, b"replica-repair", b"no")
    config_set(c, b"replica-repair-delay", b"30000")
    text = rewrite_config_text(None, c)
    assert b"\nreplica-repair no\n" in text and b"\nreplica-repair-delay 30000\n" in text


def test_rewrite_writes_the_clock_skew_threshold_once_changed(tmp_path):
    c = Config()
    assert b"clock-skew-warn-ms" not in rewrite_config_text(None, c)
    config_set(c, b"clock-skew-warn-ms", b"0")
    assert b"\nclock-skew-warn-ms 0\n" in rewrite_config_text(None, c)


def rewritten_once_set(c: Config, absent: bytes, *settings: tuple[bytes, bytes]) -> bytes:
    """CONFIG REWRITE's text for ``c``, which has no ``absent`` directive until each
    of ``settings`` is CONFIG SET; that text reads back the same values."""
    assert absent not in rewrite_config_text(None, c)
    for name, value in settings:
        config_set(c, name, value)
    text = rewrite_config_text(None, c)
    assert load_config_text(text).values() == c.values()
    return text


def test_rewrite_writes_the_flow_to_disk_directives_once_changed(tmp_path):
    c = Config()
    text = rewritten_once_set(
        c,
        b"flow-to-disk",
        (b"flow-to-disk", b"yes"),
        (b"flow-to-disk-level", b"512mb"),
        (b"flow-to-disk-dir", b"spill here"),
        (b"flow-to-disk-max-size", b"10gb"),
    )
    assert text.endswith(
        b'flow-to-disk yes\nflow-to-disk-level 512mb\nflow-to-disk-dir "spill here"\n'
        b"flow-to-disk-max-size 10gb\n"
    )
    config_set(c, b"flow-to-disk-level", b"5000")  # not a round number of kb: bytes
    assert b"\nflow-to-disk-level 5000\n" in rewrite_config_text(None, c)
    config_set(c, b"flow-to-disk-level", b"80%")
    assert b"\nflow-to-disk-level 80%\n" in rewrite_config_text(text, c)


def test_rewrite_writes_the_http_directives_once_changed(tmp_path):
    c = Config()
    text = rewritten_once_set(
        c, b"http-", (b"http-port", b"8711"), (b"http-bind", b"127.0.0.1 ::1")
    )
    assert text.endswith(b"http-port 8711\nhttp-bind 127.0.0.1 ::1\n")
    config_set(c, b"http-bind", b"")
    assert b"http-bind" not in rewrite_config_text(text, c)


def test_rewrite_keeps_comments_and_unrelated_lines(tmp_path):
    old = (
        b"# Disque configuration\n"
        b"\n"
        b"  port 7000  \n"
        b"# the next one is unknown\n"
        b"include /dev/null\n"
        b'rename-command DEBUG ""\n'
        b"hz 20\n"
        b"\n\n\n"
        b"port 7001\n"
        b"HZ 30\n"
        b'requirepass "unterminated\n'
        b"\v\n"
    )
    c = load_config_text("port 7001\nhz 30\n")
    config_set(c, b"maxclients", b"77")
    out = rewrite_config_text(old, c)
    assert (
        out
        == (
            b"# Disque configuration\n"
            b"\n"
            b"port 7001\n"
            b"# the next one is unknown\n"
            b"include /dev/null\n"
            b'rename-command DEBUG ""\n'
            b"hz 30\n"
            b"\n"  # the blanked duplicates merge with the blank lines
            b'# ??? requirepass "unterminated\n'
            b"\v\n"
            b"# Generated by CONFIG REWRITE\n"
            b'dir "%s"\n'
            b"maxclients 77\n"
        )
        % str(tmp_path).encode()
    )


def test_rewrite_option_at_default_is_kept_if_present(tmp_path):
    c = Config()
    out = rewrite_config_text(b"port 7711\nmaxmemory 1073741824\nappendonly no\n", c)
    assert out.startswith(b"port 7711\nmaxmemory 1gb\nappendonly no\n")


def test_rewrite_reuses_the_signature():
    c = Config()
    config_set(c, b"hz", b"50")
    old = b"port 1\n# Generated by CONFIG REWRITE\ndir /x\n"
    out = rewrite_config_text(old, c)
    assert out.count(b"# Generated by CONFIG REWRITE") == 1
    assert out.endswith(b"hz 50\n")


def test_rewrite_unset_strings_remove_their_lines():
    c = load_config_text("requirepass foo\nunixsocket /tmp/s\nbind 1.2.3.4\n")
    config_set(c, b"requirepass", b"")
    c.unixsocket = None
    c.bind = []
    out = rewrite_config_text(b"requirepass foo\nunixsocket /tmp/s\nbind 1.2.3.4\nport 1\n", c)
    assert b"requirepass" not in out and b"unixsocket" not in out and b"bind" not in out
    assert out.startswith(b"\nport 7711\n")


def test_rewrite_formats():
    c = load_config_text(
        "maxmemory 3gb\nauto-aof-rewrite-min-size 1536\nunixsocketperm 700\nbind 127.0.0.1 ::1\n"
        'client-output-buffer-limit normal 2mb 1kb 5\nrequirepass "p w\\"\\n"\n'
        "tcp-keepalive 60\nloglevel debug\nappendonly yes\nprotected-mode no\n"
        "pidfile /tmp/x.pid\nsyslog-facility local1\nslowlog-max-len -1\n"
    )
    lines = rewrite_config_text(None, c).splitlines()
    for expected in (
        b"maxmemory 3gb",
        b"auto-aof-rewrite-min-size 1536",
        b"unixsocketperm 700",
        b"bind 127.0.0.1 ::1",
        b"client-output-buffer-limit normal 2mb 1kb 5",
        b'requirepass "p w\\"\\n"',
        b"tcp-keepalive 60",
        b"loglevel debug",
        b"appendonly yes",
        b"protected-mode no",
        b'pidfile "/tmp/x.pid"',
        b"syslog-facility local1",
        b"slowlog-max-len -1",
    ):
        assert expected in lines


def test_rewrite_order_of_appended_lines():
    c = Config()
    config_set(c, b"protected-mode", b"no")
    config_set(c, b"hz", b"11")
    config_set(c, b"timeout", b"5")
    c.daemonize = True
    lines = rewrite_config_text(None, c).splitlines()
    assert lines[1] == b"daemonize yes"
    assert [line.split()[0] for line in lines[1:]] == [
        b"daemonize", b"timeout", b"dir", b"hz", b"protected-mode",
    ]  # fmt: skip


def test_rewrite_bind_quotes_only_odd_addresses():
    c = Config()
    c.bind = ["127.0.0.1", "a b", ""]
    assert b'bind 127.0.0.1 "a b" ""' in rewrite_config_text(None, c)


def test_rewrite_round_trip_via_file(tmp_path):
    path = tmp_path / "disque.conf"
    path.write_text(
        '# my node\nport 7000\nport 7002\nrename-command debug ""\n'
        "client-output-buffer-limit normal 0 0 0\nloglevel verbose\n"
    )
    c = load_config_file(str(path))
    assert c.config_file == str(path)
    for name, value in (
        (b"maxmemory", b"512mb"),
        (b"hz", b"42"),
        (b"requirepass", b"se cret"),
        (b"appendfsync", b"always"),
        (b"client-output-buffer-limit", b"normal 1048576 0 7"),
        (b"tcp-keepalive", b"yes"),
        (b"cluster-node-timeout", b"3000"),
        (b"loglevel", b"notice"),
    ):
        config_set(c, name, value)
    config_rewrite(c)
    text = path.read_bytes()
    assert text.startswith(b"# my node\nport 7002\n\nrename-command debug")
    assert b"loglevel notice" in text  # present in the file: rewritten even at default
    again = load_config_file(str(path))
    assert again == c
    assert again.rename_commands == {"debug": ""}
    # A second rewrite is stable.
    config_rewrite(again)
    assert path.read_bytes() == text


def test_rewrite_shrinking_file_is_truncated(tmp_path):
    path = tmp_path / "d.conf"
    path.write_text("port 1\n" * 100 + "# " + "x" * 1000 + "\n")
    c = load_config_file(str(path))
    config_rewrite(c)
    data = path.read_bytes()
    assert data.startswith(b"port 1\n\n# xxx")
    assert data.count(b"\n") == 5 and data.endswith(b'"\n')


def test_rewrite_creates_missing_file(tmp_path):
    c = Config()
    c.config_file = str(tmp_path / "new.conf")
    config_rewrite(c)
    assert (tmp_path / "new.conf").read_bytes().startswith(b"# Generated by CONFIG REWRITE\n")
    assert (tmp_path / "new.conf").stat().st_mode & 0o777 == 0o644 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_rewrite_errors(tmp_path):
    c = Config()
    (tmp_path / "d").mkdir()
    c.config_file = str(tmp_path / "d")
    with pytest.raises(ConfigRewriteError) as info:
        config_rewrite(c)
    assert info.value.message == "Rewriting config file: Is a directory"
    c.config_file = str(tmp_path / "missing" / "x.conf")
    with pytest.raises(ConfigRewriteError) as info:
        config_rewrite(c)
    assert info.value.message == "Rewriting config file: No such file or directory"
