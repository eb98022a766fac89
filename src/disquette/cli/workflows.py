"""``disquette workflows list|show ID|cancel ID``: the task API's workflows from a terminal.

What the dashboard's Workflows section and the JSON API's ``/api/workflows`` show, for
an operator with a shell or a script: observe/workflows.py lists, reads and cancels;
this module parses the options, reaches the cluster and prints.

It asks the node given (``--node``, default ``127.0.0.1:7711``; ``-a`` or
``DISQUETTE_PASSWORD`` for its ``requirepass``; TLS as disquette-cli's options) for
the cluster's nodes (HELLO), then reads every node, as the API does:

* ``list [--limit N] [--json]``: the workflows, newest first, as a table (ID, kind,
  name, state, done of how many jobs, percent, the failed ones, age).
* ``show ID [--state S] [--limit N] [--offset N] [--json]``: one workflow's summary
  (and its result once finished), then its jobs (role, task, state, result), or those
  in state ``S``.
* ``cancel ID``: cancel every job of it not finished yet.

Exit status: 0, 1 when the workflow is unknown or the cluster cannot be reached, 2
for bad arguments. Names and results come from anywhere, so they are printed with
every non-printable character escaped.
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
from disquette.client import workflow_state
from disquette.observe import workflows

LIST_HEADERS = ("id", "kind", "name", "state", "done", "%", "failed", "age")
JOB_HEADERS = ("job", "role", "task", "state", "result")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="workflows_command", required=True,
                           metavar="{list,show,cancel}")  # fmt: skip
    listing = sub.add_parser("list", help="the workflows, newest first, with their progress")
    listing.add_argument("--limit", type=int, default=50, help="workflows shown (50)")
    show = sub.add_parser("show", help="one workflow: its state, result and jobs")
    show.add_argument("id", metavar="ID", help="the workflow's ID (its handle's id)")
    show.add_argument("--state", help="only its jobs in this state (" + ", ".join(
        workflow_state.STATES) + ")")  # fmt: skip
    show.add_argument("--limit", type=int, default=100, help="jobs shown (100)")
    show.add_argument("--offset", type=int, default=0, help="jobs skipped (0)")
    cancel = sub.add_parser("cancel", help="cancel every job of a workflow not finished yet")
    cancel.add_argument("id", metavar="ID", help="the workflow's ID")
    for verb in (listing, show, cancel):
        verb.add_argument("--node", default="127.0.0.1:7711", metavar="HOST:PORT",
                          help="the node to ask (default 127.0.0.1:7711)")  # fmt: skip
        verb.add_argument("-a", "--password", default=os.environ.get("DISQUETTE_PASSWORD"),
                          help="the nodes' requirepass (default: $DISQUETTE_PASSWORD)")  # fmt: skip
        verb.add_argument("--json", action="store_true", help="print the API's JSON answer")
        add_tls_arguments(verb)


def run(args: argparse.Namespace) -> int:
    try:
        if args.workflows_command == "show":
            workflows.check_state(args.state)
            if args.limit < 0 or args.offset < 0:
                raise ValueError("--limit and --offset must be 0 or more")
        tls = ssl_context(args)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"disquette workflows: {exc}\n")
        return 2
    return asyncio.run(_session(args, tls))


async def _session(args: argparse.Namespace, tls: ssl.SSLContext | None) -> int:
    async def work(client: Client, seed: str) -> int:
        nodes = await client.on_node(seed).call(workflow_state.cluster())
        command = args.workflows_command
        if command == "list":
            answer = await workflows.listing(client, nodes, max(args.limit, 0))
            return _print_list(answer, args.json)
        if command == "show":
            found = await workflows.detail(client, nodes, args.id, args.offset, args.limit,
                                           workflows.check_state(args.state))  # fmt: skip
            return _print_detail(args.id, found, args.json)
        done = await workflows.cancel(client, nodes, args.id)
        return _print_cancel(args.id, done, args.json)

    return await session("workflows", args, tls, work)


def _cells(*values: object) -> list[str]:
    return [printable("-" if v is None else str(v)) for v in values]


def _failed(summary: dict[str, Any]) -> int:
    counts = summary["counts"]
    return int(counts["failed"] + counts["gone"])


def _print_list(answer: dict[str, Any], as_json: bool) -> int:
    if as_json:
        sys.stdout.write(json.dumps(answer, ensure_ascii=False, indent=1) + "\n")
    else:
        rows = []
        for w in answer["workflows"]:
            counted = w["counted"]
            done = f"{w['done']}/{w['jobs']}" if counted else f"?/{w['jobs']}"
            rows.append(_cells(
                w["id"], w["kind"], w["name"], w["state"] if counted else "(not counted)",
                done, w["percent"] if counted else None, _failed(w) if counted else None,
                age(w["age"]),
            ))  # fmt: skip
        sys.stdout.write(table(LIST_HEADERS, rows) if rows else "no workflows\n")
        shown, total = len(answer["workflows"]), answer["total"]
        if shown < total:
            sys.stderr.write(f"{shown} of {total} workflows shown (--limit)\n")
    _notes(answer["unanswered"])
    return 0


def _said(workflow_id: str, answer: dict[str, Any] | None, as_json: bool) -> int | None:
    """The exit status when ``answer`` is all there is to print (none: a workflow not
    found; JSON asked for), else None."""
    if answer is None:
        sys.stderr.write(f"disquette workflows: no workflow {workflow_id}\n")
        return 1
    if as_json:
        sys.stdout.write(json.dumps(answer, ensure_ascii=False, indent=1) + "\n")
        _notes(answer["unanswered"])
        return 0
    return None


def _print_detail(workflow_id: str, answer: dict[str, Any] | None, as_json: bool) -> int:
    status = _said(workflow_id, answer, as_json)
    if status is not None:
        return status
    assert answer is not None
    w = answer["workflow"]
    counts = ", ".join(f"{n} {state}" for state, n in w["counts"].items() if n)
    lines = [
        f"workflow {w['id']}: {w['kind']}" + (f" {w['name']!r}" if w["name"] else ""),
        f"state: {w['state']}, {w['percent']}% done ({w['done']} of {w['jobs']} jobs: {counts})",
        f"age: {age(w['age'])}",
    ]
    if w["state"] != "running":
        lines.append(f"result: {json.dumps(w['result'], ensure_ascii=False)}")
    out = sys.stdout
    out.write("".join(printable(line) + "\n" for line in lines))
    rows = [_cells(j["id"], j["role"], j["task"], j["state"], j["result"]) for j in answer["jobs"]]
    out.write(table(JOB_HEADERS, rows) if rows else "no jobs match\n")
    if answer["next"] is not None:
        sys.stderr.write(f"more jobs: --offset {answer['next']}\n")
    _notes(answer["unanswered"])
    return 0


def _print_cancel(workflow_id: str, answer: dict[str, Any] | None, as_json: bool) -> int:
    status = _said(workflow_id, answer, as_json)
    if status is not None:
        return status
    assert answer is not None
    sys.stdout.write(f"cancelled {answer['cancelled']} of {answer['jobs']} jobs "
                     f"of workflow {workflow_id} (the others had finished)\n")  # fmt: skip
    _notes(answer["unanswered"])
    return 0


def _notes(unanswered: list[str]) -> None:
    if unanswered:
        sys.stderr.write(f"not answering (their copies are missing): {', '.join(unanswered)}\n")
