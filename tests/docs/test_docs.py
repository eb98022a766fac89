"""The documentation's examples, run: README.md and docs/*.md against real nodes.

One test per page, parametrized by file name, so a new docs/*.md is tested as
soon as it exists. The format a page is written in (which blocks run, sessions
and their expected output, ``...``, the ``skip``, ``output`` and ``nodes``
directives) is described in :mod:`tests.support.docblocks` and in docs/development.md
(The examples are tests). How a page is run:

* **Nodes.** The page gets fresh nodes, as ``make run`` starts them: ``nodes N``
  (default 3) server processes on free loopback ports, each in its own directory,
  started with ``--port P --bind 127.0.0.1 --http-port P+1000`` (those of
  :func:`disquette.tools.local_cluster.node_args`) and joined with CLUSTER MEET
  from the first until every node sees every other one. Three ports are picked
  even when fewer nodes start, so that a page may start its own nodes on
  7711-7713; they have four digits, as 7711 has, so that tables keep their
  columns. Every block's text has 7711-7713 (and the HTTP ports 8711-8713, the
  bus ports 17711-17713) replaced by the picked ports, and its output the picked
  ports by the documented ones.
* **Where.** Blocks run in order in a temporary directory of the page (files
  carry over from one block to the next), which holds a ``.venv`` link to the
  virtualenv running the tests, so ``source .venv/bin/activate`` works as in a
  clone. ``PATH`` starts with that virtualenv's ``bin``; ``PYTHONPATH`` has the
  tree's ``src``. Standard input is empty.
* **Shell blocks** run in one ``bash`` per block (variables carry over from one
  command to the next within the block). Standard output and error go to a
  pseudo-terminal, as on the reader's screen: ``disquette-cli`` formats replies
  as on a terminal, and what a progress bar leaves is its last state.
* **Python blocks** run alone, ``python block.py`` with the tests' interpreter;
  their standard output is compared, standard error is shown when they fail.
* **Processes.** Each block runs in a process group of its own; what it leaves
  running (a server started with ``&``) is stopped at the end of the page, with
  SIGTERM, then SIGKILL.

A failure names the page, the block's and the command's line, the exit status
and the diff between expected and actual output; every block of the page runs
and every failing block is reported.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import random
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from disquette.tools.local_cluster import HTTP_OFFSET, join
from tests.support import docblocks
from tests.support.docblocks import Block, Document
from tests.support.ports import bindable
from tests.support.servers import SRC, ServerProcess, wait_for

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
BIN = Path(sys.executable).parent  # .venv/bin under `make test`
BLOCK_TIMEOUT = 400.0  # seconds a block may run; a hung example fails instead of hanging
# (the Spark page's block took 81 s on a loaded run here, over 180 s on one CI run)
PAGE_TIMEOUT = 900.0  # pytest-timeout's limit for a page (its default, 300, is per test)
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL at the end of a page
JOIN_TIMEOUT = 60.0  # seconds for the page's nodes to form a full mesh
START_ATTEMPTS = 3
WINSIZE = struct.pack("HHHH", 24, 100, 0, 0)  # rows, columns of the pseudo-terminal
UNSET = ("DISQUETTECLI_AUTH", "DISQUETTE_SEEDS", "DISQUETTE_PASSWORD", "PYTHONSTARTUP")
MARK = re.compile(r"\x1e(\d+) (\d+)\x1e\r?\n?")  # printed by the harness after each command


def _marker(index: int) -> str:
    return f"printf '\\036%s %s\\036\\n' {index} \"$?\""


class _PtyReader(threading.Thread):
    """Reads a pseudo-terminal's master side until every writer has closed it."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.data = bytearray()
        self.closed = False
        self.changed = threading.Condition()

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # EIO: no process has the terminal open any more
                chunk = b""
            with self.changed:
                if not chunk:
                    self.closed = True
                else:
                    self.data += chunk
                self.changed.notify_all()
            if not chunk:
                return

    def until(self, end: re.Pattern[bytes], timeout: float) -> bytes:
        """What was read once ``end`` is found in it, or every writer closed, or after
        ``timeout`` seconds."""
        with self.changed:
            self.changed.wait_for(lambda: self.closed or end.search(self.data), timeout)
            return bytes(self.data)


