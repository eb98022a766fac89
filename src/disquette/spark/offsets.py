"""Offsets of the stream source: a micro-batch number and what it holds.

Two kinds, one per way of reading (docs/spark.md):

* **Planned** (disquette, whose GETJOB knows TAG): ``{"seq": n, "run": uuid,
  "parts": {"host:port": [count, ...]}}``: micro-batch ``n`` of the query whose
  offsets carry ``run`` reads, on each node, one partition per count, each taking
  at most that many jobs under tags named from ``run``, ``n`` and the partition
  (:func:`~disquette.spark.plan.tags_of`). The driver never sees a job ID: the
  tags are acknowledged by name, and a replayed partition gets its tag's jobs
  back. An offset's size does not grow with ``maxJobsPerTrigger``.
* **Taken** (a plain Disque server): the IDs themselves, below.

A Disque queue has no positions to remember: a job is taken by GETJOB and
gone once acknowledged. So an offset is not a place in a log but a receipt:
``{"seq": n, "jobs": {"host:port": [id, ...]}}`` names micro-batch ``n`` and
every job it holds, grouped by the node that delivered it (that node knows
the job, so acknowledgements, WORKING and re-reads go there first).

Spark writes each end offset to the checkpoint before it runs the batch, which
is what makes the source crash-proof: after a driver crash the batch is planned
again from its end offset, and its jobs are re-read by ID; once a batch is
done, its end offset comes back as the next batch's start and its jobs are
acknowledged from there, whatever the driver remembers. The number of IDs in an
offset is capped by ``maxJobsPerTrigger`` (at most
:data:`~disquette.spark.options.MAX_JOBS_PER_TRIGGER`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class BatchOffset:
    """The end offset of micro-batch ``seq``: the jobs it holds, by delivering node."""

    seq: int
    jobs: dict[str, list[str]] = field(default_factory=dict)
    #: Planned offsets: the query's run ID ("" for a taken offset) and the counts.
    run: str = ""
    parts: dict[str, list[int]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.jobs.values())

    @property
    def planned(self) -> bool:
        return bool(self.run)

    def to_json(self) -> dict[str, Any]:
        if self.run:
            return {"seq": self.seq, "run": self.run, "parts": self.parts}
        return {"seq": self.seq, "jobs": self.jobs}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchOffset:
        try:
            seq = int(data["seq"])
            if "run" in data:
                parts = {str(n): [int(c) for c in counts] for n, counts in data["parts"].items()}
                return cls(seq, run=str(data["run"]), parts=parts)
            return cls(seq, {str(n): list(ids) for n, ids in data["jobs"].items()})
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValueError(f"not an offset of the disque source: {data!r}") from None
