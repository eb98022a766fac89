"""``disquette worker HANDLER QUEUE...``: run a :class:`disquette.Worker` from the shell.

``HANDLER`` is ``module:function`` (the current directory is importable, as
with other Python runners); an ``async def`` function runs on asyncio tasks,
a plain one on threads. With ``--dead-letters`` the queues are dead-letter
queues and the handler gets a :class:`disquette.DeadLetter` for each job.
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
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from disquette.cli.tlsargs import add_tls_arguments, ssl_context
from disquette.client.errors import DisqueError
from disquette.worker import Worker


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("handler", help="the job handler, as module:function")
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queues to consume")
    p.add_argument(
        "-s",
        "--seeds",
        default=os.environ.get("DISQUETTE_SEEDS", "127.0.0.1:7711"),
        help="comma-separated host:port of cluster nodes (default $DISQUETTE_SEEDS "
        "or 127.0.0.1:7711)",
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


def load_handler(spec: str) -> Callable[..., Any]:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"handler must be module:function, not {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    return target


def make_worker(handler: Callable[..., Any], args: argparse.Namespace) -> Worker:
    """The worker the command line asks for (``ValueError`` for settings that clash)."""
    return Worker(
        handler,
        args.queues,
        seeds=args.seeds,
        password=args.password,
        ssl=ssl_context(args),
        consumer_affinity=args.consumer_affinity,
        dedup_retries=args.dedup_retries,
        concurrency=args.concurrency,
        dead_letter_queue=args.dead_letter_queue,
        max_nacks=args.max_nacks,
        max_additional_deliveries=args.max_additional_deliveries,
        grace_period=args.grace,
        poll_timeout=args.poll_timeout,
        retry=args.retry,
        keepalive=not args.no_keepalive,
        summary_interval=args.summary_interval,
        dead_letters=args.dead_letters,
        claims=args.claims,
        results=args.results,
        heartbeat=args.heartbeat,
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        handler = load_handler(args.handler)
    except (ImportError, AttributeError, ValueError) as exc:
        sys.stderr.write(f"disquette worker: cannot load {args.handler}: {exc}\n")
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
