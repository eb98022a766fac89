"""The properties every run must satisfy, checked once faults have stopped.

After the fault window the network is healed, every node restarted, the
consumers drain the queues and virtual time runs on until the cluster is quiet
(or a bound passes). Then:

1. **Delivery.** Every job whose ADDJOB was acknowledged was delivered at least
   once, unless the run's faults excuse it:

   * a synchronous job with REPLICATE R, when R or more of the nodes holding a
     copy crashed (no persistence) before it was delivered;
   * an ASYNC job, whose copies are made after the reply, when a crash
     destroyed its last live copy; and, if it was replicated externally (no
     local copy: its only copies travel in fire-and-forget REPLJOBs), when
     anything went wrong;
   * an at-most-once job (RETRY 0), which promises nothing under faults (a lost
     message or a crash may lose it; reloaded from the AOF it is never queued
     again, reference 12.5), when anything went wrong.

   A job dead-lettered (features runs) was delivered when one of its dead
   letters was, or lost with it when a crash destroyed a dead letter's last
   copy: ``max-deliveries`` counts requeues, so a job may go to the dead-letter
   queue without ever being delivered from its own. An ADDJOB answered with
   the ID of a copy its DEDUP key found promises that copy's durability, not
   its own REPLICATE (see property 9), and is recorded so.

   A lossless run (jobs persisted in the AOF; rolling restarts with repair)
   excuses no crash, but the one that destroyed the last live copy of an ASYNC
   job (whose other copies may not have been made yet; with the AOF no copy is
   ever destroyed).
2. **Garbage collection.** No node holds any job any more: every job was
   delivered and acknowledged, and every copy, dummy acks included, was
   collected within the bound. Under faults, an at-most-once copy left
   ``active`` may wait for its TTL instead: nothing in Disque queues or
   collects it (a replica whose ADDJOB failed and whose DELJOB was lost, a job
   reloaded from the AOF, ...).
3. **No duplicates without faults.** With an empty fault schedule no delivery
   happened that neither the client nor the retry timer explains (see
   :mod:`disquette.sim.history`); with faults, duplicates are only counted and
   reported.
4. **Membership.** Every node knows every other node by its real ID, with a
   link up and no PFAIL, FAIL, handshake, noaddr or leaving flag.
5. **Nothing deleted stays referenced.** The jobs reachable from a node's state
   (its registry, queues, schedule, protocol bookkeeping, clients, command
   state) are exactly the jobs it has registered, each scheduled at most once:
   a deleted job kept alive by a timer, a queue or a client would be memory
   that follows throughput instead of the dataset.
6. **One queued copy** (rolling runs, checked before the drain): once the
   cluster has been whole and stable for a few retry periods, with producers
   stopped and consumers paused, a job that no node has acknowledged is queued
   on at most one node. Requeue coordination (WILLQUEUE, QUEUED and the ID
   tie-break) must leave one queued copy whatever repair, restarts and FAILs
   did; two queued copies are two deliveries in the drain.

The features runs (queue policies, dead letters, ADDJOB DEDUP) add three:

7. **Policies converge.** After the heal and settle, every node holds the same
   policy table — the same names with the same versions (Lamport counter and
   writer), tombstones included, and the same patterns and options — and it is
   the table the acknowledged writes imply: for each name, the write with the
   greatest version (last writer wins). Writes are durable (saved before the
   reply), so none is excused.
8. **Dead letters.** Dead letters are counted by the original job they stand
   for (their origin ID), over every one seen: delivered from the dead-letter
   queue, destroyed by a crash, or held at the end. A job is *disturbed* when a
   crash (to its restart), a partition or cut (to its heal), a leaving episode,
   a link break or network faults were on at some moment of its life, from its
   first ADDJOB to the moment in question, each extended by ``margin`` (two node
   timeouts: failure detection and reconnection after the fault ends). Then:

   * a job has at most one dead letter unless disturbed up to its last dead
     letter's creation (two holders requeuing it apart can each make one, see
     :mod:`disquette.core.deadletter`); those excused are counted;
   * a dead-lettered job is not delivered from its queue more than
     ``INFLIGHT_MS`` after its first dead letter was made (a copy queued
     elsewhere before the acknowledgement reached it), unless disturbed up to
     that delivery; those excused are counted;
   * every job delivered from the workload's queues was acknowledged by a
     consumer or has a dead letter (so none was dropped), unless disturbed at
     any moment from its first ADDJOB on (a dead letter lost, or a replica
     delivered before its failed ADDJOB deleted it) or a crash destroyed a
     copy of it; those excused are counted;
   * a NACK that takes a job past its node's policy bounds (``max-nacks``, or
     ``max-deliveries`` with the requeues) does not leave it queued there: the
     node dead-letters it, unless disturbed up to that NACK (the dead letter
     could not be added: a leaving node without reachable peers); those
     excused are counted;
   * every dead letter names its origin, and has its body.
9. **De-duplication.** An ADDJOB with a DEDUP key sent to a node holding (as it
   runs) a job of that queue with that key is answered with that job's ID (or
   with TRYAGAIN while that job is still being replicated synchronously).
   Such a reply acknowledges a job whose replication the node may never have
   seen confirmed (a replica whose own ADDJOB failed or was lost with its
   node): those no node had acknowledged yet, with fewer live copies than the
   ADDJOB's REPLICATE, are counted (``dedup_hits_short``), and property 1 holds
   every such reply to the copies it had.
   ADDJOBs sent again (after a lost reply, or once more after a success) that
   found no copy on their node are counted, not failed: those that created a
   second job while another node held one (the documented limit), and those
   that created a job while no live node held one.

Each check returns human-readable violations; an empty list means it held.
"""

