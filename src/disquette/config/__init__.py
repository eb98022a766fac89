"""disquette's configuration: directives, the config file, the command line, CONFIG.

Disque is configured like Redis 3.x: a file of ``directive args...`` lines,
command-line options that are appended to it as extra lines, and the CONFIG
command to read, change and persist settings at run time. This package
reproduces that system:

* :mod:`~disquette.config.table` -- every directive in one table row: default,
  file loader, CONFIG GET format, CONFIG SET rule, CONFIG REWRITE format;
* :mod:`~disquette.config.model` -- :class:`Config`, the settings object;
* :mod:`~disquette.config.loader` -- the config file reader;
* :mod:`~disquette.config.cmdline` -- ``disquette-server [configfile|-] [--name value ...]``;
* :mod:`~disquette.config.runtime` -- CONFIG GET / SET / REWRITE;
* :mod:`~disquette.config.command_names` -- :data:`COMMAND_NAMES`, the 32
  command names (``rename-command`` needs them; the command table imports them);
* :mod:`~disquette.config.cstring` and :mod:`~disquette.config.glob` -- the C
  conversions and the Redis glob whose quirks are part of the behaviour.
"""

from disquette.config.cmdline import CommandLine, parse_command_line, usage_text, version_line
from disquette.config.command_names import COMMAND_NAMES
from disquette.config.errors import (
    ConfigFileError,
    ConfigOpenError,
    ConfigRewriteError,
    ConfigSetError,
)
from disquette.config.glob import stringmatch
from disquette.config.loader import load_config_file, load_config_text, read_config_file
from disquette.config.model import ChangeHook, Config
from disquette.config.runtime import (
    config_get,
    config_rewrite,
    config_set,
    rewrite_config_text,
)
from disquette.config.table import GET_ORDER, PARAMS, REWRITE_ORDER, SETTABLE, ClientLimit

__all__ = [
    "COMMAND_NAMES",
    "GET_ORDER",
    "PARAMS",
    "REWRITE_ORDER",
    "SETTABLE",
    "ChangeHook",
    "ClientLimit",
    "CommandLine",
    "Config",
    "ConfigFileError",
    "ConfigOpenError",
    "ConfigRewriteError",
    "ConfigSetError",
    "config_get",
    "config_rewrite",
    "config_set",
    "load_config_file",
    "load_config_text",
    "parse_command_line",
    "read_config_file",
    "rewrite_config_text",
    "stringmatch",
    "usage_text",
    "version_line",
]
