"""``disquette top [HOST:PORT...]``: the live cluster picture in a terminal.

For operators on a server without a browser: the nodes (state, jobs, memory level,
clients, ops/s) and the queues sorted by rate, refreshed every ``--interval``
seconds until ``q``. It asks over the client port, with the extension command
OBSERVE, exactly what the HTTP API merges (observe/gather.py), so it works with the
HTTP port off: ``OBSERVE NODE`` of the first node that answers gives the node table,
then every node of the table is asked ``OBSERVE NODE`` and ``OBSERVE QUEUES SORT
activity`` at once, each given a second, and the queues are merged by merge.py's
rules. A node that does not answer shows its state from the table (``pfail``,
``fail``), or ``unreachable``; when the node asked first goes away, the next known one
is asked.

Rates are counter deltas between two refreshes (a queue's ``jobs_in`` and
``jobs_out`` summed over its nodes, divided by the seconds between the two answers),
so the first screen has none yet. A node reports its :data:`QUEUES_PER_NODE` most
active queues (by lifetime jobs in and out): with more queues than that, a queue that
just woke up after a long quiet shows once it ranks.

The screen is drawn with curses (works over ssh, no dependency beyond the standard
library) and fits the terminal: columns are cut at its width and the queue list at
its height. Names come from anywhere (a queue may be named with escape sequences),
so every byte that is not printable is shown escaped, never sent to the terminal.
``--once`` prints one picture as plain text and exits (scripts, a dumb terminal).
When no node answers at all, it says so in one line on standard error (the address
and why, in plain words) and exits 1; a cluster that goes away later shows as a
screen saying so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from disquette.aio import Client
from disquette.cli.reach import unreachable
from disquette.client.errors import ConnectionFailedError, DisqueError
from disquette.observe.merge import TIMEOUT, merge_queues

QUEUES_PER_NODE: Final = 1000  # OBSERVE's largest page
QUIT_KEYS: Final = (ord("q"), ord("Q"))

# Styles of a line or a cell, mapped to curses colour pairs when drawn.
PLAIN, TITLE, HEADER, OK, WARN, BAD = range(6)
STATE_STYLE: Final = {"ok": OK, "pfail": WARN, "leaving": WARN, "fail": BAD, "unreachable": BAD}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "nodes",
        nargs="*",
        default=["127.0.0.1:7711"],
        metavar="HOST:PORT",
        help="nodes to ask first (default: 127.0.0.1:7711); the rest is found from them",
    )
    p.add_argument("-a", "--password", default=os.environ.get("DISQUETTE_PASSWORD"))
    p.add_argument(
        "-i", "--interval", type=float, default=1.0, help="seconds between refreshes (1)"
    )
    p.add_argument("--once", action="store_true", help="print one picture as text and exit")


# --------------------------------------------------------------------------
# The data: one picture of the cluster.


@dataclass
class Snapshot:
    """The cluster as the nodes told it at ``taken`` (monotonic seconds): nodes in the
    shape of /api/cluster's, merged queues in the shape of /api/queues's."""

    taken: float
    source: str | None = None  # the node whose table this is
    nodes: list[dict[str, Any]] = field(default_factory=list)
    queues: list[dict[str, Any]] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    error: str | None = None


class ClusterSource:
    """Gathers :class:`Snapshot` objects from a cluster over the client port."""

    def __init__(self, seeds: Sequence[str], password: str | None) -> None:
        self.known = list(dict.fromkeys(seeds))  # addresses to try first, in order
        self.password = password
        self._client: Client | None = None

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(
                self.known[0],
                password=self.password,
                connect_timeout=TIMEOUT,
                socket_timeout=TIMEOUT,
            )
        return self._client

    async def observe(self, address: str, *args: str) -> Any:
        call = self.client().on_node(address).execute("OBSERVE", *args)
        answer = await asyncio.wait_for(call, TIMEOUT)
        return None if answer is None else json.loads(answer)

    async def snapshot(self) -> Snapshot:
        source, table, failures = None, None, []
        for address in self.known:
            try:
                table = await self.observe(address, "NODE")
            except (TimeoutError, DisqueError, OSError, ValueError) as exc:
                cause = exc.__cause__ if isinstance(exc, ConnectionFailedError) else None
                failures.append(f"could not reach {address}: {unreachable(cause or exc)}")
                continue
            source = address
            break
        if table is None or source is None:
            return Snapshot(time.monotonic(), error="; ".join(failures))
        addresses = _addresses(table, source)
        # The node that answered first comes first next time; the others follow.
        self.known = list(dict.fromkeys([source, *addresses.values(), *self.known]))
        ids = list(addresses)
        asks = [self.observe(addresses[i], "NODE") for i in ids if i != table["id"]]
        asks += [
            self.observe(addresses[i], "QUEUES", "SORT", "activity", "COUNT", str(QUEUES_PER_NODE))
            for i in ids
        ]
        replies = await asyncio.gather(*asks, return_exceptions=True)
        taken = time.monotonic()
        others = iter(replies[: len(ids) - 1])
        views = {i: table if i == table["id"] else next(others) for i in ids}
        pages = dict(zip(ids, replies[len(ids) - 1 :], strict=True))
        answered = {i: v for i, v in views.items() if isinstance(v, dict)}
        unanswered = [i for i in ids if i not in answered]
        nodes = [
            _node_entry(row, addresses[row["id"]], answered.get(row["id"]))
            for row in table["table"]
        ]
        good_pages = {i: p for i, p in pages.items() if isinstance(p, dict)}
        queues = list(merge_queues(good_pages).values())
        return Snapshot(taken, source, nodes, queues, unanswered)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


def _addresses(table: dict[str, Any], source: str) -> dict[str, str]:
    """``{node id: "ip:port"}`` of the table's nodes (the answering node at ``source``;
    a node known by port only is taken on the answering node's host)."""
    host = source.rsplit(":", 1)[0]
    out = {}
    for row in table["table"]:
        ip, port = row["addr"].rsplit(":", 1)
        if row["id"] == table["id"]:
            out[row["id"]] = source
        elif port not in ("", "0"):
            out[row["id"]] = f"{ip or host}:{port}"
    return out


