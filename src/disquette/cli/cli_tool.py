"""``disquette-cli``: redis-cli's habits, for Disque.

* ``disquette-cli [-h host] [-p port] [-a password] CMD ARGS...`` runs one
  command (``-r N`` times, ``-i`` seconds apart; ``-x`` takes the last
  argument from standard input, ADDJOB's body for ADDJOB; ``-X tag`` the
  argument written ``tag``) and prints the reply. Like redis-cli it exits 0
  after an error reply, 1 with ``-e``.
* After an error reply, lines starting ``hint:`` on standard error say which
  argument was wrong (:mod:`disquette.cli.hints`): the server keeps Disque's
  words, which its clients may match. A node that cannot be reached, or an
  address that is no client port (an HTTP port, a cluster bus), is said in
  plain words (:mod:`disquette.cli.reach`).
* Without a command: an interactive prompt (``127.0.0.1:7711>``) with
  readline editing, history (``~/.disquettecli_history``, or
  ``$DISQUETTECLI_HISTFILE``; ``/dev/null`` disables it) and tab completion
  of command names, subcommands and options; ``help COMMAND`` shows a
  command's syntax (:mod:`disquette.cli.syntax`). Lines are split like
  redis-cli's (quotes, ``\\xHH``); ``3 ping`` repeats; ``quit`` leaves. When
  standard input is not a terminal, it runs one command per line.
* Replies are printed as redis-cli prints them: formatted on a terminal,
  ``--raw`` (one value per line, no quoting) otherwise; ``--raw``/``--no-raw``
  force either.
* ``--stat``: a rolling table, one line per node and per interval, of jobs,
  queues, memory, clients, blocked clients, requests and ops/s.
* Bulk work, with a progress bar on a terminal and a plain summary line
  otherwise: ``--pipe`` sends commands read from standard input (Disque
  protocol or one command per line) pipelined; ``--add-jobs QUEUE`` adds one
  job per input line; ``--drain QUEUE`` prints the body of every job of a
  queue, one per line, and acknowledges them.

Like redis-cli it talks to the one node given by ``-h``/``-p``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import ssl
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from disquette import __version__
from disquette.cli.hints import hints, warnings
from disquette.cli.output import format_reply, human_bytes
from disquette.cli.progress import Progress
from disquette.cli.reach import not_a_client_port, unreachable
from disquette.cli.syntax import Completer, help_text
from disquette.cli.tlsargs import add_tls_arguments, ssl_context
from disquette.client.api import ClientConfig
from disquette.client.batch import Batch
from disquette.client.calls import Command
from disquette.client.errors import DisqueError, PipelineError, ResponseError
from disquette.client.models import Backoff
from disquette.client.resp import TypedParser
from disquette.client.sync import Client, Link
from disquette.client.topology import Address, format_address
from disquette.protocol.inline import UnbalancedQuotes, split_args
from disquette.protocol.reader import ProtocolError as RequestError
from disquette.protocol.reader import RequestReader

USAGE = """\
disquette-cli {version}

Usage: disquette-cli [OPTIONS] [cmd [arg [arg ...]]]
  -h <hostname>      Server hostname (default: 127.0.0.1).
  -p <port>          Server port (default: 7711).
  -a <password>      Password to use when connecting to the server
                     (or the DISQUETTECLI_AUTH environment variable).
  --no-auth-warning  Don't warn about a password given on the command line.
  --tls              Establish a secure TLS connection.
  --cacert <file>    CA Certificate file to verify with.
  --cacertdir <dir>  Directory where trusted CA certificates are stored.
  --cert <file>      Client certificate to authenticate with.
  --key <file>       Private key file to authenticate with.
  --insecure         Allow insecure TLS connection by skipping cert validation.
  -r <repeat>        Execute the command N times (-1: forever).
  -i <interval>      Wait <interval> seconds between commands with -r,
                     and between samples with --stat (default 1).
  -x                 Read the last argument from STDIN (for ADDJOB, the job's
                     body: disquette-cli -x ADDJOB queue 0 < file).
  -X <tag>           Read the argument written <tag> from STDIN.
  -e                 Exit with status 1 after an error reply (as redis-cli -e);
                     without it, as redis-cli, the status is 0.
  --raw              Use raw formatting for replies (default when STDOUT is
                     not a tty).
  --no-raw           Force formatted output even when STDOUT is not a tty.
  --stat             Print a rolling table of jobs, queues, memory, clients,
                     requests and ops/s of every node.
  --pipe             Send the commands read from STDIN (Disque protocol or
                     one command per line), pipelined.
  --add-jobs <queue> Add one job per line of input to <queue>, pipelined.
  --drain <queue>    Print the body of every job of <queue>, one per line,
                     and acknowledge them.
  --input <file>     Read --pipe/--add-jobs input from <file>, not STDIN.
  --window <n>       Commands in flight for --pipe/--add-jobs (default 256).
  --timeout <s>      --add-jobs: replication timeout in seconds (default 5).
  --replicate <n>, --delay <s>, --retry <s>, --ttl <s>, --maxlen <n>, --async,
  --priority <0-9>   --add-jobs: the ADDJOB options of every job.
  --dedup            --add-jobs: a random DEDUP key per job, so the jobs in
                     flight when the connection breaks are sent again without
                     being added twice (disquette only).
  --backoff <spec>   --add-jobs: every requeue of each job postponed,
                     fixed:<s> or exponential:<base>:<cap> (disquette only).
  --help             Output this help and exit.
  --version          Output version and exit.

