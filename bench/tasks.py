#!/usr/bin/env python3
"""Tasks and workers side by side: enqueue rates and processed jobs per second.

Usage::

    python bench/tasks.py [--jobs 100000] [--rounds 3] [--processes 2] [--threads 8]
                          [--baseline REV] [--bullmq DIR] [--only SCENARIO ...]

One disquette server (``python -m disquette.server``; compiled if the tree was
built), then, each scenario ``--rounds`` times (the median is printed):

* enqueue one by one: ``client.add_job`` and ``task.send`` (``--jobs``/10 jobs);
* enqueue in bulk: ``client.add_jobs`` and ``task.send_many`` (window 256);
* processed per second, ``--jobs`` no-op jobs of 20 bytes preloaded, consumed by
  ``--processes`` processes: the plain ``Worker`` with a sync handler
  (``--threads`` threads each), with an async handler (``--threads`` tasks), and
  the task worker ``disquette worker _tasks_app:app --processes N`` with its
  defaults otherwise. The clock runs from the workers' start to the last ACK.
* ``--baseline REV`` (a git revision, e.g. ``main``): the plain ``Worker`` (sync and
  async handlers) of that revision too, its ``src`` extracted with ``git archive``
  to a temporary directory and run by the same interpreter against the same server
  build, so a change to the worker is compared with what it replaces in one run.
* ``--bullmq DIR``: the same with BullMQ beside it, on a redis-server started here
  (on PATH), ``DIR`` being a directory where ``npm install bullmq`` was run; this
  script installs nothing::

      apt-get install -y redis-server
      mkdir /tmp/bullmq && cd /tmp/bullmq && npm init -y && npm install bullmq ioredis

  (ioredis, BullMQ's Redis client, is an optional dependency of BullMQ 6: name it.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import _common as cm

sys.path.insert(0, str(cm.REPO / "src"))

from disquette import Client

BODY = b"x" * 20
POLL = 0.01


SCENARIOS = ("enqueue", "sync", "async", "tasks", "bullmq")


def drain(client: Client, queue: str, jobs: int, start: Callable[[], list]) -> float:
    """Preload ``jobs``, start the workers, return jobs/s once the queue's jobs are gone."""
    client.add_jobs(queue, (BODY for _ in range(jobs)), window=256)
    t0 = time.perf_counter()
    procs = start()
    try:
        while client.info()["registered_jobs"] > 0:
            time.sleep(POLL)
        return jobs / (time.perf_counter() - t0)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait()


def bench_workers(seeds: str, client: Client, args, kind: str, src: Path) -> float:
    """``--processes`` processes of bench/_tasks_worker.py running the ``Worker`` of ``src``."""
    env = dict(os.environ, PYTHONPATH=str(src))
    argv = [sys.executable, str(cm.REPO / "bench" / "_tasks_worker.py")]
    argv += [seeds, "bench-w", str(args.threads), kind]

    def start() -> list:
        return [subprocess.Popen(argv, env=env) for _ in range(args.processes)]

    return drain(client, "bench-w", args.jobs, start)