from __future__ import annotations

import gc
from collections import OrderedDict, deque
from typing import Any

from disquette.core.client import Client
from disquette.core.ids import is_at_least_once
from disquette.core.job import ACKED, ACTIVE, QUEUED, STATE_NAMES, Job
from disquette.core.membership import FAIL, HANDSHAKE, LEAVING, NOADDR, PFAIL
from disquette.core.node import Node
from disquette.core.policy import Policy
from disquette.core.schedule import RESOLUTION
from disquette.sim.history import (
    FIRST,
    NEVER,
    RESEND,
    RETRY,
    DeadLetter,
    History,
    PolicyWrite,
)
from disquette.sim.process import SimNode

INFLIGHT_MS = 100  # a delivery this soon after a dead letter was made may be in flight
BAD_FLAGS = (
    (PFAIL, "fail?"),
    (FAIL, "fail"),
    (HANDSHAKE, "handshake"),
    (NOADDR, "noaddr"),
    (LEAVING, "leaving"),
)


def check_delivery(history: History, faulty: bool, excuse_crashes: bool = True) -> list[str]:
    out = []
    dead_lettered = {
        letter.origin
        for letter in history.dead_letters.values()
        if letter.deliveries or letter.job_id in history.last_copy_lost
    }
    for job_id, added in history.added.items():
        if job_id in history.deliveries or (faulty and not is_at_least_once(job_id)):
            continue
        if job_id in dead_lettered:
            continue
        if faulty and added.async_ and added.external:
            continue  # no copy anywhere but in fire-and-forget REPLJOBs, which faults may lose
        crashed = history.crashed_holders.get(job_id, set())
        lost = job_id in history.last_copy_lost
        if added.async_ and lost:
            continue  # maybe before its copies were made: a crash right after the reply
        if excuse_crashes and len(crashed) >= added.repl:
            continue
        out.append(
            f"never delivered: {job_id.decode()} (REPLICATE {added.repl}"
            f"{' ASYNC' if added.async_ else ''}, added on n{added.node} at "
            f"{added.time}, holders {_names(added.holders)}, crashed holders "
            f"{_names(sorted(crashed))}{', last copy lost' if lost else ''})"
        )
    return out


