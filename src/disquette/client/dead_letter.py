"""A dead letter: a job that failed for good, with where it came from and why.

A worker that gives up on a job (its NACKs past a limit, or its handler rejecting
it) adds a job to a dead-letter queue whose body is a one-line JSON header (the
original queue, ID, counters, reason, error) then the original body, byte for byte,
so nothing is lost and the original can be added again as it was. A disquette
queue policy makes dead letters too, with the original body as is and the origin
in the fields SHOW gives. :class:`DeadLetter` reads both. It lives with the client
because it is a format every side reads: the worker that writes and consumes dead
letters, the task API, and the node's page of failed jobs (observe/failed.py).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from disquette.client.models import Job, JobInfo

#: The first line of a worker's dead letter.
DEAD_LETTER_MAGIC = b"disquette-dead-letter 1\n"
#: The reason of a dead letter made by the server (a queue policy's max-nacks or max-deliveries).
SERVER_REASON = "queue policy"
#: Where the task API's workers put theirs, unless the app names another queue.
DEFAULT_DEAD_LETTER_QUEUE = "dead-letters"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A job diverted to a dead-letter queue: where it came from, why, and its body.

    ``queue`` and ``id`` are the original job's (``None`` when the dead-letter
    job says nothing of its origin), ``nacks`` and ``additional_deliveries`` its
    counters then, ``reason`` why it was diverted, ``error`` the handler's
    traceback when it failed, ``body`` the original body. ``job``: the
    dead-letter job itself, when the worker fetched it (not part of the body).
    """

    queue: str | None
    id: str | None
    nacks: int | None
    additional_deliveries: int | None
    reason: str
    error: str | None
    body: bytes
    job: Job | None = dataclasses.field(default=None, compare=False)

    @classmethod
    def of(cls, job: Job, reason: str, error: str | None = None) -> DeadLetter:
        return cls(job.queue, job.id, job.nacks, job.additional_deliveries, reason, error, job.body)

    @classmethod
    def from_show(cls, job: Job, info: JobInfo | None) -> DeadLetter:
        """A dead letter made by a queue policy, from its SHOW (origin fields, disquette only)."""
        if info is None or info.origin_id is None:
            return cls(None, None, None, None, "unknown origin", None, job.body, job)
        return cls(
            info.origin_queue,
            info.origin_id,
            info.origin_nacks,
            info.origin_additional_deliveries,
            SERVER_REASON,
            None,
            job.body,
            job,
        )

    def encode(self) -> bytes:
        header = {
            "queue": self.queue,
            "id": self.id,
            "nacks": self.nacks,
            "additional_deliveries": self.additional_deliveries,
            "reason": self.reason,
            "error": self.error,
        }
        return DEAD_LETTER_MAGIC + json.dumps(header).encode() + b"\n" + self.body

    @classmethod
    def decode(cls, body: bytes) -> DeadLetter:
        """Parse a dead-letter job's body; ``ValueError`` if it is not one."""
        if not body.startswith(DEAD_LETTER_MAGIC):
            raise ValueError("not a disquette dead letter")
        header, sep, original = body[len(DEAD_LETTER_MAGIC) :].partition(b"\n")
        if not sep:
            raise ValueError("truncated dead letter")
        try:
            h = json.loads(header)
            return cls(
                h["queue"],
                h["id"],
                h["nacks"],
                h["additional_deliveries"],
                h["reason"],
                h["error"],
                original,
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed dead-letter header: {exc!r}") from None