class Page:
    """One page's run: its directory, its ports, the process groups its blocks started."""

    def __init__(self, name: str, workdir: Path, ports: list[int]) -> None:
        self.name = name
        self.workdir = workdir / "work"
        self.scripts = workdir / "blocks"
        self.workdir.mkdir()
        self.scripts.mkdir()
        (self.workdir / ".venv").symlink_to(sys.prefix)
        self.ports = docblocks.port_map(ports)
        self.back = docblocks.inverse(self.ports)
        self.groups: list[int] = []
        self.readers: list[tuple[_PtyReader, int]] = []
        self.env = {k: v for k, v in os.environ.items() if k not in UNSET}
        self.env["PATH"] = f"{BIN}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SRC), self.env.get("PYTHONPATH")) if p
        )
        self.env["DISQUETTECLI_HISTFILE"] = os.devnull

    def run(self, block: Block) -> str | None:
        """Run one block; a failure message, or None."""
        if block.kind == "python":
            return self._python(block)
        return self._shell(block)

    def _where(self, block: Block, line: int | None = None) -> str:
        where = f"{self.name}, {block.info} block at line {block.line}"
        return where if line is None else f"{where}, command at line {line}"

    def _start(self, argv: list[str], stdout: int, stderr: int) -> subprocess.Popen[bytes]:
        """Start a block's process in the page's directory, in a process group of its own."""
        proc = subprocess.Popen(
            argv,
            cwd=self.workdir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        self.groups.append(proc.pid)
        return proc

    # ------------------------------------------------------------------ shell

    def _shell(self, block: Block) -> str | None:
        commands = block.commands()
        script = "".join(
            f"{docblocks.rewrite_ports(c.text, self.ports)}\n{_marker(i)}\n"
            for i, c in enumerate(commands)
        )
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, WINSIZE)
        reader = _PtyReader(master)
        reader.start()
        self.readers.append((reader, master))
        try:
            proc = self._start(["bash", "--noprofile", "--norc", "-c", script], slave, slave)
        finally:
            os.close(slave)
        timed_out = not _wait(proc, BLOCK_TIMEOUT)
        last = re.compile(rb"\x1e%d \d+\x1e" % (len(commands) - 1))
        raw = reader.until(last, 0 if timed_out else STOP_TIMEOUT)
        text = docblocks.rewrite_ports(raw.decode("utf-8", "replace"), self.back)
        outputs: list[tuple[str, int]] = []
        start = 0
        for mark in MARK.finditer(text):
            outputs.append((text[start : mark.start()], int(mark[2])))
            start = mark.end()
        for index, command in enumerate(commands):
            shown = "$ " + command.text.rstrip("\n").replace("\n", "\n  ")
            if index < len(outputs):
                output, status = outputs[index]
            else:  # the shell stopped before this command's marker
                output = text[start:]
                status = (
                    f"timed out after {BLOCK_TIMEOUT:g}s"
                    if timed_out
                    else f"the shell exited with status {proc.returncode} here"
                )
            actual = docblocks.output_lines(output)
            details = "output:\n" + "\n".join(actual)
            failure = _verdict(self._where(block, command.line), shown, status, command.expected,
                               actual, details)  # fmt: skip
            if failure:
                return failure
        return None

    # ----------------------------------------------------------------- python

    def _python(self, block: Block) -> str | None:
        stem = Path(self.name).stem
        script = self.scripts / f"{stem}-{block.line}.py"
        script.write_text(docblocks.rewrite_ports(block.source, self.ports))
        out, err = script.with_suffix(".out"), script.with_suffix(".err")
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = self._start([sys.executable, str(script)], stdout.fileno(), stderr.fileno())
        status = proc.returncode if _wait(proc, BLOCK_TIMEOUT) else "timed out"
        printed = docblocks.rewrite_ports(out.read_text(errors="replace"), self.back)
        details = "stderr:\n" + err.read_text(errors="replace").rstrip()
        actual = docblocks.output_lines(printed)
        return _verdict(self._where(block), "", status, block.expected, actual, details)

    # ------------------------------------------------------------------- stop

    def stop(self) -> None:
        """Stop every process the page's blocks left, then release the terminals."""
        for group in self.groups:
            _signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while any(_group_alive(g) for g in self.groups) and time.monotonic() < deadline:
            time.sleep(0.05)
        for group in self.groups:
            if _group_alive(group):
                _signal_group(group, signal.SIGKILL)
        for reader, master in self.readers:
            reader.join(STOP_TIMEOUT)
            if not reader.is_alive():  # else a process that left its group holds the
                os.close(master)  # terminal: the thread still reads this descriptor


