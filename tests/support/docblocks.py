"""The runnable blocks of the documentation: extraction from Markdown, and output matching.

README.md and docs/*.md are tested by ``tests/docs/test_docs.py``, which runs
their examples against real nodes and compares what they print with what the
page shows. This module is the part without processes: it reads a page into
:class:`Document` and :class:`Block` values, splits shell sessions into
commands and their expected output, renders what a terminal would show, maps
the documented ports to the ports a test picked, and matches output against
expected text. The format, as a page author writes it:

* Every fenced block whose info string is ``sh``, ``console``, ``shell`` or
  ``python`` is run, unless the line right before its opening fence is
  ``<!-- doctest: skip: <reason> -->``. Other blocks (``text``, ``conf``, no
  info string...) are never run.
* A shell block with lines starting with ``$ `` is a **session**: each such
  line is a command (a trailing ``\\`` continues it on the next line), and
  the lines after it, up to the next command, are its expected output. A shell
  block without any ``$ `` line is a **script**, run whole; its output is not
  compared. Every command (every script) must exit with status 0.
* A ``python`` block runs alone in a fresh interpreter and must exit with
  status 0. When the next fenced block is a ``text`` block whose opening fence
  is preceded by ``<!-- doctest: output -->``, that block is the expected
  standard output.
* Output is compared line by line, trailing spaces and trailing empty lines
  ignored: ``...`` inside a line matches any text (the spaces around it any
  run of spaces, so that a table keeps its columns aligned), and a line that
  is only ``...`` matches any number of lines (none included).
* Pages talk to nodes on ports 7711, 7712 and 7713 (HTTP ports 8711-8713, bus ports
  17711-17713), as ``make run`` starts them.
  The runner starts ``<!-- doctest: nodes N -->`` nodes for the page (0 to 3,
  default 3: a joined cluster, as ``make run`` starts), on free ports, and
  rewrites those numbers in every block before running it, and back in the
  output before comparing. A port left to its default is not rewritten, so
  pages always give it.
* ``<!-- doctest: clean -->`` anywhere on a page says that the page removes every
  file its examples made: once its blocks ran, its directory must hold nothing but
  the ``.venv`` link the runner put there.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from disquette.tools.local_cluster import HTTP_OFFSET  # (make run's: a node's port + 1000)

SHELL = frozenset({"sh", "console", "shell"})
RUN = SHELL | {"python"}
ELLIPSIS = "..."
PROMPT = "$ "
DOC_PORTS = (7711, 7712, 7713)
BUS_OFFSET = 10000  # a node's cluster bus listens on its port + 10000
DEFAULT_NODES = 3

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+)\s*(?P<info>[^`]*?)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*doctest:\s*(?P<body>.*?)\s*-->\s*$")
_CSI = re.compile(r"\x1b\[(?P<params>[0-9;?]*)(?P<final>[@-~])")

Kind = Literal["python", "session", "script", "text"]


class FormatError(ValueError):
    """A page breaks the doctest format (an unknown directive, an unclosed fence...)."""


@dataclass(frozen=True)
class Command:
    """One command of a shell block, and what it must print (None: not compared)."""

    line: int  # 1-based line in the page
    text: str  # bash source; continuation lines included, joined by newlines
    expected: tuple[str, ...] | None


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    line: int  # 1-based line of the opening fence
    info: str  # the first word of the info string ("" when none)
    source: str
    skip: str | None = None  # the reason given by a skip directive
    expected: tuple[str, ...] | None = None  # python: the output block that follows

    @property
    def kind(self) -> Kind:
        if self.info == "python":
            return "python"
        if self.info in SHELL:
            return "session" if _has_prompt(self.source) else "script"
        return "text"

    @property
    def runs(self) -> bool:
        return self.info in RUN and self.skip is None

    def commands(self) -> list[Command]:
        """A shell block's commands: a session's, or the script as one command."""
        if self.kind == "script":
            return [Command(self.line + 1, self.source, None)]
        return parse_session(self.source, self.line + 1)


@dataclass(frozen=True)
class Document:
    """A page's blocks, the number of nodes it asks for, and whether it cleans up."""

    blocks: tuple[Block, ...]
    nodes: int = DEFAULT_NODES
    clean: bool = False

    @property
    def runnable(self) -> list[Block]:
        return [b for b in self.blocks if b.runs]


def _has_prompt(source: str) -> bool:
    return any(line.startswith(PROMPT) for line in source.splitlines())


