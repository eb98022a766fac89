#!/usr/bin/env python3
"""What disquette's extensions cost: priorities, de-duplication, policies, dependencies,
progress logs, claims, retry delays, results, cancellation and overflow.

Usage::

    python bench/extensions.py [--jobs 200000] [--repeat 3] [--batch 200] [--pure]
                               [--variants plain,priority,...] [--json FILE]

Each variant runs against a fresh server (the compiled build; ``--pure`` adds the pure
build): one connection adds ``--jobs`` jobs, pipelined ``--batch`` deep with two batches
in flight, then takes them back with ``GETJOB COUNT 100`` and acknowledges each batch
with one ``ACKJOB``. The table gives the throughput of each phase and the server's CPU
time per job (the steadier figure on a shared machine), best of ``--repeat``, and each
variant's CPU per job relative to plain jobs:

- ``plain``: ``ADDJOB q <64 bytes> 0`` (Disque's command, nothing beyond it);
- ``policies-elsewhere``: plain jobs while 20 policies exist, none matching ``q``;
- ``policy``: plain ADDJOBs into a queue whose policy sets retry, TTL and priority;
- ``priority``: ``... PRIORITY 5`` (one level in use);
- ``priority-mixed``: ``... PRIORITY n``, n cycling over 0-9 (ten levels, and no two
  consecutive requests alike: each is a pipelined run of its own);
- ``dedup``: ``... DEDUP <unique key>`` (every key new: the index grows and shrinks);
- ``dedup-hit``: the same ADDJOB repeated with one key (each answered from the index:
  one job is taken back);
- ``after-done``: ``... AFTER <id>`` of a job acknowledged before (settled at once: a
  plain job is made);
- ``after-live``: ``... AFTER <id>`` of one live job, acknowledged once all are added:
  the add phase makes waiting jobs, the take phase times their release (all at once)
  with the GETJOBs;
- ``withclaim``: plain jobs taken with ``GETJOB WITHCLAIM`` (a claim per delivery);
- ``progress``: plain jobs, each given a ``WORKING <id> <32 bytes>`` (pipelined)
  between its GETJOB and its ACKJOB: a progress log entry per job.
- ``backoff``: ``... BACKOFF exponential 1 60`` (a backoff record per job);
- ``nack``: plain jobs, each NACKed (requeued at once) before its ACKJOB, the
  reference of ``nack-delay``: each NACKed with ``DELAY 3600`` (postponed);
- ``result``: plain jobs acknowledged with ``RESULT <16 bytes>`` each (an outcome
  kept per job: one ``ACKJOB id RESULT r id RESULT r ...`` per batch);
- ``cancel``: plain jobs, each cancelled (``CANCEL <id>``) before its ACKJOB;
- ``overflow``: a policy ``maxlen`` of half the jobs with ``overflow drop-oldest``: the
  second half of the ADDJOBs each drop the oldest job.

A dead letter costs what it is made of (a requeue that becomes an asynchronous ADDJOB
and an ACKJOB); it only happens to jobs that failed, so it is not a variant here.

Dependencies: the standard library and ``hiredis``; Linux only (as run.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as cm
from _common import BlockingClient, Server, ServerSpec, encode

BODY = cm.make_body(64)


class Variant:
    """A load: set-up commands, the ADDJOB of job ``i`` (given the set-up's context),
    what runs between the two phases, and how jobs are taken."""

    def __init__(
        self,
        add: Callable[[int, dict[str, bytes]], tuple[bytes | str | int, ...]] = lambda i, c: (),
        setup: tuple[tuple[str, ...], ...] = (),
        parent: bool = False,
        release: bool = False,
        take: tuple[str, ...] = (),
        per_job: tuple[str, ...] = (),
        result: bool = False,
    ) -> None:
        self.add = add
        self.setup = setup
        self.parent = parent  # make a job in another queue first: ctx["parent"]
        self.release = release  # acknowledge that job between the two phases
        self.take = take  # GETJOB options
        self.per_job = per_job  # a command (with the job ID) between GETJOB and ACKJOB
        self.result = result  # each job acknowledged with a result

    def request(self, i: int, ctx: dict[str, bytes]) -> bytes:
        return encode("ADDJOB", "q", BODY, "0", *self.add(i, ctx))


OVERFLOW = ("QPOLICY", "SET", "p", "q", "maxlen", "{half}", "overflow", "drop-oldest")
VARIANTS: dict[str, Variant] = {
    "plain": Variant(),
    "policies-elsewhere": Variant(
        setup=tuple(("QPOLICY", "SET", f"p{n}", f"other{n}*", "retry", "5") for n in range(20))
    ),
    "policy": Variant(
        setup=(("QPOLICY", "SET", "p", "q", "retry", "30", "ttl", "3600", "priority", "2"),)
    ),
    "priority": Variant(lambda i, c: ("PRIORITY", 5)),
    "priority-mixed": Variant(lambda i, c: ("PRIORITY", i % 10)),
    "dedup": Variant(lambda i, c: ("DEDUP", b"key-%d" % i)),
    "dedup-hit": Variant(lambda i, c: ("DEDUP", "same")),
    "after-done": Variant(lambda i, c: ("AFTER", c["done"])),
    "after-live": Variant(lambda i, c: ("AFTER", c["parent"]), parent=True, release=True),
    "withclaim": Variant(take=("WITHCLAIM",)),
    "progress": Variant(per_job=("WORKING", "{id}", "x" * 32)),
    "backoff": Variant(lambda i, c: ("BACKOFF", "exponential", 1, 60)),
    "nack": Variant(per_job=("NACK", "{id}")),
    "nack-delay": Variant(per_job=("NACK", "{id}", "DELAY", "3600")),
    "result": Variant(result=True),
    "cancel": Variant(per_job=("CANCEL", "{id}")),
    "overflow": Variant(setup=(OVERFLOW,)),
}
RESULT = b"r" * 16


def pipelined(client: BlockingClient, requests: Iterator[bytes], batch: int) -> list:
    """Send the requests ``batch`` at a time, two batches in flight; the replies."""
    replies: list = []
    inflight: list[int] = []
    done = False
    while inflight or not done:
        while not done and len(inflight) < 2:
            chunk = [r for _, r in zip(range(batch), requests, strict=False)]
            if not chunk:
                done = True
                break
            client.sock.sendall(b"".join(chunk))
            inflight.append(len(chunk))
        if inflight:
            replies.extend(client.read_reply() for _ in range(inflight.pop(0)))
    return replies


def check_added(name: str, replies: list) -> None:
    """Raise if any ADDJOB of the variant ``name`` was answered with an error."""
    errors = [r for r in replies if not isinstance(r, bytes)]
    if errors:
        raise RuntimeError(f"{name}: {len(errors)} errors, first {errors[0]}")


Measure = Callable[[ServerSpec, str, int, int], dict[str, float]]


def best_runs(
    measure: Measure, spec: ServerSpec, variants: list[str], jobs: int, batch: int, repeat: int
) -> dict[str, dict[str, float]]:
    """Each variant's run with the least server CPU per ADDJOB, best of ``repeat``; the
    variants interleaved, so that drifts of the machine hit all alike."""
    best: dict[str, dict[str, float]] = {}
    for _ in range(repeat):
        for variant in variants:
            run = measure(spec, variant, jobs, batch)
            old = best.get(variant)
            if old is None or run["add_cpu_us"] < old["add_cpu_us"]:
                best[variant] = run
    return best


def variants_parser(doc: str, jobs: int) -> argparse.ArgumentParser:
    """The options of a comparison of variants (this script's and bench/acl.py's), the
    first line of ``doc`` as its description: ``--jobs`` (default ``jobs``), ``--repeat``,
    ``--batch``, the builds (``--pure``), ``--variants`` and ``--json``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=jobs)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=200)
    cm.add_build_options(parser)
    parser.add_argument("--variants", help="comma-separated variants (default: all)")
    return parser


