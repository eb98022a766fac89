"""The table of configuration directives: the one place that knows each option.

Disque (a Redis 3.x fork) handles an option in up to four places of config.c:
the config file loader, CONFIG GET, CONFIG SET and CONFIG REWRITE, each a long
chain of ``strcasecmp`` branches with its own conversion and validation. The
four often disagree on purpose (``cluster-node-timeout`` must be > 0 in the
file but CONFIG SET accepts 0; ``tcp-keepalive`` is a number in the file and a
yes/no for CONFIG GET and SET), so this module writes each option once, as a
:class:`Param` row whose four columns say what each of those places does:

* ``load``: how the config file reads it (which parser, which range, Disque's
  text of the fatal error in ``error``), or ``None`` when it is not a file directive;
* ``get``: how CONFIG GET formats it, or ``None`` when CONFIG GET hides it;
* ``set``: how CONFIG SET parses it, or ``None`` when it is not settable
  (``-ERR Unsupported CONFIG parameter``);
* ``rewrite``: the line CONFIG REWRITE writes and whether it is forced into the
  file (a value different from the default), or ``None`` when REWRITE leaves
  the option's lines alone.

Values are read by the parsers of :mod:`disquette.config.values`, one per kind
(whole numbers, sizes, durations, yes/no, choices), the same in the file and in
CONFIG SET (``_int(...)``, ``_size(...)``, ``_duration(...)`` below), so a value
is read one way everywhere and refused when it cannot be read whole (where
Disque's ``atoi`` read ``port 77abc`` as 77 and ``maxmemory 100MBs`` as 100 bytes).
The order of CONFIG GET's reply and of the lines CONFIG REWRITE appends is
Disque's, given by :data:`GET_ORDER` and :data:`REWRITE_ORDER` below the table.
``include`` is the only directive that is not a row: it is structure, not an
option, and the loader handles it.

Values are stored on :class:`~disquette.config.model.Config` as Python values:
``int``, ``bool``, ``str`` (decoded with ``surrogateescape``), enum names as
lowercase ``str``, ``list[str]`` for ``bind``, :class:`ClientLimit` for
``client-output-buffer-limit`` and ``dict[str, str]`` for ``rename-command``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from disquette.config import values
from disquette.config.command_names import COMMAND_NAMES
from disquette.config.cstring import (
    INT32_MAX,
    c_str,
    format_memory,
    sds_repr,
    strerror,
    to_bytes,
    to_str,
)
from disquette.config.errors import ConfigSetError, LoadError
from disquette.config.tls import (
    AUTH_CLIENTS,
    AUTH_CLIENTS_ERROR,
    PROTOCOLS_ERROR,
    ciphers_error,
    ciphersuites_error,
    parse_protocols,
)

if TYPE_CHECKING:
    from disquette.config.model import Config

#: Longest accepted ``requirepass`` (CONFIG_AUTHPASS_MAX_LEN).
AUTHPASS_MAX_LEN = 512
#: Most addresses ``bind`` accepts (CONFIG_BINDADDR_MAX).
BINDADDR_MAX = 16
#: ``hz`` is clamped to this range (CONFIG_MIN_HZ, CONFIG_MAX_HZ).
MIN_HZ, MAX_HZ = 1, 500
#: The only client class of client-output-buffer-limit Disque knows.
CLIENT_CLASSES = ("normal",)

LOGLEVELS = ("debug", "verbose", "notice", "warning")
MAXMEMORY_POLICIES = ("acks", "noeviction")
APPENDFSYNC_MODES = ("everysec", "always", "no")
SYSLOG_FACILITIES = ("user", *(f"local{i}" for i in range(8)))

YESNO_ERROR = "argument must be 'yes' or 'no'"
FLOW_TO_DISK_LEVEL_ERROR = "flow-to-disk-level must be a percentage from 1% to 95% or a memory size"
FLOW_TO_DISK_MAX_SIZE_ERROR = "flow-to-disk-max-size must be 0 or a memory size"
FLOW_TO_DISK_DIR_ERROR = "flow-to-disk-dir can't be empty"
#: The highest ``flow-to-disk-level`` percentage (past 95 % maxmemory Disque refuses jobs).
FLOW_TO_DISK_MAX_PERCENT = 95
#: The largest ``job-max-size``: a job must fit in one frame of the cluster bus (64 MB,
#: protocol/frames.py) beside its ID, queue name and fields.
JOB_MAX_SIZE_LIMIT = 63 << 20
JOB_MAX_SIZE_ERROR = "job-max-size must be between 1 byte and 63mb"


class ClientLimit(NamedTuple):
    """Output buffer limits of the ``normal`` client class (bytes, bytes, seconds)."""

    hard: int = 0
    soft: int = 0
    seconds: int = 0


class BadValue(Exception):
    """A CONFIG SET value was rejected (``Invalid argument ... for CONFIG SET ...``)
    by a rule of CONFIG SET's own (the parsers of config/values.py raise Refused)."""


