"""The sink: DataFrame rows become jobs, in batch and streaming writes.

Both writers take Spark's Arrow path (``DataSourceArrowWriter``): each task
receives ``pyarrow.RecordBatch`` es, which are turned into bodies (and queue
names) column by column, cut into chunks of the size the
:class:`~disquette.spark.addjob.AddJobPipe` asks for (half a window when the jobs
are pipelined, one when they are replicated synchronously and spread over many
connections) and handed to it. A task returns the number of jobs
it added only once every reply was a job ID; any error fails the task and
Spark runs it again (at-least-once; jobs added before the failure are added
again, so a retried task may produce duplicates).

The input schema is checked on the driver, when Spark asks for the writer: a
``body`` column of type string or binary, and either a string ``queue`` column
or the ``queue`` option.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from disquette.spark.addjob import AddJobEncoder, AddJobPipe, SinkError
from disquette.spark.options import OptionError, SinkOptions

log = logging.getLogger("disquette.spark")


@dataclass(frozen=True, slots=True)
class SinkPlan:
    """What a write does, checked against the DataFrame's schema on the driver."""

    options: SinkOptions
    queue_column: bool

    @classmethod
    def check(cls, options: SinkOptions, schema: StructType, overwrite: bool) -> SinkPlan:
        if overwrite:
            raise OptionError("the disque sink can only append jobs (mode 'append')")
        fields = {f.name: f.dataType for f in schema.fields}
        body = fields.get("body")
        if body is None:
            raise OptionError(f"the disque sink needs a 'body' column, not only {list(fields)}")
        if not isinstance(body, StringType | BinaryType):
            raise OptionError(f"'body' must be a string or binary column, {body.simpleString()}")
        queue = fields.get("queue")
        if queue is not None and not isinstance(queue, StringType):
            raise OptionError(f"the 'queue' column must be a string, not {queue.simpleString()}")
        if (queue is None) == (options.queue is None):
            raise OptionError(
                "the disque sink needs the queue either as a 'queue' column or as the "
                "'queue' option" + (", not both" if queue is not None else "")
            )
        return cls(options, queue_column=queue is not None)


@dataclass
class AddedJobs(WriterCommitMessage):
    """What a task reports once every one of its ADDJOBs was answered with an ID."""

    jobs: int


def _column(batch: pa.RecordBatch, name: str) -> list:
    column = batch.column(name)
    if column.null_count:
        raise SinkError(f"the '{name}' column has null values: every job needs one")
    if name == "body" and pa.types.is_string(column.type) | pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


def add_batches(plan: SinkPlan, batches: Iterator[pa.RecordBatch]) -> AddedJobs:
    """Add one job per row of ``batches`` (one Spark task's input)."""
    options = plan.options
    encoder = AddJobEncoder(options)
    pipe = AddJobPipe(options)
    try:
        chunk = pipe.chunk
        for batch in batches:
            bodies = _column(batch, "body")
            queues = _column(batch, "queue") if plan.queue_column else None
            for i in range(0, len(bodies), chunk):
                part = bodies[i : i + chunk]
                if queues is None:
                    data = encoder.encode(options.queue, part)  # type: ignore[arg-type]
                else:
                    data = encoder.encode_rows(queues[i : i + chunk], part)
                pipe.send(data, len(part))
        return AddedJobs(pipe.finish())
    finally:
        pipe.close()


def _log_commit(messages: list[WriterCommitMessage | None], what: str) -> None:
    added = sum(m.jobs for m in messages if isinstance(m, AddedJobs))
    log.info("disque sink: %s added %d jobs in %d tasks", what, added, len(messages))


class DisqueWriter(DataSourceArrowWriter):
    """``df.write.format("disque")``: a batch write."""

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddedJobs:
        return add_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, "write")


class DisqueStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("disque")``: each micro-batch is written like a batch write."""

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddedJobs:
        return add_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(messages, f"micro-batch {batchId}")
