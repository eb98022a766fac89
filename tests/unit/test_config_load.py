"""The config file loader: directives, validation texts, quoting, include, units."""

from __future__ import annotations

import io
import os

import pytest

from disquette.config import (
    ClientLimit,
    Config,
    ConfigFileError,
    ConfigOpenError,
    load_config_file,
    load_config_text,
    read_config_file,
)
from disquette.config.loader import MAX_INCLUDE_DEPTH


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Loading ``dir`` changes directory: run every test in (and back from) tmp."""
    monkeypatch.chdir(tmp_path)


def load(text: str | bytes) -> Config:
    return load_config_text(text)


def reason(text: str | bytes) -> str:
    with pytest.raises(ConfigFileError) as info:
        load_config_text(text)
    return info.value.reason


# ---------------------------------------------------------------- defaults


def test_defaults_match_section_13(tmp_path):
    c = Config()
    assert c.daemonize is False
    assert c.pidfile == "/var/run/disque.pid"
    assert c.port == 7711
    assert c.tcp_backlog == 511
    assert c.bind == []
    assert c.unixsocket is None
    assert c.unixsocketperm == 0
    assert c.timeout == 0
    assert c.tcp_keepalive == 0
    assert c.loglevel == "notice"
    assert c.logfile == ""
    assert (c.syslog_enabled, c.syslog_ident, c.syslog_facility) == (False, "disque", "local0")
    assert c.databases == 16
    assert c.dir == str(tmp_path)
    assert c.requirepass is None
    assert c.rename_commands == {}
    assert c.maxclients == 10000
    assert c.maxmemory == 1 << 30
    assert c.maxmemory_policy == "acks"
    assert c.maxmemory_samples == 5
    assert c.activerehashing is True
    assert c.hz == 10
    assert c.appendonly is False
    assert c.appendfilename == "disque.aof"
    assert c.appendfsync == "everysec"
    assert c.no_appendfsync_on_rewrite is False
    assert c.auto_aof_rewrite_percentage == 100
    assert c.auto_aof_rewrite_min_size == 64 * 1024 * 1024
    assert c.aof_rewrite_incremental_fsync is True
    assert c.aof_load_truncated is True
    assert c.aof_enqueue_jobs_once is False
    assert c.cluster_config_file == "nodes.conf"
    assert c.cluster_node_timeout == 15000
    assert c.slowlog_log_slower_than == 10000
    assert c.slowlog_max_len == 128
    assert c.latency_monitor_threshold == 0
    assert c.client_output_buffer_limit == ClientLimit(0, 0, 0)
    assert c.watchdog_period == 0
    assert c.protected_mode is True
    assert c.clock_skew_warn_ms == 500
    assert (c.flow_to_disk, c.flow_to_disk_level) == (False, "60%")
    assert (c.flow_to_disk_dir, c.flow_to_disk_max_size) == ("spill", 0)
    assert c.config_file is None
    assert c.on_change is None


def test_mutable_defaults_are_not_shared():
    a, b = Config(), Config()
    a.bind.append("x")
    a.rename_commands["ping"] = ""
    assert b.bind == [] and b.rename_commands == {}


def test_copy_and_equality():
    a = load("bind 1.2.3.4\nport 1\n")
    b = a.copy()
    assert a == b
    b.bind.append("5.6.7.8")
    assert a != b and a.bind == ["1.2.3.4"]


# ---------------------------------------------------------------- the banner


def test_fatal_banner_exact_text():
    with pytest.raises(ConfigFileError) as info:
        load_config_text("# comment\n\n   port 99999   \r\nhz 10\n")
    assert str(info.value) == (
        "\n*** FATAL CONFIG FILE ERROR ***\n"
        "Reading the configuration file, at line 3\n"
        ">>> 'port 99999'\n"
        "Invalid port: port '99999' is out of range; accepted: a whole number from 0 to 65535\n"
    )
    assert info.value.line_number == 3
    assert info.value.line == b"port 99999"


def test_banner_bytes_keep_non_utf8():
    with pytest.raises(ConfigFileError) as info:
        load_config_text(b"bogus \xff\n")
    assert bytes(info.value).endswith(
        b">>> 'bogus \xff'\nBad directive or wrong number of arguments: unknown directive 'bogus'\n"
    )
    assert "\\xff" in str(info.value)


def test_first_error_stops_loading():
    c = Config()
    with pytest.raises(ConfigFileError):
        load_config_text("port 1\nport 99999\nport 3\n", c)
    assert c.port == 1


# ---------------------------------------------------------------- lexical


def test_comments_blank_lines_whitespace_and_crlf():
    c = load("# port 1\n\n\t  \n  port 2  \r\n#port 3\n   # indented comment\n")
    assert c.port == 2


def test_directive_names_are_case_insensitive():
    c = load("PORT 1\nMaxMemory 2MB\nAppendOnly YES\nLogLevel WARNING\n")
    assert (c.port, c.maxmemory, c.appendonly, c.loglevel) == (1, 2 << 20, True, "warning")


def test_last_occurrence_wins():
    c = load("port 1\nhz 20\nport 2\nport 3\n")
    assert (c.port, c.hz) == (3, 20)


def test_quoting():
    c = load(
        'requirepass "a b\\"c\\x41\\n"\n'
        "pidfile 'it\\'s'\n"
        'logfile ""\n'
        'syslog-ident "tab\\there"\n'
    )
    assert c.requirepass == 'a b"cA\n'
    assert c.pidfile == "it's"
    assert c.logfile == ""
    assert c.syslog_ident == "tab\there"


@pytest.mark.parametrize(
    "line",
    ['requirepass "abc', "requirepass 'abc", 'requirepass "a"b', "pidfile 'x'y"],
)
def test_unbalanced_quotes(line):
    assert reason(line) == "Unbalanced quotes in configuration line"


def test_line_that_splits_to_nothing_is_skipped():
    assert load("\v\nport 5\n\f\n").port == 5


def test_empty_argument_is_an_argument():
    assert reason('port ""  ""').startswith("Bad directive or wrong number of arguments")
    assert (
        reason('port ""')
        == "port '' is not a whole number; accepted: a whole number from 0 to 65535"
    )


def test_nul_ends_the_text():
    assert load(b"port 1\nport 2\x00\nport 3\n").port == 2


def test_nul_inside_quoted_value_is_a_c_string_end():
    c = load('pidfile "/tmp/a\\x00b"\n"port\\x00junk" 9\n')
    assert c.pidfile == "/tmp/a"
    assert c.port == 9


# ---------------------------------------------------------------- directives


@pytest.mark.parametrize(
    "line",
    [
        "bogus 1",
        "port",
        "port 1 2",
        "bind",
        "rename-command ping",
        "rename-command a b c",
        "client-output-buffer-limit normal 0 0",
        "include",
        "include a b",
        "save 900 1",
        "slaveof 127.0.0.1 6379",
        "watchdog-period 100",  # CONFIG SET only
        "cluster-enabled yes",
        '"" x',
    ],
)
def test_bad_directive_or_wrong_number_of_arguments(line):
    assert reason(line).startswith("Bad directive or wrong number of arguments: ")


@pytest.mark.parametrize(
    "line, message",
    [
        ("timeout -1", "Invalid timeout value"),
        ("tcp-keepalive -1", "Invalid tcp-keepalive value"),
        ("port -1", "Invalid port"),
        ("port 65536", "Invalid port"),
        ("tcp-backlog -1", "Invalid backlog value"),
        ("unixsocketperm 1000", "Invalid socket file permissions"),
        ("unixsocketperm 77777777777777777777777", "Invalid socket file permissions"),
        ("loglevel loud", "Invalid log level. Must be one of debug, verbose, notice, warning"),
        (
            "syslog-facility local8",
            "Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7",
        ),
        ("databases 0", "Invalid number of databases"),
        ("maxclients 0", "Invalid max clients limit"),
        ("maxmemory 0", "You need to specify a memory limit greater than zero"),
        ("maxmemory -1gb", "You need to specify a memory limit greater than zero"),
        ("maxmemory-policy allkeys-lru", "Invalid maxmemory policy"),
        ("maxmemory-samples 0", "maxmemory-samples must be 1 or greater"),
        ("appendfilename a/b.aof", "appendfilename can't be a path, just a filename"),
        ("appendfilename a\\b.aof", "appendfilename can't be a path, just a filename"),
        ("appendfsync sometimes", "argument must be 'no', 'always' or 'everysec'"),
        ("auto-aof-rewrite-percentage -5", "Invalid negative percentage for AOF auto rewrite"),
        ("requirepass " + "x" * 513, "Password is longer than CONFIG_AUTHPASS_MAX_LEN"),
        ("rename-command nosuch foo", "No such command in rename-command"),
        ("rename-command quit foo", "No such command in rename-command"),
        ("rename-command ping info", "Target command name already exists"),
        ("cluster-node-timeout 0", "cluster node timeout must be 1 or greater"),
        ("latency-monitor-threshold -1", "The latency threshold can't be negative"),
        ("clock-skew-warn-ms -1", "clock-skew-warn-ms can't be negative"),
        *(
            (
                f"flow-to-disk-level {bad}",
                "flow-to-disk-level must be a percentage from 1% to 95% or a memory size",
            )
            for bad in ("0%", "96%", "0", "-1gb")
        ),
        ("flow-to-disk-max-size -1", "flow-to-disk-max-size must be 0 or a memory size"),
        ("flow-to-disk-dir ''", "flow-to-disk-dir can't be empty"),
        ("client-output-buffer-limit slave 0 0 0", "Unrecognized client limit class"),
        ("client-output-buffer-limit pubsub 0 0 0", "Unrecognized client limit class"),
        (
            "client-output-buffer-limit normal 0 0 -1",
            "Negative number of seconds in soft limit is invalid",
        ),
        ("bind " + " ".join(f"10.0.0.{i}" for i in range(17)), "Too many bind addresses specified"),
        ("http-port 65536", "Invalid http-port"),
        ("http-port -1", "Invalid http-port"),
        (
            "http-bind " + " ".join(f"10.0.0.{i}" for i in range(17)),
            "Too many http-bind addresses specified",
        ),
    ],
)
def test_validation_messages(line, message):
    """Disque's text first, then which value was refused and what is accepted."""
    text = reason(line)
    assert text.startswith(message)
    if text != message:
        assert "; accepted: " in text