#: ``load(args, config) -> value``: args are the words after the directive name; raises
#: LoadError (the banner's reason) or Refused (a value, explained by the loader).
Loader = Callable[[list[bytes], "Config"], object]
#: ``get(value) -> bytes``: the CONFIG GET value.
Shower = Callable[[object], bytes]
#: ``set(raw, config) -> value``: raises Refused or BadValue (or ConfigSetError for own
#: texts).
Setter = Callable[[bytes, "Config"], object]
#: ``rewrite(name, value, default) -> [(line, force), ...]``; [] = drop old lines.
Rewriter = Callable[[bytes, object, object], list[tuple[bytes, bool]]]


@dataclass(frozen=True)
class Param:
    """One configuration option and what each part of config.c does with it."""

    #: Directive / CONFIG parameter name.
    name: str
    #: Attribute of :class:`~disquette.config.model.Config`.
    attr: str
    #: The value, or a zero-argument callable making it (``list``, ``dict``, getcwd).
    default: object
    load: Loader | None = None
    get: Shower | None = None
    set: Setter | None = None
    rewrite: Rewriter | None = None
    #: Accepted number of arguments after the name in the file (min, max or None).
    nargs: tuple[int, int | None] = (1, 1)
    #: The config file's reason for a value of the right kind it refuses (Disque's text
    #: where Disque has one: ``Invalid port``), before the value's explanation.
    error: str | None = None

    def fresh_default(self) -> object:
        """The default value (a new object for mutable defaults)."""
        return self.default() if callable(self.default) else self.default


# --------------------------------------------------------------------------
# Loaders (the config file) and setters (CONFIG SET). Values are read by the parsers
# of config/values.py, one per kind, which raise Refused; the loader and CONFIG SET
# turn that into their own errors (the banner's reason, Disque's CONFIG SET text).
# Where Disque's file and CONFIG SET accept different ranges, each has its own.


def _int(lo: int | None = None, hi: int | None = None) -> Setter:
    return lambda raw, config: values.integer(raw, lo, hi)


def _size(lo: int | None = 0, hi: int | None = None) -> Setter:
    return lambda raw, config: values.size(raw, lo, hi)


def _duration(unit: str, lo: int | None = 0, hi: int | None = None) -> Setter:
    return lambda raw, config: values.duration(raw, unit, lo, hi)


def _choice(names: tuple[str, ...]) -> Setter:
    return lambda raw, config: values.choice(raw, names)


def _yesno(raw: bytes, config: Config) -> object:
    return values.boolean(raw)


def _one(parse: Setter) -> Loader:
    """The loader of a one-argument directive read by ``parse``."""
    return lambda args, config: parse(args[0], config)


_load_yesno = _one(_yesno)


def _ip(raw: bytes, config: Config) -> object:
    return values.ip_address(raw)


def _load_seeds(args: list[bytes], config: Config) -> object:
    for arg in args:
        values.seed(arg)  # (Refused: not host:port[@bus-port])
    return [to_str(c_str(a)) for a in args]


def _set_seeds(raw: bytes, config: Config) -> object:
    """Seeds separated by spaces, like the directive's arguments; empty: none."""
    return _load_seeds(c_str(raw).split(), config)


def _hz(lo: int | None) -> Setter:
    """``hz``: any whole number (CONFIG SET: not negative), clamped to 1..500 (Disque's
    hz is a hint)."""

    def parse(raw: bytes, config: Config) -> object:
        return min(max(values.integer(raw, lo), MIN_HZ), MAX_HZ)

    return parse


def _load_str(args: list[bytes], config: Config) -> object:
    return to_str(c_str(args[0]))


def _load_bind(args: list[bytes], config: Config) -> object:
    if len(args) > BINDADDR_MAX:
        raise LoadError("Too many bind addresses specified")
    return [to_str(c_str(a)) for a in args]


def _load_http_bind(args: list[bytes], config: Config) -> object:
    if len(args) > BINDADDR_MAX:
        raise LoadError("Too many http-bind addresses specified")
    return [to_str(c_str(a)) for a in args]


def _unixsocketperm(raw: bytes, config: Config) -> object:
    word = c_str(raw)
    accepted = "octal digits from 0 to 777"
    if not word or word.strip(b"01234567"):
        raise values.Refused(raw, "is not a file mode", accepted)
    if int(word, 8) > 0o777:
        raise values.Refused(raw, "is out of range", accepted, readable=True)
    return int(word, 8)


def _load_dir(args: list[bytes], config: Config) -> object:
    try:
        os.chdir(c_str(args[0]))
    except OSError as e:
        raise LoadError(strerror(e)) from None
    return _getcwd()


def _load_logfile(args: list[bytes], config: Config) -> object:
    path = c_str(args[0])
    if path:
        # Disque opens the log file once to fail early (and creates it).
        try:
            with open(path, "ab"):
                pass
        except OSError as e:
            raise LoadError(f"Can't open the log file: {strerror(e)}") from None
    return to_str(path)


