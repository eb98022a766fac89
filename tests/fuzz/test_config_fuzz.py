"""Property tests of the configuration system with random input.

* Random config text (directive names from the table, random argument tokens,
  random quoting and case) only ever fails with ConfigFileError, and whatever
  loads is valid and survives CONFIG REWRITE + reload unchanged.
* Random CONFIG SET calls only ever fail with ConfigSetError, never leave an
  invalid value, and the result survives CONFIG REWRITE + reload.
* CONFIG GET with a random pattern on the result never fails and answers in
  Disque's order.
* A random value reads the same in the file, on the command line and in CONFIG
  SET (one parser per kind), or is refused with a banner naming the directive.

``dir``, ``logfile`` and ``include`` touch the file system, so their
arguments come from a small safe set inside a temporary directory.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st

from disquette.config import (
    COMMAND_NAMES,
    GET_ORDER,
    PARAMS,
    SETTABLE,
    ClientLimit,
    Config,
    ConfigFileError,
    ConfigSetError,
    config_get,
    config_set,
    load_config_text,
    parse_command_line,
    rewrite_config_text,
)
from disquette.config.cstring import sds_repr
from disquette.config.table import (
    APPENDFSYNC_MODES,
    LOGLEVELS,
    MAXMEMORY_POLICIES,
    PARAMS_BY_NAME,
    SYSLOG_FACILITIES,
    _get_yesno,
)
from tests.support.fuzz import fuzz_settings

FUZZ = fuzz_settings(2000, HealthCheck.function_scoped_fixture)

DANGEROUS = {b"dir", b"logfile", b"include"}
SAFE_ARGS = {
    "dir": [".", "sub", "missing", '""'],
    "logfile": ['""', "log.txt", "sub", "missing/x.log"],
    "include": ["inc.conf", "missing.conf", "-", "loop.conf", "bad.conf", "sub"],
}
#: For the round trip: only arguments whose effect does not depend on the cwd.
#: No ``include``: CONFIG REWRITE replaces the first line of an option and
#: blanks the others, so an ``include`` between two of them changes which value
#: wins after the rewrite (``port 0 / include (port 1234) / port 0``). Disque
#: and Redis behave the same way.
ROUND_TRIP_SAFE_ARGS = {"dir": ["."], "logfile": ['""', "log.txt"]}
STDIN = b"port 4321\nhz 44\n"

NAMES = [p.name for p in PARAMS] + ["include", "bogus", "save", ""]

WORDS = [
    "yes", "no", "YES", "No", "", "0", "1", "-1", "5", "007", "+3", "65535", "65536", "55535",
    "2147483647", "2147483648", "4294967296", "99999999999999999999", "-99999999999999999999",
    "1k", "1kb", "1KB", "10mb", "1g", "1gb", "3GB", "-1gb", "100xyz", "1.5", "0x10", " 5",
    "normal", "NORMAL", "slave", "pubsub", "debug", "verbose", "notice", "warning", "acks",
    "noeviction", "always", "everysec", "local0", "LOCAL7", "user", "local8", "777", "0777",
    "1000", "ping", "PING", "info", "config", "debug", "quit", "foo", "a b", "a/b", "a\\b",
    "127.0.0.1", "::1", "x" * 513, "x" * 512,
]  # fmt: skip


def _encode(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def _no_newline(b: bytes) -> bool:
    return b"\n" not in b and b"\0" not in b


tokens = st.one_of(
    st.sampled_from(WORDS),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(alphabet="0123456789kmgbKMGB-+ x", max_size=6),
    st.text(max_size=6),
).map(_encode)

BROKEN = [b'"', b"'", b'"x"y', b"'x'y"]


@st.composite
def quoted_token(draw: st.DrawFn) -> bytes:
    """A token written one of the ways a config line can (some of them broken)."""
    token = draw(tokens)
    style = draw(st.integers(0, 9))
    if style >= 5 and token and not any(c in b" \t\"'" for c in token):
        return token  # raw
    if style == 4:
        return b"'" + token.replace(b"\\", b"").replace(b"'", b"\\'") + b"'"
    if style == 3:
        return BROKEN[len(token) % len(BROKEN)] + token
    return sds_repr(token)


QUOTED = quoted_token()
ARG_COUNTS = st.sampled_from([1, 1, 1, 2, 4, 0, 3, 5])
PADS = st.sampled_from([b"", b" ", b"\t", b"  ", b"\r"])
ENDS = st.sampled_from([b"", b" ", b"\r"])


def mixed_case(draw: st.DrawFn, name: str) -> bytes:
    mask = draw(st.integers(0, (1 << len(name)) - 1))
    return "".join(c.upper() if mask >> i & 1 else c for i, c in enumerate(name)).encode()


def directive_line(safe_args: dict[str, list[str]]) -> st.SearchStrategy[bytes]:
    safe = {name: st.sampled_from([a.encode() for a in args]) for name, args in safe_args.items()}

    @st.composite
    def line(draw: st.DrawFn) -> bytes:
        name = draw(st.sampled_from(NAMES))
        if name in safe:
            args = [draw(safe[name])]
            if draw(st.integers(0, 9)) == 0:
                args.append(b"extra")
        else:
            args = [draw(QUOTED) for _ in range(draw(ARG_COUNTS))]
        head = mixed_case(draw, name) if name else b'""'
        return draw(PADS) + b" ".join([head, *args]) + draw(ENDS)

    return line()


def safe_random_line(line: bytes) -> bool:
    """Random bytes must not turn into a dir/logfile/include directive."""
    words = line.strip().split()
    return not words or words[0].strip(b"\"'").lower().split(b"\x00")[0] not in DANGEROUS


def _mem(n: int, unit: bytes) -> bytes:
    return b"%d%s" % (n, unit)


YESNO_WORDS = st.sampled_from([b"yes", b"no", b"YES", b"No"])
SMALL_INTS = st.integers(-5, 70000).map(lambda i: str(i).encode())
MEMORY = st.builds(
    _mem,
    st.integers(-3, 5000),
    st.sampled_from([b"", b"b", b"k", b"kb", b"m", b"mb", b"g", b"gb", b"KB", b"Gb"]),
)
STRINGS = st.binary(max_size=12).map(sds_repr)
COMMANDS = st.sampled_from([n.encode() for n in COMMAND_NAMES] + [b"PING", b"renamed"])


def _enum(*words: str) -> st.SearchStrategy[bytes]:
    return st.sampled_from([w.encode() for w in words] + [w.upper().encode() for w in words])


#: Argument strategies that usually produce a valid line (for the round trip).
PLAUSIBLE_ARGS: dict[str, st.SearchStrategy[list[bytes]]] = {
    "bind": st.lists(
        st.sampled_from([b"127.0.0.1", b"::1", b"0.0.0.0", b'"a b"']), min_size=1, max_size=3
    ),
    "rename-command": st.tuples(COMMANDS, st.sampled_from([b"x1", b"X2", b'""', b"renamed"])).map(
        list
    ),
    "client-output-buffer-limit": st.tuples(_enum("normal"), MEMORY, MEMORY, SMALL_INTS).map(list),
    "loglevel": _enum(*LOGLEVELS).map(lambda w: [w]),
    "maxmemory-policy": _enum(*MAXMEMORY_POLICIES).map(lambda w: [w]),
    "appendfsync": _enum(*APPENDFSYNC_MODES).map(lambda w: [w]),
    "syslog-facility": _enum(*SYSLOG_FACILITIES).map(lambda w: [w]),
    "unixsocketperm": st.integers(0, 0o777).map(lambda i: [b"%o" % i]),
    "maxmemory": MEMORY.map(lambda w: [w]),
    "auto-aof-rewrite-min-size": MEMORY.map(lambda w: [w]),
    "requirepass": STRINGS.map(lambda w: [w]),
    "appendfilename": st.sampled_from([b"a.aof", b'"x y.aof"']).map(lambda w: [w]),
}
for _name in ("pidfile", "unixsocket", "syslog-ident", "cluster-config-file"):
    PLAUSIBLE_ARGS[_name] = STRINGS.map(lambda w: [w])
for _param in PARAMS:
    if _param.name in PLAUSIBLE_ARGS or _param.load is None:
        continue
    if _param.get is _get_yesno or _param.name in ("syslog-enabled", "daemonize"):
        PLAUSIBLE_ARGS[_param.name] = YESNO_WORDS.map(lambda w: [w])
    else:
        PLAUSIBLE_ARGS[_param.name] = SMALL_INTS.map(lambda w: [w])
for _name, _args in ROUND_TRIP_SAFE_ARGS.items():
    PLAUSIBLE_ARGS[_name] = st.sampled_from([[a.encode()] for a in _args])


@st.composite
def plausible_line(draw: st.DrawFn) -> bytes:
    name = draw(st.sampled_from(sorted(PLAUSIBLE_ARGS)))
    return b" ".join([mixed_case(draw, name), *draw(PLAUSIBLE_ARGS[name])])


PLAUSIBLE = plausible_line()


NOISE = st.binary(max_size=20).filter(_no_newline)
BLANKS = st.sampled_from([b"", b"  ", b"\t"])
KINDS = st.sampled_from(["directive"] * 6 + ["comment", "blank", "noise"])


def config_text(
    safe_args: dict[str, list[str]], noise: bool = True, plausible: bool = False
) -> st.SearchStrategy[bytes]:
    directive = PLAUSIBLE if plausible else directive_line(safe_args)

    @st.composite
    def text(draw: st.DrawFn) -> bytes:
        lines = []
        for _ in range(draw(st.integers(0, 6))):
            kind = draw(KINDS)
            if kind == "directive":
                lines.append(draw(directive))
            elif kind == "comment":
                lines.append(b"# " + draw(tokens))
            elif kind == "blank":
                lines.append(draw(BLANKS))
            elif noise:
                raw = draw(NOISE)
                lines.append(raw if safe_random_line(raw) else b"#")
        return b"\n".join(lines) + draw(ENDS)

    return text()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("config-fuzz")
    (base / "sub").mkdir()
    (base / "inc.conf").write_text("port 1234\nhz 33\n")
    (base / "loop.conf").write_text("include loop.conf\n")
    (base / "bad.conf").write_text("port 99999\n")
    home = os.getcwd()
    yield base
    os.chdir(home)


class InBase:
    """Run one example from the sandbox directory, then go back home."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.home = os.getcwd()

    def __enter__(self) -> None:
        os.chdir(self.base)

    def __exit__(self, *exc: object) -> None:
        os.chdir(self.home)


