#!/usr/bin/env python3
"""What users with permissions cost ADDJOB and the GETJOB + ACKJOB cycle.

Usage::

    python bench/acl.py [--jobs 100000] [--repeat 3] [--batch 200] [--pure]
                        [--variants default,...] [--json FILE]

Each variant runs against a fresh server (the compiled build; ``--pure`` adds the pure
build, or runs alone with ``--pure-only``): one connection adds ``--jobs`` jobs to
queue ``q``, pipelined ``--batch`` deep with two batches in flight (bench/extensions.py's
load), then takes them back with ``GETJOB COUNT 100`` and acknowledges each batch with
one ``ACKJOB``. The table gives each phase's throughput and the server's CPU time per
job, best of ``--repeat``, relative to ``default``:

- ``default``: no user defined; the connection is ``default`` (every permission);
- ``users-elsewhere``: 20 restricted users exist, the connection stays ``default``:
  unrestricted connections are never checked (``client.acl`` is None);
- ``restricted``: the connection is a user ``%RW~q +@produce +@consume`` (every request
  checked: the command, then the queue or the jobs' queues; pipelined ADDJOBs run one
  by one instead of as a run);
- ``restricted-patterns``: the same with 20 more patterns before the one that matches
  (a queue's permissions are cached per user, so the patterns are matched once).

Dependencies: the standard library and ``hiredis``; Linux only (as run.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as cm
from _common import Server, ServerSpec, encode
from extensions import check_added, compare, pipelined, variants_parser

BODY = cm.make_body(64)
OTHERS = tuple(("ACL", "SETUSER", f"u{n}", "on", ">pw", f"~other{n}*", "+@produce")
               for n in range(20))  # fmt: skip
RESTRICTED = ("ACL", "SETUSER", "app", "on", ">pw", "~q", "+@produce", "+@consume")
PATTERNS = tuple(f"%R~p{n}:*" for n in range(20))
#: Variant: (set-up commands, AUTH as ``app``).
VARIANTS: dict[str, tuple[tuple[tuple[str, ...], ...], bool]] = {
    "default": ((), False),
    "users-elsewhere": (OTHERS, False),
    "restricted": ((RESTRICTED,), True),
    "restricted-patterns": (((*RESTRICTED[:5], *PATTERNS, *RESTRICTED[5:]),), True),
}


def measure(spec: ServerSpec, name: str, jobs: int, batch: int) -> dict[str, float]:
    setup, restricted = VARIANTS[name]
    with Server(spec) as server, server.client() as client:
        for command in setup:
            client.call(*command)
        if restricted:
            client.call("AUTH", "app", "pw")
        cpu0, t0 = cm.proc_cpu_seconds(server.pid), time.perf_counter()
        requests = (encode("ADDJOB", "q", BODY, "0") for _ in range(jobs))
        replies = pipelined(client, requests, batch)
        add_wall, add_cpu = time.perf_counter() - t0, cm.proc_cpu_seconds(server.pid) - cpu0
        check_added(name, replies)
        cpu0, t0 = cm.proc_cpu_seconds(server.pid), time.perf_counter()
        taken = cm.drain(client, "q")
        take_wall, take_cpu = time.perf_counter() - t0, cm.proc_cpu_seconds(server.pid) - cpu0
    return {
        "add_ops": jobs / add_wall,
        "add_cpu_us": add_cpu / jobs * 1e6,
        "take_ops": taken / take_wall,
        "take_cpu_us": take_cpu / taken * 1e6,
    }


def main() -> int:
    parser = variants_parser(__doc__, jobs=100_000)
    parser.add_argument("--pure-only", action="store_true", help="run the pure build only")
    args = parser.parse_args()
    header, meta = cm.run_description("disquette users and permissions", sys.executable)
    print("\n".join(header))
    specs = cm.disquette_builds(args.pure, args.pure_only)
    cm.save_results(args.json, meta, compare(measure, specs, VARIANTS, "default", args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
