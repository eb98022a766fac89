"""A producer and a consumer for the several-hosts tests, run inside a namespace.

``python -m tests.support.netns_load OUT STOP NAME:PORT ...`` adds jobs (REPLICATE 3) to
random nodes and consumes them from random nodes (GETJOB, then ACKJOB), reaching each
node by name (so a node that moved is found at its new address). A job counts as added
once its ADDJOB answered its ID: that is the acknowledgement the client has. When the
file STOP appears, it stops adding and keeps consuming until every added job was
delivered, or 120 s pass; then it writes to OUT, as JSON, how many were added and
delivered, and the IDs added but never delivered (the jobs lost).
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from pathlib import Path

import redis

DRAIN_S = 120


def connect(nodes: list[str]) -> redis.Redis:
    host, port = random.choice(nodes).rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), protocol=2, socket_timeout=5,
                       socket_connect_timeout=2)  # fmt: skip


def produce(nodes: list[str], stop: Path, added: set[bytes]) -> None:
    n = 0
    while not stop.exists():
        n += 1
        try:
            with connect(nodes) as r:
                reply = r.execute_command("ADDJOB", "q", f"job {n}", 5000, "REPLICATE", 3,
                                          "RETRY", 2)  # fmt: skip
            if isinstance(reply, bytes) and reply.startswith(b"D-"):
                added.add(reply)
        except redis.RedisError:
            pass  # (a node stopped, moved or leaving: the job was not acknowledged)
        time.sleep(0.02)


def consume(nodes: list[str], delivered: set[bytes]) -> None:
    try:
        with connect(nodes) as r:
            for _queue, job_id, _body in (
                r.execute_command("GETJOB", "TIMEOUT", 200, "COUNT", 20, "FROM", "q") or []
            ):
                delivered.add(job_id)
                r.execute_command("ACKJOB", job_id)
    except redis.RedisError:
        time.sleep(0.05)


def main(out: str, stop_file: str, *nodes: str) -> None:
    stop = Path(stop_file)
    added: set[bytes] = set()
    delivered: set[bytes] = set()
    producer = threading.Thread(target=produce, args=(list(nodes), stop, added))
    producer.start()
    while not stop.exists():
        consume(list(nodes), delivered)
    producer.join()
    deadline = time.monotonic() + DRAIN_S
    while not added <= delivered and time.monotonic() < deadline:
        consume(list(nodes), delivered)
    missing = sorted(j.decode() for j in added - delivered)
    Path(out).write_text(json.dumps({"added": len(added), "delivered": len(delivered),
                                     "missing": missing}))  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:])
