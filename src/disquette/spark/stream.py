"""The stream source: ``spark.readStream.format("disque")``, at-least-once.

It reads one of two ways, chosen on the driver when a micro-batch is planned
(docs/spark.md has the whole story):

* **Planned** (a disquette cluster, whose GETJOB knows ``TAG``): the driver plans,
  the executors read. ``latestOffset`` asks every node its QLEN and returns an
  end offset with the jobs each partition may take on which node
  (:mod:`~disquette.spark.plan`); ``read()``, on the executors, takes them from
  its node under tags named from the offset; the driver acknowledges the
  committed batch by tag and keeps its tags alive while it runs. No job, ID or
  body, passes through the driver.
* **Taken** (a plain Disque server): ``latestOffset(start)`` takes the jobs, with
  GETJOB NOHANG from every node, at most the read limit (``maxJobsPerTrigger``).
  Their bodies stay in this process, their IDs go into the returned end offset,
  which Spark writes to the checkpoint before running the batch.
  ``partitions(start, end)`` ships the bodies to the executors as Arrow record
  batches; ``read()`` yields them. When the driver does not have the bodies,
  because it crashed and this is a fresh reader re-planning the unfinished batch
  from the checkpoint, the partitions carry the IDs instead and ``read()``
  re-reads the jobs with SHOW.

Acknowledgement is what makes it at-least-once and never lossy: a job is
acknowledged only after Spark has committed the batch that processed it.
Spark calls ``latestOffset(start)`` on every trigger with ``start`` the end
offset of the last completed batch, so that is where its jobs are acknowledged
(from the offset: its tags or its IDs, so a restarted driver acknowledges them
too), and again in ``commit(end)``, which Spark calls later and not at all for
the last batch of a query. The acknowledgements are sent from a thread while
the next batch is planned and read (:mod:`~disquette.spark.acks`); until they
are answered the jobs are held and kept alive with WORKING
(:mod:`~disquette.spark.keepalive`). A stop or a crash acknowledges nothing
more: held jobs of an unfinished batch are replayed (by tag or by ID) on
restart, or come back through RETRY.

``Trigger.AvailableNow`` is supported: the queues' QLEN when the query starts
is the budget, drained in batches of ``maxJobsPerTrigger``; the final
``latestOffset`` call that finds the budget spent acknowledges the last batch
and waits for every acknowledgement before it answers (the query ends next).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from disquette.client import Client
from disquette.spark import cluster, plan
from disquette.spark.acks import Acknowledgements
from disquette.spark.jobs import JobColumns, part_size
from disquette.spark.keepalive import KeepAlive
from disquette.spark.offsets import BatchOffset
from disquette.spark.options import SourceOptions

log = logging.getLogger("disquette.spark")


@dataclass
class HeldPartition(InputPartition):
    """Jobs taken by this driver, shipped to the executor as they are."""

    batch: pa.RecordBatch


@dataclass
class ReplayPartition(InputPartition):
    """Jobs of a batch planned again after a driver crash: read them by ID."""

    jobs: dict[str, list[str]]


def _split(jobs: dict[str, list[str]], parts: int) -> list[dict[str, list[str]]]:
    """The IDs (by node) in at most ``parts`` groups of about equal size."""
    flat = [(node, job_id) for node, ids in jobs.items() for job_id in ids]
    size = part_size(len(flat), parts)
    groups = []
    for i in range(0, len(flat), size):
        group: dict[str, list[str]] = {}
        for node, job_id in flat[i : i + size]:
            group.setdefault(node, []).append(job_id)
        groups.append(group)
    return groups


class DisqueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Takes jobs per micro-batch and acknowledges them once Spark committed it."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: Client | None = None
        self._keepalive: KeepAlive | None = None
        #: Jobs taken per micro-batch and not yet acknowledged (driver only).
        self._taken: dict[int, tuple[BatchOffset, JobColumns]] = {}
        self._acked_through = -1
        #: Planned batches not yet acknowledged (driver only): their offsets.
        self._planned: dict[int, BatchOffset] = {}
        #: Whether the cluster's GETJOB knows TAG (None: not asked yet).
        self._tagged: bool | None = None
        #: Jobs still to take under Trigger.AvailableNow (None: no such trigger).
        self._budget: int | None = None
        #: Acknowledgements of committed batches, sent beside the next batch.
        self._acks = Acknowledgements(self._released)

    def __getstate__(self) -> dict[str, Any]:
        # read() on the executors needs the options only; never sockets or held jobs.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = cluster.connect(self.options.connect)
        return self._client

    @property
    def keepalive(self) -> KeepAlive:
        if self._keepalive is None:
            self._keepalive = KeepAlive(self.client)
        return self._keepalive

    # -------------------------------------------------------------- driver side

    def initialOffset(self) -> dict[str, Any]:
        return BatchOffset(0).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.jobs_per_trigger(self._by_executors()))

    def _by_executors(self) -> bool:
        """Whether the executors read (the cluster's GETJOB knows TAG and readMode is
        auto), asked of the cluster once."""
        if self._tagged is None:
            o = self.options
            auto = o.read_mode == "auto"
            self._tagged = auto and cluster.knows_tags(self.client, o.connect.nodes)
            log.info("disque source: read by the %s", "executors" if self._tagged else "driver")
        return self._tagged

    def prepareForTriggerAvailableNow(self) -> None:
        o = self.options
        self._budget = cluster.queued(self.client, o.connect.nodes, o.queues)
        log.info("disque source: Trigger.AvailableNow, %d jobs queued", self._budget)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        done = BatchOffset.from_json(start)
        self._acknowledge(done)
        seq = done.seq + 1
        if seq in self._taken:  # asked again for the same batch: the same answer
            return self._taken[seq][0].to_json()
        if seq in self._planned:
            return self._planned[seq].to_json()
        planned = self._by_executors()
        want = self.options.jobs_per_trigger(planned)
        if isinstance(limit, ReadMaxRows):
            want = min(want, limit.max_rows)
        if self._budget is not None:
            want = min(want, self._budget)
        if want <= 0:
            return self._idle(start)
        if planned:
            return self._plan(done, seq, want)
        o = self.options
        jobs = cluster.take(self.client, o.connect.nodes, o.queues, want, o.job_fields)
        if not jobs:
            return self._idle(start)
        if self._budget is not None:
            self._budget -= len(jobs)
        offset = BatchOffset(seq, jobs.nodes)
        self._taken[seq] = (offset, jobs)
        self.keepalive.hold(seq, jobs.nodes)
        return offset.to_json()

    def _plan(self, done: BatchOffset, seq: int, want: int) -> dict[str, Any]:
        """The next planned batch: how many jobs each partition takes on which node."""
        o = self.options
        queued = cluster.queued_by_node(self.client, o.connect.nodes, o.queues)
        parts = plan.plan(queued, want, o.num_partitions)
        if not parts:
            return self._idle(done.to_json())
        if self._budget is not None:
            self._budget -= sum(sum(counts) for counts in parts.values())
        offset = BatchOffset(seq, run=done.run or uuid.uuid4().hex, parts=parts)
        self._planned[seq] = offset
        self.keepalive.hold(seq, plan.tags_by_node(offset), tagged=True)
        return offset.to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = BatchOffset.from_json(start), BatchOffset.from_json(end)
        if last.seq == first.seq:
            return []
        if last.seq != first.seq + 1:
            raise ValueError(f"a disque micro-batch spans one offset, not {first.seq}..{last.seq}")
        if last.planned:
            if last.seq > self._acked_through and last.seq not in self._planned:
                self.keepalive.hold(last.seq, plan.tags_by_node(last), tagged=True)
            return plan.partitions_of(last)
        parts = self.options.num_partitions
        taken = self._taken.get(last.seq)
        if taken is not None:
            batches = taken[1].record_batches(parts, self.options.body_as_string)
            return [HeldPartition(batch) for batch in batches]
        log.info("disque source: re-reading the %d jobs of batch %d by ID", last.count, last.seq)
        if last.seq > self._acked_through:
            self.keepalive.hold(last.seq, last.jobs)
        return [ReplayPartition(group) for group in _split(last.jobs, parts)]

    def commit(self, end: dict[str, Any]) -> None:
        self._acknowledge(BatchOffset.from_json(end))

    def stop(self) -> None:
        """Acknowledges nothing more than the committed batches it was acknowledging:
        what was not committed comes back (replay or RETRY)."""
        self._acks.stop()
        if self._keepalive is not None:
            self._keepalive.stop()
        if self._client is not None:
            self._client.close()

    def _idle(self, offset: dict[str, Any]) -> dict[str, Any]:
        """No new batch (``offset``: the last one's end): the query may be about to
        end, so every committed batch is acknowledged first (acks.py)."""
        self._acks.wait()
        return offset

    def _acknowledge(self, done: BatchOffset) -> None:
        """Acknowledge the jobs of completed batch ``done`` (once per reader), beside
        the next batch (acks.py); they are kept alive until then."""
        if done.seq <= self._acked_through:
            return
        send: Callable[[], object] | None = None
        if done.planned:
            send = partial(cluster.on_tags, self.client, "ACKJOB", plan.tags_by_node(done))
        elif done.jobs:
            send = partial(cluster.acknowledge, self.client, done.jobs)
        self._acked_through = done.seq
        for held in (self._taken, self._planned):
            for seq in [s for s in held if s <= done.seq]:
                del held[seq]
        self._acks.submit(done.seq, send)

    def _released(self, seq: int) -> None:
        """Batch ``seq`` was acknowledged (acks.py's thread): no more keeping alive."""
        if self._keepalive is not None:
            self._keepalive.release_through(seq)

    # ------------------------------------------------------------ executor side

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, plan.TagPartition):
            o = self.options
            yield from plan.read(o.connect, o.queues, partition, o.body_as_string, o.job_fields)
            return
        if isinstance(partition, HeldPartition):
            yield partition.batch
            return
        assert isinstance(partition, ReplayPartition)
        jobs = cluster.reread(self.options.connect, partition.jobs, self.options.job_fields)
        yield from jobs.record_batches(1, self.options.body_as_string)
