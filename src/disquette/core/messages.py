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
    (VERSION, version, oldest, release, [feature, ...], flags)  bus protocol 2
                                           (core/dialect.py): the protocol versions and
                                           features the sender speaks, and its release;
                                           flags: ASK (answer with yours); never sent to
                                           a node of protocol 1
    (ADDRESS, ip, port, bus_port, (node_id, bus_port, ...))  feature ``addresses``
                                           (core/membership.py): the address the sender
                                           announces (ip b"": the one it is reached
                                           from), and the bus ports of the nodes it knows
                                           whose bus is not at port + 10000; flat pairs

:data:`SHAPES` and :data:`CONTENTS` are what the bus codec
(:mod:`disquette.protocol.frames`) checks a received message against; every
type a release knows keeps its shape, so that older releases stay peers
(:mod:`disquette.core.dialect` says who may be sent what).

Serialized jobs use the bus variant of :mod:`disquette.core.serialize`. Every
frame carries a :class:`Header` describing its sender, including its *data
generation* (beyond Disque, :mod:`disquette.core.repair`): a number that grows
each time the node starts without the jobs it held, so that its peers know the
copies they believed it held are gone.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from disquette.protocol.frames import Contents, is_node_id, is_port

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
VERSION: Final = 33  # bus protocol 2: the versions and features a node speaks (core/dialect.py)
ADDRESS: Final = 34  # feature addresses: the address a node announces (core/membership.py)

# Message flags.
NOREPLY: Final = 1
INCR_NACKS: Final = 2
INCR_DELIV: Final = 4
FULL_TABLE: Final = 1  # POLICIES, CRONS, ACLUSERS: the sender's whole table
ASK: Final = 1  # VERSION: the sender has not had the receiver's, and asks for it


class Header(NamedTuple):
    """What every frame says about its sender."""

    sender: bytes  # the sender's node ID
    port: int  # the sender's client port (its bus listens on port + 10000)
    flags: int  # the sender's flags as it sees itself (membership bits, e.g. LEAVING) in the
    # low byte, and its bus protocol version in the high byte (protocol/frames.py)
    generation: int = 0  # the sender's data generation (0: none announced)


Message = tuple[Any, ...]


# --------------------------------------------------------------------------
# The shape of each message, as the bus codec checks it.

MAX_GOSSIP_ENTRIES: Final = 0xFFFF  # Disque's 16-bit gossip count
MAX_IP_BYTES: Final = 64
MAX_FEATURES: Final = 256  # names in a VERSION message
MAX_NAME_BYTES: Final = 64  # a feature's name, a release
_INT64_MIN, _UINT64_MAX = -(1 << 63), (1 << 64) - 1
_BYTES_ONLY: Final = {bytes}
_INT_ONLY: Final = {int}


def _is_int(value: Any) -> bool:
    return type(value) is int and _INT64_MIN <= value <= _UINT64_MAX


def _is_bytes(value: Any) -> bool:
    return type(value) is bytes


def _is_gossip_entry(entry: Any) -> bool:
    return (
        type(entry) is tuple
        and len(entry) == 6
        and is_node_id(entry[0])
        and _is_int(entry[1])
        and _is_int(entry[2])
        and _is_bytes(entry[3])
        and len(entry[3]) <= MAX_IP_BYTES
        and is_port(entry[4])
        and type(entry[5]) is int
        and 0 <= entry[5] <= 0xFFFF
    )


def _is_gossip(value: Any) -> bool:
    return (
        type(value) is tuple
        and len(value) <= MAX_GOSSIP_ENTRIES
        and all(_is_gossip_entry(e) for e in value)
    )


def _is_node_list(value: Any) -> bool:
    return type(value) is tuple and len(value) <= MAX_GOSSIP_ENTRIES and all(map(is_node_id, value))


def _is_bytes_list(value: Any) -> bool:
    return type(value) is tuple and set(map(type, value)) <= _BYTES_ONLY


def _is_id_number_pairs(value: Any) -> bool:
    """A flat ``job_id, number, job_id, number, ...`` tuple (SETACK, GOTACK)."""
    return (
        type(value) is tuple
        and not len(value) % 2
        and set(map(type, value[::2])) <= _BYTES_ONLY
        and set(map(type, value[1::2])) <= _INT_ONLY
    )


def _is_log_entries(value: Any) -> bool:
    """A flat ``ms, node_id, text, ms, node_id, text, ...`` tuple (PROGRESS)."""
    return (
        type(value) is tuple
        and not len(value) % 3
        and set(map(type, value[::3])) <= _INT_ONLY
        and all(map(is_node_id, value[1::3]))
        and set(map(type, value[2::3])) <= _BYTES_ONLY
    )