@contextlib.contextmanager
def baseline_sources(rev: str) -> Iterator[Path]:
    """The ``src`` directory of git revision ``rev``, extracted to a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="disquette-baseline-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(cm.REPO), "archive", rev, "src"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp) / "src"


def bench_task_worker(seeds: str, client: Client, args) -> float:
    from _tasks_app import noop as task

    task.send_many((i,) for i in range(args.jobs))  # the task's bodies, not raw bytes
    env = dict(
        os.environ, DISQUETTE_SEEDS=seeds, PYTHONPATH=f"{cm.REPO / 'src'}:{cm.REPO / 'bench'}"
    )
    argv = [sys.executable, "-m", "disquette.cli.main", "worker", "_tasks_app:app"]
    argv += ["--processes", str(args.processes), "--log-level", "warning"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cm.REPO / "bench")
    try:
        while client.info()["registered_jobs"] > 0:
            time.sleep(POLL)
        return args.jobs / (time.perf_counter() - t0)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()


def bench_enqueue(client: Client, args) -> dict[str, float]:
    from _tasks_app import noop as task

    n = args.jobs // 10
    out = {}
    t0 = time.perf_counter()
    for _ in range(n):
        client.add_job("bench-e", BODY)
    out["add_job"] = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for i in range(n):
        task.send(i)
    out["task.send"] = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    client.add_jobs("bench-e", (BODY for _ in range(args.jobs)), window=256)
    out["add_jobs"] = args.jobs / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    task.send_many((i,) for i in range(args.jobs))
    out["task.send_many"] = args.jobs / (time.perf_counter() - t0)
    return out


BULLMQ_JS = r"""
const { Queue, Worker } = require('bullmq');
const { fork } = require('child_process');
const [,, mode, port, jobs, conc] = process.argv;
const connection = { host: '127.0.0.1', port: +port };
async function main() {
  if (mode === 'work') {
    const w = new Worker('bench', async () => {}, { connection, concurrency: +conc });
    process.on('SIGTERM', async () => { await w.close(); process.exit(0); });
    return;
  }
  const q = new Queue('bench', { connection });
  const n = +jobs, out = {};
  let t = Date.now();
  for (let i = 0; i < n / 10; i++) await q.add('noop', { n: i });
  out.one = (n / 10) / ((Date.now() - t) / 1000);
  await q.obliterate({ force: true });
  t = Date.now();
  for (let i = 0; i < n; i += 1000)
    await q.addBulk(Array.from({ length: 1000 }, (_, k) => ({ name: 'noop', data: { n: i + k } })));
  out.bulk = n / ((Date.now() - t) / 1000);
  t = Date.now();
  const argv = ['work', port, jobs, conc];
  const kids = Array.from({ length: +process.env.PROCS }, () => fork(__filename, argv));
  while (true) {
    const c = await q.getJobCounts('wait', 'active');
    if (c.wait + c.active === 0) break;
    await new Promise(r => setTimeout(r, 10));
  }
  out.processed = n / ((Date.now() - t) / 1000);
  kids.forEach(k => k.kill('SIGTERM'));
  await q.obliterate({ force: true });
  console.log(JSON.stringify(out));
  process.exit(0);
}
main();
"""


def bench_bullmq(args) -> dict[str, float]:
    redis = cm.Server(cm.redis_spec("redis-server"))
    redis.start()
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".js", dir=args.bullmq, delete=False) as f:
            f.write(BULLMQ_JS)
        env = dict(os.environ, PROCS=str(args.processes))
        argv = ["node", f.name, "bench", str(redis.port), str(args.jobs), str(args.threads)]
        out = subprocess.run(argv, env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"bench: the BullMQ run failed (see the module docstring):\n{out.stderr}")
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        os.unlink(f.name)
        redis.stop()


@contextlib.contextmanager
def fresh_server():
    """A new disquette server for one measurement, the task app's client pointed at it."""
    from _tasks_app import app

    server = cm.Server(cm.disquette_spec(sys.executable))
    server.start()
    seeds = f"127.0.0.1:{server.port}"
    app.seeds = os.environ["DISQUETTE_SEEDS"] = seeds
    app.forget_clients()
    try:
        with Client(seeds) as client:
            yield seeds, client
    finally:
        app.forget_clients()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--baseline", metavar="REV", help="also run the Worker of git revision REV")
    p.add_argument("--bullmq", metavar="DIR", help="a directory with bullmq installed")
    p.add_argument("--only", nargs="+", choices=SCENARIOS, default=SCENARIOS, metavar="SCENARIO")
    args = p.parse_args(argv)
    cm.require_hiredis()
    print(cm.command_line())
    rows: dict[str, dict[str, list[float]]] = {}

    def note(system: str, column: str, value: float) -> None:
        print(f"  {system}, {column}: {value:,.0f}/s", file=sys.stderr, flush=True)
        rows.setdefault(system, {}).setdefault(column, []).append(value)

    tasks = "tasks (disquette worker module:app)"
    workers = [(f"Worker, {kind} handler", kind, cm.REPO / "src") for kind in ("sync", "async")]
    with contextlib.ExitStack() as stack:
        if args.baseline:
            old = stack.enter_context(baseline_sources(args.baseline))
            for kind in ("sync", "async"):
                workers.append((f"{args.baseline}'s Worker, {kind} handler", kind, old))
        for _ in range(args.rounds):
            if "enqueue" in args.only:
                with fresh_server() as (seeds, client):
                    e = bench_enqueue(client, args)
                note("Worker, sync handler", "one", e["add_job"])
                note("Worker, sync handler", "bulk", e["add_jobs"])
                note(tasks, "one", e["task.send"])
                note(tasks, "bulk", e["task.send_many"])
            for system, kind, src in workers:
                if kind in args.only:
                    with fresh_server() as (seeds, client):
                        note(system, "processed", bench_workers(seeds, client, args, kind, src))
            if "tasks" in args.only:
                with fresh_server() as (seeds, client):
                    note(tasks, "processed", bench_task_worker(seeds, client, args))
            if args.bullmq and "bullmq" in args.only:
                b = bench_bullmq(args)
                for column in ("one", "bulk", "processed"):
                    note("BullMQ (Node, redis-server)", column, b[column])
    print(
        f"\n{args.jobs:,} no-op jobs of {len(BODY)} bytes, {args.processes} worker processes of "
        f"{args.threads} threads or tasks, median of {args.rounds} rounds\n"
    )
    print("| system | enqueue one by one | enqueue in bulk | processed per second |")
    print("|---|---:|---:|---:|")
    for system, columns in rows.items():
        cells = [
            f"{statistics.median(columns[c]):,.0f}/s" if c in columns else "—"
            for c in ("one", "bulk", "processed")
        ]
        print(f"| {system} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