def _load_requirepass(args: list[bytes], config: Config) -> object:
    password = c_str(args[0])
    if len(password) > AUTHPASS_MAX_LEN:
        raise LoadError("Password is longer than CONFIG_AUTHPASS_MAX_LEN")
    return to_str(password) or None


def _load_secret(args: list[bytes], config: Config) -> object:
    return to_str(c_str(args[0])) or None


def _load_appendfilename(args: list[bytes], config: Config) -> object:
    name = c_str(args[0])
    if b"/" in name or b"\\" in name:
        raise LoadError("appendfilename can't be a path, just a filename")
    return to_str(name)


def _client_limit(words: list[bytes]) -> ClientLimit:
    """``normal <hard size> <soft size> <seconds>``."""
    if to_str(c_str(words[0]).lower()) not in CLIENT_CLASSES:
        raise LoadError("Unrecognized client limit class")
    hard, soft = values.size(words[1]), values.size(words[2])
    try:
        seconds = values.duration(words[3], "s", 0, INT32_MAX)
    except values.Refused as e:
        if e.readable and e.value.startswith("-"):
            raise LoadError(
                e.explain(
                    "client-output-buffer-limit",
                    "Negative number of seconds in soft limit is invalid",
                )
            ) from None
        raise
    return ClientLimit(hard, soft, seconds)


def _load_client_limit(args: list[bytes], config: Config) -> object:
    return _client_limit(args)


def current_command_table(renames: dict[str, str]) -> dict[str, str]:
    """Map each currently valid command name to its original name."""
    table: dict[str, str] = {}
    for original in COMMAND_NAMES:
        name = renames.get(original, original)
        if name:
            table[name] = original
    return table


def _load_rename(args: list[bytes], config: Config) -> object:
    renames = dict(config.rename_commands)
    table = current_command_table(renames)
    original = table.pop(to_str(args[0].lower()), None)
    if original is None:
        raise LoadError("No such command in rename-command")
    target = to_str(args[1].lower())
    if target:
        if target in table:
            raise LoadError("Target command name already exists")
        table[target] = original
    if target == original:
        renames.pop(original, None)
    else:
        renames[original] = target
    return renames


def _nonempty_path(raw: bytes, config: Config) -> object:
    path = c_str(raw)
    if not path:
        raise values.Refused(raw, "is empty", "a directory's path", readable=True)
    return to_str(path)


# --------------------------------------------------------------------------
# flow-to-disk-level: a share of maxmemory or an absolute size.


def parse_flow_to_disk_level(raw: bytes, config: object = None) -> str:
    """The normalised ``flow-to-disk-level`` (``"60%"`` or bytes as ``"536870912"``).

    ``N%`` with N from 1 to 95, or a size above 0 (``512mb``); raises Refused.
    """
    word = c_str(raw)
    accepted = (
        f"a percentage of maxmemory from 1% to {FLOW_TO_DISK_MAX_PERCENT}% (such as 60%), "
        f"or a size above 0: {values.SIZE_FORMS}"
    )
    if word.endswith(b"%"):
        digits = word[:-1]
        if not digits.isdigit():
            raise values.Refused(raw, "is not a percentage", accepted)
        percent = int(digits)
        if not 1 <= percent <= FLOW_TO_DISK_MAX_PERCENT:
            raise values.Refused(raw, "is out of range", accepted, readable=True)
        return f"{percent}%"
    try:
        return str(values.size(word, 1))
    except values.Refused as e:
        raise values.Refused(raw, e.problem, accepted, e.readable) from None


def flow_to_disk_threshold(config: Config) -> int:
    """The dataset size in bytes past which jobs spill to disk; 0: never.

    A percentage is of ``maxmemory`` (so it follows CONFIG SET maxmemory; with
    ``maxmemory 0``, reachable only through CONFIG SET, it is 0); a size is itself.
    """
    level = config.flow_to_disk_level
    if level.endswith("%"):
        return config.maxmemory // 100 * int(level[:-1])
    return int(level)


# --------------------------------------------------------------------------
# The tls-* values with a syntax of their own (config/tls.py): file and CONFIG SET.


def _tls_text(name: str, raw: bytes) -> str:
    """A ``tls-protocols``/``tls-ciphers``/``tls-ciphersuites`` value, normalised, or
    LoadError with the reason."""
    text = to_str(c_str(raw)).strip()
    if name == "tls-protocols":
        protocols = parse_protocols(text)
        if protocols is None:
            raise LoadError(PROTOCOLS_ERROR)
        return protocols
    error = ciphers_error(text) if name == "tls-ciphers" else ciphersuites_error(text)
    if error is not None:
        raise LoadError(error)
    return text


def _load_tls_text(name: str) -> Loader:
    def load(args: list[bytes], config: Config) -> object:
        return _tls_text(name, b" ".join(args)) or None

    return load