def assert_valid(c: Config) -> None:
    """Every value is one Disque could hold (and disquette can use)."""
    assert 0 <= c.port <= 65535
    assert c.tcp_backlog >= 0
    assert isinstance(c.bind, list) and len(c.bind) <= 16
    assert all(isinstance(a, str) for a in c.bind)
    assert 0 <= c.unixsocketperm <= 0o777
    assert c.timeout >= 0 and c.tcp_keepalive >= 0
    assert c.loglevel in LOGLEVELS
    assert c.syslog_facility in SYSLOG_FACILITIES
    assert c.databases >= 1
    assert c.requirepass is None or 0 < len(c.requirepass.encode("utf-8", "surrogateescape")) <= 512
    assert c.maxclients >= 1
    assert c.maxmemory >= 0
    assert c.maxmemory_policy in MAXMEMORY_POLICIES
    assert c.maxmemory_samples >= 1
    assert 1 <= c.hz <= 500
    assert c.appendfsync in APPENDFSYNC_MODES
    assert "/" not in c.appendfilename and "\\" not in c.appendfilename
    assert c.auto_aof_rewrite_percentage >= 0
    assert c.cluster_node_timeout >= 0
    assert c.latency_monitor_threshold >= 0
    limit = c.client_output_buffer_limit
    assert isinstance(limit, ClientLimit)
    assert 0 <= limit.hard < 2**64 and 0 <= limit.soft < 2**64
    assert 0 <= limit.seconds <= 2**31 - 1
    assert c.watchdog_period >= 0
    for attr in (
        "daemonize", "syslog_enabled", "activerehashing", "appendonly",
        "no_appendfsync_on_rewrite", "aof_rewrite_incremental_fsync", "aof_load_truncated",
        "aof_enqueue_jobs_once", "protected_mode",
    ):  # fmt: skip
        assert isinstance(getattr(c, attr), bool), attr


