"""The server's command line: ``disquette-server [configfile|-] [--name value ...]``.

This follows the argument handling of Disque's ``main()`` (Redis 3.0's):

* only the *first* argument is checked for ``-v``/``--version`` (print the
  version line, exit 0), ``-h``/``--help`` (usage on stderr, exit 1) and
  ``--test-memory`` (disquette has no memory tester: a message, exit 1);
* the first argument is a config file unless it starts with ``--``; ``-``
  reads the configuration from standard input;
* every ``--name`` starts a new config line ``name``; every other argument
  is appended to the current line, quoted with ``sdscatrepr`` so spaces and
  quotes survive (``--requirepass "a b"`` becomes ``requirepass "a b"``);
* the effective configuration is the file content, a newline, then those
  lines, loaded as one text. So an option error is reported with its line
  number in the combined text (``disquette-server --port x`` fails "at line
  2", exactly like Disque, because the missing file counts as one empty line).

:func:`parse_command_line` does not print or exit: it returns a
:class:`CommandLine` saying what ``main`` must do. It reads the config file
(raising :class:`~disquette.config.errors.ConfigOpenError` when it cannot be
opened: log it and exit 1) but does not apply it; :meth:`CommandLine.load`
does, because loading has side effects (``dir`` changes directory).
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from typing import IO, Literal

from disquette import DISQUE_VERSION, __version__
from disquette.config.cstring import sds_repr
from disquette.config.errors import ConfigFileError
from disquette.config.loader import load_config_text, read_config_file
from disquette.config.model import Config
from disquette.protocol import frames

#: The program name shown in the usage text.
PROG = "disquette-server"

Action = Literal["run", "version", "help", "test-memory"]


def build_id() -> str:
    """A stable hexadecimal build id (Disque prints a hash of its build)."""
    digest = hashlib.sha1(f"disquette-{__version__}".encode()).digest()
    return f"{int.from_bytes(digest[:8], 'big'):x}"


def version_line() -> str:
    """``--version`` output: Disque's format, so tools parsing it keep working, then
    disquette's own release and the bus protocols it speaks (protocol/frames.py) as more
    ``key=value`` at the end."""
    bits = 64 if sys.maxsize > 2**32 else 32
    return (
        f"Disque server v={DISQUE_VERSION} sha=00000000:0 malloc=libc "
        f"bits={bits} build={build_id()} disquette={__version__} "
        f"bus-protocols={frames.OLDEST}-{frames.PROTOCOL}\n"
    )


def usage_text() -> str:
    """``--help`` output (disque-server's usage with disquette's program name)."""
    p = PROG
    return (
        f"Usage: {p} [/path/to/disque.conf] [options]\n"
        f"       {p} - (read config from stdin)\n"
        f"       {p} -v or --version\n"
        f"       {p} -h or --help\n"
        f"       {p} --test-memory <megabytes>\n"
        "\n"
        "Examples:\n"
        f"       {p} (run the server with default conf)\n"
        f"       {p} /etc/disque/7711.conf\n"
        f"       {p} --port 7777\n"
        f"       {p} /etc/mydisque.conf --loglevel verbose\n"
        "\n"
    )


@dataclass(frozen=True)
class CommandLine:
    """What the server's ``main`` must do, decided from its arguments.

    For ``action != "run"``: write :attr:`output` as is to :attr:`stream`
    (``"stdout"`` or ``"stderr"``) and exit with :attr:`exit_code`.
    For ``"run"``: log :attr:`warning` if set (Disque logs it at warning
    level), then call :meth:`load` and start the server.
    """

    action: Action = "run"
    output: str = ""
    stream: Literal["stdout", "stderr"] = "stdout"
    exit_code: int = 0
    #: Absolute path of the config file; ``None`` without one or with ``-`` (stdin).
    config_file: str | None = None
    #: File content + ``\\n`` + option lines; ``None`` = no arguments, pure defaults.
    config_text: bytes | None = None
    warning: str | None = None
    #: Where the lines of ``config_text`` come from: the file's name ("standard input"
    #: for ``-``) and the number of the first line made from the options.
    file_name: str | None = None
    options_line: int = 1

    def load(self, config: Config | None = None, *, stdin: IO[bytes] | None = None) -> Config:
        """Apply the configuration (raises ConfigFileError, whose banner names where
        the bad line came from: an option of the command line, or a line of the
        file); returns the Config."""
        if config is None:
            config = Config()
        config.config_file = self.config_file
        if self.config_text is not None:
            try:
                load_config_text(self.config_text, config, stdin=stdin)
            except ConfigFileError as e:
                if e.line_number >= self.options_line:
                    option = e.line.split(b" ", 1)[0].decode("utf-8", "backslashreplace")
                    e.where = f"Reading the command line, at option --{option}"
                elif self.file_name is not None and e.line_number > 0:
                    e.where = (
                        f"Reading the configuration file {self.file_name}, at line {e.line_number}"
                    )
                raise
        return config


def parse_command_line(argv: list[str], stdin: IO[bytes] | IO[str] | None = None) -> CommandLine:
    """Interpret ``argv`` (with the program name first, like C's ``main``).

    ``stdin`` is read when the config file is ``-``. Raises
    :class:`~disquette.config.errors.ConfigOpenError` when the config file
    cannot be opened (Disque: ``Fatal error, can't open config file '<path>'``
    then exit 1).
    """
    program = argv[0] if argv else PROG
    args = argv[1:]
    if not args:
        return CommandLine(
            warning=(
                "Warning: no config file specified, using the default config. "
                f"In order to specify a config file use {program} /path/to/disque.conf"
            )
        )
    first = args[0]
    if first in ("-v", "--version"):
        return CommandLine("version", version_line(), "stdout", 0)
    if first in ("--help", "-h"):
        return CommandLine("help", usage_text(), "stderr", 1)
    if first == "--test-memory":
        if len(args) == 2:
            message = (
                "disquette does not implement --test-memory: it is a C memory tester. "
                "Use a dedicated tool such as memtester instead.\n"
            )
        else:
            message = (
                "Please specify the amount of memory to test in megabytes.\n"
                f"Example: {PROG} --test-memory 4096\n\n"
            )
        return CommandLine("test-memory", message, "stderr", 1)

    j = 0
    configfile: str | None = None
    if not first.startswith("--"):
        configfile = first
        j = 1
    options = bytearray()
    for arg in args[j:]:
        word = os.fsencode(arg)
        if word.startswith(b"--"):
            if options:
                options += b"\n"
            options += word[2:] + b" "
        else:
            options += sds_repr(word) + b" "

    text = b""
    config_file = None
    if configfile is not None:
        if configfile != "-":
            config_file = os.path.abspath(configfile) if configfile else None
        text = read_config_file(configfile, stdin)
    return CommandLine(
        config_file=config_file,
        config_text=text + b"\n" + bytes(options),
        file_name=None if configfile is None else config_file or "standard input",
        options_line=text.count(b"\n") + 2,
    )