def _set_tls_text(name: str) -> Setter:
    def parse(raw: bytes, config: Config) -> object:
        if not raw:
            return None  # back to OpenSSL's default
        try:
            return _tls_text(name, raw) or None
        except LoadError:
            raise BadValue from None

    return parse


def _set_opt_str(raw: bytes, config: Config) -> object:
    return to_str(c_str(raw)) or None


# --------------------------------------------------------------------------
# CONFIG GET formatting.


def _get_int(value: object) -> bytes:
    assert isinstance(value, int | float)
    return b"%d" % value


def _get_yesno(value: object) -> bytes:
    return b"yes" if value else b"no"


def _get_str(value: object) -> bytes:
    return b"" if value is None else to_bytes(str(value))


def _get_octal(value: object) -> bytes:
    assert isinstance(value, int)
    return b"%o" % value


def _get_dir(value: object) -> bytes:
    return to_bytes(_getcwd())


def _get_client_limit(value: object) -> bytes:
    assert isinstance(value, ClientLimit)
    return b"normal %d %d %d" % value


def _get_bind(value: object) -> bytes:
    assert isinstance(value, list)
    return b" ".join(to_bytes(a) for a in value)


# --------------------------------------------------------------------------
# CONFIG SET's own rules.


def _set_yesno_int(raw: bytes, config: Config) -> object:
    """tcp-keepalive: a yes/no that Disque stores in the seconds field as 1/0."""
    return 1 if values.boolean(raw) else 0


def _set_http_bind(raw: bytes, config: Config) -> object:
    """Addresses separated by spaces, like ``bind`` in the file; empty: like ``bind``."""
    words = c_str(raw).split()
    if len(words) > BINDADDR_MAX:
        raise BadValue
    return [to_str(w) for w in words]


def _set_requirepass(raw: bytes, config: Config) -> object:
    if len(raw) > AUTHPASS_MAX_LEN:  # sdslen: the NUL bytes count here
        raise BadValue
    return to_str(c_str(raw)) or None


def _set_dir(raw: bytes, config: Config) -> object:
    try:
        os.chdir(c_str(raw))
    except OSError as e:
        raise ConfigSetError(f"Changing directory: {strerror(e)}") from None
    return _getcwd()


def _set_client_limit(raw: bytes, config: Config) -> object:
    """``<class> <hard> <soft> <seconds>`` repeated, split on single spaces.

    Checked as a whole before anything is applied; the last group wins. An
    empty value is accepted and changes nothing, like in Disque.
    """
    words = raw.split(b" ") if raw else []
    if len(words) % 4:
        raise BadValue
    value = config.client_output_buffer_limit
    for i in range(0, len(words), 4):
        try:
            value = _client_limit(words[i : i + 4])
        except LoadError:
            raise BadValue from None
    return value


# --------------------------------------------------------------------------
# CONFIG REWRITE formatting: the rewriteConfig*Option functions.


def _rw_numerical(name: bytes, value: object, default: object) -> list[tuple[bytes, bool]]:
    assert isinstance(value, int | float)
    return [(b"%s %d" % (name, value), value != default)]


def _rw_memory(name: bytes, value: object, default: object) -> list[tuple[bytes, bool]]:
    assert isinstance(value, int)
    return [(b"%s %s" % (name, format_memory(value)), value != default)]


def _rw_yesno(name: bytes, value: object, default: object) -> list[tuple[bytes, bool]]:
    return [(name + (b" yes" if value else b" no"), bool(value) != bool(default))]


def _rw_str(name: bytes, value: object, default: object) -> list[tuple[bytes, bool]]:
    if value is None:  # an unset string option must be absent from the file
        return []
    force = default is None or value != default
    return [(name + b" " + sds_repr(to_bytes(str(value))), force)]


def _rw_enum(name: bytes, value: object, default: object) -> list[tuple[bytes, bool]]:
    return [(name + b" " + to_bytes(str(value)), value != default)]


def _rw_octal(name: bytes, value: object, default: object) -> list[tuple[bytes, bool]]:
    assert isinstance(value, int)
    return [(b"%s %o" % (name, value), value != default)]


def _rw_flow_to_disk_level(name: bytes, value: object, default: object) -> list[tuple[bytes, bool]]:
    assert isinstance(value, str)
    text = to_bytes(value) if value.endswith("%") else format_memory(int(value))
    return [(name + b" " + text, value != default)]


def _bind_word(address: str) -> bytes:
    """An address as written by REWRITE: raw like Disque, quoted only when it must be.

    Disque joins the addresses unquoted, which breaks on an address with a
    space or a quote (never a real address); quoting those keeps the file loadable.
    """
    word = to_bytes(address)
    if word and all(0x21 <= c <= 0x7E and c not in b"\"'\\" for c in word):
        return word
    return sds_repr(word)


def _rw_bind(name: bytes, value: object, default: object) -> list[tuple[bytes, bool]]:
    assert isinstance(value, list)
    if not value:
        return []
    return [(name + b" " + b" ".join(_bind_word(a) for a in value), True)]