YESNO = [
    "daemonize",
    "syslog-enabled",
    "activerehashing",
    "appendonly",
    "no-appendfsync-on-rewrite",
    "aof-rewrite-incremental-fsync",
    "aof-load-truncated",
    "aof-enqueue-jobs-once",
    "protected-mode",
    "flow-to-disk",
]


@pytest.mark.parametrize("name", YESNO)
def test_yes_no_directives(name):
    attr = name.replace("-", "_")
    assert getattr(load(f"{name} YES"), attr) is True
    assert getattr(load(f"{name} no"), attr) is False
    assert reason(f"{name} 1") == (
        f"argument must be 'yes' or 'no': {name} '1' is not yes or no; accepted: yes or no"
    )
    assert reason(f"{name} ''").startswith("argument must be 'yes' or 'no'")


def test_flow_to_disk_directives():
    c = load(
        "flow-to-disk yes\nflow-to-disk-level 75%\nflow-to-disk-dir /var/spool/spill\n"
        "flow-to-disk-max-size 20GB\n"
    )
    assert (c.flow_to_disk, c.flow_to_disk_level) == (True, "75%")
    assert (c.flow_to_disk_dir, c.flow_to_disk_max_size) == ("/var/spool/spill", 20 << 30)
    assert load("flow-to-disk-level 512mb").flow_to_disk_level == str(512 << 20)
    assert load("flow-to-disk-level 1%").flow_to_disk_level == "1%"
    assert load("flow-to-disk-level 095%").flow_to_disk_level == "95%"
    assert load("flow-to-disk-max-size 0").flow_to_disk_max_size == 0


