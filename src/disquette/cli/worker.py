"""``disquette worker HANDLER QUEUE...``: run a :class:`disquette.Worker` from the shell.

``HANDLER`` is ``module:function`` (the current directory is importable, as
with other Python runners); an ``async def`` function runs on asyncio tasks,
a plain one on threads. ``HANDLER`` may also be ``module:app``, a
:class:`disquette.tasks.App`: its tasks run in ``--processes`` worker processes
(default: one per core) of ``--threads`` threads each (default 8), or as many
asyncio tasks with ``--asyncio``, under a supervisor that restarts a process
that dies (:mod:`disquette.tasks.process`); the queues default to those of the
app's tasks, the seeds (without ``-s`` or ``$DISQUETTE_SEEDS``) to the app's, and
``--metrics-port`` serves Prometheus metrics (process ``i`` on ``port + i``). With
``--dead-letters`` the queues are dead-letter queues and the handler gets a
:class:`disquette.DeadLetter` for each job.
With ``--claims`` (disquette) jobs are fetched with their claim, sent back with
every ACK, NACK and WORKING; with ``--results`` the handler's return value is
sent with the ACK as the job's result; ``--heartbeat`` bounds the time between
keep-alives (how late a cancelled job is noticed).
The process stops gracefully on SIGTERM or SIGINT (a second signal skips the
grace period) and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from disquette.cli.tlsargs import add_tls_arguments, ssl_context
from disquette.client.errors import DisqueError
from disquette.tasks.app import App
from disquette.tasks.process import Supervisor, default_processes
from disquette.worker import Worker

DEFAULT_SEEDS = "127.0.0.1:7711"  # a handler's worker without -s or $DISQUETTE_SEEDS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("handler", help="the job handler, as module:function, or module:app")
    p.add_argument(
        "queues", nargs="*", metavar="QUEUE", help="queues to consume (an app: its tasks' queues)"
    )
    p.add_argument(
        "-s",
        "--seeds",
        default=os.environ.get("DISQUETTE_SEEDS"),
        help="comma-separated host:port of cluster nodes (default $DISQUETTE_SEEDS, "
        "else an app's own seeds, else 127.0.0.1:7711)",
    )
    p.add_argument("-a", "--password", default=os.environ.get("DISQUETTE_PASSWORD"))
    add_tls_arguments(p)
    p.add_argument("-c", "--concurrency", type=int, default=1, help="jobs handled at once")
    p.add_argument("--grace", type=float, default=30.0, help="seconds to finish on shutdown")
    p.add_argument("--poll-timeout", type=float, default=1.0, help="GETJOB timeout, seconds")
    p.add_argument("--dead-letter-queue", help="queue for jobs that fail too often")
    p.add_argument("--max-nacks", type=int, help="NACKs before a job is dead-lettered")
    p.add_argument(
        "--max-additional-deliveries", type=int, help="redeliveries before a job is dead-lettered"
    )
    p.add_argument(
        "--dead-letters",
        action="store_true",
        help="the queues hold dead letters: the handler gets a DeadLetter (origin, reason, body)",
    )
    p.add_argument(
        "--dedup-retries",
        action="store_true",
        help="disquette only: add dead letters with a DEDUP key (the original's ID), "
        "resent if the reply is lost",
    )
    p.add_argument(
        "--claims",
        action="store_true",
        help="disquette only: fetch jobs WITHCLAIM and send each one's claim with its ACK, "
        "NACK and WORKING; a job delivered again since is left to its new holder",
    )
    p.add_argument(
        "--results",
        action="store_true",
        help="disquette only: the handler's return value (bytes or str) is sent with the ACK "
        "as the job's result, for whoever waits for the job",
    )
    p.add_argument(
        "--heartbeat",
        type=float,
        help="seconds between keep-alives at most (default: 80%% of the retry time): how late "
        "a cancelled job is noticed",
    )
    p.add_argument("--retry", type=int, help="the jobs' RETRY, if known (saves a SHOW)")
    p.add_argument("--no-keepalive", action="store_true", help="never send WORKING")
    p.add_argument("--consumer-affinity", action="store_true", help="fetch where jobs come from")
    p.add_argument("--summary-interval", type=float, default=60.0, help="seconds between summaries")
    p.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error"), help="logging"
    )
    p.add_argument(
        "--log-format",
        default="text",
        choices=("text", "json"),
        help="json: one JSON object per line (time, level, logger, message, task, job_id...)",
    )
    tasks = p.add_argument_group("tasks (HANDLER is an App)")
    tasks.add_argument("--processes", type=int, help="worker processes (default: one per core)")
    tasks.add_argument("--threads", type=int, default=8, help="tasks at once per process")
    tasks.add_argument(
        "--asyncio", action="store_true", help="run the tasks on asyncio (--threads of them)"
    )
    tasks.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics (process i on port + i)"
    )


def load_handler(spec: str) -> Callable[..., Any]:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"handler must be module:function, not {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target) and not isinstance(target, App):
        raise ValueError(f"{spec} is neither callable nor a disquette.tasks.App")
    return target


#: The :class:`Worker` options the command line gives as they are, under the same names.
_SAME_NAME_OPTIONS = (
    "seeds",
    "password",
    "consumer_affinity",
    "dedup_retries",
    "concurrency",
    "dead_letter_queue",
    "max_nacks",
    "max_additional_deliveries",
    "poll_timeout",
    "retry",
    "summary_interval",
    "dead_letters",
    "claims",
    "results",
    "heartbeat",
)


def worker_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`Worker` options the command line gives (those an app may override)."""
    options = {name: getattr(args, name) for name in _SAME_NAME_OPTIONS}
    options.update(ssl=ssl_context(args), grace_period=args.grace, keepalive=not args.no_keepalive)
    return options


