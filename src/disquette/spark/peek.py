"""The batch read: ``spark.read.format("disque")`` is a *peek*.

A batch query has no later moment at which Spark says its output was
committed, so a batch read cannot acknowledge what it read without risking
the loss of jobs. It therefore takes nothing: it returns a snapshot of the
jobs queued in ``queues`` on every node (JSCAN ``QUEUE q STATE queued REPLY
all``, one partition per node), and leaves them queued for the consumers.
To consume a queue from Spark, use the stream source (with
``Trigger.AvailableNow`` for a one-off drain).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from disquette.spark import cluster
from disquette.spark.options import SourceOptions


class NodePartition(InputPartition):
    """The queued jobs of one node."""

    def __init__(self, node: str) -> None:
        super().__init__(node)
        self.node = node


class DisquePeekReader(DataSourceReader):
    """A snapshot of the queued jobs; acknowledges and dequeues nothing."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return [NodePartition(node) for node in self.options.connect.nodes]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, NodePartition)
        o = self.options
        jobs = cluster.peek(o.connect, partition.node, o.queues, o.job_fields)
        yield from jobs.record_batches(1, o.body_as_string)