def test_http_directives():
    c = load("http-port 8711\nhttp-bind 127.0.0.1 ::1\n")
    assert (c.http_port, c.http_bind) == (8711, ["127.0.0.1", "::1"])
    assert (load("").http_port, load("").http_bind) == (0, [])


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('port "  +77abc"', "port '  +77abc' is not a whole number"),
        ("timeout 12.5", "timeout '12.5' is not a duration"),
        ("tcp-backlog abc", "tcp-backlog 'abc' is not a whole number"),
        ("port 4294967296", "Invalid port: port '4294967296' is out of range"),
        ("maxmemory 100MBs", "maxmemory '100MBs' is not a size"),
        ("maxmemory 100xyz", "maxmemory '100xyz' is not a size"),
        ("maxmemory 1.5gb", "maxmemory '1.5gb' is not a size"),
        ("maxmemory abc", "maxmemory 'abc' is not a size"),
        ("auto-aof-rewrite-min-size -1kb", "auto-aof-rewrite-min-size '-1kb' is out of range"),
        ("unixsocketperm -1", "unixsocketperm '-1' is not a file mode"),
        ("unixsocketperm 9", "unixsocketperm '9' is not a file mode"),
        ("unixsocketperm 75x", "unixsocketperm '75x' is not a file mode"),
        ("latency-monitor-threshold 99999999999999999999", "is out of range"),
        ("flow-to-disk-max-size 10xb", "flow-to-disk-max-size '10xb' is not a size"),
        ("cluster-node-timeout 15sec", "cluster-node-timeout '15sec' is not a duration"),
        ("result-ttl 1500ms", "result-ttl '1500ms' is not a whole number of seconds"),
        ("client-output-buffer-limit normal -1 0 0", "'-1' is out of range"),
        ("job-max-size 64mb", "job-max-size must be between 1 byte and 63mb"),
        *((f"flow-to-disk-level {bad}", f"flow-to-disk-level '{bad}' is not a")
          for bad in ("%", "5.5%", "60pc", "1.5gb", "-5%")),
    ],
)  # fmt: skip
def test_values_are_read_whole_or_refused(line, problem):
    """Disque's atoi and memtoll read ``port 77abc`` as 77 and ``maxmemory 100MBs`` as
    100 bytes; each value is read whole here, or the load stops with what is accepted."""
    text = reason(line)
    assert problem in text and "; accepted: " in text


