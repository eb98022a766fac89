"""Planned micro-batches: the driver decides how many jobs each partition takes
from which node; the executors take them, under tags, and the driver acknowledges
the tags by name once Spark committed the batch.

This is the stream source's way of reading a disquette cluster (whose GETJOB
knows ``TAG``: core/tags.py), the shape of Spark's Kafka source: the driver
never sees a job. Per micro-batch:

* **Planning** (driver): QLEN of the queues on every node; the batch's jobs
  (the read limit, at most what is queued) shared between the nodes in
  proportion to what each holds, and each node's share cut into partitions:
  ``numPartitions`` over the batch, at least one per node that holds jobs, so
  a node holding many jobs is read by several tasks at once. The counts go into
  the end offset (:class:`~disquette.spark.offsets.BatchOffset`), nothing else.
* **Reading** (executor, :func:`read`): the task connects to its node only and
  asks ``GETJOB NOHANG COUNT c WITHCOUNTERS TAG t FROM queues`` for each chunk
  of at most :data:`CHUNK` jobs of its partition; each chunk's tag is named from
  the query's run ID, the batch, the partition and the chunk
  (:func:`tags_of`), so the same partition run again (a task retry, the batch
  replayed after a driver crash) asks under the same tags and gets the same
  jobs back first. Every chunk is asked even after a short one: a replayed
  chunk may hold jobs whatever the one before returned.
* **Acknowledging** (driver): ``ACKJOB TAG t`` for every chunk of the committed
  batch, on its node; ``WORKING TAG t`` keeps them alive while it runs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from disquette.client import DisqueError
from disquette.spark.cluster import connect, describe
from disquette.spark.jobs import JobColumns, part_size, reply_batch
from disquette.spark.offsets import BatchOffset
from disquette.spark.options import ConnectOptions

log = logging.getLogger("disquette.spark")

#: Jobs asked for by one GETJOB of a partition, each chunk under a tag of its own.
CHUNK = 2000


def tags_of(run: str, seq: int, index: int, count: int) -> list[tuple[str, int]]:
    """The tags of partition ``index`` of batch ``seq``, with the jobs each takes."""
    base = f"spark:{run}:{seq}:{index}"
    return [
        (f"{base}/{k}", min(CHUNK, count - start)) for k, start in enumerate(range(0, count, CHUNK))
    ]


def plan(queued: dict[str, int], want: int, partitions: int) -> dict[str, list[int]]:
    """The jobs each partition takes, by node: ``want`` at most, shared by what is queued."""
    total = sum(queued.values())
    take = min(want, total)
    if take <= 0:
        return {}
    shares = {node: take * count // total for node, count in queued.items()}
    left = take - sum(shares.values())
    for node in sorted(queued, key=lambda n: queued[n] - shares[n], reverse=True)[:left]:
        shares[node] += 1
    parts: dict[str, list[int]] = {}
    for node, share in shares.items():
        if share:
            count = max(1, round(partitions * share / take))
            size = part_size(share, count)
            parts[node] = [min(size, share - i) for i in range(0, share, size)]
    return parts


def tags_by_node(offset: BatchOffset) -> dict[str, list[str]]:
    """Every tag of a planned batch, by the node it is taken on."""
    tags: dict[str, list[str]] = {}
    for partition in partitions_of(offset):
        tags.setdefault(partition.node, []).extend(tag for tag, _ in partition.tags)
    return tags


@dataclass
class TagPartition(InputPartition):
    """A task's share of a planned batch: its node, and its tags with their counts."""

    node: str
    tags: list[tuple[str, int]]


def partitions_of(offset: BatchOffset) -> list[TagPartition]:
    """The partitions of a planned batch, numbered in the offset's order."""
    partitions: list[TagPartition] = []
    for node, counts in offset.parts.items():
        for count in counts:
            tags = tags_of(offset.run, offset.seq, len(partitions), count)
            partitions.append(TagPartition(node, tags))
    return partitions


def read(
    options: ConnectOptions,
    queues: Sequence[str],
    partition: TagPartition,
    body_as_string: bool,
    fields: tuple[str, ...] = (),
) -> Iterator[pa.RecordBatch]:
    """Take a partition's jobs from its node, chunk by chunk (on an executor), as record
    batches; the job ``fields`` asked for are read with SHOW, pipelined, on the same node.

    A node that cannot be reached gives nothing: its jobs stay where they are,
    and what an earlier attempt took there comes back through their retry.
    """
    node = partition.node
    try:
        client = connect(dataclasses.replace(options, nodes=(node,)))
    except (OSError, DisqueError) as exc:
        log.warning("disque source: %s cannot be read (%s)", node, exc)
        return
    with client:
        view = client.on_node(node)
        for tag, count in partition.tags:
            try:
                reply = view.execute(
                    "GETJOB", "NOHANG", "COUNT", count, "WITHCOUNTERS", "TAG", tag, "FROM", *queues
                )
            except ConnectionError as exc:
                log.warning("disque source: %s lost mid-read (%s)", node, exc)
                return
            if not reply:
                continue
            if not fields:
                yield reply_batch(reply, body_as_string)
                continue
            jobs = JobColumns(fields)
            jobs.add_getjob_reply(node, reply)
            jobs.add_fields(describe(view, jobs.ids))
            yield jobs.record_batch(body_as_string)