def _rw_dir(name: bytes, value: object, default: object) -> list[tuple[bytes, bool]]:
    cwd = _getcwd()
    if not cwd:
        return []
    return _rw_str(name, cwd, None)


def _rw_client_limit(name: bytes, value: object, default: object) -> list[tuple[bytes, bool]]:
    assert isinstance(value, ClientLimit)
    line = b"%s normal %s %s %d" % (
        name,
        format_memory(value.hard),
        format_memory(value.soft),
        value.seconds,
    )
    return [(line, value != default)]


def _getcwd() -> str:
    try:
        return os.getcwd()
    except OSError:
        return ""


# --------------------------------------------------------------------------
# The table. Rows follow section 13 of the reference; texts are Disque's.


def _port_param(name: str) -> Param:
    """A port directive beyond Disque: 0 (the default) for none, settable at run time."""
    return Param(name, name.replace("-", "_"), 0,
                 load=_one(_int(0, 65535)), get=_get_int, set=_int(0, 65535),
                 rewrite=_rw_numerical, error=f"Invalid {name}")  # fmt: skip


def _flag_param(name: str, default: bool, settable: bool = True) -> Param:
    """A yes/no directive, shown by CONFIG GET, and set by CONFIG SET if ``settable``."""
    return Param(name, name.replace("-", "_"), default, load=_load_yesno, get=_get_yesno,
                 set=_yesno if settable else None, rewrite=_rw_yesno,
                 error=YESNO_ERROR)  # fmt: skip


