"""Reading configuration text into a :class:`Config`, as Disque reads its file.

This is ``loadServerConfigFromString`` and ``loadServerConfig`` of Disque's
config.c: the text is split on ``\\n``; each line is trimmed of spaces, tabs,
CR and LF; empty lines and lines starting with ``#`` are skipped; the rest is
split with the shell-like quoting of inline requests
(:func:`disquette.protocol.inline.split_args`, empty arguments kept); the
first word, case-insensitive, selects a row of :mod:`disquette.config.table`
whose loader converts and checks the arguments. Later lines overwrite earlier
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

import os
import sys
from typing import IO

from disquette.config.cstring import c_str, to_str
from disquette.config.errors import ConfigFileError, ConfigOpenError, LoadError
from disquette.config.model import Config
from disquette.config.table import PARAMS_BY_NAME
from disquette.protocol.inline import UnbalancedQuotes, split_args

#: fgets buffer size of loadServerConfig (CONFIG_MAX_LINE).
CONFIG_MAX_LINE = 1024
#: Disque recurses until it crashes; disquette stops ``include`` loops here.
MAX_INCLUDE_DEPTH = 32

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
            lo, hi = param.nargs if param is not None else (0, 0)
            if (
                param is None
                or param.load is None
                or len(args) < lo
                or (hi is not None and len(args) > hi)
            ):
                raise LoadError("Bad directive or wrong number of arguments")
            setattr(config, param.attr, param.load(args, config))
        except LoadError as e:
            raise ConfigFileError(number, line, e.reason) from None


def _include(path: bytes, config: Config, stdin: IO[bytes] | IO[str] | None, depth: int) -> None:
    if depth >= MAX_INCLUDE_DEPTH:
        raise LoadError(f"Too many nested includes (more than {MAX_INCLUDE_DEPTH})")
    text = read_config_file(c_str(path), stdin)
    _load(text, config, stdin, depth + 1)