def reload(text: bytes, base: Path) -> Config:
    os.chdir(base)
    return load_config_text(text, stdin=io.BytesIO(STDIN))


@FUZZ
@given(text=config_text(SAFE_ARGS))
def test_random_config_text_only_fails_with_config_file_error(sandbox: Path, text: bytes) -> None:
    with InBase(sandbox):
        try:
            c = load_config_text(text, stdin=io.BytesIO(STDIN))
        except ConfigFileError as e:
            assert str(e)  # the banner always renders
            return
        assert_valid(c)


@FUZZ
@given(text=config_text(ROUND_TRIP_SAFE_ARGS, noise=False, plausible=True))
def test_loaded_config_survives_rewrite_and_reload(sandbox: Path, text: bytes) -> None:
    with InBase(sandbox):
        try:
            c = load_config_text(text, stdin=io.BytesIO(STDIN))
        except ConfigFileError:
            return
        assert_valid(c)
        rewritten = rewrite_config_text(text, c)
        assert reload(rewritten, sandbox) == c
        # Rewriting the rewritten file changes nothing.
        assert rewrite_config_text(rewritten, c) == rewritten


set_names = st.one_of(
    st.sampled_from(SETTABLE).map(str.encode),
    st.sampled_from(SETTABLE).map(str.upper).map(str.encode),
    st.sampled_from(["port", "bind", "nosuch", "", "daemonize", "rename-command"]).map(str.encode),
)