PARAMS: tuple[Param, ...] = (
    _flag_param("daemonize", False, settable=False),
    Param("pidfile", "pidfile", "/var/run/disque.pid",
          load=_load_str, get=_get_str, rewrite=_rw_str),
    Param("port", "port", 7711,
          load=_one(_int(0, 65535)), get=_get_int, rewrite=_rw_numerical,
          error="Invalid port"),
    Param("tcp-backlog", "tcp_backlog", 511,
          load=_one(_int(0, INT32_MAX)), get=_get_int, rewrite=_rw_numerical,
          error="Invalid backlog value"),
    Param("bind", "bind", list,
          load=_load_bind, get=_get_bind, rewrite=_rw_bind, nargs=(1, None)),
    Param("unixsocket", "unixsocket", None,
          load=_load_str, get=_get_str, rewrite=_rw_str),
    Param("unixsocketperm", "unixsocketperm", 0,
          load=_one(_unixsocketperm), get=_get_octal, rewrite=_rw_octal,
          error="Invalid socket file permissions"),
    Param("timeout", "timeout", 0,
          load=_one(_duration("s", 0, INT32_MAX)), get=_get_int,
          set=_duration("s", 0, INT32_MAX), rewrite=_rw_numerical, error="Invalid timeout value"),
    Param("tcp-keepalive", "tcp_keepalive", 0,
          load=_one(_duration("s", 0, INT32_MAX)), get=_get_yesno,
          set=_set_yesno_int, rewrite=_rw_numerical, error="Invalid tcp-keepalive value"),
    Param("loglevel", "loglevel", "notice",
          load=_one(_choice(LOGLEVELS)), get=_get_str, set=_choice(LOGLEVELS), rewrite=_rw_enum,
          error="Invalid log level. Must be one of debug, verbose, notice, warning"),
    Param("logfile", "logfile", "",
          load=_load_logfile, get=_get_str, rewrite=_rw_str),
    Param("syslog-enabled", "syslog_enabled", False,
          load=_load_yesno, rewrite=_rw_yesno, error=YESNO_ERROR),
    Param("syslog-ident", "syslog_ident", "disque",
          load=_load_str, rewrite=_rw_str),
    Param("syslog-facility", "syslog_facility", "local0",
          load=_one(_choice(SYSLOG_FACILITIES)), get=_get_str, rewrite=_rw_enum,
          error="Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7"),
    Param("databases", "databases", 16,
          load=_one(_int(1, INT32_MAX)), get=_get_int, error="Invalid number of databases"),
    Param("dir", "dir", _getcwd,
          load=_load_dir, get=_get_dir, set=_set_dir, rewrite=_rw_dir),
    Param("requirepass", "requirepass", None,
          load=_load_requirepass, get=_get_str, set=_set_requirepass, rewrite=_rw_str),
    # Beyond Disque: Redis's users file (ACL SAVE/LOAD, core/acl.py) and ACL LOG's length.
    Param("aclfile", "aclfile", None, load=_load_str, get=_get_str, rewrite=_rw_str),
    Param("acllog-max-len", "acllog_max_len", 128,
          load=_one(_int(0, INT32_MAX)), get=_get_int, set=_int(0, INT32_MAX),
          rewrite=_rw_numerical, error="acllog-max-len can't be negative"),
    Param("rename-command", "rename_commands", dict,
          load=_load_rename, nargs=(2, 2)),
    Param("maxclients", "maxclients", 10000,
          load=_one(_int(1, INT32_MAX)), get=_get_int, set=_int(1, INT32_MAX),
          rewrite=_rw_numerical, error="Invalid max clients limit"),
    Param("maxmemory", "maxmemory", 1 << 30,
          load=_one(_size(1)), get=_get_int, set=_size(0), rewrite=_rw_memory,
          error="You need to specify a memory limit greater than zero"),
    Param("maxmemory-policy", "maxmemory_policy", "acks",
          load=_one(_choice(MAXMEMORY_POLICIES)), get=_get_str, set=_choice(MAXMEMORY_POLICIES),
          rewrite=_rw_enum, error="Invalid maxmemory policy"),
    Param("maxmemory-samples", "maxmemory_samples", 5,
          load=_one(_int(1, INT32_MAX)), get=_get_int, set=_int(1, INT32_MAX),
          rewrite=_rw_numerical, error="maxmemory-samples must be 1 or greater"),
    _flag_param("activerehashing", True),
    Param("hz", "hz", 10,
          load=_one(_hz(None)), get=_get_int, set=_hz(0), rewrite=_rw_numerical),
    _flag_param("appendonly", False),
    Param("appendfilename", "appendfilename", "disque.aof",
          load=_load_appendfilename, rewrite=_rw_str),
    Param("appendfsync", "appendfsync", "everysec",
          load=_one(_choice(APPENDFSYNC_MODES)), get=_get_str, set=_choice(APPENDFSYNC_MODES),
          rewrite=_rw_enum, error="argument must be 'no', 'always' or 'everysec'"),
    _flag_param("no-appendfsync-on-rewrite", False, settable=False),
    Param("auto-aof-rewrite-percentage", "auto_aof_rewrite_percentage", 100,
          load=_one(_int(0, INT32_MAX)), get=_get_int, set=_int(0, INT32_MAX),
          rewrite=_rw_numerical, error="Invalid negative percentage for AOF auto rewrite"),
    Param("auto-aof-rewrite-min-size", "auto_aof_rewrite_min_size", 64 << 20,
          load=_one(_size(0)), get=_get_int, set=_size(0), rewrite=_rw_memory),
    _flag_param("aof-rewrite-incremental-fsync", True),
    _flag_param("aof-load-truncated", True),
    _flag_param("aof-enqueue-jobs-once", False),
    Param("cluster-config-file", "cluster_config_file", "nodes.conf",
          load=_load_str, rewrite=_rw_str),
    Param("cluster-node-timeout", "cluster_node_timeout", 15000,
          load=_one(_duration("ms", 1)), get=_get_int, set=_duration("ms", 0),
          rewrite=_rw_numerical, error="cluster node timeout must be 1 or greater"),
    Param("slowlog-log-slower-than", "slowlog_log_slower_than", 10000,
          load=_one(_duration("us", None)), get=_get_int, set=_duration("us", 0),
          rewrite=_rw_numerical),
    Param("slowlog-max-len", "slowlog_max_len", 128,
          load=_one(_int()), get=_get_int, set=_int(0), rewrite=_rw_numerical),
    Param("latency-monitor-threshold", "latency_monitor_threshold", 0,
          load=_one(_duration("ms", 0)), get=_get_int, set=_duration("ms", 0),
          rewrite=_rw_numerical, error="The latency threshold can't be negative"),
    Param("client-output-buffer-limit", "client_output_buffer_limit", ClientLimit(),
          load=_load_client_limit, get=_get_client_limit, set=_set_client_limit,
          rewrite=_rw_client_limit, nargs=(4, 4)),
    # Not a file directive in Disque (nor Redis): CONFIG GET/SET only.
    Param("watchdog-period", "watchdog_period", 0,
          get=_get_int, set=_duration("ms", 0, INT32_MAX)),
    # Beyond Disque: modern Redis's protected mode.
    _flag_param("protected-mode", True),
    # Beyond Disque: the secret cluster bus links authenticate with (none = no handshake).
    Param("cluster-secret", "cluster_secret", None,
          load=_load_secret, get=_get_str, rewrite=_rw_str),
    # Beyond Disque: re-replication of the copies lost with failed nodes (core/repair.py);
    # a delay of 0 means twice cluster-node-timeout.
    _flag_param("replica-repair", True),
    Param("replica-repair-delay", "replica_repair_delay", 0,
          load=_one(_duration("ms", 0)), get=_get_int, set=_duration("ms", 0),
          rewrite=_rw_numerical, error="replica-repair-delay can't be negative"),
    # Beyond Disque (Redis's names and meaning): the address the cluster and its clients are
    # told to reach this node at, whatever it binds (core/membership.py); empty and 0: the
    # bound ones. CONFIG SET tells the peers at once.
    Param("cluster-announce-ip", "cluster_announce_ip", "",
          load=_one(_ip), get=_get_str, set=_ip, rewrite=_rw_str),
    _port_param("cluster-announce-port"),
    _port_param("cluster-announce-bus-port"),
    # Beyond Disque: where to find the cluster, host:port[@bus-port] words, names resolved
    # again on every attempt until every address they give is a known node (server/seeds.py).
    Param("cluster-seeds", "cluster_seeds", list,
          load=_load_seeds, get=_get_bind, set=_set_seeds, rewrite=_rw_bind,
          nargs=(1, None)),
    # Beyond Disque: the estimated skew of a peer's clock (ms) logged as a warning
    # (core/clock.py); 0 turns the warning off.
    Param("clock-skew-warn-ms", "clock_skew_warn_ms", 500,
          load=_one(_duration("ms", 0)), get=_get_int, set=_duration("ms", 0),
          rewrite=_rw_numerical, error="clock-skew-warn-ms can't be negative"),
    # Beyond Disque: flow-to-disk (core/spill.py, server/spill.py). Past the level (a share
    # of maxmemory or a size) whole job records move to a spill log in flow-to-disk-dir
    # (relative to dir), up to flow-to-disk-max-size bytes on disk (0: the disk's room).
    # CONFIG SET flow-to-disk-dir is refused while the spill log is open (server/spill.py).
    _flag_param("flow-to-disk", False),
    Param("flow-to-disk-level", "flow_to_disk_level", "60%",
          load=_one(parse_flow_to_disk_level), get=_get_str, set=parse_flow_to_disk_level,
          rewrite=_rw_flow_to_disk_level, error=FLOW_TO_DISK_LEVEL_ERROR),
    Param("flow-to-disk-dir", "flow_to_disk_dir", "spill",
          load=_one(_nonempty_path), get=_get_str, set=_nonempty_path, rewrite=_rw_str,
          error=FLOW_TO_DISK_DIR_ERROR),
    Param("flow-to-disk-max-size", "flow_to_disk_max_size", 0,
          load=_one(_size(0)), get=_get_int, set=_size(0), rewrite=_rw_memory,
          error=FLOW_TO_DISK_MAX_SIZE_ERROR),
    # The jobs kept in memory at each queue's head, and loaded back at a time (read-ahead).
    Param("flow-to-disk-readahead", "flow_to_disk_readahead", 256,
          load=_one(_int(1, 100_000)), get=_get_int, set=_int(1, 100_000), rewrite=_rw_numerical,
          error="flow-to-disk-readahead must be between 1 and 100000"),
    # Beyond Disque: how long (s) a job's outcome (ACKJOB RESULT, CANCEL) is kept after it
    # happened, for WAITJOB and WORKING (core/outcome.py).
    Param("result-ttl", "result_ttl", 3600,
          load=_one(_duration("s", 1, 2_592_000)), get=_get_int, set=_duration("s", 1, 2_592_000),
          rewrite=_rw_numerical, error="result-ttl must be between 1 and 2592000"),
    # Beyond Disque: the largest job body ADDJOB accepts (commands/jobs.py); at most what
    # a frame of the cluster bus carries.
    Param("job-max-size", "job_max_size", 16 << 20,
          load=_one(_size(1, JOB_MAX_SIZE_LIMIT)), get=_get_int,
          set=_size(1, JOB_MAX_SIZE_LIMIT), rewrite=_rw_memory, error=JOB_MAX_SIZE_ERROR),
    # Beyond Disque: the operator's HTTP port (http/server.py): the JSON API, /metrics and
    # the dashboard. 0 (the default) opens no port; http-bind empty binds like bind.
    # CONFIG SET restarts the HTTP listener (a port in use is a CONFIG SET error).
    _port_param("http-port"),
    Param("http-bind", "http_bind", list,
          load=_load_http_bind, get=_get_bind, set=_set_http_bind, rewrite=_rw_bind,
          nargs=(1, None)),
    # Beyond Disque: /metrics exports the N longest queues one by one (observe/metrics.py),
    # the others as an aggregate; 0 exports none one by one.
    Param("metrics-queues-max", "metrics_queues_max", 1000,
          load=_one(_int(0, 1_000_000)), get=_get_int, set=_int(0, 1_000_000),
          rewrite=_rw_numerical, error="metrics-queues-max must be between 0 and 1000000"),
    # Beyond Disque: TLS, in Redis 6+'s words (config/tls.py, server/tls.py,
    # docs/security.md). tls-port is a client port beside (or, with port 0, instead of)
    # port; tls-cluster puts the bus under TLS (its port then follows tls-port) and
    # tls-http the HTTP port. Files are read when the TLS context is built: at start-up
    # and on CONFIG SET, which builds a new context for the connections opened after it.
    Param("tls-port", "tls_port", 0,
          load=_one(_int(0, 65535)), get=_get_int, rewrite=_rw_numerical,
          error="Invalid tls-port"),
    *(Param(f"tls-{name}", f"tls_{name.replace('-', '_')}", None,
            load=_load_secret, get=_get_str, set=_set_opt_str, rewrite=_rw_str)
      for name in ("cert-file", "key-file", "key-file-pass", "ca-cert-file", "ca-cert-dir")),
    Param("tls-auth-clients", "tls_auth_clients", "yes",
          load=_one(_choice(AUTH_CLIENTS)), get=_get_str, set=_choice(AUTH_CLIENTS),
          rewrite=_rw_enum, error=AUTH_CLIENTS_ERROR),
    *(Param(name, name.replace("-", "_"), None, load=_load_tls_text(name), get=_get_str,
            set=_set_tls_text(name), rewrite=_rw_str, nargs=(1, None))
      for name in ("tls-protocols", "tls-ciphers", "tls-ciphersuites")),
    _flag_param("tls-prefer-server-ciphers", False),
    _flag_param("tls-session-caching", True),
    _flag_param("tls-cluster", False, settable=False),
    _flag_param("tls-http", False),
)  # fmt: skip

