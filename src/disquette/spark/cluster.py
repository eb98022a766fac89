"""What the readers ask of the cluster: take, count, acknowledge, re-read, peek.

Every function here takes a :class:`disquette.Client` (the project's client
library, which does the handshake, pooling and job-ID routing) and works node
by node through ``client.on_node``: the source fetches from every node given
in ``nodes`` (jobs are queued on the node that received them), and a job is
acknowledged, kept alive or re-read on the node that delivered it, which knows
it; when that node cannot be reached, the client's routing by job ID (the
node that created the job) is the fallback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from disquette.client import Client, DisqueError
from disquette.client.models import JobInfo
from disquette.spark.jobs import JobColumns
from disquette.spark.options import ConnectOptions

log = logging.getLogger("disquette.spark")

#: Jobs asked for by one GETJOB, and IDs sent in one ACKJOB.
GETJOB_COUNT = 2000
ACK_CHUNK = 2000


def connect(options: ConnectOptions) -> Client:
    return Client(
        list(options.nodes),
        password=options.password,
        client_name="disquette-spark",
        ssl=options.ssl_context(),
        username=options.user,
    )


def take(
    client: Client, nodes: Sequence[str], queues: Sequence[str], want: int, fields: tuple[str, ...]
) -> JobColumns:
    """GETJOB NOHANG from each node in turn until ``want`` jobs or every node is empty
    (the job ``fields`` asked for read with SHOW)."""
    jobs = JobColumns(fields)
    live = list(nodes)
    failures: list[str] = []
    while live and len(jobs) < want:
        for node in list(live):
            count = min(want - len(jobs), GETJOB_COUNT)
            if count <= 0:
                break
            try:
                reply = client.on_node(node).execute(
                    "GETJOB", "NOHANG", "COUNT", count, "WITHCOUNTERS", "FROM", *queues
                )
            except (OSError, DisqueError) as exc:
                log.warning("disque source: GETJOB on %s failed: %s", node, exc)
                failures.append(f"{node}: {exc}")
                live.remove(node)
                continue
            added = jobs.add_getjob_reply(node, reply)
            if fields and added:
                jobs.add_fields(describe(client.on_node(node), jobs.ids[-added:]))
            if added < count:
                live.remove(node)
    if len(failures) == len(nodes):
        raise ConnectionError("no node could be read: " + "; ".join(failures))
    return jobs


def queued(client: Client, nodes: Sequence[str], queues: Sequence[str]) -> int:
    """The jobs queued in ``queues`` over all ``nodes`` (QLEN is per node)."""
    return sum(client.on_node(node).qlen(q) for node in nodes for q in queues)


def queued_by_node(client: Client, nodes: Sequence[str], queues: Sequence[str]) -> dict[str, int]:
    """The jobs queued in ``queues`` on each node that answers (a planned batch's input)."""
    counts: dict[str, int] = {}
    failures: list[str] = []
    for node in nodes:
        try:
            counts[node] = sum(client.on_node(node).qlen(q) for q in queues)
        except (OSError, DisqueError) as exc:
            log.warning("disque source: QLEN on %s failed: %s", node, exc)
            failures.append(f"{node}: {exc}")
    if len(failures) == len(nodes):
        raise ConnectionError("no node could be read: " + "; ".join(failures))
    return counts


def knows_tags(client: Client, nodes: Sequence[str]) -> bool:
    """Whether the cluster's GETJOB knows TAG (disquette's ``INFO extensions``
    lists ``job_tags``; Disque's section is empty): asked of the first node that answers."""
    for node in nodes:
        try:
            return "job_tags" in client.on_node(node).info("extensions")
        except (OSError, DisqueError) as exc:
            log.warning("disque source: INFO on %s failed: %s", node, exc)
    raise ConnectionError("no node could be reached: " + ", ".join(nodes))


def on_tags(client: Client, command: str, tags: dict[str, list[str]]) -> int:
    """``<command> TAG t`` for every tag on its node (ACKJOB, WORKING); the smallest
    non-zero reply (WORKING: a retry time), 0 if none. A node that cannot be reached
    is passed over: its tagged jobs come back after their retry time."""
    smallest = 0
    for node, names in tags.items():
        view = client.on_node(node)
        try:
            for name in names:
                answer = view.execute(command, "TAG", name)
                if answer and (not smallest or answer < smallest):
                    smallest = answer
        except (OSError, DisqueError) as exc:
            log.warning("disque source: %s TAG on %s failed: %s", command, node, exc)
    return smallest


def acknowledge(client: Client, jobs: dict[str, list[str]]) -> None:
    """ACKJOB every job, on the node that delivered it (else where the client routes it)."""
    for node, ids in jobs.items():
        for i in range(0, len(ids), ACK_CHUNK):
            chunk = ids[i : i + ACK_CHUNK]
            try:
                client.on_node(node).ack(*chunk)
            except (OSError, DisqueError) as exc:
                log.warning("disque source: ACKJOB on %s failed (%s); routing by job ID", node, exc)
                client.ack(*chunk)


def keep_alive(client: Client, jobs: dict[str, list[str]]) -> None:
    """WORKING for every job, pipelined per node; a job already gone is no error."""
    for node, ids in jobs.items():
        try:
            pipe = client.on_node(node).pipeline()
            for job_id in ids:
                pipe.working(job_id)
            pipe.execute(raise_on_error=False)
        except (OSError, DisqueError) as exc:
            log.warning("disque source: WORKING on %s failed: %s", node, exc)


def describe(view: Client, ids: Sequence[str]) -> list[JobInfo | None]:
    """SHOW each job on the node ``view`` talks to, pipelined (None: not known there)."""
    pipe = view.pipeline()
    for job_id in ids:
        pipe.show(job_id)
    return [i if isinstance(i, JobInfo) else None for i in pipe.execute(raise_on_error=False)]


def show_all(client: Client, node: str, ids: Sequence[str]) -> Iterator[JobInfo]:
    """SHOW each job on ``node`` (pipelined), then by routing for those it does not know.

    Acknowledged jobs are left out: they were processed already.
    """
    try:
        pipe = client.on_node(node).pipeline()
        for job_id in ids:
            pipe.show(job_id)
        infos = pipe.execute(raise_on_error=False)
    except (OSError, DisqueError) as exc:
        log.warning("disque source: SHOW on %s failed (%s); routing by job ID", node, exc)
        infos = [None] * len(ids)
    for job_id, info in zip(ids, infos, strict=True):
        if not isinstance(info, JobInfo):
            info = client.show(job_id)
        if info is not None and info.state != "acked" and info.body is not None:
            yield info


def reread(
    options: ConnectOptions, jobs: dict[str, list[str]], fields: tuple[str, ...]
) -> JobColumns:
    """The jobs of a micro-batch planned again after a driver crash, read by ID."""
    columns = JobColumns(fields)
    with connect(options) as client:
        for node, ids in jobs.items():
            columns.add_infos(node, show_all(client, node, ids))
    return columns


def peek(
    options: ConnectOptions, node: str, queues: Sequence[str], fields: tuple[str, ...]
) -> JobColumns:
    """The jobs queued on ``node`` in ``queues``, left where they are (JSCAN snapshot)."""
    columns = JobColumns(fields)
    with connect(options) as client:
        view = client.on_node(node)
        for queue in queues:
            columns.add_infos(node, view.jscan(queue=queue, states=("queued",), reply="all"))
    return columns