def _verdict(
    where: str,
    heading: str,
    status: int | str,
    expected: tuple[str, ...] | None,
    actual: tuple[str, ...],
    details: str,
) -> str | None:
    """None when a command or program passed, else the failure message. ``status`` is
    the exit status or why there is none; ``heading`` the command (or nothing);
    ``details`` what to show when it failed (its output, or its standard error)."""
    lead = f"{heading}\n" if heading else ""
    if status != 0:
        why = status if isinstance(status, str) else f"exit status {status}"
        return f"{where}: {why}\n{lead}{details}"
    if expected is not None and not docblocks.matches(expected, actual):
        return f"{where}: the output differs\n{lead}{docblocks.diff(expected, actual)}"
    return None


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait for ``proc``; on timeout kill its group and return False."""
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        return False


def _signal_group(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _group_alive(group: int) -> bool:
    """Whether a process other than a zombie is left in process group ``group``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat(stat)
        if fields and int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    fields = _stat(Path(f"/proc/{pid}/stat"))
    return fields is not None and fields[0] != "Z"


def _stat(path: Path) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp...)."""
    try:
        return path.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


OFFSETS = (0, HTTP_OFFSET, docblocks.BUS_OFFSET)


def pick_ports(count: int, rng: random.Random) -> list[int]:
    """``count`` distinct free ports of four digits, like 7711-7713 (so that output
    mapped back keeps its columns aligned), whose HTTP (+1000) and bus (+10000) ports
    are free too and none of them a documented one, in increasing order (so that
    tables sorted by port keep 7711-7713's order)."""
    documented = set(docblocks.port_map(docblocks.DOC_PORTS))
    taken: set[int] = set()
    ports: list[int] = []
    while len(ports) < count:
        port = rng.randrange(1024, 9000)
        numbers = {port + offset for offset in OFFSETS}
        if not numbers & (taken | documented) and all(map(bindable, numbers)):
            ports.append(port)
            taken |= numbers
    return sorted(ports)


@contextlib.contextmanager
def nodes_for(document: Document, base: Path) -> Iterator[list[int]]:
    """The page's nodes, started and, when several, joined as ``make run`` joins them
    (:func:`disquette.tools.local_cluster.join`); yields the three ports that 7711-7713
    stand for, the nodes' first. A port taken between the pick and the start is
    picked again."""
    rng = random.Random()
    for attempt in range(START_ATTEMPTS):
        ports = pick_ports(len(docblocks.DOC_PORTS), rng)
        with contextlib.ExitStack() as stack:
            servers = []
            for port in ports[: document.nodes]:
                workdir = base / f"node-{port}"
                workdir.mkdir(parents=True, exist_ok=True)
                server = ServerProcess(workdir, port=port, http=port + HTTP_OFFSET)
                stack.callback(server.stop)
                servers.append(server)
            try:
                for server in servers:
                    server.wait_ready()
            except AssertionError:
                if attempt + 1 == START_ATTEMPTS or not any(
                    "already in use" in s.log() for s in servers
                ):
                    raise
                continue
            if len(servers) > 1:
                procs = {s.port: s.proc for s in servers}
                assert join([s.port for s in servers], JOIN_TIMEOUT, procs), "no full mesh"
                # What a reader of `make run` sees a moment later: each node's HTTP port
                # asking the others for their figures once a second, on a connection each.
                wait_for(
                    functools.partial(_peers_connected, servers),
                    JOIN_TIMEOUT,
                    what="the HTTP ports' connections to their peers",
                )
            yield ports
            return


def _peers_connected(servers: list[ServerProcess]) -> bool:
    """Whether every node has a client from each other one (its HTTP port's), besides
    the one asking."""
    for server in servers:
        with contextlib.closing(server.client()) as client:
            if int(client.info("clients")["connected_clients"]) < len(servers):
                return False
    return True


def run_page(name: str, document: Document, workdir: Path) -> list[str]:
    """Run a page's blocks on its nodes; the failure messages, one per failing block.
    Returns only once every process the page started is stopped."""
    failures: list[str] = []
    with nodes_for(document, workdir / "nodes") as ports:
        page = Page(name, workdir, ports)
        try:
            for block in document.runnable:
                failure = page.run(block)
                if failure:
                    failures.append(failure)
        finally:
            page.stop()
        left = sorted(p.name for p in page.workdir.iterdir() if p.name != ".venv")
        if document.clean and left:
            failures.append(f"{name}: its clean-up left files behind: {', '.join(left)}")
    return failures


#: The pages with a block to run (a page without one gives this test nothing to do).
RUNNABLE = [page for page in PAGES if docblocks.parse(page.read_text()).runnable]


@pytest.mark.timeout(PAGE_TIMEOUT)
@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_page(page: Path, tmp_path: Path) -> None:
    name = str(page.relative_to(ROOT))
    document = docblocks.parse(page.read_text())
    failures = run_page(name, document, tmp_path)
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)