#: The TLS directives, in table order (CONFIG GET and REWRITE list them last).
TLS_NAMES: tuple[str, ...] = (
    "tls-port", "tls-cert-file", "tls-key-file", "tls-key-file-pass", "tls-ca-cert-file",
    "tls-ca-cert-dir", "tls-auth-clients", "tls-protocols", "tls-ciphers", "tls-ciphersuites",
    "tls-prefer-server-ciphers", "tls-session-caching", "tls-cluster", "tls-http",
)  # fmt: skip

PARAMS_BY_NAME: dict[str, Param] = {p.name: p for p in PARAMS}

#: CONFIG GET reply order (Disque's configGetCommand), plus the directives beyond Disque.
GET_ORDER: tuple[str, ...] = (
    # strings
    "requirepass", "unixsocket", "logfile", "pidfile",
    # numbers
    "maxmemory", "maxmemory-samples", "timeout", "auto-aof-rewrite-percentage",
    "auto-aof-rewrite-min-size", "slowlog-log-slower-than", "latency-monitor-threshold",
    "slowlog-max-len", "port", "tcp-backlog", "databases", "maxclients", "watchdog-period",
    "hz", "cluster-node-timeout",
    # yes/no
    "tcp-keepalive", "no-appendfsync-on-rewrite", "daemonize", "activerehashing",
    "aof-rewrite-incremental-fsync", "aof-load-truncated", "aof-enqueue-jobs-once",
    # enums
    "maxmemory-policy", "loglevel", "appendfsync", "syslog-facility",
    # special cases
    "appendonly", "dir", "client-output-buffer-limit", "unixsocketperm", "bind",
    "aclfile", "acllog-max-len",
    "protected-mode", "cluster-secret", "replica-repair", "replica-repair-delay",
    "cluster-announce-ip", "cluster-announce-port",
    "cluster-announce-bus-port", "cluster-seeds", "clock-skew-warn-ms", "flow-to-disk",
    "flow-to-disk-level", "flow-to-disk-dir",
    "flow-to-disk-max-size", "flow-to-disk-readahead", "result-ttl", "job-max-size",
    "http-port", "http-bind", "metrics-queues-max", *TLS_NAMES,
)  # fmt: skip

