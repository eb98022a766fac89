"""Reading configuration text into a :class:`Config`, as Disque reads its file.

This is ``loadServerConfigFromString`` and ``loadServerConfig`` of Disque's
config.c: the text is split on ``\\n``; each line is trimmed of spaces, tabs,
CR and LF; empty lines and lines starting with ``#`` are skipped; the rest is
split with the shell-like quoting of inline requests
(:func:`disquette.protocol.inline.split_args`, empty arguments kept); the
first word, case-insensitive, selects a row of :mod:`disquette.config.table`
whose loader converts and checks the arguments (with the parsers of
:mod:`disquette.config.values`: a value it cannot read stops the load with the
directive's name, the value and what is accepted; an unknown directive, with
the nearest known name). Later lines overwrite earlier
ones (the last occurrence wins), except ``rename-command`` and ``include``,
which act when they are read. The first bad line stops everything with a
:class:`~disquette.config.errors.ConfigFileError` carrying Disque's banner.

Some directives act at once, as in Disque: ``dir`` changes the working
directory (so later relative paths, ``include`` included, are relative to
it), ``logfile`` creates the log file to check it can be opened.

Config text is a C string in Disque: a NUL byte ends it (and, in a file, ends
the line it is on); this module cuts the text the same way.
"""

from __future__ import annotations

import difflib
import os
import sys
from typing import IO

from disquette.config.cstring import c_str, to_str
from disquette.config.errors import ConfigFileError, ConfigOpenError, LoadError
from disquette.config.model import Config
from disquette.config.table import PARAMS, PARAMS_BY_NAME
from disquette.config.values import Refused
from disquette.protocol.inline import UnbalancedQuotes, split_args

#: fgets buffer size of loadServerConfig (CONFIG_MAX_LINE).
CONFIG_MAX_LINE = 1024
#: Disque recurses until it crashes; disquette stops ``include`` loops here.
MAX_INCLUDE_DEPTH = 32
#: Disque's reason for an unknown directive or a wrong number of arguments (disquette
#: says which after it).
BAD_DIRECTIVE = "Bad directive or wrong number of arguments"
#: The names a config file (and so the command line) accepts.
FILE_DIRECTIVES = ("include", *(p.name for p in PARAMS if p.load is not None))

_TRIM = b" \t\r\n"


def _read_stream(stream: IO[bytes] | IO[str] | None) -> bytes:
    if stream is None:
        stream = sys.stdin.buffer if sys.stdin is not None else None
        if stream is None:
            return b""
    data = stream.read()
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    return data


def _fgets_concat(data: bytes) -> bytes:
    """Concatenate ``fgets`` chunks the way ``sdscat`` does: each chunk stops at a NUL."""
    if 0 not in data:
        return data
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        j = data.find(b"\n", i, i + CONFIG_MAX_LINE)
        end = j + 1 if j >= 0 else min(i + CONFIG_MAX_LINE, n)
        out += c_str(data[i:end])
        i = end
    return bytes(out)


def read_config_file(path: str | bytes, stdin: IO[bytes] | IO[str] | None = None) -> bytes:
    """The content of a configuration file as Disque sees it (``-`` = standard input).

    Raises :class:`ConfigOpenError` when the file cannot be opened. A
    directory reads as empty (``fopen`` succeeds on it, ``fgets`` fails).
    """
    if path in ("-", b"-"):
        return _fgets_concat(_read_stream(stdin))
    try:
        with open(path, "rb") as f:
            data = f.read()
    except IsADirectoryError:
        return b""
    except OSError:
        raise ConfigOpenError(path if isinstance(path, str) else to_str(path)) from None
    return _fgets_concat(data)


def load_config_text(
    text: str | bytes,
    config: Config | None = None,
    *,
    stdin: IO[bytes] | IO[str] | None = None,
) -> Config:
    """Apply configuration ``text`` to ``config`` (a new default one if ``None``).

    Raises :class:`ConfigFileError` on the first bad line (and
    :class:`ConfigOpenError` when an ``include`` cannot be opened). ``stdin``
    serves ``include -``. The config object may be half-updated on error; Disque
    exits at that point.
    """
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogateescape")
    if config is None:
        config = Config()
    _load(c_str(text), config, stdin, 0)
    return config


def load_config_file(
    path: str,
    config: Config | None = None,
    *,
    options: bytes | None = None,
    stdin: IO[bytes] | IO[str] | None = None,
) -> Config:
    """``loadServerConfig``: read ``path`` (``-`` = stdin), append ``options``, load.

    As in Disque, ``options`` (command-line options already turned into
    config lines) follow the file content after a newline, so errors in them
    report their line number in the combined text. ``config.config_file`` is
    set to the absolute path (left ``None`` for standard input).
    """
    if config is None:
        config = Config()
    if path != "-":
        config.config_file = os.path.abspath(path)
    text = read_config_file(path, stdin)
    if options is not None:
        text += b"\n" + options
    return load_config_text(text, config, stdin=stdin)


def _load(text: bytes, config: Config, stdin: IO[bytes] | IO[str] | None, depth: int) -> None:
    for number, raw in enumerate(text.split(b"\n"), start=1):
        line = raw.strip(_TRIM)
        if not line or line[0] == 0x23:  # '#'
            continue
        try:
            argv = split_args(line)
        except UnbalancedQuotes:
            raise ConfigFileError(number, line, "Unbalanced quotes in configuration line") from None
        if not argv:
            continue
        name = to_str(c_str(argv[0]).lower())
        args = argv[1:]
        try:
            if name == "include" and len(args) == 1:
                _include(args[0], config, stdin, depth)
                continue
            param = PARAMS_BY_NAME.get(name)
            if param is None or param.load is None:
                raise LoadError(f"{BAD_DIRECTIVE}: {unknown_directive(name)}")
            lo, hi = param.nargs
            if len(args) < lo or (hi is not None and len(args) > hi):
                raise LoadError(f"{BAD_DIRECTIVE}: {_arguments(name, lo, hi, len(args))}")
            try:
                setattr(config, param.attr, param.load(args, config))
            except Refused as e:
                raise LoadError(e.explain(name, param.error)) from None
        except LoadError as e:
            raise ConfigFileError(number, line, e.reason) from None


def unknown_directive(name: str) -> str:
    """Why ``name`` is no directive of the file, with the nearest one's name."""
    param = PARAMS_BY_NAME.get(name)
    if param is not None:
        return f"{name} is set with CONFIG SET only"
    text = f"unknown directive '{name}'"
    near = difflib.get_close_matches(name, FILE_DIRECTIVES, n=1, cutoff=0.75)
    return f"{text}; did you mean '{near[0]}'?" if near else text


def _arguments(name: str, lo: int, hi: int | None, given: int) -> str:
    if hi is None:
        wanted = f"at least {lo}"
    elif lo == hi:
        wanted = str(lo)
    else:
        wanted = f"{lo} to {hi}"
    plural = "" if (lo if hi is None else hi) == 1 else "s"
    return f"{name} takes {wanted} argument{plural}, not {given}"


def _include(path: bytes, config: Config, stdin: IO[bytes] | IO[str] | None, depth: int) -> None:
    if depth >= MAX_INCLUDE_DEPTH:
        raise LoadError(f"Too many nested includes (more than {MAX_INCLUDE_DEPTH})")
    text = read_config_file(c_str(path), stdin)
    _load(text, config, stdin, depth + 1)