def waits_for_ttl(job: Job, faulty: bool) -> bool:
    """A copy that Disque leaves alone until its TTL (see the module docstring)."""
    return faulty and job.state == ACTIVE and not job.retry


def check_collected(processes: list[SimNode], history: History, faulty: bool) -> list[str]:
    out = []
    for p in processes:
        node = p.node
        if node is None:
            out.append(f"{p.name} is down at the end of the run")
            continue
        for job in node.jobs.values() if len(node.jobs) else ():  # (a full scan is slow)
            if waits_for_ttl(job, faulty):
                continue
            what = "dummy ack" if job.is_dummy_ack else STATE_NAMES[job.state].decode()
            acked = " (acknowledged by a client)" if job.id in history.acked else ""
            out.append(f"not collected on {p.name}: {job.id.decode()} {what}{acked}")
    return out


def tolerated(history: History, faulty: bool) -> int:
    """At most how many copies :func:`check_collected` lets wait for their TTL."""
    return sum(1 for _, retry, _ in history.issued.values() if not retry) if faulty else 0


def check_duplicates(history: History, faulty: bool) -> list[str]:
    if faulty or not history.duplicates:
        return []
    jobs = [jid for jid, ds in history.deliveries.items() if any(d.duplicate for d in ds)]
    return [
        f"delivered again without faults: {jid.decode()} at "
        + ", ".join(f"n{d.node}@{d.time}({d.action})" for d in history.deliveries[jid])
        for jid in jobs
    ]


def check_membership(processes: list[SimNode]) -> list[str]:
    out = []
    ids = {p.node_id: p.name for p in processes}
    for p in processes:
        node = p.node
        if node is None:
            continue
        table = node.cluster.nodes
        for node_id, name in ids.items():
            entry = table.get(node_id)
            if entry is None:
                out.append(f"{p.name} does not know {name}")
                continue
            bad = [label for flag, label in BAD_FLAGS if entry.flags & flag]
            if bad:
                out.append(f"{p.name} flags {name} {','.join(bad)}")
            if node_id != p.node_id and not entry.link:
                out.append(f"{p.name} has no link to {name}")
        for node_id in table:
            if node_id not in ids:
                out.append(f"{p.name} knows an extra node {node_id[:8].decode()}")
    return out


_CONTAINERS = (dict, list, tuple, set, frozenset, OrderedDict, deque)
_STATE_MODULES = ("disquette.core.", "disquette.commands.", "disquette.observe.")


def _is_state(kind: type) -> bool:
    """Whether the walk goes through objects of ``kind``: containers, and the core,
    command and observe layers' objects (clients included)."""
    return (
        kind in _CONTAINERS
        or kind.__module__.startswith(_STATE_MODULES)
        or issubclass(kind, Client)
    )


def reachable_jobs(root: Node, *more: Any) -> dict[int, Job]:
    """Every :class:`Job` reachable from ``root`` (and ``more``, such as its command
    state) through the node's own state, but no other node, by ``id``."""
    found: dict[int, Job] = {}
    seen: set[int] = {id(root)}
    stack: list[Any] = [root, *more]
    walk: dict[type, bool] = {Node: False}  # by type, worked out once
    while stack:
        obj = stack.pop()
        if type(obj) is Job:
            found[id(obj)] = obj
        for ref in filter(None, gc.get_referents(obj)):  # (empty buckets skipped in C)
            kind = type(ref)
            go = walk.get(kind)
            if go is None:
                go = walk[kind] = _is_state(kind)
            if go and id(ref) not in seen:
                seen.add(id(ref))
                stack.append(ref)
    return found


def check_references(processes: list[SimNode]) -> list[str]:
    out = []
    for p in processes:
        node = p.node
        if node is None:
            continue
        registered = {id(job) for job in node.jobs.values()}
        out += [
            f"{p.name} still references a deleted job: {job!r}"
            for key, job in reachable_jobs(node, p.state).items()
            if key not in registered
        ]
        for bucket_ms, job in node.schedule.entries():
            if id(job) not in registered:
                out.append(f"{p.name} schedules a deleted job: {job!r}")
            elif not bucket_ms <= job.awake < bucket_ms + RESOLUTION:
                out.append(f"{p.name} schedules {job!r} at {bucket_ms}, awake {job.awake}")
    return out