def _node_entry(
    row: dict[str, Any], address: str | None, own: dict[str, Any] | None
) -> dict[str, Any]:
    """A node as /api/cluster shows it: the table's state, its own counters when it
    answered (None otherwise)."""
    state = row["state"]
    if own is None and state == "ok":
        state = "unreachable"
    entry: dict[str, Any] = {"id": row["id"], "addr": address or row["addr"], "state": state}
    for name in ("jobs", "queued", "queues", "memory", "clients", "ops_per_sec", "repair_backlog"):
        entry[name] = None if own is None else own.get(name)
    return entry


# --------------------------------------------------------------------------
# Rates.


class Rates:
    """Per-queue jobs in and out per second, from the counters of two snapshots."""

    def __init__(self) -> None:
        self._last: tuple[float, dict[str, tuple[int, int]]] | None = None
        self.per_queue: dict[str, tuple[float, float]] = {}

    def update(self, snapshot: Snapshot) -> None:
        if snapshot.error is not None:
            return
        counters = {q["name"]: (q["jobs_in"], q["jobs_out"]) for q in snapshot.queues}
        last = self._last
        self._last = (snapshot.taken, counters)
        if last is None or snapshot.taken <= last[0]:
            self.per_queue = {}
            return
        seconds = snapshot.taken - last[0]
        self.per_queue = {}
        for name, (jobs_in, jobs_out) in counters.items():
            before_in, before_out = last[1].get(name, (jobs_in, jobs_out))
            # A node missing from one answer lowers the sums: never a negative rate.
            self.per_queue[name] = (
                max(0, jobs_in - before_in) / seconds,
                max(0, jobs_out - before_out) / seconds,
            )

    def of(self, name: str) -> tuple[float, float] | None:
        return self.per_queue.get(name)


