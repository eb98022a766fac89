#!/usr/bin/env python3
"""Celery and Dramatiq on disquette beside the same frameworks on Redis and RabbitMQ.

(Not ``celery.py``: this directory is on the workers' ``sys.path``, where that name
would hide Celery itself.)

Usage::

    python bench/celery_dramatiq.py [--tasks 10000] [--rounds 3] [--only SCENARIO ...]
                                    [--delayed 100000 --countdown 300] [--delayed-redis]

One server of each kind on loopback (disquette, compiled if built; Debian's
``redis-server``; ``rabbitmq-server`` when installed: ``apt-get install
redis-server rabbitmq-server``; a missing one is skipped and said so), then for
each framework, broker and pool, in one run:

* **enqueue**: ``--tasks`` no-op tasks sent one by one (``noop.delay()``,
  ``noop.send()``) by a producer process; tasks per second;
* **processed**: those tasks, preloaded, consumed by a worker started as users
  start it (``celery -A _celery_app worker -P prefork -c 2`` or ``-P threads -c 8``;
  ``dramatiq _dramatiq_app -p 2 -t 8``), with Celery's defaults otherwise
  (early acks, prefetch multiplier 4); per second, from the first task done to
  the last;
* **end to end**: the worker running idle, a producer sends ``--tasks`` more; per
  second, from the first send to the last task done.

Each round runs every scenario once, in turn (so a busy machine weighs on all of
them alike); the table gives the medians of ``--rounds``. Tasks done are counted
by the worker processes themselves (``_progress.py``: a
byte per task), the same way for every broker. ``--delayed N`` then sends N
tasks with ``countdown=--countdown`` seconds to a Celery worker (threads) on
disquette (and on Redis with ``--delayed-redis``), samples the worker's RSS every
second until all have run, and counts the tasks that ran twice.
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import _common as cm
from _progress import counted

BENCH = Path(__file__).resolve().parent
POOLS = {"prefork": ["-P", "prefork", "-c", "2"], "threads": ["-P", "threads", "-c", "8"]}
DRAMATIQ = ["-p", "2", "-t", "8"]


@dataclass
class Broker:
    name: str
    celery_url: str
    dramatiq_url: str | None


# ----------------------------------------------------------------------------- servers


@contextlib.contextmanager
def rabbitmq() -> Iterator[str | None]:
    """A RabbitMQ node of its own (ports, data and logs in a temporary directory)."""
    server = shutil.which("rabbitmq-server") or "/usr/sbin/rabbitmq-server"
    if not os.path.exists(server):
        yield None
        return
    port = cm.free_port(also_bus=False)
    base = Path(tempfile.mkdtemp(prefix="bench-rabbitmq-"))
    (base / "enabled_plugins").write_text("[].\n")
    node = f"bench{port}@localhost"
    env = {
        **os.environ,
        "RABBITMQ_NODENAME": node,
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(cm.free_port(also_bus=False)),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
        "HOME": str(base),
    }
    (base / "rabbitmq.conf").write_text("loopback_users = none\n")
    for sub in ("mnesia", "log"):
        (base / sub).mkdir()
    epmd_before = subprocess.run(["pgrep", "-x", "epmd"], capture_output=True).returncode == 0
    if os.geteuid() == 0:  # Debian's script runs the node as the rabbitmq user
        subprocess.run(["chown", "-R", "rabbitmq", str(base)], check=False)
    log = (base / "server.log").open("wb")
    proc = subprocess.Popen(
        [server], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"amqp://guest:guest@127.0.0.1:{port}//"
    try:
        from kombu import Connection

        deadline = time.monotonic() + 90
        while True:
            try:
                with Connection(url, connect_timeout=2) as c:
                    c.connect()
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    print(f"rabbitmq-server did not start: {base / 'server.log'}", file=sys.stderr)
                    yield None
                    return
                time.sleep(0.5)
        yield url
    finally:
        subprocess.run(["rabbitmqctl", "-n", node, "stop"], env=env, capture_output=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if not epmd_before:  # Erlang's port mapper, started by the node
            subprocess.run(["epmd", "-kill"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


# ----------------------------------------------------------------------------- processes


def python_env(directory: Path, broker: str, queue: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(BENCH), str(cm.REPO / "src")]),
        "BENCH_DIR": str(directory),
        "BENCH_BROKER": broker,
        "BENCH_QUEUE": queue,
    }


def produce(env: dict[str, str], framework: str, n: int, countdown: int = 0) -> dict:
    """Send ``n`` tasks from a producer process; its start time and rate."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__)), "--produce", framework, str(n), str(countdown)],
        env=env, capture_output=True, text=True, check=True, timeout=3600,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def produce_here(framework: str, n: int, countdown: int) -> None:
    """The producer process: import the app, send, print ``{start, seconds}``."""
    if framework == "celery":
        import _celery_app as app

        start = time.time()
        for i in range(n):
            if countdown:
                app.probe.apply_async((i,), countdown=countdown)
            else:
                app.noop.delay()
        app.app.close()
    else:
        import _dramatiq_app as dapp

        start = time.time()
        for _ in range(n):
            dapp.noop.send()
        dapp.broker.close()
    print(json.dumps({"start": start, "seconds": time.time() - start}))