Examples:
  disquette-cli addjob queue body 0
  disquette-cli -r 100 -i 1 info jobs
  cat bodies.txt | disquette-cli --add-jobs queue
  disquette-cli --drain dead-letters > dead.txt

When no command is given, disquette-cli starts in interactive mode.
Type "help" in interactive mode for the server's command list, "help <command>"
(e.g. "help qpolicy") for a command's syntax; TAB completes commands and options.
"""

STAT_HEADER_EVERY = 20
ADD_CHUNK = 4096
DRAIN_COUNT = 100


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="disquette-cli", add_help=False, allow_abbrev=False)
    p.add_argument("-h", dest="host", default="127.0.0.1")
    p.add_argument("-p", dest="port", type=int, default=7711)
    p.add_argument("-a", dest="password", default=os.environ.get("DISQUETTECLI_AUTH"))
    p.add_argument("--no-auth-warning", action="store_true")
    add_tls_arguments(p)
    p.add_argument("-r", dest="repeat", type=int, default=1)
    p.add_argument("-i", dest="interval", type=float, default=None)
    p.add_argument("-x", dest="stdin_arg", action="store_true")
    p.add_argument("-X", dest="stdin_tag")
    p.add_argument("-e", dest="error_status", action="store_true")
    p.add_argument("--raw", action="store_true")
    p.add_argument("--no-raw", action="store_true")
    p.add_argument("--stat", action="store_true")
    p.add_argument("--pipe", action="store_true")
    p.add_argument("--add-jobs", metavar="QUEUE")
    p.add_argument("--drain", metavar="QUEUE")
    p.add_argument("--input", type=Path)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--timeout", type=float, default=5.0)
    for option in ("--replicate", "--delay", "--retry", "--ttl", "--maxlen", "--priority"):
        p.add_argument(option, type=int)
    p.add_argument("--async", dest="async_", action="store_true")
    p.add_argument("--dedup", action="store_true")
    p.add_argument("--backoff", type=backoff)
    p.add_argument("--help", action="store_true")
    p.add_argument("--version", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.help:
        sys.stdout.write(USAGE.format(version=__version__))
        return 0
    if args.version:
        sys.stdout.write(f"disquette-cli {__version__}\n")
        return 0
    if (
        args.password
        and "-a" in (argv if argv is not None else sys.argv)
        and not args.no_auth_warning
    ):
        sys.stderr.write(
            "Warning: Using a password with '-a' option on the command line interface "
            "may not be safe.\n"
        )
    address = (args.host, args.port)
    raw = args.raw or (not args.no_raw and not sys.stdout.isatty())
    try:
        args.ssl = ssl_context(args)
    except (OSError, ValueError) as exc:  # an unreadable --cacert, --cert or --key
        sys.stderr.write(f"Could not create TLS context: {exc}\n")
        return 1
    try:
        if args.stat:
            return stat(address, args)
        if args.add_jobs is not None:
            return add_jobs(address, args)
        if args.drain is not None:
            return drain(address, args)
        session = Session(address, args.password, raw, args.ssl)
        if not session.connect():
            return 1
        if args.pipe:
            return pipe(session, args)
        if args.command:
            return one_shot(session, args)
        return interactive(session)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. piped into head: stop quietly, as redis-cli does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


# ---------------------------------------------------------------------- one node


class Session:
    """The connection of the CLI to its one node, reconnecting when needed."""

    def __init__(
        self, address: Address, password: str | None, raw: bool, tls: ssl.SSLContext | None = None
    ) -> None:
        self.address = address
        self.tls = tls
        self.password = password
        self.raw = raw
        self.link: Link | None = None
        self.out = sys.stdout.buffer
        #: Whether the link got a reply yet (a link closed before any did not reach a
        #: Disque client port, maybe) and the error replies printed so far.
        self.answered = False
        self.errors = 0

    @property
    def prompt(self) -> str:
        return f"{format_address(self.address)}> " if self.link else "not connected> "

    def connect(self) -> bool:
        config = ClientConfig((self.address,), socket_timeout=None, ssl=self.tls)
        try:
            self.link = Link.open(self.address, config, hello=False, parser=TypedParser())
        except OSError as exc:
            sys.stderr.write(
                f"Could not connect to Disque at {format_address(self.address)}: "
                f"{unreachable(exc)}\n"
            )
            self.link = None
            return False
        self.answered = False
        if self.password:
            reply = self.run([b"AUTH", self.password.encode()])
            if isinstance(reply, ResponseError):
                sys.stderr.write(f"AUTH failed: {reply}\n")
        return True

    def run(self, argv: list[bytes]) -> Any:
        """Send one command; return its reply (an error reply is a value, not raised)."""
        if self.link is None and not self.connect():
            raise ConnectionError("not connected")
        assert self.link is not None
        batch = Batch((Command(tuple(argv)),))
        if not self.link.exchange(batch, None):
            self.link = None
            if self.answered or self.tls is not None:
                where = format_address(self.address)
                raise ConnectionError(f"the node at {where} closed the connection")
            raise ConnectionError(not_a_client_port(self.address))
        self.answered = True
        return batch.results[0]

    def show(self, reply: Any, argv: list[bytes]) -> None:
        self.out.write(format_reply(reply, argv, self.raw))
        self.out.flush()
        if isinstance(reply, ResponseError):
            self.errors += 1
            words = [a.decode("utf-8", "surrogateescape") for a in argv]
            notes = hints(words, str(reply))
            if notes:
                sys.stderr.write("".join(f"hint: {line}\n" for line in notes))
                sys.stderr.flush()

    def execute(self, argv: list[bytes], times: int = 1, interval: float = 0.0) -> bool:
        """Run and print ``argv`` ``times`` times (-1: forever); False if the link broke."""
        words = [a.decode("utf-8", "surrogateescape") for a in argv]
        for line in warnings(words):
            sys.stderr.write(f"warning: {line}\n")
        for n in itertools.count() if times < 0 else range(times):
            if n and interval:
                time.sleep(interval)
            try:
                reply = self.run(argv)
            except ConnectionError as exc:
                if argv[0].lower() == b"shutdown" and self.link is None:
                    return True  # the node closed the link as it stopped: as redis-cli
                sys.stderr.write(f"Error: {exc}\n")
                return False
            self.show(reply, argv)
            if argv[0].lower() == b"monitor" and not isinstance(reply, ResponseError):
                assert self.link is not None
                for line in self.link.stream():
                    self.show(line, argv)
        return True


def one_shot(session: Session, args: argparse.Namespace) -> int:
    argv = [a.encode("utf-8", "surrogateescape") for a in args.command]
    if args.stdin_tag is not None:
        tag = args.stdin_tag.encode("utf-8", "surrogateescape")
        if tag not in argv:
            sys.stderr.write(f"-X {args.stdin_tag}: no argument is written {args.stdin_tag}\n")
            return 1
        argv[argv.index(tag)] = sys.stdin.buffer.read()
    elif args.stdin_arg:
        data = sys.stdin.buffer.read()
        if argv and argv[0].lower() == b"addjob":
            # ADDJOB's last argument is its timeout (or an option): -x reads the body.
            argv.insert(2, data)
        else:
            argv.append(data)
    if not session.execute(argv, args.repeat, args.interval or 0.0):
        return 1
    return 1 if args.error_status and session.errors else 0


def interactive(session: Session) -> int:
    tty = sys.stdin.isatty()
    readline = _readline() if tty else None
    history = _load_history(readline) if readline else None
    if readline:
        Completer(readline).install()
    try:
        while True:
            try:
                line = input(session.prompt) if tty else sys.stdin.readline()
            except EOFError:
                break
            if not tty and not line:
                break
            text = line.strip()
            if not text:
                continue
            try:
                argv = split_args(text.encode("utf-8", "surrogateescape"))
            except UnbalancedQuotes:
                session.out.write(b"Invalid argument(s)\n")
                session.out.flush()
                continue
            if not argv:
                continue
            name = argv[0].lower()
            if readline and name == b"auth":  # like redis-cli, keep passwords out of the history
                readline.remove_history_item(readline.get_current_history_length() - 1)
            if name in (b"quit", b"exit"):
                break
            if name == b"help":
                if len(argv) == 1:
                    _help(session)
                else:
                    words = [a.decode("utf-8", "replace") for a in argv[1:]]
                    session.out.write(help_text(words).encode())
                    session.out.flush()
                continue
            times = 1
            if len(argv) > 1 and argv[0].isdigit():
                times, argv = int(argv[0]), argv[1:]
            session.execute(argv, times)
    finally:
        if readline and history:
            readline.write_history_file(history)
    return 0


def _readline() -> Any:
    """The readline module (line editing for input()), if this Python has it."""
    try:
        import readline
    except ImportError:  # pragma: no cover - e.g. Windows
        return None
    return readline


def _load_history(readline: Any) -> str | None:
    """Load the history file; return its path (None: history disabled)."""
    path = os.environ.get("DISQUETTECLI_HISTFILE", str(Path.home() / ".disquettecli_history"))
    if path == os.devnull:
        return None
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    return path


def _help(session: Session) -> None:
    reply = session.run([b"COMMAND"])
    if isinstance(reply, ResponseError):
        session.show(reply, [b"COMMAND"])
        return
    names = sorted(entry[0].decode() for entry in reply)
    session.out.write(
        f"disquette-cli {__version__}\nCommands of this node: {' '.join(names)}\n"
        'Type a command with its arguments ("help COMMAND" shows them, TAB completes); '
        '"quit" to leave.\n'.encode()
    )
    session.out.flush()


# ---------------------------------------------------------------------- bulk


def _input(args: argparse.Namespace) -> contextlib.AbstractContextManager[BinaryIO]:
    """The input: ``--input FILE`` (closed after use) or standard input."""
    if args.input is None:
        return contextlib.nullcontext(sys.stdin.buffer)
    return args.input.open("rb")


def pipe(session: Session, args: argparse.Namespace) -> int:
    """``--pipe``: every command of the input, pipelined; errors to stderr; a summary."""
    progress = Progress("pipe", unit="replies")
    errors = 0

    def commands(stream: BinaryIO) -> Iterator[Command[Any]]:
        reader = RequestReader()
        while chunk := stream.read(1 << 16):
            for request in reader.feed(chunk):
                if isinstance(request, RequestError):
                    raise ValueError(f"bad input: {request}")
                yield Command(tuple(request))

    def sink(reply: Any) -> None:
        nonlocal errors
        if isinstance(reply, BaseException):
            errors += 1
            sys.stderr.write(f"{reply}\n")
        progress.advance()

    assert session.link is not None
    with _input(args) as stream:
        batch = Batch(commands(stream), args.window, sink=sink)
        try:
            if not session.link.exchange(batch, None):
                progress.close(f"Error: {batch.lost_cause}")
                return 1
        except ValueError as exc:
            progress.close(str(exc))
            return 1
    progress.close(f"errors: {errors}, replies: {progress.done}")
    return 1 if errors else 0


def _job_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "timeout": args.timeout,
        "replicate": args.replicate,
        "delay": args.delay,
        "retry": args.retry,
        "ttl": args.ttl,
        "maxlen": args.maxlen,
        "async_": args.async_,
        "priority": args.priority,
        "dedup": args.dedup or None,
        "backoff": args.backoff,
    }


def backoff(text: str) -> Backoff:
    """``--backoff``: ``fixed:30`` or ``exponential:1:60`` (argparse names this type)."""
    return Backoff.of(text)


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for line in stream:
        if line.endswith(b"\r\n"):
            yield line[:-2]
        elif line.endswith(b"\n"):
            yield line[:-1]
        else:
            yield line


def _chunks(items: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _node_client(address: Address, args: argparse.Namespace) -> Client:
    return Client([address], password=args.password, ssl=args.ssl).on_node(address)


def add_jobs(address: Address, args: argparse.Namespace) -> int:
    """``--add-jobs QUEUE``: one job per input line, pipelined, with a progress bar."""
    client = _node_client(address, args)
    progress = Progress(f"adding to {args.add_jobs}")
    options = _job_options(args)
    try:
        with _input(args) as stream:
            for chunk in _chunks(_lines(stream), ADD_CHUNK):
                client.add_jobs(args.add_jobs, chunk, window=args.window, **options)
                progress.advance(len(chunk))
    except PipelineError as exc:
        added = sum(isinstance(r, str) for r in exc.results)
        progress.advance(added)
        first = next(r for r in exc.results if isinstance(r, BaseException))
        progress.close(f"added {progress.done:,} jobs to {args.add_jobs}, then: {first}")
        return 1
    except DisqueError as exc:
        progress.close(f"added {progress.done:,} jobs to {args.add_jobs}, then: {exc}")
        return 1
    finally:
        client.close()
    progress.close()
    return 0


def drain(address: Address, args: argparse.Namespace) -> int:
    """``--drain QUEUE``: print and acknowledge every job of the queue."""
    client = _node_client(address, args)
    out = sys.stdout.buffer
    try:
        progress = Progress(f"draining {args.drain}", total=client.qlen(args.drain))
        while jobs := client.get_jobs(args.drain, count=DRAIN_COUNT, nohang=True):
            out.write(b"".join(job.body + b"\n" for job in jobs))
            out.flush()
            client.ack(*(job.id for job in jobs))
            progress.advance(len(jobs))
    except DisqueError as exc:
        sys.stderr.write(f"drain failed: {exc}\n")
        return 1
    finally:
        client.close()
    progress.close()
    return 0


# ---------------------------------------------------------------------- stat

STAT_COLUMNS = ("node", "jobs", "queues", "mem", "clients", "blocked", "requests", "ops/s")


def stat(address: Address, args: argparse.Namespace) -> int:
    """``--stat``: one line per node every interval; the header every 20 samples."""
    client = Client([address], password=args.password, ssl=args.ssl)
    interval = args.interval if args.interval is not None else 1.0
    previous: dict[str, tuple[float, int]] = {}
    try:
        for sample in itertools.count():
            if args.repeat >= 0 and sample >= max(args.repeat, 1):
                break
            if sample:
                time.sleep(interval)
            try:
                nodes = [format_address(a) for a in _stat_nodes(client, address)]
            except DisqueError as exc:
                sys.stderr.write(
                    f"Could not connect to Disque at {format_address(address)}: {exc}\n"
                )
                return 1
            rows = [_stat_row(client, node, previous) for node in nodes]
            if sample % STAT_HEADER_EVERY == 0:
                rows.insert(0, STAT_COLUMNS)
            width = max(len(n) for n in nodes)
            for row in rows:
                sys.stdout.write(_stat_line(row, width))
            sys.stdout.flush()
    finally:
        client.close()
    return 0


def _stat_nodes(client: Client, address: Address) -> list[Address]:
    hello = client.on_node(address).hello()
    nodes = [address]
    for node in hello.nodes:
        if node.id != hello.node_id and node.host:
            nodes.append((node.host, node.port))
    return list(dict.fromkeys(nodes))  # a node being met is listed twice for a moment


def _stat_row(client: Client, node: str, previous: dict[str, tuple[float, int]]) -> tuple:
    try:
        info = client.on_node(node).info()
    except DisqueError:
        return (node, "down", "", "", "", "", "", "")
    now = time.monotonic()
    total = info.get("total_commands_processed", 0)
    before = previous.get(node)
    previous[node] = (now, total)
    if before is None:
        requests, ops = f"{total}", info.get("instantaneous_ops_per_sec", 0)
    else:
        requests = f"{total} (+{total - before[1]})"
        ops = round((total - before[1]) / max(now - before[0], 1e-9))
    return (
        node,
        info.get("registered_jobs", 0),
        info.get("registered_queues", 0),
        human_bytes(info.get("used_memory", 0)),
        info.get("connected_clients", 0),
        info.get("blocked_clients", 0),
        requests,
        ops,
    )


def _stat_line(row: tuple, node_width: int) -> str:
    widths = (max(node_width, 4), 10, 8, 9, 8, 8, 22, 8)
    return " ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n"


if __name__ == "__main__":
    sys.exit(main())
