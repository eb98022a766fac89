"""What ``disquette-cli`` adds to an error reply: which argument was wrong, and how.

The server answers in Disque's words, which its clients may match (``ERR syntax
error``, ``ERR Invalid argument '100MBs' for CONFIG SET 'maxmemory'``), so the
detail a person needs comes from the CLI: from the command's synopsis
(:mod:`disquette.cli.syntax`) it finds the option it did not know (``RETRYY``,
with the nearest known one), the option missing its value, or GETJOB's missing
FROM; from the configuration table, why CONFIG SET refused a value; from the
command and parameter names, a near miss. :func:`hints` gives those lines,
printed after the reply. :func:`warnings` gives, before sending, what Disque
accepts but rarely means: options written after GETJOB's FROM, which are read as
queue names.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from disquette.cli.syntax import NAMES, Syntax, lookup
from disquette.config.errors import ConfigSetError, LoadError
from disquette.config.model import Config
from disquette.config.table import PARAMS_BY_NAME, SETTABLE, BadValue
from disquette.config.values import Refused

#: ``[KEYWORD value ...]`` groups of a synopsis: the keyword and its value words.
_OPTION = re.compile(r"\[([A-Z][A-Z-]*[A-Z])((?: [a-z0-9|-]+)*)(?: \.\.\.)?\]")
_CONFIG_SET = re.compile(r"ERR Invalid argument '(.*)' for CONFIG SET '(.*)'\Z", re.S)
_UNKNOWN = re.compile(r"ERR unknown command '(.*)'\Z", re.S)
_UNSUPPORTED = re.compile(r"ERR Unsupported CONFIG parameter: (.*)\Z", re.S)
_ARITY = re.compile(r"ERR wrong number of arguments for '(.*)' command\Z")
#: GETJOB's options, which are queue names when they follow FROM.
GETJOB_OPTIONS = ("NOHANG", "TIMEOUT", "COUNT", "WITHCOUNTERS", "WITHCLAIM", "TAG")


def _options(syntax: Syntax) -> dict[str, int]:
    """The synopsis' options and how many values each takes (``BACKOFF``'s forms are
    the server's to check: one or more)."""
    found = {m[1]: len(m[2].split()) for m in _OPTION.finditer(syntax.arguments)}
    if "BACKOFF" in found:
        found["BACKOFF"] = 2
    return found


def _positional(syntax: Syntax) -> int:
    """The arguments before the first option of a synopsis (ADDJOB's queue, job, timeout)."""
    head = syntax.arguments.split("[", 1)[0].split()
    return len(head)


def _near(word: str, names: Sequence[str]) -> str:
    """`` (did you mean NAME?)`` for the nearest of ``names``, compared in any case."""
    by_upper = {n.upper(): n for n in names}
    near = difflib.get_close_matches(word.upper(), list(by_upper), n=1, cutoff=0.6)
    return f" (did you mean {by_upper[near[0]]}?)" if near else ""


def _scan(words: list[str], options: dict[str, int], after: str) -> str | None:
    """The first of ``words`` that is no option, or an option without its values."""
    i = 0
    while i < len(words):
        keyword = words[i].upper()
        if keyword not in options:
            return f"unknown option '{words[i]}' {after}{_near(keyword, list(options))}"
        count = options[keyword]
        if i + count >= len(words):
            return f"{keyword} needs a value"
        i += 1 + count
    return None


def syntax_error(argv: list[str]) -> str | None:
    """Which argument made ``ERR syntax error``, when the synopsis tells."""
    entries = lookup(argv[:1])
    if len(entries) != 1:
        return None
    syntax = entries[0]
    options = _options(syntax)
    name = syntax.name
    if name == "GETJOB":
        upper = [w.upper() for w in argv[1:]]
        if "FROM" not in upper:
            return "GETJOB needs FROM before the queue names: GETJOB [options] FROM queue ..."
        cut = upper.index("FROM")
        if cut == len(upper) - 1:
            return "no queue name after FROM"
        return _scan(argv[1 : cut + 1], options, "before FROM")
    positional = _positional(syntax)
    if len(argv) - 1 < positional:
        return None
    return _scan(argv[1 + positional :], options, f"for {name}")


def config_set_error(name: str, value: str) -> str | None:
    """Why CONFIG SET refused ``value`` for ``name``: what this version would read."""
    param = PARAMS_BY_NAME.get(name.lower())
    if param is None or param.set is None or param.name == "dir":  # (dir changes directory)
        return None
    try:
        param.set(value.encode("utf-8", "surrogateescape"), Config())
    except Refused as e:
        return e.explain(param.name)
    except (BadValue, LoadError, ConfigSetError):  # a rule of CONFIG SET's own
        return None
    return None


def hints(argv: list[str], error: str) -> list[str]:
    """Lines that say what was wrong with ``argv``, answered ``error``."""
    if error == "ERR syntax error":
        found = syntax_error(argv)
        usage = [f"usage: {s.name} {s.arguments}" for s in lookup(argv[:2])[:1]]
        return ([found] if found else []) + usage
    match = _CONFIG_SET.match(error)
    if match:
        found = config_set_error(match[2], match[1])
        return [found] if found else []
    match = _UNSUPPORTED.match(error)
    if match:
        near = _near(match[1], SETTABLE)
        return [f"{match[1]} is not a parameter CONFIG SET knows{near}"] if near else []
    match = _UNKNOWN.match(error)
    if match:
        near = _near(match[1], NAMES)
        return [f"no command {match[1]}{near}"] if near else []
    match = _ARITY.match(error)
    if match:
        return [f"usage: {s.name} {s.arguments}".rstrip() for s in lookup(argv[:2])[:1]]
    return []


def warnings(argv: list[str]) -> list[str]:
    """What the command does that it is unlikely to mean (sent all the same)."""
    if not argv or argv[0].upper() != "GETJOB":
        return []
    upper = [w.upper() for w in argv]
    if "FROM" not in upper:
        return []
    after = [w for w in argv[upper.index("FROM") + 1 :] if w.upper() in GETJOB_OPTIONS]
    if not after:
        return []
    names = ", ".join(f"'{w}'" for w in after)
    return [
        f"{names} after FROM: GETJOB reads every word after FROM as a queue name (as Disque "
        "does); put the options before FROM"
    ]