def check_single_queued(processes: list[SimNode]) -> list[str]:
    queued: dict[bytes, list[int]] = {}
    acked: set[bytes] = set()
    for p in processes:
        if p.node is None:
            continue
        for job in p.node.jobs.values():
            if job.state == QUEUED:
                queued.setdefault(job.id, []).append(p.index)
            elif job.state == ACKED:
                acked.add(job.id)
    index = {p.node_id: p.index for p in processes}
    out = []
    for job_id, where in queued.items():
        if len(where) > 1 and job_id not in acked:
            views = []
            for p in processes:
                job = p.node.jobs.get(job_id) if p.node is not None else None
                if job is not None:
                    holders = sorted(index.get(n, -1) for n in job.nodes_delivered)
                    views.append(f"{p.name} {STATE_NAMES[job.state].decode()} {_names(holders)}")
            out.append(f"{job_id.decode()} queued on {_names(where)} at once ({'; '.join(views)})")
    return out


def policies_agree(processes: list[SimNode]) -> bool:
    """Every running node holds a policy table with the same digest."""
    return len({p.node.policies.digest for p in processes if p.node is not None}) <= 1


def expected_policies(history: History) -> dict[bytes, PolicyWrite]:
    """The table the acknowledged writes imply: the greatest version of each name."""
    table: dict[bytes, PolicyWrite] = {}
    for write in history.policy_writes:
        current = table.get(write.name)
        if current is None or write.version > current.version:
            table[write.name] = write
    return table


def check_policies(processes: list[SimNode], history: History) -> list[str]:
    expected = expected_policies(history)
    out = []
    for p in processes:
        if p.node is None:
            continue
        records = p.node.policies.records
        for name in sorted(set(records) | set(expected)):
            have, want = records.get(name), expected.get(name)
            held = None if have is None else _policy_view(have)
            wanted = None if want is None else _policy_view(want)
            if held != wanted:
                out.append(f"{p.name} holds policy {name.decode()} {held}, writes say {wanted}")
    if not policies_agree(processes):
        out.append("policy digests differ between nodes")
    return out


def _policy_view(policy: Policy | PolicyWrite) -> str:
    """A policy version as a comparable text: version, writer, and what it says."""
    options = sorted(policy.options.items())
    what = "deleted" if policy.deleted else f"{policy.pattern.decode()} {options}"
    return f"v{policy.version[0]}@{policy.version[1][:8].decode()} {what}"


def disturbed(intervals: list[tuple[int, int]], margin: int, start: int, end: int) -> bool:
    """Whether a fault was on (or ended less than ``margin`` ago) at some moment of
    [start, end]."""
    return any(a <= end and start <= b + margin for a, b in intervals)


