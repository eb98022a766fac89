"""Delivery tags: jobs taken under a name, acknowledged and kept alive by that name
(``GETJOB ... TAG name``, ``ACKJOB TAG name``, ``WORKING TAG name``; beyond Disque).

A consumer that splits its work between a planner and many readers (the Spark
connector: a driver plans micro-batches, executors read the jobs) needs the
planner to acknowledge what the readers took without ever seeing a job ID. A
*tag* is that handle: the node that delivers jobs under a tag records their IDs
under it, in delivery order, and the tag's name is all anyone needs later.

* ``GETJOB NOHANG [COUNT n] TAG name FROM queue ...`` first delivers again the
  tag's jobs this node still holds unacknowledged (a queued one is taken out of
  its queue, an active one has its requeue postponed as by ``WORKING``), in the
  order they were taken, up to ``n``; then takes new jobs from the queues, as
  GETJOB does, to make up ``n``, and records them under the tag. Each delivered
  copy gets a full retry period from now (this node's requeue timer), so that a
  job that waited in its queue is not queued again before its keeper's first
  WORKING. A reader that
  dies and is run again with the same tag (a retried Spark task, a micro-batch
  replayed after the driver crashed) therefore gets the same jobs back first:
  nothing is lost, and what it sees twice is at most what the tag holds. A tag
  never blocks (``NOHANG`` is required): a reader asks for what is there.
* ``ACKJOB TAG name`` acknowledges every job of the tag still held here (Disque's
  ACKJOB on each: the acknowledgement reaches every copy through the usual
  collection) and forgets the tag. It replies how many jobs it acknowledged.
* ``WORKING TAG name`` postpones the requeue of every live job of the tag (Disque's
  WORKING on each; a job past half its TTL is left as it is, as WORKING would
  refuse it) and replies the smallest retry time among them (0: none), so that a
  keeper learns how often to call it. A job this node alone holds whose requeue
  is still more than :data:`FRESH_PERMILLE` of its retry time away (delivered or
  postponed moments ago) is left as it is too: postponing it would move its
  requeue by those moments, at the cost of a WORKING, and a keeper calling at
  intervals under 90 % of the retry time (the reply) is back long before it is
  due. So a keeper's first call, which finds its tags just filled, costs a lookup
  a job rather than a WORKING. A job other nodes hold copies of is always
  postponed, as the WORKING tells them so.

A tag is node-local: it records the deliveries this node made, and is never sent
on the bus (each job's own acknowledgement and WORKING are). It is forgotten when
acknowledged, or once nobody touched it (GETJOB, WORKING) for :data:`IDLE_MS`;
its jobs are then ordinary active jobs, queued again after their retry time.
Tags are not saved in the AOF: after a restart the node knows none, a reader
replaying a tag takes new jobs, and the jobs of the forgotten tag come back
through their retry (at least once; seen twice at most once more). Memory: the
records are counted against maxmemory, and a tag holds at most the COUNT its
GETJOBs asked for, above what its jobs already cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.core import replies
from disquette.core.errors import DisqueError
from disquette.core.job import ACKED, ACTIVE, QUEUED
from disquette.core.memory import DICT_ENTRY, bytes_cost

if TYPE_CHECKING:
    from disquette.core.job import Job
    from disquette.core.node import Node

#: A tag untouched for this long is forgotten (its jobs come back after their retry).
IDLE_MS: Final = 3_600_000
MAX_NAME: Final = 256
#: What one recorded delivery costs (a slot in the tag's list, the ID is the job's).
ENTRY_COST: Final = 8
#: WORKING TAG leaves alone a job held here only whose requeue is further away than
#: this share of its retry time (per mille: ms per second of retry).
FRESH_PERMILLE: Final = 900

TAG_LENGTH: Final = replies.err(f"TAG name must be 1 to {MAX_NAME} bytes long")
TAG_NOHANG: Final = replies.err("GETJOB TAG needs NOHANG")


class Tag:
    """The IDs delivered under one name, in order, and when it was last touched."""

    __slots__ = ("ids", "touched")

    def __init__(self, now: int) -> None:
        self.ids: list[bytes] = []
        self.touched = now


class Tags:
    """A node's delivery tags, least recently touched first."""

    __slots__ = ("node", "tags")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.tags: dict[bytes, Tag] = {}

    def __len__(self) -> int:
        return len(self.tags)

    def entries(self) -> int:
        """The deliveries recorded over all tags (INFO extensions)."""
        return sum(len(tag.ids) for tag in self.tags.values())

    def ids(self, name: bytes) -> list[bytes]:
        """The IDs delivered under ``name`` (none for a tag this node does not know)."""
        tag = self.tags.get(name)
        return [] if tag is None else tag.ids

    def _touch(self, name: bytes) -> Tag:
        now = self.node.clock()
        tag = self.tags.pop(name, None)
        if tag is None:
            tag = Tag(now)
            self.node.used_memory += DICT_ENTRY + bytes_cost(len(name))
        tag.touched = now
        self.tags[name] = tag  # to the end: the most recently touched
        return tag

    def _forget(self, name: bytes, tag: Tag) -> None:
        del self.tags[name]
        self.node.used_memory -= DICT_ENTRY + bytes_cost(len(name)) + ENTRY_COST * len(tag.ids)

    def _live(self, tag: Tag) -> list[Job]:
        """The tag's jobs still held here and not acknowledged; drops the others."""
        jobs = self.node.jobs
        live = [j for j in map(jobs.get, tag.ids) if j is not None and j.state != ACKED]
        gone = len(tag.ids) - len(live)
        if gone:
            tag.ids = [job.id for job in live]
            self.node.used_memory -= ENTRY_COST * gone
        return live

    def get_jobs(
        self, name: bytes, queue_names: list[bytes], count: int, withclaim: bool
    ) -> list[Job]:
        """GETJOB's TAG: the tag's live jobs delivered again, then new ones recorded."""
        node = self.node
        tag = self._touch(name)
        jobs: list[Job] = []
        for job in self._live(tag)[:count]:
            if job.state == QUEUED:
                node.dequeue(job)
            if job.state == ACTIVE and not job.waiting:
                _postpone(node, job)
                jobs.append(job)
        if len(jobs) < count:
            new = node.get_jobs(queue_names, count - len(jobs), withclaim)
            now = node.clock()
            for job in new:  # a full retry period from this delivery (this copy's timer)
                if job.retry and job.qtime:
                    job.qtime = now + job.retry * 1000 + node.jitter()
                    node.reschedule(job)
            tag.ids += [job.id for job in new]
            node.used_memory += ENTRY_COST * len(new)
            jobs += new
        return jobs

    def ack(self, name: bytes) -> int:
        """ACKJOB's TAG: acknowledge the tag's live jobs and forget it."""
        tag = self.tags.get(name)
        if tag is None:
            return 0
        count = self.node.ack_jobs([job.id for job in self._live(tag)])
        self._forget(name, tag)
        return count

    def working(self, name: bytes) -> int:
        """WORKING's TAG: postpone the requeue of the tag's live jobs (but those held
        here only and postponed moments ago); the smallest retry time among them
        (seconds), 0 when it has none (or no such tag)."""
        if name not in self.tags:
            return 0
        node = self.node
        now = node.clock()
        smallest = 0
        for job in self._live(self._touch(name)):
            retry = job.retry
            if not (
                retry
                and job.state == ACTIVE
                and job.qtime - now > retry * FRESH_PERMILLE
                and _held_here_only(node, job)
            ):
                retry = _postpone(node, job)
            if retry and (not smallest or retry < smallest):
                smallest = retry
        return smallest

    def cron(self, now: int) -> None:
        """Forget the tags untouched for :data:`IDLE_MS` (the oldest come first)."""
        for name, tag in list(self.tags.items()):
            if now - tag.touched < IDLE_MS:
                return
            self._forget(name, tag)


def _held_here_only(node: Node, job: Job) -> bool:
    """Whether no other node may hold a copy of ``job`` (nothing to tell them)."""
    delivered = job.nodes_delivered
    return len(delivered) == 1 and delivered[0] == node.myself


def _postpone(node: Node, job: Job) -> int:
    """WORKING on a job of a tag; 0 (left alone) when WORKING would refuse it."""
    try:
        return node.working(job.id)
    except DisqueError:  # past half its TTL (-TOOLATE): it keeps its requeue time
        return 0


def check_name(name: bytes) -> None:
    """A tag's name is 1 to :data:`MAX_NAME` bytes."""
    if not 0 < len(name) <= MAX_NAME:
        raise DisqueError(TAG_LENGTH)
