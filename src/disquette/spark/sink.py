"""The sink: DataFrame rows become jobs, in batch and streaming writes.

Both writers take Spark's Arrow path (``DataSourceArrowWriter``): each task
receives ``pyarrow.RecordBatch`` es, which are turned into bodies (and queue
names) column by column, cut into chunks of the size the
:class:`~disquette.spark.addjob.AddJobPipe` asks for (half a window when the jobs
are pipelined, one when they are replicated synchronously and spread over many
connections) and handed to it. A task returns the number of jobs
it added only once every reply was a job ID; any error fails the task and
Spark runs it again. Jobs added before the failure are sent again by the
retry: with DEDUP keys (:func:`task_identity`, the row's position and its
body's CRC), which are the same in every attempt of a task and every replay
of a micro-batch, the node answers the existing job's ID and adds nothing;
without them (the default: ``dedup=false``) the retry duplicates them.

The input schema is checked on the driver, when Spark asks for the writer: a
``body`` column of type string or binary, and either a string ``queue`` column
or the ``queue`` option. Optional per-row columns (:data:`ROW_OPTIONS`) set a
job's ``priority``, ``ttl``, ``retry``, ``delay`` (integers), ``dedup`` key or
fair-share ``group`` (strings); a null leaves the option's value (or the server's
default).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from disquette.spark.addjob import AddJobEncoder, AddJobPipe, SinkError
from disquette.spark.options import OptionError, SinkOptions

log = logging.getLogger("disquette.spark")


#: Columns that set an ADDJOB option per row, with the Spark types they take.
ROW_OPTIONS: dict[str, tuple[type, ...]] = {
    "priority": (ByteType, ShortType, IntegerType, LongType),
    "ttl": (ByteType, ShortType, IntegerType, LongType),
    "retry": (ByteType, ShortType, IntegerType, LongType),
    "delay": (ByteType, ShortType, IntegerType, LongType),
    "dedup": (StringType,),
    "group": (StringType,),
}


@dataclass(frozen=True, slots=True)
class SinkPlan:
    """What a write does, checked against the DataFrame's schema on the driver."""

    options: SinkOptions
    queue_column: bool
    #: The per-row option columns the DataFrame has (:data:`ROW_OPTIONS`).
    row_options: tuple[str, ...] = ()

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
        row_options = []
        for name, types in ROW_OPTIONS.items():
            kind = fields.get(name)
            if kind is None:
                continue
            if not isinstance(kind, types):
                wanted = "a string" if types == (StringType,) else "an integer"
                raise OptionError(
                    f"the '{name}' column must be {wanted} (a job's {name.upper()}), "
                    f"not {kind.simpleString()}"
                )
            row_options.append(name)
        if "dedup" in row_options and options.dedup:
            raise OptionError(
                "the DEDUP keys come either from a 'dedup' column or from dedup=true, not both"
            )
        return cls(options, queue is not None, tuple(row_options))


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


#: Local properties Spark gives the tasks of a micro-batch: the query's ID (kept
#: in the checkpoint, so the same after a restart) and the batch's. PySpark's own
#: ``foreach`` sink reads the batch ID the same way.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def task_identity(context: TaskContext, write_id: str | None) -> str:
    """``<write>:<batch>:<partition>``: what the DEDUP keys of this task start with.

    The same in every attempt of the task: ``write_id`` (a batch write's, drawn on
    the driver and pickled into every task) or the streaming query's ID, the
    micro-batch's ID (``0`` for a batch write) and the partition's; never the
    attempt number.
    """
    partition = context.partitionId()
    if write_id is not None:
        return f"{write_id}:0:{partition}"
    query = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch = context.getLocalProperty(BATCH_ID_PROPERTY)
    if not query or not batch:
        raise SinkError(
            f"a streaming write without Spark's {QUERY_ID_PROPERTY} and {BATCH_ID_PROPERTY}: "
            "no stable DEDUP keys (write without dedup)"
        )
    return f"{query}:{batch}:{partition}"


def add_batches(
    plan: SinkPlan, batches: Iterator[pa.RecordBatch], write_id: str | None
) -> AddedJobs:
    """Add one job per row of ``batches`` (one Spark task's input).

    ``write_id``: the batch write's ID, None for a micro-batch (see :func:`task_identity`).
    """
    options = plan.options
    context = TaskContext.get()
    if context is None:
        raise SinkError("the disque sink writes in Spark tasks only")
    partition = context.partitionId()
    prefix = task_identity(context, write_id) if options.dedup else None
    pipe = AddJobPipe(options)
    try:
        encoder = AddJobEncoder(options, prefix)
        chunk = pipe.chunk
        row = 0  # the number of the batch's first row in the task's input
        chunks = 0  # chunks sent (without keys: they only spread the task over the nodes)
        for batch in batches:
            bodies = _column(batch, "body")
            queues = _column(batch, "queue") if plan.queue_column else None
            if plan.row_options:  # options per row: each request encoded on its own
                columns = {name: batch.column(name).to_pylist() for name in plan.row_options}
                names = queues or [options.queue or ""] * len(bodies)
                for i in range(0, len(bodies), chunk):
                    window = {name: values[i : i + chunk] for name, values in columns.items()}
                    data = encoder.encode_with(
                        names[i : i + chunk], bodies[i : i + chunk], window, row + i
                    )
                    span = (row + i) // chunk if prefix is not None else chunks
                    pipe.send(data, len(bodies[i : i + chunk]), span + partition)
                    chunks += 1
                row += len(bodies)
                continue
            if prefix is None:  # no keys: chunks as the record batches cut them
                for i in range(0, len(bodies), chunk):
                    part = bodies[i : i + chunk]
                    if queues is None:
                        data = encoder.encode(options.queue, part)  # type: ignore[arg-type]
                    else:
                        data = encoder.encode_rows(queues[i : i + chunk], part)
                    pipe.send(data, len(part), chunks + partition)
                    chunks += 1
                continue
            end = row + len(bodies)
            start = row
            while start < end:
                # Chunks follow row numbers, not record batches: rows k * chunk to
                # (k + 1) * chunk - 1 go together, to the node of route k (+ the
                # partition, so that tasks spread), in every attempt of the task.
                span = start // chunk
                stop = min(end, (span + 1) * chunk)
                part = bodies[start - row : stop - row]
                if queues is None:
                    data = encoder.encode(options.queue, part, start)  # type: ignore[arg-type]
                else:
                    data = encoder.encode_rows(queues[start - row : stop - row], part, start)
                pipe.send(data, stop - start, span + partition)
                start = stop
            row = end
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
        #: Drawn once, on the driver: every task (and every attempt) of this write
        #: gets it with the pickled writer, a new write gets another.
        self.write_id = str(uuid.uuid4())

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddedJobs:
        return add_batches(self.plan, iterator, self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, "write")


class DisqueStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("disque")``: each micro-batch is written like a batch write."""

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddedJobs:
        return add_batches(self.plan, iterator, None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(messages, f"micro-batch {batchId}")