#: The order CONFIG REWRITE processes options (and appends new lines), plus the directives
#: beyond Disque.
REWRITE_ORDER: tuple[str, ...] = (
    "daemonize", "pidfile", "port", "tcp-backlog", "bind", "unixsocket", "unixsocketperm",
    "timeout", "tcp-keepalive", "loglevel", "logfile", "syslog-enabled", "syslog-ident",
    "syslog-facility", "dir", "requirepass", "maxclients", "maxmemory", "maxmemory-policy",
    "maxmemory-samples", "appendonly", "appendfilename", "appendfsync",
    "no-appendfsync-on-rewrite", "auto-aof-rewrite-percentage", "auto-aof-rewrite-min-size",
    "cluster-config-file", "cluster-node-timeout", "slowlog-log-slower-than",
    "latency-monitor-threshold", "slowlog-max-len", "activerehashing",
    "client-output-buffer-limit", "hz", "aof-rewrite-incremental-fsync", "aof-load-truncated",
    "aclfile", "acllog-max-len",
    "aof-enqueue-jobs-once", "protected-mode", "cluster-secret", "replica-repair",
    "replica-repair-delay", "cluster-announce-ip", "cluster-announce-port",
    "cluster-announce-bus-port", "cluster-seeds", "clock-skew-warn-ms", "flow-to-disk",
    "flow-to-disk-level",
    "flow-to-disk-dir", "flow-to-disk-max-size", "flow-to-disk-readahead", "result-ttl",
    "job-max-size", "http-port", "http-bind", "metrics-queues-max", *TLS_NAMES,
)  # fmt: skip

#: Parameters CONFIG SET accepts, in table order.
SETTABLE: tuple[str, ...] = tuple(p.name for p in PARAMS if p.set is not None)
