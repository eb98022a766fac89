"""Cluster bus messages: types, flags, the header, and the shape of each message.

The core names the messages it sends with these numbers; the bus shell frames
them. Their semantics are Disque's (reference section 11); the wire format is
disquette's own. A message is a tuple whose first element is its type:

    (PING|MEET, gossip, sent)  gossip: list of (node_id, ping_sent, pong_received,
                                                ip, port, flags)
                               sent: the sender's clock (ms) as it sends
    (PONG, gossip, sent, now)  sent: echoed from the PING or MEET answered;
                               now: the responder's clock (ms) as it answers
    (FAIL, node_id)
    (REPLJOB, serialized_job, flags)       flags: NOREPLY
    (GOTJOB, [job_id, ...])                the REPLJOBs of one frame confirmed together
    (ENQUEUE, job_id, delay)
    (QUEUED, job_id, flags)                flags: INCR_NACKS | INCR_DELIV
    (SETACK, (job_id, may_have, ...))      batched: flat pairs (core/acks.py)
    (WILLQUEUE, job_id)
    (GOTACK, (job_id, known, ...))         known: 0 or 1; batched like SETACK
    (DELJOB, (job_id, ...))
    (NEEDJOBS, queue, count)
    (YOURJOBS, [serialized_job, ...])
    (WORKING, job_id)
    (PAUSE, queue, flags)                  flags: 1 in, 2 out
    (HOLDERS, job_id, [node_id, ...])      beyond Disque: a repaired job's holders
    (POLICYDIGEST, digest)                 beyond Disque: the sender's policy table hash
    (POLICIES, [record, ...], flags)       its policies (core/policy.py); flags: FULL_TABLE
    (DEPQUERY, round, (job_id, ...))       beyond Disque: what became of these jobs? and
                                           tell me when they are acked (core/dependency.py)
    (DEPSTATE, round, (job_id, state, ...)) the answer (round 0: unasked news); flat pairs
    (PROGRESS, job_id, (ms, node_id, text, ...))  a job's progress log (core/progress.py)
    (GOTPROGRESS, job_id, count)           how many entries the receiver's log now has
    (CLAIM, job_id, claim)                 a job was handed out with this claim (core/claim.py)
    (CRONDIGEST, digest)                   beyond Disque: the sender's schedule table hash
    (CRONS, [record, ...], flags)          its recurring-job schedules (core/cron.py);
                                           flags: FULL_TABLE
    (CRONFIRED, (name, tick, ...))         these schedules' ticks fired; flat pairs
    (RATEDEMAND, epoch, (queue, rate, concurrency, held, ...))  beyond Disque: the sender's
                                           demands for an epoch (core/ratelimit.py)
    (OUTCOME, job_id, kind, result)        beyond Disque: a job was acknowledged (with a
                                           result) or cancelled (core/outcome.py)
    (POSTPONE, job_id, flags, delay)       a requeue postponed by delay ms (core/backoff.py);
                                           flags: INCR_NACKS | INCR_DELIV
    (ACLDIGEST, digest)                    beyond Disque: the sender's user table hash
    (ACLUSERS, [record, ...], flags)       its users (core/acl.py); flags: FULL_TABLE

Serialized jobs use the bus variant of :mod:`disquette.core.serialize`. Every
frame carries a :class:`Header` describing its sender, including its *data
generation* (beyond Disque, :mod:`disquette.core.repair`): a number that grows
each time the node starts without the jobs it held, so that its peers know the
copies they believed it held are gone.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

PING: Final = 0
PONG: Final = 1
MEET: Final = 2
FAIL: Final = 3
REPLJOB: Final = 4
GOTJOB: Final = 5
ENQUEUE: Final = 6
QUEUED: Final = 7
SETACK: Final = 8
WILLQUEUE: Final = 9
GOTACK: Final = 10
DELJOB: Final = 11
NEEDJOBS: Final = 12
YOURJOBS: Final = 13
WORKING: Final = 14
PAUSE: Final = 15
HOLDERS: Final = 16  # beyond Disque: the holders of a job after a repair (core/repair.py)
POLICYDIGEST: Final = 17  # beyond Disque: queue policies (core/policy.py)
POLICIES: Final = 18
DEPQUERY: Final = 19  # beyond Disque: dependencies (core/dependency.py)
DEPSTATE: Final = 20
PROGRESS: Final = 21  # beyond Disque: progress logs (core/progress.py)
GOTPROGRESS: Final = 22
CLAIM: Final = 23  # beyond Disque: claim numbers (core/claim.py)
CRONDIGEST: Final = 24  # beyond Disque: recurring jobs (core/cron.py)
CRONS: Final = 25
CRONFIRED: Final = 26
RATEDEMAND: Final = 27  # beyond Disque: rate and concurrency limits (core/ratelimit.py)
OUTCOME: Final = 29  # beyond Disque: results and cancellations (core/outcome.py)
POSTPONE: Final = 30  # beyond Disque: postponed requeues (core/backoff.py)
ACLDIGEST: Final = 31  # beyond Disque: users and permissions (core/acl.py)
ACLUSERS: Final = 32

# Message flags.
NOREPLY: Final = 1
INCR_NACKS: Final = 2
INCR_DELIV: Final = 4
FULL_TABLE: Final = 1  # POLICIES, CRONS, ACLUSERS: the sender's whole table


class Header(NamedTuple):
    """What every frame says about its sender."""

    sender: bytes  # the sender's node ID
    port: int  # the sender's client port (its bus listens on port + 10000)
    flags: int  # the sender's flags as it sees itself (membership bits, e.g. LEAVING)
    generation: int = 0  # the sender's data generation (0: none announced)


Message = tuple[Any, ...]