# The harness itself: a wrong example fails, with what differs; nothing is left running.

WRONG = """\
<!-- doctest: nodes 0 -->
```console
$ echo "port 7711, bus 17711"
port 7711, bus 17711
$ echo one; echo two
one
three
```

```sh
false
```

```python
print("7712")
```

<!-- doctest: output -->
```text
7713
```

```console
$ printf 'no newline'
no newline
$ exit 3
$ echo never
```
"""


def test_a_wrong_example_fails_and_says_why(tmp_path: Path) -> None:
    failures = run_page("wrong.md", docblocks.parse(WRONG), tmp_path)
    assert len(failures) == 4
    differs, script, program, shell = failures
    assert differs.startswith("wrong.md, console block at line 2, command at line 5: the ")
    assert "$ echo one; echo two\n" in differs and "-three\n+two" in differs
    assert script.startswith("wrong.md, sh block at line 10, command at line 11: exit status 1")
    assert program.startswith("wrong.md, python block at line 14: the output differs")
    assert "-7713\n+7712" in program  # the picked port, printed, mapped back to 7712
    assert shell.startswith(
        "wrong.md, console block at line 23, command at line 26: the shell exited with status 3"
    )


LEFT_RUNNING = """\
<!-- doctest: nodes 0 -->
```console
$ sleep 600 &
$ echo $! > shell.pid
```

```python
import subprocess

with open("python.pid", "w") as f:
    print(subprocess.Popen(["sleep", "600"]).pid, file=f)
```
"""


CLEAN = """\
<!-- doctest: nodes 0 -->
<!-- doctest: clean -->
```sh
touch kept.txt removed.txt
mkdir __pycache__
rm -rf removed.txt
```
"""


def test_a_page_that_promises_to_clean_up_must(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert run_page("clean.md", docblocks.parse(CLEAN), tmp_path / "a") == [
        "clean.md: its clean-up left files behind: __pycache__, kept.txt"
    ]
    cleaned = CLEAN.replace("rm -rf removed.txt", "rm -rf removed.txt kept.txt __pycache__")
    assert run_page("clean.md", docblocks.parse(cleaned), tmp_path / "b") == []


def test_what_a_page_leaves_running_is_stopped(tmp_path: Path) -> None:
    assert run_page("left.md", docblocks.parse(LEFT_RUNNING), tmp_path) == []
    for name in ("shell.pid", "python.pid"):
        assert not _running(int((tmp_path / "work" / name).read_text()))
