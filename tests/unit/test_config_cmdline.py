"""The server command line: disquette-server [configfile|-] [--name value ...]."""

from __future__ import annotations

import io
import re

import pytest

from disquette.config import (
    Config,
    ConfigFileError,
    ConfigOpenError,
    parse_command_line,
)

PROG = "disquette-server"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def run(*args: str, stdin: bytes = b"") -> Config:
    cl = parse_command_line([PROG, *args], io.BytesIO(stdin))
    assert cl.action == "run"
    return cl.load()


def error(*args: str, stdin: bytes = b"") -> ConfigFileError:
    with pytest.raises(ConfigFileError) as info:
        run(*args, stdin=stdin)
    return info.value


def test_no_arguments_uses_defaults_with_a_warning():
    cl = parse_command_line([PROG])
    assert cl.action == "run"
    assert cl.config_text is None and cl.config_file is None
    assert cl.warning == (
        "Warning: no config file specified, using the default config. "
        f"In order to specify a config file use {PROG} /path/to/disque.conf"
    )
    assert cl.load() == Config()


@pytest.mark.parametrize("flag", ["-v", "--version"])
def test_version(flag):
    cl = parse_command_line([PROG, flag, "ignored"])
    assert (cl.action, cl.stream, cl.exit_code) == ("version", "stdout", 0)
    assert re.fullmatch(
        r"Disque server v=1\.0-rc1 sha=00000000:0 malloc=libc bits=(32|64) "
        r"build=[0-9a-f]+ disquette=[0-9.]+ bus-protocols=1-2\n",
        cl.output,
    )


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help(flag):
    cl = parse_command_line([PROG, flag])
    assert (cl.action, cl.stream, cl.exit_code) == ("help", "stderr", 1)
    assert cl.output.startswith(f"Usage: {PROG} [/path/to/disque.conf] [options]\n")
    assert f"{PROG} - (read config from stdin)" in cl.output
    assert f"{PROG} --test-memory <megabytes>" in cl.output
    assert "Examples:" in cl.output


def test_special_flags_only_count_first():
    with pytest.raises(ConfigOpenError):
        parse_command_line([PROG, "missing.conf", "--version"])
    # "--help" after a file is an option line "help" -> bad directive
    (open("d.conf", "w")).close()
    e = error("d.conf", "--help")
    assert e.reason == "Bad directive or wrong number of arguments: unknown directive 'help'"


def test_test_memory():
    cl = parse_command_line([PROG, "--test-memory", "1024"])
    assert (cl.action, cl.stream, cl.exit_code) == ("test-memory", "stderr", 1)
    assert "not implement --test-memory" in cl.output
    cl = parse_command_line([PROG, "--test-memory"])
    assert cl.output == (
        "Please specify the amount of memory to test in megabytes.\n"
        f"Example: {PROG} --test-memory 4096\n\n"
    )
    assert cl.exit_code == 1


def test_config_file(tmp_path):
    (tmp_path / "d.conf").write_text("port 7001\nhz 20\n")
    cl = parse_command_line([PROG, "d.conf"])
    assert cl.config_file == str(tmp_path / "d.conf")
    c = cl.load()
    assert (c.port, c.hz) == (7001, 20)
    assert c.config_file == str(tmp_path / "d.conf")


def test_missing_config_file():
    with pytest.raises(ConfigOpenError) as info:
        parse_command_line([PROG, "nope.conf", "--port", "1"])
    assert str(info.value) == "Fatal error, can't open config file 'nope.conf'"


def test_first_argument_is_a_file_unless_it_starts_with_two_dashes():
    with pytest.raises(ConfigOpenError) as info:
        parse_command_line([PROG, "-p", "7711"])
    assert info.value.path == "-p"
    with pytest.raises(ConfigOpenError):
        parse_command_line([PROG, ""])


def test_stdin():
    cl = parse_command_line([PROG, "-", "--hz", "30"], io.BytesIO(b"port 7003\nhz 20\n"))
    assert cl.config_file is None  # nothing to rewrite
    c = cl.load()
    assert (c.port, c.hz, c.config_file) == (7003, 30, None)


