"""Jobs as Arrow columns: the rows the stream source and the peek produce.

Every reader of the ``disque`` format yields the same schema::

    queue STRING, id STRING, body BINARY, nacks BIGINT, additional_deliveries BIGINT

(``body STRING`` with ``bodyType=string``; a body that is not UTF-8 then fails
the read), then the job fields asked for with ``jobFields`` (:data:`JOB_FIELDS`:
``priority BIGINT``, ``dedup STRING``, ``progress ARRAY<STRING>``, the texts of
its progress log, oldest first, ``claim BIGINT``), null where a job has none.
Rows are built as ``pyarrow.RecordBatch`` es, column by column, which Spark
takes without converting tuples row by row.

:class:`JobColumns` collects jobs from GETJOB replies (the stream source, on
the driver), from SHOW (re-reading a micro-batch by ID after a driver crash,
on an executor) or from JSCAN (the peek).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from disquette.client.models import JobInfo

#: The job fields the readers can add as columns (``jobFields``), as SHOW gives them.
JOB_FIELDS: dict[str, tuple[DataType, pa.DataType]] = {
    "priority": (LongType(), pa.int64()),
    "dedup": (StringType(), pa.string()),
    "progress": (ArrayType(StringType()), pa.list_(pa.string())),
    "claim": (LongType(), pa.int64()),
}


def field_value(info: JobInfo | None, name: str) -> Any:
    """A job's field ``name`` (:data:`JOB_FIELDS`) from its SHOW, None when it has none."""
    if info is None:
        return None
    value = getattr(info, name)
    if name == "progress" and value is not None:
        return [entry.text for entry in value]
    return value