def check_dead_letters(
    history: History, intervals: list[tuple[int, int]], margin: int
) -> tuple[list[str], dict[str, int]]:
    """Property 8, with counts: dead letters, jobs dead-lettered, extra dead letters
    and late deliveries excused, jobs gone without an ack nor a dead letter (excused)."""
    by_origin: dict[bytes, list[DeadLetter]] = {}
    for letter in history.dead_letters.values():
        by_origin.setdefault(letter.origin, []).append(letter)
    body_of = {jid: body for body, jids in history.jobs_by_body.items() for jid in jids}
    out = []
    extra = late = missing = 0
    for origin, letters in by_origin.items():
        if origin == b"?":
            out += [f"dead letter {dl.job_id.decode()} names no origin" for dl in letters]
            continue
        body = body_of.get(origin)
        out += [
            f"dead letter {dl.job_id.decode()} of {origin.decode()} has another body"
            for dl in letters
            if body is not None and dl.body != body
        ]
        born = _issued(history, letters[0].body)
        made = sorted(dl.created for dl in letters)
        if len(letters) > 1:
            if not disturbed(intervals, margin, born, made[-1]):
                out.append(
                    f"{len(letters)} dead letters of {origin.decode()} without faults: "
                    + ", ".join(f"{dl.job_id.decode()}@{dl.created}" for dl in letters)
                )
            extra += len(letters) - 1
        for d in history.deliveries.get(origin, ()):
            if d.time > made[0] + INFLIGHT_MS:
                if not disturbed(intervals, margin, born, d.time):
                    out.append(
                        f"{origin.decode()} delivered by n{d.node} at {d.time}, after its "
                        f"dead letter was made at {made[0]}, without faults"
                    )
                late += 1
    overruns = 0
    for job_id, node, time in history.nack_overruns:
        if not disturbed(intervals, margin, _issued(history, body_of.get(job_id, b"")), time):
            out.append(f"a NACK on n{node} at {time} took {job_id.decode()} past its "
                       "policy's bounds and left it queued, without faults")  # fmt: skip
        overruns += 1
    end = NEVER  # any fault after the job's first ADDJOB may have taken its dead letter
    for job_id in history.deliveries:
        if job_id in history.acked or job_id in by_origin:
            continue
        born = _issued(history, body_of[job_id])
        if job_id in history.crashed_holders or disturbed(intervals, margin, born, end):
            missing += 1
            continue
        out.append(f"{job_id.decode()} gone without an ack nor a dead letter, without faults")
    stats = {
        "dead_letters": len(history.dead_letters),
        "dead_lettered_jobs": len(by_origin),
        "dead_letters_extra": extra,
        "delivered_after_dead_letter": late,
        "gone_without_dead_letter": missing,
        "nacks_past_bounds_queued": overruns,
    }
    return out, stats


def _issued(history: History, body: bytes) -> int:
    """When the first ADDJOB of a body was sent (0 when unknown: the whole run)."""
    issued = history.issued.get(body)
    return issued[0] if issued is not None else 0


DEDUP_KINDS = (RETRY, RESEND)
DEDUP_OUTCOMES = ("found", "second", "fresh", "failed")
DEDUP_STATS = (
    *(f"dedup_{kind}_{outcome}" for kind in DEDUP_KINDS for outcome in ("sent", *DEDUP_OUTCOMES)),
    "dedup_keys_split",
    "dedup_hits_short",
)


def check_dedup(history: History) -> tuple[list[str], dict[str, int]]:
    """Property 9, with counts of the ADDJOBs sent again (``dedup_<why>_sent``) and what
    each did: returned the copy its node held (``found``), created a second job while
    another node held one (``second``), created a job while no live node held one
    (``fresh``), or got no job ID (``failed``); and the keys that ended with more
    than one job (``dedup_keys_split``)."""
    out = []
    counts = dict.fromkeys(DEDUP_STATS, 0)
    ids: dict[bytes, set[bytes]] = {}
    for a in history.dedup_attempts:
        reply = a.reply
        if isinstance(reply, bytes):
            ids.setdefault(a.key, set()).add(reply)
        if a.held and reply not in a.held and not (a.pending and reply == "TRYAGAIN"):
            out.append(
                f"ADDJOB DEDUP {a.key.decode()} on n{a.node} at {a.time} replied {reply!r} "
                f"while the node held {[j.decode() for j in a.held]}"
            )
        if a.kind == FIRST:
            continue
        if a.held:
            outcome = "found"
        elif not isinstance(reply, bytes):
            outcome = "failed"
        else:
            outcome = "second" if a.elsewhere else "fresh"
        counts[f"dedup_{a.kind}_sent"] += 1
        counts[f"dedup_{a.kind}_{outcome}"] += 1
    for body, jids in history.jobs_by_body.items():
        ids.setdefault(body, set()).update(jids)
    counts["dedup_keys_split"] = sum(1 for jids in ids.values() if len(jids) > 1)
    counts["dedup_hits_short"] = sum(1 for a in history.dedup_attempts if a.short)
    return out, counts


def _names(indexes: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(f"n{i}" for i in indexes) + "]"