def test_stdin_text_stream():
    cl = parse_command_line([PROG, "-"], io.StringIO("port 7004\n"))
    assert cl.load().port == 7004


def test_options_only():
    c = run("--port", "7005", "--bind", "127.0.0.1", "::1", "--maxmemory", "10mb")
    assert (c.port, c.bind, c.maxmemory) == (7005, ["127.0.0.1", "::1"], 10 << 20)
    assert c.config_file is None


def test_a_directive_beyond_disque_as_an_option():
    assert run("--clock-skew-warn-ms", "0").clock_skew_warn_ms == 0
    c = run("--flow-to-disk", "yes", "--flow-to-disk-level", "1gb", "--flow-to-disk-dir", "s p",
            "--flow-to-disk-max-size", "2gb")  # fmt: skip
    assert (c.flow_to_disk, c.flow_to_disk_level) == (True, str(1 << 30))
    assert (c.flow_to_disk_dir, c.flow_to_disk_max_size) == ("s p", 2 << 30)
    c = run("--http-port", "8711", "--http-bind", "127.0.0.1", "::1")
    assert (c.http_port, c.http_bind) == (8711, ["127.0.0.1", "::1"])


def test_options_are_quoted():
    c = run("--requirepass", "a b\"c'", "--loglevel", "warning")
    assert c.requirepass == "a b\"c'"
    assert c.loglevel == "warning"


def test_file_then_options_override(tmp_path):
    (tmp_path / "d.conf").write_text("port 7001\nhz 20")
    c = run("d.conf", "--port", "7006")
    assert (c.port, c.hz) == (7006, 20)


def test_option_error_line_number_counts_the_file(tmp_path):
    (tmp_path / "d.conf").write_text("port 7001\nhz 20\n")
    e = error("d.conf", "--hz", "5", "--port", "99999")
    # 2 file lines, the empty line between the file's final newline and the
    # separator newline, then one line per option
    assert e.line_number == 5
    assert e.line == b'port "99999"'
    assert e.reason.startswith("Invalid port: port '99999' is out of range")


def test_option_error_without_file_is_at_line_2():
    e = error("--port", "7000", "--port", "70000")
    assert (e.line_number, e.line) == (3, b'port "70000"')
    assert e.reason.startswith("Invalid port")
    e = error("--nosuch", "1")
    assert (e.line_number, e.line) == (2, b'nosuch "1"')
    assert e.reason == "Bad directive or wrong number of arguments: unknown directive 'nosuch'"


def test_the_banner_says_where_the_bad_line_came_from(tmp_path):
    (tmp_path / "d.conf").write_text("port 7001\nhz 20\nmaxmemory-policy no\n")
    e = error("d.conf", "--hz", "5")
    assert str(e) == (
        "\n*** FATAL CONFIG FILE ERROR ***\n"
        f"Reading the configuration file {tmp_path / 'd.conf'}, at line 3\n"
        ">>> 'maxmemory-policy no'\n"
        "Invalid maxmemory policy: maxmemory-policy 'no' is not one of the choices; "
        "accepted: acks, noeviction\n"
    )
    (tmp_path / "d.conf").write_text("port 7001\n")
    e = error("d.conf", "--hz", "5", "--maxmemory", "100MBs")
    assert str(e).startswith(
        "\n*** FATAL CONFIG FILE ERROR ***\n"
        "Reading the command line, at option --maxmemory\n"
        ">>> 'maxmemory \"100MBs\"'\n"
        "maxmemory '100MBs' is not a size; accepted: "
    )
    assert error("-", stdin=b"port 7001\nport x y\n").where == (
        "Reading the configuration file standard input, at line 2"
    )
    assert error("--port", "7000", "--port", "70000").where == (
        "Reading the command line, at option --port"
    )


def test_option_without_value_and_stray_words():
    assert error("--port").reason == (
        "Bad directive or wrong number of arguments: port takes 1 argument, not 0"
    )
    (open("d.conf", "w")).close()
    e = error("d.conf", "stray", "--port", "1")
    assert e.line == b'"stray"'


def test_yes_no_options():
    c = run("--appendonly", "yes", "--protected-mode", "no")
    assert c.appendonly is True and c.protected_mode is False