def test_durations_take_units():
    c = load(
        "cluster-node-timeout 5000ms\ntimeout 5m\nresult-ttl 1d\nclock-skew-warn-ms 1s\n"
        "slowlog-log-slower-than 2ms\nreplica-repair-delay 30s\n"
    )
    assert (c.cluster_node_timeout, c.timeout, c.result_ttl, c.clock_skew_warn_ms) == (
        5000,
        300,
        86400,
        1000,
    )
    assert (c.slowlog_log_slower_than, c.replica_repair_delay) == (2000, 30_000)


def test_unknown_directive_names_the_nearest_one():
    assert reason("maxmemroy 1gb") == (
        "Bad directive or wrong number of arguments: unknown directive 'maxmemroy'; "
        "did you mean 'maxmemory'?"
    )
    assert reason("save 900 1") == (
        "Bad directive or wrong number of arguments: unknown directive 'save'"
    )
    assert reason("port 1 2") == (
        "Bad directive or wrong number of arguments: port takes 1 argument, not 2"
    )
    assert reason("bind").endswith("bind takes at least 1 argument, not 0")
    assert reason("watchdog-period 5").endswith("watchdog-period is set with CONFIG SET only")


def test_limits_accepted():
    c = load("port 0\nport 65535\ntimeout 0\ntcp-keepalive 300\nmaxclients 1\ndatabases 1\n")
    assert (c.port, c.timeout, c.tcp_keepalive, c.maxclients, c.databases) == (65535, 0, 300, 1, 1)


def test_hz_is_clamped():
    assert load("hz 0").hz == 1
    assert load("hz -5").hz == 1
    assert load("hz 501").hz == 500
    assert load("hz 100").hz == 100