def part_size(count: int, parts: int) -> int:
    """How many items each part gets when ``count`` items are cut into at most ``parts``."""
    return max(1, -(-count // parts))


def spark_schema(body_as_string: bool, fields: tuple[str, ...] = ()) -> StructType:
    """The DataFrame schema of every reader of the format."""
    return StructType(
        [
            StructField("queue", StringType(), False),
            StructField("id", StringType(), False),
            StructField("body", StringType() if body_as_string else BinaryType(), False),
            StructField("nacks", LongType(), True),
            StructField("additional_deliveries", LongType(), True),
        ]
        + [StructField(name, JOB_FIELDS[name][0], True) for name in fields]
    )


def arrow_schema(body_as_string: bool, fields: tuple[str, ...] = ()) -> pa.Schema:
    """The same schema for the record batches (Spark checks nullability too)."""
    return pa.schema(
        [
            pa.field("queue", pa.string(), nullable=False),
            pa.field("id", pa.string(), nullable=False),
            pa.field("body", pa.string() if body_as_string else pa.binary(), nullable=False),
            pa.field("nacks", pa.int64()),
            pa.field("additional_deliveries", pa.int64()),
        ]
        + [pa.field(name, JOB_FIELDS[name][1]) for name in fields]
    )


def reply_batch(reply: list[list[Any]], body_as_string: bool) -> pa.RecordBatch:
    """The jobs of a ``GETJOB ... WITHCOUNTERS`` reply as a record batch, column by
    column straight from the reply (an executor's read: no job field asked for, no ID
    kept for an offset). Queue names and IDs must be UTF-8, as for :class:`JobColumns`."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([item[0] for item in reply], pa.string()),
            pa.array([item[1] for item in reply], pa.string()),
            pa.array([item[2] for item in reply], pa.string() if body_as_string else pa.binary()),
            pa.array([item[4] for item in reply], pa.int64()),
            pa.array([item[6] for item in reply], pa.int64()),
        ],
        schema=arrow_schema(body_as_string),
    )


class JobColumns:
    """Jobs accumulated column by column, and where each was delivered from."""

    __slots__ = ("additional", "bodies", "fields", "ids", "nacks", "nodes", "queues", "sources")

    def __init__(self, fields: tuple[str, ...] = ()) -> None:
        #: The job fields asked for (``jobFields``), each a column of values.
        self.fields: dict[str, list[Any]] = {name: [] for name in fields}
        self.queues: list[str] = []
        self.ids: list[str] = []
        self.bodies: list[bytes] = []
        self.nacks: list[int | None] = []
        self.additional: list[int | None] = []
        #: The IDs by the node that delivered them (what goes into an offset).
        self.nodes: dict[str, list[str]] = {}
        #: The node that delivered each job.
        self.sources: list[str] = []

    def __len__(self) -> int:
        return len(self.ids)

    def add_getjob_reply(self, node: str, reply: list[list[Any]] | None) -> int:
        """Add the jobs of a ``GETJOB ... WITHCOUNTERS`` reply from ``node``; return how many."""
        if not reply:
            return 0
        ids = [item[1].decode() for item in reply]
        self.queues += [item[0].decode("utf-8", "surrogateescape") for item in reply]
        self.ids += ids
        self.bodies += [item[2] for item in reply]
        self.nacks += [item[4] for item in reply]
        self.additional += [item[6] for item in reply]
        self.nodes.setdefault(node, []).extend(ids)
        self.sources += [node] * len(ids)
        return len(ids)

    def add_infos(self, node: str, infos: Iterable[JobInfo]) -> None:
        """Add jobs described by SHOW or JSCAN (``REPLY all``)."""
        for info in infos:
            self.queues.append(info.queue or "")
            self.ids.append(info.id)
            self.bodies.append(info.body or b"")
            self.nacks.append(info.nacks)
            self.additional.append(info.additional_deliveries)
            self.nodes.setdefault(node, []).append(info.id)
            self.sources.append(node)
            for name, values in self.fields.items():
                values.append(field_value(info, name))

    def add_fields(self, infos: Iterable[JobInfo | None]) -> None:
        """The asked-for fields of the jobs last added from a GETJOB reply, from SHOW."""
        for info in infos:
            for name, values in self.fields.items():
                values.append(field_value(info, name))

    def record_batches(self, parts: int, body_as_string: bool) -> list[pa.RecordBatch]:
        """The jobs as at most ``parts`` record batches of about equal size.

        In the order of :attr:`nodes` (node by node, each in the order taken),
        which is the order of the IDs in the micro-batch's offset: a batch
        replayed from its offset after a driver crash has the same rows in the
        same partitions, in the same order, so a sink that keys rows by position
        (the disque sink's DEDUP keys) writes each row under the same key.
        """
        self._order_by_node()
        count = len(self.ids)
        size = part_size(count, parts)
        return [self._slice(i, i + size, body_as_string) for i in range(0, count, size)]

    def record_batch(self, body_as_string: bool) -> pa.RecordBatch:
        """All the jobs, in the order added, as one record batch."""
        return self._slice(0, len(self.ids), body_as_string)

    def _order_by_node(self) -> None:
        rank = {node: r for r, node in enumerate(self.nodes)}
        ranks = [rank[node] for node in self.sources]
        if ranks == sorted(ranks):
            return
        order = sorted(range(len(ranks)), key=ranks.__getitem__)  # stable: taken order per node
        for name in ("queues", "ids", "bodies", "nacks", "additional", "sources"):
            column = getattr(self, name)
            setattr(self, name, [column[i] for i in order])
        for name, values in self.fields.items():
            self.fields[name] = [values[i] for i in order]

    def _slice(self, start: int, stop: int, body_as_string: bool) -> pa.RecordBatch:
        bodies = pa.array(self.bodies[start:stop], pa.binary())
        if body_as_string:
            bodies = bodies.cast(pa.string())
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.queues[start:stop], pa.string()),
                pa.array(self.ids[start:stop], pa.string()),
                bodies,
                pa.array(self.nacks[start:stop], pa.int64()),
                pa.array(self.additional[start:stop], pa.int64()),
            ]
            + [
                pa.array(values[start:stop], JOB_FIELDS[name][1])
                for name, values in self.fields.items()
            ],
            schema=arrow_schema(body_as_string, tuple(self.fields)),
        )