def compare(
    measure: Measure,
    specs: list[ServerSpec],
    names: Iterable[str],
    reference: str,
    args: argparse.Namespace,
) -> dict[str, dict[str, dict[str, float]]]:
    """Each build's :func:`best_runs` of the variants ``--variants`` names (all ``names``
    by default; ``reference`` first when it does not name it), printed as a table with each
    variant's CPU per job relative to the ``reference`` variant's; the runs by build name."""
    variants = args.variants.split(",") if args.variants else list(names)
    if reference not in variants:
        variants.insert(0, reference)  # the reference of the ratios
    ratio = f"x {reference}"
    width = len(ratio) + 2
    results: dict[str, dict[str, dict[str, float]]] = {}
    for spec in specs:
        best = best_runs(measure, spec, variants, args.jobs, args.batch, args.repeat)
        results[spec.name] = best
        base = best[reference]
        print(f"\n{spec.name}: {args.jobs} jobs, pipelined {args.batch} deep, best of "
              f"{args.repeat}")  # fmt: skip
        print(f"{'variant':<22}{'ADDJOB/s':>11}{'µs CPU':>9}{ratio:>{width}}"
              f"{'GET+ACK/s':>11}{'µs CPU':>9}{ratio:>{width}}")  # fmt: skip
        for variant, r in best.items():
            # (a run too short for the CPU clock's 10 ms tick reads 0 µs: no ratio)
            add_ratio = r["add_cpu_us"] / base["add_cpu_us"] if base["add_cpu_us"] else 0.0
            take_ratio = r["take_cpu_us"] / base["take_cpu_us"] if base["take_cpu_us"] else 0.0
            add = f"{r['add_ops']:>11,.0f}{r['add_cpu_us']:>9.2f}{add_ratio:>{width}.2f}"
            take = f"{r['take_ops']:>11,.0f}{r['take_cpu_us']:>9.2f}{take_ratio:>{width}.2f}"
            print(f"{variant:<22}{add}{take}")
    return results