def test_signed_directives():
    c = load("slowlog-log-slower-than -1\nslowlog-max-len -3\nclock-skew-warn-ms 250ms\n")
    assert (c.slowlog_log_slower_than, c.slowlog_max_len, c.clock_skew_warn_ms) == (-1, -3, 250)


@pytest.mark.parametrize(
    "text, value",
    [
        ("1", 1),
        ("100", 100),
        ("1b", 1),
        ("1B", 1),
        ("1k", 1000),
        ("1K", 1000),
        ("1kb", 1024),
        ("1kB", 1024),
        ("2m", 2_000_000),
        ("2mb", 2 << 20),
        ("2Mb", 2 << 20),
        ("3g", 3_000_000_000),
        ("3gb", 3 << 30),
        ("3GB", 3 << 30),
        ("007mb", 7 << 20),
    ],
)
def test_memory_units(text, value):
    assert load(f"maxmemory {text}").maxmemory == value
    assert load(f"auto-aof-rewrite-min-size {text}").auto_aof_rewrite_min_size == value


def test_memory_without_positivity_check():
    assert load("auto-aof-rewrite-min-size 0").auto_aof_rewrite_min_size == 0


def test_enums_are_case_insensitive_and_stored_lowercase():
    c = load(
        "loglevel DEBUG\nmaxmemory-policy NoEviction\nappendfsync ALWAYS\nsyslog-facility LOCAL7\n"
    )
    assert (c.loglevel, c.maxmemory_policy, c.appendfsync, c.syslog_facility) == (
        "debug",
        "noeviction",
        "always",
        "local7",
    )
    for level in ("debug", "verbose", "notice", "warning"):
        assert load(f"loglevel {level}").loglevel == level
    assert load("syslog-facility user").syslog_facility == "user"
    assert load("appendfsync no").appendfsync == "no"


def test_strings():
    c = load(
        "pidfile /tmp/d.pid\nunixsocket /tmp/d.sock\nsyslog-ident dq\n"
        "cluster-config-file n.conf\nappendfilename my.aof\n"
    )
    assert c.pidfile == "/tmp/d.pid"
    assert c.unixsocket == "/tmp/d.sock"
    assert c.syslog_ident == "dq"
    assert c.cluster_config_file == "n.conf"
    assert c.appendfilename == "my.aof"


def test_bind():
    assert load("bind 127.0.0.1 ::1").bind == ["127.0.0.1", "::1"]
    assert load("bind a\nbind b").bind == ["b"]
    assert len(load("bind " + " ".join(f"10.0.0.{i}" for i in range(16))).bind) == 16


def test_unixsocketperm_is_octal():
    assert load("unixsocketperm 700").unixsocketperm == 0o700
    assert load("unixsocketperm 0777").unixsocketperm == 0o777


def test_requirepass():
    assert load("requirepass " + "x" * 512).requirepass == "x" * 512
    assert load('requirepass ""').requirepass is None
    assert load("requirepass s3cret").requirepass == "s3cret"


def test_client_output_buffer_limit():
    c = load("client-output-buffer-limit NORMAL 1mb 512kb 60")
    assert c.client_output_buffer_limit == ClientLimit(1 << 20, 512 << 10, 60)


def test_rename_command():
    c = load('rename-command CONFIG my-config\nrename-command debug ""\n')
    assert c.rename_commands == {"config": "my-config", "debug": ""}


def test_rename_command_chains_and_lookup_by_current_name():
    c = load("rename-command ping p1\nrename-command P1 p2\n")
    assert c.rename_commands == {"ping": "p2"}
    assert reason("rename-command ping p1\nrename-command ping p3\n") == (
        "No such command in rename-command"
    )
    assert reason("rename-command debug ''\nrename-command debug x\n") == (
        "No such command in rename-command"
    )
    # A removed command's name is free again, and renaming to itself is a no-op.
    c = load("rename-command info ''\nrename-command ping info\nrename-command time time\n")
    assert c.rename_commands == {"info": "", "ping": "info"}
    assert reason("rename-command ping x\nrename-command time X\n") == (
        "Target command name already exists"
    )


