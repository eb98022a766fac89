#!/usr/bin/env python3
"""A chord from send to callback: disquette's task API beside Celery's chord on Redis.

Usage::

    python bench/chord.py [--sizes 1000 10000 100000] [--rounds 3] [--threads 8]

One disquette node (the compiled build when built) and Debian's ``redis-server``
(``apt-get install redis-server``; skipped, and said so, when missing) on loopback.
Each system gets one worker, started as its users start it, with the same number of
threads (``disquette worker _chord_tasks:app --threads 8``; ``celery -A _chord_celery
worker -P threads -c 8``, Redis as broker and result backend), warmed up with a chord
of ten. Then, for each size and round, each system in turn (so a busy machine weighs
on both alike), a producer process sends a chord of N no-op members (each returns
its index) and a callback that sums their results and writes down when it ran:

* **send**: seconds to send the chord (members and callback);
* **to callback**: seconds from the first send to the callback's run;
* **callbacks**: how many times the callback ran (one, or the run is wrong) and
  whether its sum was right.

The table gives the medians of ``--rounds``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import _common as cm

BENCH = Path(__file__).resolve().parent
WARMUP = 10  # members of the chord each worker runs before the timed ones
TIMEOUT = 1800.0  # seconds a chord may take to call back


@dataclass
class System:
    name: str
    worker: list[str]  # argv
    env: dict[str, str]
    directory: Path
    process: subprocess.Popen[bytes] | None = None


def produce_here(system: str, n: int, tag: str) -> None:
    """The producer process: import the app, send the chord, print ``{start, seconds}``."""
    if system == "disquette":
        import _chord_tasks as tasks
        from disquette.tasks.workflow import chord

        start = time.time()
        chord((tasks.member.s(i) for i in range(n)), tasks.total.s(tag)).send()
    else:
        from celery import chord as celery_chord

        import _chord_celery as capp

        start = time.time()
        celery_chord(capp.member.s(i) for i in range(n))(capp.total.s(tag))
    print(json.dumps({"start": start, "seconds": time.time() - start}))


def produce(system: System, n: int, tag: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(Path(__file__)), "--produce", system.name, str(n), tag],
        env=system.env, capture_output=True, text=True, check=True, timeout=TIMEOUT,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def callbacks(system: System, tag: str) -> list[tuple[float, int]]:
    """The callback's runs for ``tag``: (when, the sum it computed)."""
    path = system.directory / "callbacks"
    runs = []
    if path.exists():
        for line in path.read_text().splitlines():
            t, when, total = line.split()
            if t == tag:
                runs.append((float(when), int(total)))
    return runs


def run_chord(system: System, n: int, tag: str) -> dict:
    sent = produce(system, n, tag)
    deadline = time.monotonic() + TIMEOUT
    while not (runs := callbacks(system, tag)):
        if system.process is not None and system.process.poll() is not None:
            log = (system.directory / "worker.log").read_text()[-3000:]
            raise RuntimeError(f"{system.name}'s worker exited:\n{log}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{system.name}: no callback for a chord of {n} in {TIMEOUT} s")
        time.sleep(0.01)
    time.sleep(1.0)  # a second callback run, if any, would show by now
    runs = callbacks(system, tag)
    return {
        "send": sent["seconds"],
        "to_callback": runs[0][0] - sent["start"],
        "callbacks": len(runs),
        "right": all(total == n * (n - 1) // 2 for _, total in runs),
    }


@contextlib.contextmanager
def worker(system: System):
    log = (system.directory / "worker.log").open("wb")
    proc = system.process = subprocess.Popen(
        system.worker, cwd=BENCH, env=system.env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        run_chord(system, WARMUP, "warmup")
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def system(name: str, broker: str, worker_argv: list[str]) -> System:
    directory = Path(tempfile.mkdtemp(prefix=f"bench-chord-{name}-"))
    queue = f"bench-chord-{os.getpid()}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(BENCH), str(cm.REPO / "src")]),
        "BENCH_DIR": str(directory),
        "BENCH_BROKER": broker,
        "BENCH_QUEUE": queue,
        "DISQUETTE_SEEDS": broker.removeprefix("disque://"),
    }
    return System(name, worker_argv, env, directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--celery-up-to", type=int, metavar="N",
        help="Celery runs the sizes up to N only (its 100,000 takes about an hour)",
    )  # fmt: skip
    parser.add_argument("--produce", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    cm.interrupt_on_sigterm()
    if args.produce:
        produce_here(args.produce[0], int(args.produce[1]), args.produce[2])
        return
    lines, _ = cm.run_description("Chord: disquette beside Celery on Redis", sys.executable)
    print("\n".join(lines))
    threads = str(args.threads)
    with contextlib.ExitStack() as stack:
        disq = stack.enter_context(cm.Server(cm.disquette_spec(sys.executable)))
        argv = [str(Path(sys.executable).parent / "disquette"), "worker", "_chord_tasks:app",
                "--threads", threads]  # fmt: skip
        systems = [system("disquette", f"disque://127.0.0.1:{disq.port}", argv)]
        redis_path = cm.find_redis(None)
        if redis_path:
            red = stack.enter_context(cm.Server(cm.redis_spec(redis_path)))
            systems.append(system(
                f"celery-redis-{red.version()}", f"redis://127.0.0.1:{red.port}/0",
                [sys.executable, "-m", "celery", "-A", "_chord_celery", "worker",
                 "--without-mingle", "--without-gossip", "--without-heartbeat", "-l", "warning",
                 "-P", "threads", "-c", threads],
            ))  # fmt: skip
        else:
            print("redis-server not found: Celery skipped (apt-get install redis-server)")
        for s in systems:
            stack.callback(shutil.rmtree, s.directory, ignore_errors=True)
            stack.enter_context(worker(s))
        results: dict[tuple[str, int], list[dict]] = {}
        for round_ in range(args.rounds):
            for n in args.sizes:
                for s in systems:
                    celery_done = args.celery_up_to is not None and n > args.celery_up_to
                    if s.name != "disquette" and celery_done:
                        continue
                    r = run_chord(s, n, f"r{round_}-n{n}")
                    results.setdefault((s.name, n), []).append(r)
                    print(f"  round {round_ + 1} {s.name} {n:,}: send {r['send']:.2f} s, "
                          f"callback after {r['to_callback']:.2f} s, "
                          f"{r['callbacks']} callback(s), sum {'right' if r['right'] else 'WRONG'}",
                          flush=True)  # fmt: skip
    print(f"\nA chord of N no-op members and a callback, {args.threads} worker threads; "
          f"medians of {args.rounds} rounds\n")  # fmt: skip
    print("| system | N | send (s) | send to callback (s) | callbacks per chord | sums |")
    print("|---|---:|---:|---:|---:|---|")
    for (name, n), rs in results.items():
        counts = "/".join(map(str, sorted({r["callbacks"] for r in rs})))
        sums = "right" if all(r["right"] for r in rs) else "WRONG"
        send = statistics.median(r["send"] for r in rs)
        to_callback = statistics.median(r["to_callback"] for r in rs)
        print(f"| {name} | {n:,} | {send:.2f} | {to_callback:.2f} | {counts} | {sums} |")


if __name__ == "__main__":
    main()