def make_worker(handler: Callable[..., Any], args: argparse.Namespace) -> Worker:
    """The worker the command line asks for (``ValueError`` for settings that clash)."""
    options = worker_options(args)
    options["seeds"] = options["seeds"] or DEFAULT_SEEDS
    return Worker(handler, args.queues, **options)


def run_app(app: App, args: argparse.Namespace) -> int:
    """Run an app's tasks in supervised processes (see the module docstring)."""
    options = worker_options(args)
    given = (("seeds", None), ("dead_letter_queue", None), ("max_nacks", None), ("results", False))
    for name, default in given:
        if options[name] == default:  # not given: the app's
            del options[name]
    del options["concurrency"]
    processes = args.processes or default_processes()
    try:
        app.worker(args.queues or None, threads=args.threads, **options)  # settings check
        if processes < 1:
            raise ValueError("--processes must be at least 1")
    except ValueError as exc:
        sys.stderr.write(f"disquette worker: {exc}\n")
        return 2
    logging.getLogger("disquette.worker").info(
        "running %d tasks from %s in %d processes of %d %s",
        len(app.tasks),
        ", ".join(args.queues or app.queues),
        processes,
        args.threads,
        "asyncio tasks" if args.asyncio else "threads",
    )
    return Supervisor(lambda index: _run_child(app, args, options, index), processes).run()


def _run_child(app: App, args: argparse.Namespace, options: dict[str, Any], index: int) -> None:
    """A worker process: fresh clients, optional metrics, the worker until a signal."""
    app.forget_clients()
    if args.metrics_port is not None:
        from disquette.tasks.metrics import Metrics

        app.middleware.append(Metrics.serve(args.metrics_port + index))
    worker = app.worker(
        args.queues or None, use_asyncio=args.asyncio, threads=args.threads, **options
    )
    worker.run()
    logging.shutdown()
    os._exit(0)  # handler threads abandoned after the grace period must not hold the exit


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and the extra fields
    the worker adds (task, job_id, queue)."""

    EXTRA = ("task", "job_id", "queue")

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "process": record.process,
            "message": record.getMessage(),
        }
        for name in self.EXTRA:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level: str, form: str) -> None:
    handler = logging.StreamHandler()
    if form == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    try:
        handler = load_handler(args.handler)
    except (ImportError, AttributeError, ValueError) as exc:
        sys.stderr.write(f"disquette worker: cannot load {args.handler}: {exc}\n")
        return 2
    if isinstance(handler, App):
        return run_app(handler, args)
    if not args.queues:
        sys.stderr.write("disquette worker: a handler function needs at least one QUEUE\n")
        return 2
    try:
        worker = make_worker(handler, args)
    except (OSError, ValueError) as exc:  # settings that clash; an unreadable --cert
        sys.stderr.write(f"disquette worker: {exc}\n")
        return 2
    try:
        worker.run()
    except DisqueError as exc:
        sys.stderr.write(f"disquette worker: {exc}\n")
        return 1
    stuck = [t for t in threading.enumerate() if t.is_alive() and not t.daemon]
    if len(stuck) > 1:  # besides this one: handler threads abandoned after the grace period
        logging.getLogger("disquette.worker").warning(
            "%d handler threads still running after the grace period; exiting anyway",
            len(stuck) - 1,
        )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # a normal exit would wait for them
    return 0