def test_dir_changes_directory(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "inc.conf").write_text("port 42\n")
    c = load("dir sub\ninclude inc.conf\n")
    assert os.getcwd() == str(sub)
    assert c.dir == str(sub)
    assert c.port == 42


def test_dir_error_is_strerror(tmp_path):
    assert reason("dir /nonexistent/really") == "No such file or directory"
    (tmp_path / "f").write_text("")
    assert reason("dir f") == "Not a directory"
    assert reason('dir ""') == "No such file or directory"


def test_logfile_is_created_and_checked(tmp_path):
    c = load("logfile disque.log")
    assert c.logfile == "disque.log"
    assert (tmp_path / "disque.log").exists()
    assert reason("logfile /nonexistent/dir/x.log") == (
        "Can't open the log file: No such file or directory"
    )
    (tmp_path / "d").mkdir()
    assert reason("logfile d") == "Can't open the log file: Is a directory"
    assert load('logfile ""').logfile == ""


# ---------------------------------------------------------------- include


def test_include(tmp_path):
    (tmp_path / "a.conf").write_text("port 1\nhz 20\n")
    c = load(f"port 5\ninclude {tmp_path / 'a.conf'}\nhz 30\n")
    assert (c.port, c.hz) == (1, 30)


def test_include_relative_and_nested(tmp_path):
    (tmp_path / "a.conf").write_text("include b.conf\ntimeout 7\n")
    (tmp_path / "b.conf").write_text("timeout 3\nmaxclients 9\n")
    c = load("include a.conf")
    assert (c.timeout, c.maxclients) == (7, 9)


def test_error_in_included_file_reports_its_own_line(tmp_path):
    (tmp_path / "bad.conf").write_text("# x\nport 99999\n")
    with pytest.raises(ConfigFileError) as info:
        load("\n\ninclude bad.conf\n")
    assert info.value.line_number == 2
    assert info.value.line == b"port 99999"


def test_include_missing_file():
    with pytest.raises(ConfigOpenError) as info:
        load("include missing.conf")
    assert str(info.value) == "Fatal error, can't open config file 'missing.conf'"
    assert isinstance(info.value, ConfigFileError)


def test_include_directory_reads_as_empty(tmp_path):
    (tmp_path / "d").mkdir()
    assert load("include d\nport 3").port == 3


def test_include_stdin():
    c = load_config_text("include -\nhz 11\n", stdin=io.BytesIO(b"port 9\nhz 12\n"))
    assert (c.port, c.hz) == (9, 11)


def test_include_loop_is_stopped(tmp_path):
    (tmp_path / "loop.conf").write_text("include loop.conf\n")
    with pytest.raises(ConfigFileError) as info:
        load("include loop.conf")
    assert info.value.reason == f"Too many nested includes (more than {MAX_INCLUDE_DEPTH})"


# ---------------------------------------------------------------- files


def test_load_config_file(tmp_path):
    (tmp_path / "d.conf").write_text("port 1\n")
    c = load_config_file("d.conf", options=b'port "2" ')
    assert c.port == 2
    assert c.config_file == str(tmp_path / "d.conf")


def test_load_config_file_missing():
    with pytest.raises(ConfigOpenError):
        load_config_file("nope.conf")


def test_read_config_file_cuts_each_line_at_nul(tmp_path):
    (tmp_path / "n.conf").write_bytes(b"port 1\x00junk\nhz 20\n")
    assert read_config_file("n.conf") == b"port 1hz 20\n"
    (tmp_path / "long.conf").write_bytes(b"#" * 100 + b"\x00" + b"#" * 1399 + b"\nport 2\n")
    # fgets reads 1024 bytes at a time: the NUL only cuts its own chunk.
    assert read_config_file("long.conf") == b"#" * 576 + b"\nport 2\n"


def test_str_input_with_surrogates_round_trips():
    c = load(b"pidfile /tmp/\xe9\xff\n")
    assert c.pidfile.encode("utf-8", "surrogateescape") == b"/tmp/\xe9\xff"
