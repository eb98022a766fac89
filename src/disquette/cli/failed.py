"""``disquette failed list|retry|delete``: the cluster's failed jobs from a terminal.

What the dashboard's page of failed jobs and the JSON API's ``/api/failed`` do, for an
operator with a shell or a script: observe/failed.py reads, filters, retries and
deletes; this module parses the options, reaches the cluster and prints.

It asks the node given (``--node``, default ``127.0.0.1:7711``; ``-a`` or
``DISQUETTE_PASSWORD`` for its ``requirepass``; TLS as disquette-cli's options) for
the cluster's nodes (HELLO), then reads every node at once, as the API does, and
sends the actions to that node:

* ``list [filters] [--limit N] [--json]``: the failed jobs, newest first, as a table
  (ID, dead-letter queue, origin queue, task, NACKs, additional deliveries, age, and
  the reason with the error's last line); ``--json`` prints the API's answer (whole
  errors, bodies' first bytes, counts).
* ``retry ID...`` or ``retry --all [filters]``: back to their origin queues with fresh
  counters; ``delete`` likewise. One line per job, then a summary; exit status 1
  when one of them failed.

Filters: ``--dlq QUEUE`` (repeatable: the dead-letter queues to read, default every
known one), ``--queue`` (the origin queue), ``--task``, ``--error`` (text in the
reason or the error, any case), ``--min-age``/``--max-age`` (seconds, or ``30s``,
``5m``, ``2h``, ``1d``). Names and errors come from anywhere, so they are printed with
every non-printable character escaped.

It is a subcommand of ``disquette``, beside ``top`` and ``cluster``, rather than a
mode of ``disquette-cli``: it reads every node of the cluster where disquette-cli, as
redis-cli, talks to the one node it is given, and its verbs take their own filters.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
from typing import Any

from disquette.aio import Client
from disquette.cli.output import table
from disquette.cli.session import session
from disquette.cli.tlsargs import add_tls_arguments, ssl_context
from disquette.cli.top import age, printable
from disquette.client.topology import format_address, parse_address
from disquette.observe import failed

DEFAULT_LIMIT = 100
HEADERS = ("id", "dead-letter queue", "origin queue", "task", "nacks", "deliveries", "age",
           "reason")  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="failed_command", required=True, metavar="{list,retry,delete}")
    listing = sub.add_parser("list", help="list the failed jobs, newest first")
    listing.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="jobs shown (100)")
    listing.add_argument("--json", action="store_true", help="print the API's JSON answer")
    verbs = {
        "retry": "put failed jobs back on their origin queues, with fresh counters",
        "delete": "delete failed jobs on every node",
    }
    parsers = [listing]
    for verb, help_text in verbs.items():
        action = sub.add_parser(verb, help=help_text, description=help_text)
        action.add_argument("ids", nargs="*", metavar="ID", help="dead letters' job IDs")
        action.add_argument("--all", action="store_true", help="every job the filters select")
        parsers.append(action)
    for parser in parsers:
        _common_arguments(parser)


def _common_arguments(p: argparse.ArgumentParser) -> None:
    """Where the cluster is, and the filters (every verb takes them)."""
    p.add_argument("--node", default="127.0.0.1:7711", metavar="HOST:PORT",
                   help="the node to ask (default 127.0.0.1:7711)")  # fmt: skip
    p.add_argument("-a", "--password", default=os.environ.get("DISQUETTE_PASSWORD"),
                   help="the nodes' requirepass (default: $DISQUETTE_PASSWORD)")  # fmt: skip
    add_tls_arguments(p)
    p.add_argument("--dlq", action="append", default=[], metavar="QUEUE",
                   help="a dead-letter queue to read (repeatable; default: all)")  # fmt: skip
    p.add_argument("--queue", help="the origin queue")
    p.add_argument("--task", help="the task's name")
    p.add_argument("--error", metavar="TEXT", help="text in the reason or error (any case)")
    p.add_argument("--min-age", metavar="AGE", help="dead-lettered at least AGE ago (90, 5m, 2h)")
    p.add_argument("--max-age", metavar="AGE", help="dead-lettered at most AGE ago (30s, 1d)")


def run(args: argparse.Namespace) -> int:
    params = {"dlq": args.dlq, "queue": args.queue, "task": args.task, "error": args.error,
              "min_age": args.min_age, "max_age": args.max_age}  # fmt: skip
    try:
        chosen = failed.Filter.parse(params)
        ids: list[str] | None = None
        if args.failed_command != "list":
            if args.all == bool(args.ids):
                raise ValueError("give the dead letters' IDs, or --all (with filters)")
            ids = None if args.all else failed.check_ids(args.ids)
        tls = ssl_context(args)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"disquette failed: {exc}\n")
        return 2
    return asyncio.run(_session(args, chosen, ids, tls))


async def _session(
    args: argparse.Namespace,
    chosen: failed.Filter,
    ids: list[str] | None,
    tls: ssl.SSLContext | None,
) -> int:
    async def work(client: Client, seed: str) -> int:
        nodes = await _nodes(client, seed)
        if args.failed_command == "list":
            listing = await failed.read(nodes, chosen)
            return _print_listing(listing.page(chosen, max(args.limit, 0), None), args.json)
        report = await failed.apply(nodes, args.failed_command, chosen, ids)
        return _print_report(report)

    return await session("failed", args, tls, work)


async def _nodes(client: Client, seed: str) -> failed.Nodes:
    """The cluster as HELLO tells it (the seed answering for itself)."""
    hello = await client.on_node(seed).hello()
    host = parse_address(seed)[0]
    addresses = {node.id: format_address((node.host or host, node.port)) for node in hello.nodes}
    addresses[hello.node_id] = seed

    async def run(address: str, *args: Any) -> Any:
        return await client.on_node(address).execute(*args)

    return failed.Nodes(addresses, seed, run)


def _reason(job: dict[str, Any]) -> str:
    """The reason, and the error's last line (an exception's type and message)."""
    lines = (job["error"] or "").strip().splitlines()
    return job["reason"] + (f": {lines[-1]}" if lines else "")


def _row(job: dict[str, Any]) -> list[str]:
    def count(value: int | None) -> object:
        return "-" if value is None else value

    cells = (
        job["id"], job["queue"], job["origin_queue"] or "-", job["task"] or "-",
        count(job["nacks"]), count(job["additional_deliveries"]), age(job["age"]), _reason(job),
    )  # fmt: skip
    return [printable(str(cell)) for cell in cells]


def _print_listing(answer: dict[str, Any], as_json: bool) -> int:
    out = sys.stdout
    if as_json:
        out.write(json.dumps(answer, ensure_ascii=False, indent=1) + "\n")
    else:
        rows = [_row(job) for job in answer["jobs"]]
        out.write(table(HEADERS, rows) if rows else "no failed jobs\n")
        shown, total = len(answer["jobs"]), answer["total"]
        if shown < total:
            sys.stderr.write(f"{shown} of {total} failed jobs shown (--limit, or filters)\n")
    _notes(answer["unanswered"], answer["truncated"])
    return 0


def _print_report(report: failed.Report) -> int:
    out = sys.stdout
    for outcome in report.outcomes:
        if outcome.error is not None:
            out.write(f"failed {outcome.id}: {printable(outcome.error)}\n")
        elif outcome.job is not None:
            out.write(f"retried {outcome.id} as {outcome.job}\n")
        else:
            out.write(f"deleted {outcome.id}\n")
    done = len(report.outcomes) - report.failed
    out.write(f"{done} done, {report.failed} failed\n")
    _notes(report.unanswered, report.truncated)
    return 1 if report.failed else 0


def _notes(unanswered: list[str], truncated: bool) -> None:
    if unanswered:
        sys.stderr.write(
            f"not answering (their dead letters are missing): {', '.join(unanswered)}\n"
        )
    if truncated:
        sys.stderr.write(f"a node holds more than {failed.MAX_READ:,} dead letters: "
                         "only that many were read from it (narrow with --dlq)\n")  # fmt: skip