def parse(text: str) -> Document:
    """Read a Markdown page: its fenced blocks with their directives, and ``nodes``."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: list[tuple[int, str]] = []  # directives waiting for the next fence
    nodes: int | None = None
    clean = False
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i]
        directive = _DIRECTIVE.match(line)
        fence = _FENCE.match(line)
        if directive:
            body = directive["body"]
            if body.startswith("nodes"):
                if nodes is not None:
                    raise FormatError(f"line {number}: a second 'nodes' directive")
                nodes = _parse_nodes(body, number)
            elif body == "clean":
                clean = True
            else:
                pending.append((number, body))
            i += 1
            continue
        if fence:
            block, i = _read_block(lines, i, fence)
            block = _apply(block, pending, blocks)
            pending = []
            if block is not None:
                blocks.append(block)
            continue
        if pending:
            raise FormatError(f"line {pending[0][0]}: a directive must be right before a fence")
        i += 1
    if pending:
        raise FormatError(f"line {pending[0][0]}: a directive must be right before a fence")
    return Document(tuple(blocks), DEFAULT_NODES if nodes is None else nodes, clean)


def _parse_nodes(body: str, number: int) -> int:
    match = re.fullmatch(r"nodes\s+(\d+)", body)
    if not match or int(match[1]) > len(DOC_PORTS):
        raise FormatError(f"line {number}: expected 'nodes N' with N from 0 to {len(DOC_PORTS)}")
    return int(match[1])


def _read_block(lines: list[str], start: int, fence: re.Match[str]) -> tuple[Block, int]:
    """The block opened at ``lines[start]``, and the index of the line after it."""
    ticks, indent = fence["fence"], len(fence["indent"])
    info = fence["info"].split()[0] if fence["info"].split() else ""
    body: list[str] = []
    for j in range(start + 1, len(lines)):
        line = lines[j]
        if line.strip().startswith(ticks) and not line.strip().strip("`"):
            source = "".join(text + "\n" for text in body)
            return Block(start + 1, info, source), j + 1
        body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
    raise FormatError(f"line {start + 1}: the fence is never closed")


def _apply(block: Block, pending: list[tuple[int, str]], blocks: list[Block]) -> Block | None:
    """Attach directives to ``block``; an output block is folded into the block before it
    (and None returned)."""
    skip: str | None = None
    output = False
    for number, body in pending:
        if body.startswith("skip:") and body[5:].strip():
            skip = body[5:].strip()
        elif body == "output":
            output = True
        else:
            raise FormatError(f"line {number}: unknown doctest directive {body!r}")
    if skip is not None and block.info not in RUN:
        raise FormatError(f"line {block.line}: only sh, console, shell and python blocks run")
    if not output:
        return Block(block.line, block.info, block.source, skip)
    previous = blocks[-1] if blocks else None
    if (
        block.info != "text"
        or previous is None
        or previous.info != "python"
        or previous.expected is not None
    ):
        raise FormatError(
            f"line {block.line}: 'output' marks a text block that follows a python block"
        )
    blocks[-1] = Block(
        previous.line, previous.info, previous.source, previous.skip, _lines(block.source)
    )
    return None


def parse_session(source: str, first_line: int = 1) -> list[Command]:
    """Split a session into commands (``$ `` lines, ``\\`` continued) and their output."""
    commands: list[Command] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith(PROMPT):
            if line.strip():
                raise FormatError(f"line {first_line + i}: output before the first command")
            i += 1
            continue
        start = i
        text = [line[len(PROMPT) :]]
        while text[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            text.append(lines[i])
        i += 1
        expected: list[str] = []
        while i < len(lines) and not lines[i].startswith(PROMPT):
            expected.append(lines[i])
            i += 1
        commands.append(Command(first_line + start, "\n".join(text), _lines("\n".join(expected))))
    return commands


# ------------------------------------------------------------------ output


def _lines(text: str) -> tuple[str, ...]:
    """Lines with trailing spaces removed and trailing empty lines dropped."""
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return tuple(lines)


def output_lines(text: str) -> tuple[str, ...]:
    """What a command printed, as lines to compare (see :func:`terminal`)."""
    return _lines(terminal(text))


def terminal(text: str) -> str:
    """What a terminal shows for ``text``: a carriage return goes back to the start of
    the line, ``ESC [ K`` erases the rest of it (so a progress bar redrawn in place
    leaves only its last state), other escape sequences show nothing."""
    return "\n".join(_render_line(line) for line in text.split("\n"))


def _render_line(line: str) -> str:
    cells: list[str] = []
    cursor = 0
    pos = 0
    while pos < len(line):
        char = line[pos]
        if char == "\x1b":
            csi = _CSI.match(line, pos)
            if csi:
                if csi["final"] == "K":
                    mode = csi["params"] or "0"
                    if mode == "0":
                        del cells[cursor:]
                    elif mode == "1":
                        cells[:cursor] = [" "] * min(cursor, len(cells))
                    elif mode == "2":
                        cells = []
                pos = csi.end()
                continue
        elif char == "\r":
            cursor = 0
        elif char == "\b":
            cursor = max(0, cursor - 1)
        else:
            if cursor < len(cells):
                cells[cursor] = char
            else:
                cells.extend(" " * (cursor - len(cells)))
                cells.append(char)
            cursor += 1
        pos += 1
    return "".join(cells)


@functools.lru_cache(maxsize=4096)
def _pattern(expected: str) -> re.Pattern[str]:
    """``...`` as ``.*``; the spaces right before or after it as any run of spaces, so
    that a table can keep its columns aligned around an elided value. A longer run of
    dots is an ellipsis with the other dots on either side of it (``x....`` elides
    after ``x.`` or before a final ``.``), so every way of reading it is tried."""
    pieces = re.split(r"(\.{3,})", expected)
    parts, runs = pieces[::2], pieces[1::2]
    regex = []
    for k, part in enumerate(parts):
        lead = k > 0 and part.startswith(" ")
        trail = k < len(parts) - 1 and part.endswith(" ")
        core = part.lstrip(" ") if lead else part
        core = core.rstrip(" ") if trail else core
        if (lead or trail) and not core:
            regex.append(" +")
        else:
            regex.append((" +" if lead else "") + re.escape(core) + (" +" if trail else ""))
        if k < len(runs):
            extra = len(runs[k]) - len(ELLIPSIS)
            readings = [f"\\.{{{a}}}.*\\.{{{extra - a}}}" for a in range(extra + 1)]
            regex.append("(?:" + "|".join(readings) + ")")
    return re.compile("".join(regex), re.DOTALL)


def line_matches(expected: str, actual: str) -> bool:
    """One expected line against one actual line (``...``: any text)."""
    if ELLIPSIS not in expected:
        return expected == actual
    return _pattern(expected).fullmatch(actual) is not None


def matches(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """Expected lines against actual lines; a line that is only ``...`` matches any
    number of lines. Both are compared as given (see :func:`output_lines`)."""
    n, m = len(expected), len(actual)
    wild = [line.strip() == ELLIPSIS for line in expected]
    # ok[j]: expected[i:] matches actual[j:], computed for i from n down to 0.
    ok = [False] * m + [True]
    for i in reversed(range(n)):
        row = [False] * (m + 1)
        for j in reversed(range(m + 1)):
            if wild[i]:
                row[j] = ok[j] or (j < m and row[j + 1])
            else:
                row[j] = j < m and ok[j + 1] and line_matches(expected[i], actual[j])
        ok = row
    return ok[0]


def diff(expected: Sequence[str], actual: Sequence[str]) -> str:
    """A unified diff of expected and actual lines, for a failure message."""
    lines = difflib.unified_diff(
        list(expected), list(actual), "expected", "actual", lineterm="", n=max(len(expected), 3)
    )
    return "\n".join(lines)


# ------------------------------------------------------------------- ports


def port_map(ports: Sequence[int]) -> dict[int, int]:
    """The documented ports (client, HTTP and bus) mapped to ``ports``, in order."""
    mapping: dict[int, int] = {}
    for documented, real in zip(DOC_PORTS, ports, strict=True):
        for offset in (0, HTTP_OFFSET, BUS_OFFSET):
            mapping[documented + offset] = real + offset
    return mapping


def rewrite_ports(text: str, mapping: Mapping[int, int]) -> str:
    """Replace each number of ``mapping`` that stands alone (no digit either side)."""
    if not mapping:
        return text
    alternatives = "|".join(str(port) for port in sorted(mapping, reverse=True))
    number = re.compile(rf"(?<![0-9])(?:{alternatives})(?![0-9])")
    return number.sub(lambda m: str(mapping[int(m.group())]), text)


def inverse(mapping: Mapping[int, int]) -> dict[int, int]:
    return {real: documented for documented, real in mapping.items()}