def start_worker(env: dict[str, str], framework: str, pool: str, log: Path) -> subprocess.Popen:
    if framework == "celery":
        argv = ["celery", "-A", "_celery_app", "worker", "--without-mingle", "--without-gossip",
                "--without-heartbeat", "-l", "warning", *POOLS[pool]]  # fmt: skip
    else:
        argv = ["dramatiq", "_dramatiq_app", *DRAMATIQ]
    return subprocess.Popen(
        [sys.executable, "-m", *argv], cwd=BENCH, env=env, stdout=log.open("wb"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def stop_worker(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_counted(directory: Path, total: int, timeout: float) -> tuple[float, float]:
    """Wait until ``total`` tasks are done; (time of the first task seen, time of the last)."""
    first = None
    deadline = time.monotonic() + timeout
    while True:
        done = counted(directory)
        now = time.time()
        if done and first is None:
            first = now
        if done >= total:
            return first or now, now
        if time.monotonic() > deadline:
            raise TimeoutError(f"{done} of {total} tasks done in {timeout:.0f} s ({directory})")
        time.sleep(0.01)


def tree_rss(pid: int) -> int:
    """RSS of a process and its children (a prefork pool), bytes."""
    total, pids = 0, [pid]
    while pids:
        p = pids.pop()
        with contextlib.suppress(OSError):
            total += cm.proc_rss_bytes(p)
            for task in Path(f"/proc/{p}/task").iterdir():
                pids += [int(c) for c in (task / "children").read_text().split()]
    return total


# ----------------------------------------------------------------------------- scenarios


def throughput(framework: str, broker: Broker, pool: str, n: int) -> dict:
    directory = Path(tempfile.mkdtemp(prefix="bench-celery-"))
    url = broker.celery_url if framework == "celery" else broker.dramatiq_url
    assert url is not None
    queue = f"bench-{framework}-{pool}-{os.getpid()}-{time.monotonic_ns()}"
    env = python_env(directory, url, queue)
    try:
        enqueue = produce(env, framework, n)
        worker = start_worker(env, framework, pool, directory / "worker.log")
        try:
            first, last = wait_counted(directory, n, 600)
            e2e = produce(env, framework, n)
            _, done = wait_counted(directory, 2 * n, 600)
        finally:
            stop_worker(worker)
        return {
            "enqueue": n / enqueue["seconds"],
            "processed": (n - 1) / max(last - first, 1e-9),
            "end_to_end": n / max(done - e2e["start"], 1e-9),
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def delayed(broker: Broker, n: int, countdown: int) -> dict:
    directory = Path(tempfile.mkdtemp(prefix="bench-delayed-"))
    env = python_env(directory, broker.celery_url, f"bench-delayed-{os.getpid()}")
    worker = start_worker(env, "celery", "threads", directory / "worker.log")
    try:
        time.sleep(3)
        before = tree_rss(worker.pid)
        sent = produce(env, "celery", n, countdown)
        due = sent["start"] + countdown
        samples: list[tuple[float, int]] = []
        deadline = due + sent["seconds"] + 600
        while True:
            samples.append((time.time(), tree_rss(worker.pid)))
            ran = sum(len(p.read_text().split()) for p in directory.glob("probe-*"))
            if ran >= n and time.time() > due + sent["seconds"] + 5:
                break
            if time.time() > deadline:
                break
            time.sleep(1)
        tags = [t for p in directory.glob("probe-*") for t in p.read_text().split()]
        waiting = [rss for t, rss in samples if t < due]
        return {
            "rss_before": before,
            "rss_waiting_max": max(waiting) if waiting else before,
            "rss_max": max(rss for _, rss in samples),
            "ran": len(set(tags)),
            "twice": len(tags) - len(set(tags)),
            "send_seconds": sent["seconds"],
        }
    finally:
        stop_worker(worker)
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", nargs="*", help="scenario names (as printed) to run")
    parser.add_argument("--delayed", type=int, default=0, help="delayed tasks to send")
    parser.add_argument("--countdown", type=int, default=120)
    parser.add_argument("--delayed-redis", action="store_true")
    parser.add_argument("--produce", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    cm.interrupt_on_sigterm()
    if args.produce:
        produce_here(args.produce[0], int(args.produce[1]), int(args.produce[2]))
        return
    lines, _ = cm.run_description("Celery and Dramatiq: disquette, Redis, RabbitMQ", sys.executable)
    print("\n".join(lines))
    redis_path = cm.find_redis(None)
    with contextlib.ExitStack() as stack:
        disq = stack.enter_context(cm.Server(cm.disquette_spec(sys.executable)))
        brokers = [Broker("disquette", f"disque://127.0.0.1:{disq.port}",
                          f"disque://127.0.0.1:{disq.port}")]  # fmt: skip
        if redis_path:
            red = stack.enter_context(cm.Server(cm.redis_spec(redis_path)))
            url = f"redis://127.0.0.1:{red.port}/0"
            brokers.append(Broker(f"redis {red.version()}", url, url))
        else:
            print("redis-server not found: skipped (apt-get install redis-server)")
        rabbit = stack.enter_context(rabbitmq())
        if rabbit:
            brokers.append(Broker("rabbitmq", rabbit, None))
        else:
            print("rabbitmq-server not running here: skipped (apt-get install rabbitmq-server)")
        scenarios = []
        for framework in ("celery", "dramatiq"):
            for broker in brokers:
                if framework == "dramatiq" and broker.dramatiq_url is None:
                    continue
                for pool in list(POOLS) if framework == "celery" else ["2x8"]:
                    name = f"{framework}-{broker.name.split()[0]}-{pool}"
                    if not args.only or name in args.only:
                        scenarios.append((name, framework, broker, pool))
        results: dict[str, list[dict]] = {name: [] for name, *_ in scenarios}
        for round_ in range(args.rounds):  # rounds interleave the scenarios: same noise
            for name, framework, broker, pool in scenarios:
                result = throughput(framework, broker, pool, args.tasks)
                results[name].append(result)
                rates = ", ".join(f"{k} {v:,.0f}/s" for k, v in result.items())
                print(f"  round {round_ + 1} {name}: {rates}", flush=True)
        rows = [
            (framework, broker.name, pool,
             {k: statistics.median(r[k] for r in results[name]) for k in results[name][0]})
            for name, framework, broker, pool in scenarios
        ]  # fmt: skip
        print(f"\n{args.tasks:,} no-op tasks, one by one; per second, median of "
              f"{args.rounds} rounds\n")  # fmt: skip
        print("| framework | broker | pool | enqueue | processed | end to end |")
        print("|---|---|---|---:|---:|---:|")
        for framework, broker_name, pool, r in rows:
            print(f"| {framework} | {broker_name} | {pool} | {r['enqueue']:,.0f} | "
                  f"{r['processed']:,.0f} | {r['end_to_end']:,.0f} |")  # fmt: skip
        if args.delayed:
            targets = [brokers[0]] + ([brokers[1]] if args.delayed_redis and redis_path else [])
            print(f"\n{args.delayed:,} tasks with countdown={args.countdown} s, "
                  "a Celery worker (threads, 8)\n")  # fmt: skip
            print("| broker | worker RSS before | max while waiting | max | ran | ran twice |")
            print("|---|---:|---:|---:|---:|---:|")
            for broker in targets:
                d = delayed(broker, args.delayed, args.countdown)
                mb = 1 << 20
                print(f"| {broker.name} | {d['rss_before'] / mb:.0f} MB | "
                      f"{d['rss_waiting_max'] / mb:.0f} MB | {d['rss_max'] / mb:.0f} MB | "
                      f"{d['ran']:,} | {d['twice']:,} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