def measure(spec: ServerSpec, name: str, jobs: int, batch: int) -> dict[str, float]:
    variant = VARIANTS[name]
    with Server(spec) as server, server.client() as client:
        for command in variant.setup:
            client.call(*[str(jobs // 2) if arg == "{half}" else arg for arg in command])
        done = client.call("ADDJOB", "other", "x", "0")
        client.call("ACKJOB", done)
        ctx = {"done": done, "parent": client.call("ADDJOB", "other", "x", "0")}
        cpu0, t0 = cm.proc_cpu_seconds(server.pid), time.perf_counter()
        replies = pipelined(client, (variant.request(i, ctx) for i in range(jobs)), batch)
        add_wall, add_cpu = time.perf_counter() - t0, cm.proc_cpu_seconds(server.pid) - cpu0
        check_added(name, replies)
        cpu0, t0 = cm.proc_cpu_seconds(server.pid), time.perf_counter()
        if variant.release:
            client.call("ACKJOB", ctx["parent"])
        taken = 0
        while True:
            got = client.call("GETJOB", "NOHANG", *variant.take, "COUNT", 100, "FROM", "q")
            if not got:
                break
            ids = [job[1] for job in got]
            if variant.per_job:
                pipelined(client, (_per_job(variant.per_job, jid) for jid in ids), len(ids))
            if variant.result:
                client.call("ACKJOB", *[arg for jid in ids for arg in (jid, "RESULT", RESULT)])
            else:
                client.call("ACKJOB", *ids)
            taken += len(got)
        take_wall, take_cpu = time.perf_counter() - t0, cm.proc_cpu_seconds(server.pid) - cpu0
    return {
        "add_ops": jobs / add_wall,
        "add_cpu_us": add_cpu / jobs * 1e6,
        "take_ops": taken / take_wall if taken else 0.0,
        "take_cpu_us": take_cpu / taken * 1e6 if taken else 0.0,
        "taken": taken,
    }


def _per_job(command: tuple[str, ...], job_id: bytes) -> bytes:
    return encode(*[job_id if arg == "{id}" else arg for arg in command])


def main() -> int:
    args = variants_parser(__doc__, jobs=200_000).parse_args()
    header, meta = cm.run_description("disquette queue extensions", sys.executable)
    print("\n".join(header))
    specs = cm.disquette_builds(args.pure)
    cm.save_results(args.json, meta, compare(measure, specs, VARIANTS, "plain", args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