DIR_VALUES = st.sampled_from([b".", b"sub", b"missing", b"", b"sub\x00x"])
CLASSES = st.sampled_from([b"normal", b"NORMAL", b"slave"])
SET_VALUES = st.one_of(tokens, st.binary(max_size=8))


@st.composite
def set_call(draw: st.DrawFn) -> tuple[bytes, bytes]:
    name = draw(set_names)
    if name.lower() == b"dir":
        return name, draw(DIR_VALUES)
    if name.lower() == b"client-output-buffer-limit" and draw(st.booleans()):
        words = [draw(CLASSES), draw(tokens), draw(tokens), draw(tokens)]
        return name, b" ".join(words)
    return name, draw(SET_VALUES)


PATTERNS = st.one_of(
    st.binary(max_size=12), st.text(alphabet="*?[]^\\-amxp", max_size=10).map(str.encode)
)


@FUZZ
@given(calls=st.lists(set_call(), max_size=8), pattern=PATTERNS)
def test_random_config_set_only_fails_with_config_set_error(
    sandbox: Path, calls: list[tuple[bytes, bytes]], pattern: bytes
) -> None:
    with InBase(sandbox):
        c = Config()
        for name, value in calls:
            before = c.copy()
            try:
                config_set(c, name, value)
            except ConfigSetError as e:
                assert e.message
                assert c == before  # a refused value changes nothing
            assert_valid(c)
        # Whatever CONFIG SET accepted, CONFIG REWRITE writes a loadable file.
        # Only the documented quirks (0 is accepted by CONFIG SET but not by
        # the file loader) are set aside.
        fixed = c.copy()
        fixed.maxmemory = fixed.maxmemory or 1
        fixed.cluster_node_timeout = fixed.cluster_node_timeout or 1
        fixed.watchdog_period = 0  # CONFIG SET only, never written to the file
        assert reload(rewrite_config_text(None, fixed), sandbox) == fixed
        # And CONFIG GET answers any pattern, in Disque's order.
        names = [name.decode() for name, _ in config_get(c, pattern)]
        assert names == [n for n in GET_ORDER if n in names]


#: The directives the file and CONFIG SET both take, with one argument and no effect
#: on the file system: each value must read the same in the file, on the command line
#: and in CONFIG SET, but for the ranges where Disque's file and CONFIG SET differ.
SHARED = [
    p.name
    for p in PARAMS
    if p.load is not None and p.set is not None and p.nargs == (1, 1) and p.name != "dir"
]
#: Disque's own differences between the file's and CONFIG SET's ranges (0 for these two,
#: negative slow log values, tcp-keepalive's yes/no in CONFIG SET; hz is clamped).
DIFFERENT = {"maxmemory", "cluster-node-timeout", "slowlog-log-slower-than", "slowlog-max-len",
             "tcp-keepalive", "hz", "requirepass"}  # fmt: skip
VALUE_TEXT = st.one_of(
    tokens,
    st.builds(
        lambda n, u: f"{n}{u}".encode(),
        st.integers(-3, 10**7),
        st.sampled_from(["", "b", "k", "kb", "MB", "mbs", "ms", "s", "m", "h", "d", "x", "%"]),
    ),
).filter(lambda v: b"\x00" not in v and not v.startswith(b"--"))  # "--" starts an option


@FUZZ
@given(name=st.sampled_from(SHARED), value=VALUE_TEXT)
@example(name="requirepass", value=b"p" * 513)  # found: its reason does not name it
def test_a_value_reads_the_same_in_the_file_on_the_command_line_and_in_config_set(
    sandbox: Path, name: str, value: bytes
) -> None:
    with InBase(sandbox):
        attr = PARAMS_BY_NAME[name].attr
        results = []
        for how in ("file", "command line", "config set"):
            c = Config()
            try:
                if how == "file":
                    load_config_text(name.encode() + b" " + sds_repr(value), c)
                elif how == "command line":
                    argv = ["disquette-server", f"--{name}", os.fsdecode(value)]
                    parse_command_line(argv).load(c)
                else:
                    config_set(c, name.encode(), value)
            except (ConfigFileError, ConfigSetError) as e:
                if how != "config set":
                    # The banner names the directive (in its reason or the line it
                    # quotes: Disque's reasons for requirepass, say, do not).
                    assert isinstance(e, ConfigFileError)
                    assert name.encode() in bytes(e), bytes(e)
                results.append(None)
                continue
            results.append(getattr(c, attr))
        file, cmdline, config_set_value = results
        assert file == cmdline
        if name not in DIFFERENT:
            assert file == config_set_value, (name, value, results)