def _is_demands(value: Any) -> bool:
    """A flat ``queue, rate, concurrency, held, ...`` tuple (RATEDEMAND)."""
    return (
        type(value) is tuple
        and not len(value) % 4
        and set(map(type, value[::4])) <= _BYTES_ONLY
        and all(type(v) is int for i, v in enumerate(value) if i % 4)
    )


def _is_ip(value: Any) -> bool:
    return type(value) is bytes and len(value) <= MAX_IP_BYTES


def _is_bus_ports(value: Any) -> bool:
    """A flat ``node_id, bus_port, ...`` tuple (ADDRESS)."""
    return (
        type(value) is tuple
        and len(value) <= 2 * MAX_GOSSIP_ENTRIES
        and not len(value) % 2
        and all(map(is_node_id, value[::2]))
        and all(map(is_port, value[1::2]))
    )


def _is_version(value: Any) -> bool:
    return type(value) is int and 1 <= value <= 0xFF


def _is_name(value: Any) -> bool:
    return type(value) is bytes and 0 < len(value) <= MAX_NAME_BYTES


def _is_names(value: Any) -> bool:
    return type(value) is tuple and len(value) <= MAX_FEATURES and all(map(_is_name, value))


#: The types of every message's elements, its type first: checked at C speed, all at once.
SHAPES: Final[dict[int, tuple[type, ...]]] = {
    PING: (int, tuple, int),
    PONG: (int, tuple, int, int),
    MEET: (int, tuple, int),
    FAIL: (int, bytes),
    REPLJOB: (int, bytes, int),
    GOTJOB: (int, tuple),
    ENQUEUE: (int, bytes, int),
    QUEUED: (int, bytes, int),
    SETACK: (int, tuple),
    WILLQUEUE: (int, bytes),
    GOTACK: (int, tuple),
    DELJOB: (int, tuple),
    NEEDJOBS: (int, bytes, int),
    YOURJOBS: (int, tuple),
    WORKING: (int, bytes),
    PAUSE: (int, bytes, int),
    HOLDERS: (int, bytes, tuple),
    POLICYDIGEST: (int, int),
    POLICIES: (int, tuple, int),
    DEPQUERY: (int, int, tuple),
    DEPSTATE: (int, int, tuple),
    PROGRESS: (int, bytes, tuple),
    GOTPROGRESS: (int, bytes, int),
    CLAIM: (int, bytes, int),
    CRONDIGEST: (int, int),
    CRONS: (int, tuple, int),
    CRONFIRED: (int, tuple),
    OUTCOME: (int, bytes, int, bytes),
    POSTPONE: (int, bytes, int, int),
    RATEDEMAND: (int, int, tuple),
    ACLDIGEST: (int, int),
    ACLUSERS: (int, tuple, int),
    VERSION: (int, int, int, bytes, tuple, int),
    ADDRESS: (int, bytes, int, int, tuple),
}

#: The elements that need more than their type checked: (index, check) pairs.
CONTENTS: Final[dict[int, Contents]] = {
    PING: ((1, _is_gossip),),
    PONG: ((1, _is_gossip),),
    MEET: ((1, _is_gossip),),
    FAIL: ((1, is_node_id),),
    GOTJOB: ((1, _is_bytes_list),),
    YOURJOBS: ((1, _is_bytes_list),),
    SETACK: ((1, _is_id_number_pairs),),
    GOTACK: ((1, _is_id_number_pairs),),
    DELJOB: ((1, _is_bytes_list),),
    HOLDERS: ((2, _is_node_list),),
    POLICIES: ((1, _is_bytes_list),),
    DEPQUERY: ((2, _is_bytes_list),),
    DEPSTATE: ((2, _is_id_number_pairs),),
    PROGRESS: ((2, _is_log_entries),),
    CRONS: ((1, _is_bytes_list),),
    CRONFIRED: ((1, _is_id_number_pairs),),
    RATEDEMAND: ((2, _is_demands),),
    ACLUSERS: ((1, _is_bytes_list),),
    VERSION: ((1, _is_version), (2, _is_version), (3, _is_name), (4, _is_names)),
    ADDRESS: ((1, _is_ip), (2, is_port), (3, is_port), (4, _is_bus_ports)),
}

#: The types each bus protocol version added (1: those of the releases before versions).
ADDED_IN: Final[dict[int, frozenset[int]]] = {
    1: frozenset(k for k in SHAPES if k not in (VERSION, ADDRESS)),
    2: frozenset((VERSION, ADDRESS)),
}