def by_rate(queues: list[dict[str, Any]], rates: Rates) -> list[dict[str, Any]]:
    """Busiest first (jobs in and out per second), then longest, then by name."""

    def key(q: dict[str, Any]) -> tuple[float, int, str]:
        rate = rates.of(q["name"]) or (0.0, 0.0)
        return (-(rate[0] + rate[1]), -q["len"], q["name"])

    return sorted(queues, key=key)


# --------------------------------------------------------------------------
# Rendering: lines of (text, style), cut to the screen.


def printable(text: str) -> str:
    """``text`` with every non-printable character escaped (no terminal control)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def age(seconds: int | None) -> str:
    """A queue's age with its unit: ``45s``, ``12m30s``, ``3h12m``, ``2d3h``."""
    if seconds is None:
        return "-"
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}{seconds % size // sub_size}{sub}"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if value < 100 else f"{value:.0f}"
    return str(value)


def _level(memory: dict[str, Any] | None) -> str:
    if not memory:
        return "-"
    level = memory.get("level")
    used = memory.get("used") or 0
    size = f"{used / 1048576:.1f}M"
    return size if level is None else f"{size} {level * 100:.0f}%"


Line = tuple[str, int]
NODE_COLUMNS: Final = ("NODE", "ADDRESS", "STATE", "JOBS", "QUEUED", "MEMORY", "CLIENTS", "OPS/S")
QUEUE_COLUMNS: Final = ("QUEUE", "LEN", "IN/S", "OUT/S", "NACKS", "PAUSED", "AGE", "NODES")


def _row(cells: Sequence[str], widths: Sequence[int], left: int) -> str:
    """Cells padded to ``widths``: the first ``left`` (names) to the left, numbers right."""
    return " ".join(
        f"{c:<{w}}" if i < left else f"{c:>{w}}"
        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


def _table(
    header: Sequence[str], rows: list[tuple[list[str], int]], first: int, left: int
) -> list[Line]:
    """A header and rows in aligned columns, the first column at most ``first`` wide."""
    widths = [max([len(header[i]), *(len(r[0][i]) for r in rows)]) for i in range(len(header))]
    widths[0] = min(widths[0], first)
    cut = [([c[: widths[0]] if i == 0 else c for i, c in enumerate(cells)], s) for cells, s in rows]
    lines = [(_row(cells, widths, left), style) for cells, style in cut]
    return [(_row(header, widths, left), HEADER), *lines]


def render(
    snapshot: Snapshot, rates: Rates, width: int, height: int, interval: float
) -> list[Line]:
    """The screen: a title, the nodes, the queues by rate, each line cut to ``width``,
    the queue list cut to fit ``height``."""
    title = f"disquette top - every {interval:g}s - q quits"
    if snapshot.error is not None:
        lines: list[Line] = [(title, TITLE), ("", PLAIN), (printable(snapshot.error), BAD)]
        return [(text[:width], style) for text, style in lines[:height]]
    failed = sum(n["state"] != "ok" for n in snapshot.nodes)
    summary = f"{len(snapshot.nodes)} nodes ({failed} not ok), {len(snapshot.queues)} queues"
    summary += f", asked {snapshot.source}"
    lines = [(title, TITLE), (summary, PLAIN), ("", PLAIN)]
    node_rows = [
        (
            [
                n["id"][:8],
                printable(n["addr"]),
                n["state"],
                _num(n["jobs"]),
                _num(n["queued"]),
                _level(n["memory"]),
                _num(n["clients"]),
                _num(n["ops_per_sec"]),
            ],
            STATE_STYLE.get(n["state"], PLAIN),
        )
        for n in snapshot.nodes
    ]
    lines += _table(NODE_COLUMNS, node_rows, 8, 3)
    lines.append(("", PLAIN))
    room = max(0, height - len(lines) - 1)  # the header takes a line
    shown = by_rate(snapshot.queues, rates)[:room]
    queue_rows = []
    for q in shown:
        rate = rates.of(q["name"])
        queue_rows.append(
            (
                [
                    printable(q["name"]),
                    _num(q["len"]),
                    "-" if rate is None else _num(rate[0]),
                    "-" if rate is None else _num(rate[1]),
                    _num(q["nacks"]),
                    q["paused"],
                    age(q["age"]),
                    str(len(q["nodes"])),
                ],
                WARN if q["paused"] != "none" else PLAIN,
            )
        )
    if room:
        lines += _table(QUEUE_COLUMNS, queue_rows, max(10, width // 3), 1)
    return [(text[:width], style) for text, style in lines[:height]]


# --------------------------------------------------------------------------
# Running.


def run(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        sys.stderr.write("disquette top: --interval must be above 0\n")
        return 2
    source = ClusterSource(args.nodes, args.password)
    loop = asyncio.new_event_loop()
    try:
        first = loop.run_until_complete(source.snapshot())
        if first.error is not None:  # no node at all: one line, no screen
            sys.stderr.write(f"disquette top: {printable(first.error)}\n")
            return 1
        if args.once or not sys.stdout.isatty():
            return _print_once(source, loop, first, args.interval)
        import curses

        return int(curses.wrapper(_screen, source, loop, first, args.interval))
    except KeyboardInterrupt:
        return 0
    finally:
        loop.run_until_complete(source.close())
        loop.close()


def _print_once(
    source: ClusterSource, loop: asyncio.AbstractEventLoop, first: Snapshot, interval: float
) -> int:
    """Two snapshots an interval apart (so rates show), printed as plain text."""
    rates = Rates()
    rates.update(first)
    time.sleep(interval)
    snapshot = loop.run_until_complete(source.snapshot())
    rates.update(snapshot)
    size = os.get_terminal_size(sys.stdout.fileno()) if sys.stdout.isatty() else None
    width, height = (size.columns, size.lines) if size else (200, 1000)
    for text, _style in render(snapshot, rates, width, height, interval):
        print(text)
    return 1 if snapshot.error is not None else 0


def _screen(
    stdscr: Any,
    source: ClusterSource,
    loop: asyncio.AbstractEventLoop,
    first: Snapshot,
    interval: float,
) -> int:
    import curses

    styles = _curses_styles(curses)
    with contextlib.suppress(curses.error):
        curses.curs_set(0)
    rates = Rates()
    rates.update(first)
    snapshot = first
    next_at = time.monotonic() + interval
    _draw(stdscr, curses, snapshot, rates, interval, styles)
    while True:
        now = time.monotonic()
        if now >= next_at:
            snapshot = loop.run_until_complete(source.snapshot())
            rates.update(snapshot)
            next_at = now + interval
            _draw(stdscr, curses, snapshot, rates, interval, styles)
        stdscr.timeout(max(1, int((next_at - time.monotonic()) * 1000)))
        key = stdscr.getch()
        if key in QUIT_KEYS:
            return 0
        if key == curses.KEY_RESIZE:
            _draw(stdscr, curses, snapshot, rates, interval, styles)


def _curses_styles(curses: Any) -> Callable[[int], int]:
    colours = {OK: curses.COLOR_GREEN, WARN: curses.COLOR_YELLOW, BAD: curses.COLOR_RED}
    attrs = {TITLE: curses.A_BOLD, HEADER: curses.A_REVERSE}
    if curses.has_colors():
        with contextlib.suppress(curses.error):
            curses.use_default_colors()
        for style, colour in colours.items():
            curses.init_pair(style, colour, -1)
            attrs[style] = curses.color_pair(style) | (curses.A_BOLD if style == BAD else 0)
    return lambda style: attrs.get(style, curses.A_NORMAL)


def _draw(
    stdscr: Any,
    curses: Any,
    snapshot: Snapshot,
    rates: Rates,
    interval: float,
    styles: Callable[[int], int],
) -> None:
    height, width = stdscr.getmaxyx()
    stdscr.erase()
    # The last column of the last line cannot be written: one less everywhere.
    for y, (text, style) in enumerate(render(snapshot, rates, width - 1, height, interval)):
        with contextlib.suppress(curses.error):
            stdscr.addstr(y, 0, text, styles(style))
    stdscr.refresh()
