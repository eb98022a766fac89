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
   that follows throughput instead of the dataset. The count of acknowledged
   jobs the node keeps as jobs move (``/metrics``' jobs by state) is theirs.
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

The skew runs (clocks set off virtual time) add one, checked before each fault, when
the window closes and at the end:

10. **Clock estimates hold.** A node's estimate of a peer's clock offset is within
    its bound of the true one (the peer's skew minus its own) whenever every sample
    behind it was taken while all clocks held still: every PING of the estimate's
    window left after the last change of any clock (see :mod:`disquette.core.clock`,
    whose claim this is).

The coordination runs (jobs waiting for others, claims, progress logs) add three.
The first two are watched as the run goes, at the end of every event of every
node (the runner's observer), and judged at the end:

11. **Dependencies.** A *child* is a job added with AFTER; a dependency is
    *acknowledged* once a consumer's ACKJOB or FASTACK of it returned.

    (a) A child is never delivered unless the first holder to release it (to stop
    it waiting without failing it: its last dependency settled, QUEUED from
    another holder, or at once on ADDJOB) stopped waiting for each of its
    dependencies, when it did, because the dependency was acknowledged, or (IFGONE
    release) had gone without an ack: some node remembered it gone (a tombstone),
    or no node knew it. (The view is taken when that holder settles each
    dependency, not at the release: the node that told it of a dependency gone may
    crash in between.) The core counts a dependency no node knows as
    acknowledged (:mod:`disquette.core.dependency`), so for IFGONE fail two cases
    are excused, and counted: every copy of the dependency was destroyed by
    crashes without an AOF (``deps_lost_excused``), or it went without an ack and
    the nodes that remembered it did not live to say so, or never watched it
    (``deps_forgotten_excused``). A dependency held unacknowledged anywhere (a
    down node whose AOF names it counts) is never an excuse.

    (b) After the heal and the drain, a child that no holder failed was
    delivered, unless its own copies were lost as property 1 excuses
    (``children_lost``); a child with IFGONE release is never failed; a failure is
    right only when one of its dependencies was then gone (a tombstone) and not
    acknowledged. Failures are seen when a holder marks a copy failed or keeps
    the tombstone of a job it failed (the designated holder fails and deletes a
    job in one event).

    (c) At the end no node waits for a dependency (``deps.waits`` empty: a wait
    whose jobs were released, failed or deleted goes with them) nor keeps a
    progress log to send; property 2 already says that no job is left.
12. **Claims.** On every node a job's claim number never goes back, from one of
    the node's events to the next, while the node holds the job: deliveries and
    CLAIM messages only raise it, and a restart with the AOF brings it back as it
    was (a restart without one starts the node's sequence again: it lost the job;
    a node that let a job go forgets its number). Without faults each delivery of
    a job gets a larger claim than every earlier delivery it could have heard of:
    on its node, or on another more than the bus's longest latency before. Two
    holders whose retry timers fire together (Disque's requeue race: their
    WILLQUEUEs cross) can each deliver the job before the other's CLAIM arrives,
    with the same number; those are counted (``claims_concurrent``), as under
    faults is every delivery whose claim is not the largest yet
    (``claims_repeated``). A command refused with
    -STALECLAIM names a claim that was superseded: a delivery of that job with a
    larger claim came before the refusal.
13. **Progress logs converge** (checked after the heal, once the cluster has
    been stable for ``progress_check`` ms with consumers paused, before the drain
    acknowledges everything). Every job held unacknowledged by running nodes has
    the same progress log on each of them, and that log holds every entry whose
    WORKING was answered, unless a crash without an AOF destroyed every copy of
    the entry while the job was unacknowledged (``progress_entries_lost``).

The flow-to-disk runs (jobs spilled to a store past a level, loaded back when
named, when due or by read-ahead; disk faults) extend two and add four. A
spilled job is *held*: property 2 counts the jobs left in a node's spill index,
and a copy on disk is a live copy. A disk fault that damages a record (a
corruption) destroys that node's copy, as a crash does: property 1 excuses a job
whose copies were all destroyed by crashes (when the run excuses them) and
corruptions, and one whose record was corrupted while that node held its last
copy; nothing else (a write failure loses nothing: it stops spilling).

14. **Bodies.** Every body a client is given -- by GETJOB, QPEEK, SHOW and
    JSCAN REPLY ALL -- is byte for byte the body its job ID was added with (the
    ADDJOB's, or for a job whose ADDJOB never answered, the first one seen, which
    must be a body some ADDJOB sent and no other job's).
15. **Queue order.** A GETJOB serves the head of its queue, the spilled jobs
    included: right after the reply no job left in the queue on that node, in
    memory or on disk, comes before a job served, by priority then ctime. A QPEEK
    lists its jobs in that order (from the tail: the reverse).
16. **The spill index agrees with itself** (when the window closes, mid-traffic,
    and at the end). On each node the index counts its entries; each entry's
    record, when readable, holds a job with that ID hash, not in memory too; the
    live bytes per segment add up to the bytes on disk; each queue's spilled jobs
    are sorted runs whose counts add up, each entry naming a queued job of that
    queue, priority and ctime on disk; every queued job on disk is listed in its
    queue, no other; so ``spill.count`` is the sum of the queues' spilled counts
    plus the spilled jobs not queued.
17. **Memory stays bounded while spilling works.** After each cron tick of a node
    over its level whose spilling works (no write failure pending, the disk under
    its limit), no queue holds more than its head in memory (``window`` jobs, or
    the COUNT of its consumers' last GETJOB if larger, at most ``MAX_HEAD``), and no job that
    may spill (not queued, no extension, not in flight, its timer more than the
    horizon away) stays in memory more than ``SPILL_LAG_MS``: a backlog, the one
    thing that grows with the workload, lives on disk; memory holds the windows
    and the jobs that cannot move (in flight, being replicated, acknowledged,
    due soon).

The rate runs (queues with ``rate`` and ``concurrency`` policies, consumers on every
node, see :mod:`disquette.sim.ratesim`) add one, measured on the clients' side:

18. **Limits hold within their bound.** The jobs of the rate-limited queue handed to
    consumers in any sliding second, cluster-wide, are at most ``L + ceil(L/10) + n``
    (:mod:`disquette.core.ratelimit`'s bound for nodes that agree; plus ``L * d / 1000``
    when clocks are ``d`` ms apart); the jobs of the concurrency-limited queue that
    consumers hold (delivered, not yet acknowledged or NACKed) are at most ``C``.
    Under partitions and crashes the bounds are the fault bounds: n times the rate
    bound, and ``(n + crashes) x C``. The worst overshoot measured is reported
    either way.

The cron runs (recurring jobs set before the window, no producers or consumers)
add one:

19. **One job per tick.** Every tick of every schedule, from the first at or
    after the write that set it to the last that had a period to fire before the
    end, has exactly one job cluster-wide: the jobs with its de-duplication key
    (``cron:<name>:<tick>``) that any node held, seen at each crash and at the
    end (a copy in ``wait-repl`` is not a job yet), counted by job ID. A tick
    near a disturbance (from ``CRON_BEFORE`` ms before it starts to
    ``CRON_AFTER`` ms after it ends: failure detection clearing, a restarted node
    holding back) may have none or two; those are counted
    (``cron_ticks_missing``, ``cron_ticks_duplicated``), not violations.

The outcomes runs (NACK DELAY and backoffs, ACKJOB RESULT, WAITJOB, CANCEL) add
four. A job cancelled is excused from property 1 (it may be cancelled before any
consumer takes it). *Disturbed* is property 8's: a fault on at some moment of the
interval in question, each extended by two node timeouts.

20. **A postponed requeue waits for its delay.** After a NACK a node answered 1 for
    at ``t``, with ``DELAY d`` or for a job added with a ``BACKOFF`` (``d`` the
    backoff of that requeue, by the node's counters), no node delivers the job
    before ``t + d``. Without faults, never. Under faults a holder cut off from the
    NACKing node when its POSTPONE was sent requeues on its own timer (as Disque's
    holders do): a delivery before the end of the delay is excused, and counted
    (``early_deliveries_excused``), only by another node than the one that
    postponed it (or by that node in a later life: a crash without an AOF took the
    postponed copy with it) and only when the job was disturbed between the NACK
    and that delivery. A later NACK of the job (from a consumer holding another
    delivery of it) decides from then on: its own delay, or none.
21. **WAITJOB never answers early** (under every fault schedule, no excuse):
    ``acked`` comes after an ACKJOB or FASTACK of the job was answered, with the
    result one of those gave (nil when one gave none); ``cancelled`` after a CANCEL
    of it was answered; ``gone`` only for a job added to expire, once its TTL is
    over; ``unknown`` only when no node holds the job unacknowledged (nor a down
    node's AOF); nil only with a TIMEOUT, once it passed.
22. **A cancelled job stays cancelled.** After a CANCEL is answered, the job is not
    delivered again, unless disturbed between the CANCEL and the delivery
    (``delivered_after_cancel_excused``: a holder cut off keeps its copy until the
    cancellation reaches it); a WORKING answered on a node after that node knew the
    cancellation (it answered the CANCEL, or was seen holding the outcome, in the
    same life) fails with -CANCELLED, and its worker stops.
23. **Every WAITJOB is answered** once the cluster heals (liveness): at the end none
    is pending; one whose node crashed saw its connection drop.

24. **Mixed releases understand each other** (upgrade runs): no node is ever sent
    a frame it cannot read with its own release's codec (the network reports each,
    see :mod:`disquette.sim.network`), and at the end every node of protocol 2 or
    more knows the protocol each linked peer's running release speaks.

Each check returns human-readable violations; an empty list means it held.
"""

from __future__ import annotations

import gc
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Any

from disquette.core.client import Client
from disquette.core.ids import is_at_least_once
from disquette.core.job import ACKED, ACTIVE, DELIVERED, QUEUED, STATE_NAMES, Job
from disquette.core.membership import FAIL, HANDSHAKE, LEAVING, NOADDR, PFAIL
from disquette.core.node import Node
from disquette.core.policy import Policy
from disquette.core.schedule import RESOLUTION
from disquette.core.spill import HORIZON_MS, MAX_HEAD, SWEEP_REST_MS, fingerprint
from disquette.sim.history import (
    ACKED_COPY,
    DROPPED,
    FIRST,
    FORGOTTEN,
    GONE,
    HELD,
    LOST,
    NEVER,
    NIL,
    RESEND,
    RETRY,
    Child,
    DeadLetter,
    History,
    PolicyWrite,
    ProgressEntry,
    Release,
    WaitCall,
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
    for job_id in history.added:
        if job_id in history.deliveries or job_id in dead_lettered:
            continue
        if job_id in history.children:
            continue  # property 11 says when a job waiting for others must be delivered
        if job_id in history.cancels:
            continue  # cancelled (outcomes runs): maybe before anyone could take it
        problem = undelivered(history, job_id, faulty, excuse_crashes)
        if problem is not None:
            out.append(problem)
    return out


def undelivered(history: History, job_id: bytes, faulty: bool, excuse_crashes: bool) -> str | None:
    """Property 1 for one acknowledged job never delivered: the violation, or None when
    the run's faults excuse it."""
    added = history.added[job_id]
    if faulty and not is_at_least_once(job_id):
        return None
    if faulty and added.async_ and added.external:
        return None  # no copy anywhere but in fire-and-forget REPLJOBs, which faults may lose
    crashed = history.crashed_holders.get(job_id, set())
    lost = job_id in history.last_copy_lost
    if added.async_ and lost:
        return None  # maybe before its copies were made: a crash right after the reply
    if excuse_crashes and len(crashed) >= added.repl:
        return None
    corrupted = history.corrupted.get(job_id, ())
    if any(c.last for c in corrupted):
        return None  # a disk fault damaged its last copy (flow-to-disk runs)
    damaged = history.corrupted_holders(job_id)
    if damaged and len(damaged | (crashed if excuse_crashes else set())) >= added.repl:
        return None  # every copy destroyed, by crashes or damaged records
    return (
        f"never delivered: {job_id.decode()} (REPLICATE {added.repl}"
        f"{' ASYNC' if added.async_ else ''}, added on n{added.node} at "
        f"{added.time}, holders {_names(added.holders)}, crashed holders "
        f"{_names(sorted(crashed))}{', last copy lost' if lost else ''}"
        f"{f', corrupted on {_names(sorted(damaged))}' if damaged else ''})"
    )


def waits_for_ttl(job: Job, faulty: bool) -> bool:
    """A copy that Disque leaves alone until its TTL (see the module docstring)."""
    return faulty and job.state == ACTIVE and not job.retry


def check_collected(processes: list[SimNode], history: History, faulty: bool) -> list[str]:
    """Property 2. A damaged record still in a node's index is its job's copy, as
    the corruption found it (a spilled job never changes): one that waits for its
    TTL may stay there."""
    damaged = {
        (c.node, fingerprint(job_id)): c
        for job_id, corruptions in history.corrupted.items()
        for c in corruptions
    }
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
        for fp, loc, _size, spilled in p.spilled():  # (flow to disk: held on disk)
            if spilled is None:
                c = damaged.get((p.index, fp))
                if c is not None and faulty and c.state == ACTIVE and not c.retry:
                    continue
                out.append(f"not collected on {p.name}: a damaged record at {loc:#x} still "
                           "in the spill index")  # fmt: skip
            elif not waits_for_ttl(spilled, faulty):
                state = STATE_NAMES[spilled.state].decode()
                out.append(f"not collected on {p.name}: {spilled.id.decode()} {state} (on disk)")
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


def check_dialects(processes: list[SimNode]) -> list[str]:
    """Property 24's end: what each versioned node believes its linked peers speak."""
    out = []
    running = {p.node_id: p for p in processes if p.node is not None}
    for p in running.values():
        node = p.node
        assert node is not None
        if node.dialect.speech.version < 2:
            continue  # (protocol 1 knew nothing of versions)
        for node_id, peer in running.items():
            entry = node.cluster.nodes.get(node_id)
            if peer is p or entry is None or not entry.link or peer.node is None:
                continue
            want = peer.node.dialect.speech.version
            if entry.bus_version != want:
                out.append(f"{p.name} believes {peer.name} speaks protocol {entry.bus_version}, "
                           f"not {want}")  # fmt: skip
    return out


def check_clocks(processes: list[SimNode]) -> tuple[list[str], int]:
    """Property 10, and how many estimates it could check."""
    out = []
    checked = 0
    by_id = {p.node_id: p for p in processes}
    for p in processes:
        if p.node is None:
            continue
        for row in p.node.cluster.nodes.values():
            peer = by_id.get(row.id)
            clock = row.clock
            if peer is None or peer is p or clock is None:
                continue
            if min(s.sent for s in clock.samples) <= p.clock_settled:
                continue  # a sample from before some clock changed
            checked += 1
            true = peer.clock_offset - p.clock_offset
            if abs(clock.offset - true) > clock.bound:
                out.append(
                    f"{p.name} estimates {peer.name}'s clock {clock.offset:+d} +/- "
                    f"{clock.bound} ms off its own, but it is {true:+d} ms off"
                )
    return out, checked


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
        acked = sum(job.state == ACKED for job in node.jobs.values())
        if node.jobs_acked != acked:
            out.append(f"{p.name} counts {node.jobs_acked} acked jobs, holds {acked}")
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
                copy = p.node.jobs.get(job_id) if p.node is not None else None
                if copy is not None:
                    holders = sorted(index.get(n, -1) for n in copy.nodes_delivered)
                    views.append(f"{p.name} {STATE_NAMES[copy.state].decode()} {_names(holders)}")
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


# Coordination runs: properties 11 to 13 -----------------------------------------------

DEPENDENCY_STATS = (
    "children",
    "children_delivered",
    "children_duplicated",
    "children_failed",
    "children_lost",
    "deps_unacked_at_release",
    "deps_lost_excused",
    "deps_forgotten_excused",
    "doomed_parents",
)


def check_dependencies(
    history: History, faulty: bool, excuse_crashes: bool = True
) -> tuple[list[str], dict[str, int]]:
    """Property 11 (a) and (b), with counts: children (jobs added with AFTER), those
    delivered (and those of them delivered again unexplained: a callback run twice),
    those failed (a dependency went without an ack), those never delivered
    whose own copies were lost (excused as property 1 excuses), the dependencies not
    acknowledged when a child was first released, and those of them excused:
    destroyed by crashes (``lost``) or gone from every node's memory
    (``forgotten``)."""
    out = []
    stats = dict.fromkeys(DEPENDENCY_STATS, 0)
    stats["children"] = len(history.children)
    stats["doomed_parents"] = len(history.doomed)
    for job_id, child in history.children.items():
        name = job_id.decode()
        deliveries = history.deliveries.get(job_id)
        failure = history.failures.get(job_id)
        if failure is not None:
            problem = _unjustified_failure(history, child, failure)
            if problem is not None:
                out.append(f"{name} failed on n{failure.node} at {failure.time}: {problem}")
        if not deliveries:
            if failure is not None:
                stats["children_failed"] += 1
                continue
            problem = undelivered(history, job_id, faulty, excuse_crashes)
            if problem is None:
                stats["children_lost"] += 1
            else:
                out.append(
                    f"{problem}: waited for {[d.decode() for d in child.after]} (IFGONE "
                    f"{'release' if child.release else 'fail'}; first released "
                    f"{history.releases.get(job_id)})"
                )
            continue
        stats["children_delivered"] += 1
        # A callback run twice (a chord's): property 3 allows none without faults;
        # with them, this counts how many were (docs/tasks.md, "Workflows").
        stats["children_duplicated"] += any(d.duplicate for d in deliveries)
        release = history.releases.get(job_id)
        if release is None:
            out.append(f"{name} delivered at {deliveries[0].time}, never seen released")
            continue
        for dep_id in child.after:
            acked = history.acked.get(dep_id)
            settled, view = history.settled_view(job_id, dep_id, release)
            if acked is not None and acked <= settled:
                continue
            stats["deps_unacked_at_release"] += 1
            if view == LOST and not child.release:
                stats["deps_lost_excused"] += 1
            elif view == FORGOTTEN and not child.release:
                stats["deps_forgotten_excused"] += 1
            elif view in (HELD, ACKED_COPY) or (view == GONE and not child.release):
                what = "pending" if view != GONE else "gone without an ack (IFGONE fail)"
                out.append(
                    f"{name} released on n{release.node} at {release.time} (delivered at "
                    f"{deliveries[0].time}), its dependency {dep_id.decode()} settled "
                    f"there at {settled} while {what}: {view}, acked {acked}"
                )
    return out, stats


def _unjustified_failure(history: History, child: Child, failure: Release) -> str | None:
    """Why a child's failure was wrong (None: it was right): a job is failed when one of
    its dependencies went without an ack, so one must have been gone (a node
    remembering it) and not acknowledged then; never with IFGONE release."""
    if child.release:
        return "IFGONE release"
    views = {}
    for dep_id in child.after:
        acked = history.acked.get(dep_id)
        settled, view = history.settled_view(child.job_id, dep_id, failure)
        if view == GONE and (acked is None or acked > settled):
            return None
        views[dep_id.decode()] = view
    return f"no dependency gone without an ack: {views}"


def check_waits(processes: list[SimNode]) -> list[str]:
    """Property 11 (c), at the end: no node waits for a dependency any longer, nor
    keeps a progress log to send."""
    out = []
    for p in processes:
        node = p.node
        if node is None:
            continue
        for dep_id, wait in node.deps.waits.items():
            jobs = [job.id.decode() for job in wait.jobs]
            out.append(f"{p.name} still waits for {dep_id.decode()} (jobs {jobs})")
        if node.progress_pending:
            out.append(f"{p.name} still has logs to send: {list(node.progress_pending)}")
    return out


def observe_claims(
    process: SimNode, seen: dict[bytes, int], candidates: Iterable[bytes]
) -> list[str]:
    """Property 12 on one node at the end of one of its events: no job's claim is
    smaller than the last one seen for it there; ``seen`` is updated (a job the node
    no longer holds is forgotten: a node that holds no copy accepts any claim).
    ``candidates`` are the jobs that may have a claim: those delivered so far (a
    claim is only ever made by a delivery)."""
    node = process.node
    assert node is not None
    jobs = node.jobs
    out = []
    for job_id in candidates:
        job = jobs.get(job_id)
        last = seen.get(job_id, 0)
        if job is None:
            if last:
                del seen[job_id]
            continue
        claim = 0 if job.extra is None else job.extra.claim
        if claim < last:
            out.append(f"{process.name}'s claim of {job_id.decode()} went back from {last} "
                       f"to {claim}")  # fmt: skip
        if claim != last:
            seen[job_id] = claim
    return out


CLAIM_STATS = ("claims_delivered", "claims_concurrent", "claims_repeated", "claims_refused")


def check_claims(
    history: History, faulty: bool, latency: int = 0
) -> tuple[list[str], dict[str, int]]:
    """Property 12's cluster side, with counts: without faults each delivery's claim is
    larger than that of every earlier delivery of the job it could have heard of --
    on its node, or elsewhere more than ``latency`` ms (the bus's longest) before it;
    deliveries on two nodes closer than that are concurrent (both holders' retry
    timers fired together) and only counted (``claims_concurrent``), and under
    faults so is every delivery whose claim is not the largest yet
    (``claims_repeated``). Every claim refused as stale was superseded by a delivery
    with a larger one before the refusal."""
    out = []
    delivered = concurrent = repeated = 0
    for job_id, deliveries in history.deliveries.items():
        claimed = [d for d in deliveries if d.claim]
        delivered += len(claimed)
        for i, d in enumerate(claimed):
            earlier = [e for e in claimed[:i] if e.claim >= d.claim]
            if not earlier:
                continue
            heard = [e for e in earlier if e.node == d.node or d.time - e.time > latency]
            if not heard:
                concurrent += 1
            elif faulty:
                repeated += 1
            else:
                e = heard[-1]
                out.append(f"{job_id.decode()} delivered by n{d.node} at {d.time} with "
                           f"claim {d.claim}, after n{e.node} delivered it at {e.time} with "
                           f"{e.claim}")  # fmt: skip
    for refused in history.stale_claims:
        if not any(
            d.claim > refused.claim and d.time <= refused.time
            for d in history.deliveries.get(refused.job_id, ())
        ):
            out.append(
                f"{refused.command.decode()} {refused.job_id.decode()} CLAIM {refused.claim} "
                f"refused by n{refused.node} at {refused.time}, never superseded"
            )
    stats = {
        "claims_delivered": delivered,
        "claims_concurrent": concurrent,
        "claims_repeated": repeated,
        "claims_refused": len(history.stale_claims),
    }
    return out, stats


PROGRESS_STATS = ("progress_entries", "progress_entries_lost", "progress_logs_checked")


def check_progress(processes: list[SimNode], history: History) -> tuple[list[str], dict[str, int]]:
    """Property 13, with counts: every job held unacknowledged by a live node has the
    same progress log on each of them, holding every entry a node answered WORKING
    for (but those whose every copy a crash destroyed)."""
    copies: dict[bytes, list[tuple[SimNode, Job]]] = {}
    acked = set(history.acked)
    for p in processes:
        if p.node is None:
            continue
        for job in p.node.jobs.values():
            if job.state == ACKED:
                acked.add(job.id)
            else:
                copies.setdefault(job.id, []).append((p, job))
    entries: dict[bytes, list[ProgressEntry]] = {}
    for entry in history.progress:
        entries.setdefault(entry.job_id, []).append(entry)
    out = []
    checked = 0
    for job_id, held in copies.items():
        if job_id in acked:
            continue
        logs = [tuple(job.extra.log or ()) if job.extra is not None else () for _, job in held]
        if not any(logs) and job_id not in entries:
            continue
        checked += 1
        name = job_id.decode()
        if len(set(logs)) > 1:
            views = "; ".join(
                f"{p.name} {[text.decode() for _, _, text in log]}"
                for (p, _), log in zip(held, logs, strict=True)
            )
            out.append(f"{name}'s progress logs differ: {views}")
        for entry in entries.get(job_id, ()):
            if entry.lost:
                continue
            missing = [
                p.name
                for (p, _), log in zip(held, logs, strict=True)
                if all(text != entry.text for _, _, text in log)
            ]
            if missing:
                out.append(
                    f"{name}'s progress entry {entry.text.decode()} (WORKING answered by "
                    f"n{entry.node} at {entry.time}) missing on {missing}"
                )
    stats = {
        "progress_entries": len(history.progress),
        "progress_entries_lost": sum(1 for e in history.progress if e.lost),
        "progress_logs_checked": checked,
    }
    return out, stats


def _names(indexes: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(f"n{i}" for i in indexes) + "]"


# Flow-to-disk runs: properties 14 to 17 ---------------------------------------------

SPILL_LAG_MS = SWEEP_REST_MS + 500  # a sweep's rest, and a few cron ticks
FLOW_STATS = (
    "jobs_spilled",
    "jobs_loaded",
    "readahead_misses",
    "readahead_batches",
    "spill_read_errors",
    "spill_compactions",
    "spill_write_failures",
    "records_corrupted",
    "lost_to_corruption",
    "memory_checks",
    "peak_jobs_in_memory",
    "qpeek_jobs",
    "show_jobs",
    "jscan_jobs",
)


def check_bodies(history: History) -> list[str]:
    """Properties 14 and 15 as the clients saw them."""
    return history.wrong_bodies + history.misordered


def _order(job: Job) -> tuple[int, int]:
    """Where a job stands in its queue: the highest priority first, then by ctime."""
    return (-job.priority, job.ctime)


def served_out_of_order(process: SimNode, queue_name: bytes, job_id: bytes) -> str | None:
    """Property 15 for one job a GETJOB just served: the violation, or None when no job
    left in its queue on that node comes before it (in memory, or on disk: a
    spilled queue's runs say each spilled job's priority and ctime)."""
    node = process.node
    job = process.in_memory(job_id)
    queue = node.queues.get(queue_name) if node is not None else None
    if job is None or queue is None:
        return None
    mine = _order(job)
    head = queue.jobs.first()
    if head is not None and _order(head) < mine:
        return (f"GETJOB on {process.name} served {job_id.decode()} {mine} before "
                f"{head.id.decode()} {_order(head)}, in memory")  # fmt: skip
    spilled = queue.spilled
    if spilled is not None:
        level = spilled.top_level()
        run = spilled.runs[level] if level >= 0 else None
        if run is not None and (-level, run.first_ctime()) < mine:
            return (f"GETJOB on {process.name} served {job_id.decode()} {mine} before a "
                    f"job on disk {(-level, run.first_ctime())}")  # fmt: skip
    return None


def peek_out_of_order(process: SimNode, job_ids: list[bytes], reverse: bool) -> str | None:
    """Property 15 for a QPEEK's reply: its jobs in GETJOB's order (reversed when it
    peeked from the tail), judged by the node's copies (read, never loaded back)."""
    keys = []
    for job_id in job_ids:
        job = process.copy(job_id)
        if job is None:
            return None  # (damaged since, or gone: nothing to judge by)
        keys.append(_order(job))
    if keys != sorted(keys, reverse=reverse):
        return f"QPEEK on {process.name}{' from the tail' if reverse else ''} listed {keys}"
    return None


def check_spill_index(processes: list[SimNode]) -> list[str]:
    """Property 16 on every running node."""
    out = []
    for p in processes:
        node = p.node
        if node is None or p.store is None:
            continue
        spill = node.spill
        name = p.name
        entries = p.spilled()
        if len(entries) != spill.count:
            out.append(f"{name}'s spill index counts {spill.count} jobs but holds {len(entries)}")
        size = sum(e[2] for e in entries)
        live = sum(spill.seg_live.values())
        if not size == live == spill.bytes:
            out.append(f"{name}'s spill log: {spill.bytes} live bytes, {live} by segment, "
                       f"{size} in the index")  # fmt: skip
        jobs: dict[int, list[Job | None]] = {}
        for fp, _loc, _size, job in entries:
            jobs.setdefault(fp, []).append(job)
            if job is None:
                continue
            if fingerprint(job.id) != fp:
                out.append(f"{name}'s spill index files {job.id.decode()} under another hash")
            if p.in_memory(job.id) is not None:
                out.append(f"{name} holds {job.id.decode()} in memory and on disk")
        listed: set[int] = set()
        in_queues = 0
        for queue in node.queues.values():
            spilled = queue.spilled
            if spilled is None:
                continue
            qname = queue.name.decode()
            total = 0
            for priority, run in enumerate(spilled.runs):
                if run is None:
                    continue
                pairs = list(run)
                if run.count != len(pairs) or not pairs:
                    out.append(f"{name}'s queue {qname} priority {priority}: a run counting "
                               f"{run.count} holds {len(pairs)}")  # fmt: skip
                if pairs != sorted(pairs, key=lambda pair: pair[0]):
                    out.append(f"{name}'s queue {qname} priority {priority}: a run out of order")
                total += len(pairs)
                for ctime, fp in pairs:
                    listed.add(fp)
                    copies = jobs.get(fp)
                    if not copies:
                        out.append(f"{name}'s queue {qname} lists a spilled job the index "
                                   "does not hold")  # fmt: skip
                        continue
                    readable = [j for j in copies if j is not None]
                    if readable and not any(
                        j.state == QUEUED
                        and j.queue == queue.name
                        and j.ctime == ctime
                        and j.priority == priority
                        for j in readable
                    ):
                        found = ", ".join(f"{j.id.decode()} {STATE_NAMES[j.state].decode()} "
                                          f"{j.queue!r}" for j in readable)  # fmt: skip
                        out.append(f"{name}'s queue {qname} lists ({priority}, {ctime}) but "
                                   f"the record is {found}")  # fmt: skip
            if total != spilled.count or not total:
                out.append(f"{name}'s queue {qname} counts {spilled.count} jobs on disk, "
                           f"its runs hold {total}")  # fmt: skip
            in_queues += spilled.count
        not_queued = 0
        for fp, _loc, _size, job in entries:
            if fp not in listed:
                not_queued += 1
            if job is None:
                continue
            if job.state == QUEUED and fp not in listed:
                out.append(f"{name} has {job.id.decode()} queued on disk but in no queue")
            elif job.state != QUEUED and fp in listed:
                out.append(f"{name}'s queue {job.queue!r} lists {job.id.decode()}, which is "
                           f"{STATE_NAMES[job.state].decode()} on disk")  # fmt: skip
        if spill.count != in_queues + not_queued:
            out.append(f"{name}'s spill index counts {spill.count} jobs: {in_queues} in "
                       f"queues and {not_queued} not queued")  # fmt: skip
    return out


def may_spill(job: Job, now: int) -> bool:
    """A job flow to disk moves out of memory while over the level, queued or not
    (see core/spill.py: not in flight, no extension, not being replicated, and for
    one not queued, its timer more than the horizon away)."""
    if job.extra is not None or job.body is None or job.waiter is not None:
        return False
    return job.state == ACTIVE and not job.flags & DELIVERED and job.awake - now > HORIZON_MS


class SpillWatch:
    """Property 17, watched after every cron tick of every node; also the highest
    number of jobs a node held in memory over its level. ``queues`` are the queues a
    run's clients use (looked up by name: walking a node's queue table every tick
    costs more than the run; a node holding others is walked)."""

    def __init__(self, queues: tuple[bytes, ...] = ()) -> None:
        self.queues = queues
        # (node, job ID) -> since when, and the job object: a job spilled and loaded back
        # between two ticks (a repair examines it, say) is a new object, a new stay.
        self.since: dict[tuple[int, bytes], tuple[int, Job]] = {}
        self.violations: list[str] = []
        self.checks = 0
        self.peak_jobs = 0

    def after_cron(self, process: SimNode, now: int) -> None:
        node = process.node
        assert node is not None
        spill = node.spill
        index = process.index
        if not process.spilling or not spill.can_spill():
            self.forget(index)
            return
        self.checks += 1
        self.peak_jobs = max(self.peak_jobs, len(node.jobs))
        queues = [q for name in self.queues if (q := node.queues.get(name)) is not None]
        for queue in queues if len(queues) == len(node.queues) else node.queues.values():
            jobs = queue.jobs
            # Its head: the read-ahead window, or its consumers' last COUNT (bounded).
            window = spill.head(queue)
            if window > max(spill.window, MAX_HEAD):
                self.violations.append(f"{process.name} keeps a head of {window} jobs")
            if len(jobs) > window and all(job.extra is None for job in jobs):
                self.violations.append(
                    f"{process.name} holds {len(jobs)} jobs of {queue.name.decode()} in "
                    f"memory after a cron tick at {now}, over its level (window {window})"
                )
        clock = node.clock()
        # (A job that may spill is not queued: it waits in the schedule for its timer.)
        spillable = {job.id: job for _, job in node.schedule.entries() if may_spill(job, clock)}
        for key, (_, job) in list(self.since.items()):
            if key[0] == index and spillable.get(key[1]) is not job:
                del self.since[key]
        for job_id, job in spillable.items():
            since = self.since.setdefault((index, job_id), (now, job))[0]
            if now - since > SPILL_LAG_MS:
                self.violations.append(
                    f"{process.name} keeps {job_id.decode()} in memory since {since} (now "
                    f"{now}), over its level, though it may spill"
                )
                self.since[(index, job_id)] = (now, job)  # (once per lag)

    def forget(self, index: int) -> None:
        """Start over on a node (it is under its level, cannot spill, or crashed)."""
        for key in [k for k in self.since if k[0] == index]:
            del self.since[key]


def rate_bound(rate: int, nodes: int) -> int:
    """Property 18's bound on the deliveries of a sliding second, nodes agreeing."""
    return rate + -(-rate // 10) + nodes


def busiest_second(times: list[int]) -> int:
    """The most of ``times`` (sorted, ms) in any window of 1000 ms."""
    worst = 0
    start = 0
    for end, t in enumerate(times):
        while t - times[start] >= 1000:
            start += 1
        worst = max(worst, end - start + 1)
    return worst


def check_limits(
    deliveries: list[int],
    peak: int,
    rate: int,
    concurrency: int,
    nodes: int,
    faults: int,
    skew: int = 0,
) -> list[str]:
    """Property 18: ``deliveries`` (times, ms) of the rate-limited queue and the peak of
    jobs held from the concurrency-limited one, against their bounds (``faults``:
    0 without partitions or crashes, else the crashes plus one; ``skew``: ms between
    the clocks furthest apart)."""
    violations = []
    worst = busiest_second(sorted(deliveries))
    bound = (rate_bound(rate, nodes) + -(-rate * skew // 1000)) * (nodes if faults else 1)
    if worst > bound:
        violations.append(f"{worst} jobs of rate {rate} delivered in a second (bound {bound})")
    bound = concurrency * (nodes + faults - 1 if faults else 1)
    if peak > bound:
        violations.append(f"{peak} jobs of concurrency {concurrency} in flight (bound {bound})")
    return violations


CRON_BEFORE = 3000  # ms: a tick this long before a disturbance may be in flight through it
CRON_STATS = (
    "cron_ticks",
    "cron_ticks_missing",
    "cron_ticks_duplicated",
    "cron_ticks_disturbed",
    "cron_ticks_fired",
    "cron_fire_errors",
)


def check_cron(
    ticks: dict[bytes, list[int]],
    jobs: dict[bytes, set[bytes]],
    disturbed: list[tuple[int, int]],
    after: int,
) -> tuple[list[str], dict[str, int]]:
    """Property 19: ``ticks`` (seconds) by schedule name, ``jobs`` (IDs) by
    de-duplication key, ``disturbed`` (start, end) in absolute ms, ``after`` the
    margin past a disturbance's end (ms)."""
    out: list[str] = []
    stats = dict.fromkeys(CRON_STATS[:4], 0)
    for name, times in ticks.items():
        for tick in times:
            at = tick * 1000
            count = len(jobs.get(b"cron:%s:%d" % (name, tick), ()))
            near = any(a - CRON_BEFORE <= at <= b + after for a, b in disturbed)
            stats["cron_ticks"] += 1
            stats["cron_ticks_disturbed"] += near
            stats["cron_ticks_missing"] += count == 0
            stats["cron_ticks_duplicated"] += count > 1
            if count != 1 and not near:
                out.append(f"tick {tick} of {name.decode()} has {count} jobs, undisturbed")
    return out, stats


# Outcomes runs: properties 20 to 23 -------------------------------------------------

WAIT_KINDS = ("acked", "cancelled", "gone", "unknown", NIL, DROPPED)
OUTCOME_STATS = (
    "nacks_postponed",
    "requeues_postponed",
    "early_deliveries_excused",
    *(f"waitjobs_{kind}" for kind in WAIT_KINDS),
    "waitjobs_with_result",
    "waitjobs_overtaken_excused",
    "cancels",
    "cancels_held",
    "workings_cancelled",
    "delivered_after_cancel_in_flight",
    "delivered_after_cancel_excused",
)


def check_postponed(
    history: History, intervals: list[tuple[int, int]], margin: int
) -> tuple[list[str], dict[str, int]]:
    """Property 20, with counts: the NACKs that postponed a requeue, and the early
    deliveries excused."""
    out = []
    postponed = excused = 0
    later: dict[bytes, int] = {}  # job -> the time of the next NACK (walking backwards)
    for nack in reversed(history.nacks):
        after = later.get(nack.job_id, NEVER)
        later[nack.job_id] = nack.time
        if not nack.delay:
            continue
        postponed += 1
        until = min(nack.time + nack.delay, after)
        for d in history.deliveries.get(nack.job_id, ())[nack.seen :]:
            if d.time >= until:
                break
            elsewhere = (d.node, d.incarnation) != (nack.node, nack.incarnation)
            if elsewhere and disturbed(intervals, margin, nack.time, d.time):
                excused += 1
                continue
            out.append(
                f"{nack.job_id.decode()} delivered by n{d.node} at {d.time}, "
                f"{until - d.time} ms before the {nack.delay} ms delay of its NACK on "
                f"n{nack.node} at {nack.time} ended"
            )
    return out, {"nacks_postponed": postponed, "early_deliveries_excused": excused}


def check_waitjobs(history: History, beyond_tcp: bool) -> tuple[list[str], dict[str, int]]:
    """Property 21, with the answers counted by kind (and those with a result, and
    those excused: ``beyond_tcp`` when the run duplicates or reorders messages)."""
    out = []
    counts = {f"waitjobs_{kind}": 0 for kind in WAIT_KINDS}
    with_result = overtaken = 0
    for call in history.waits:
        problem = _early_answer(history, call)
        if problem is not None and beyond_tcp and _bare(history, call):
            overtaken += 1
        elif problem is not None:
            timeout = f" TIMEOUT {call.timeout}" if call.timeout else ""
            out.append(
                f"WAITJOB {call.job_id.decode()}{timeout} on n{call.node} sent at "
                f"{call.sent} answered {call.kind} at {call.answered}: {problem}"
            )
        if call.kind in WAIT_KINDS:
            counts[f"waitjobs_{call.kind}"] += 1
        with_result += call.result is not None
    counts["waitjobs_with_result"] = with_result
    counts["waitjobs_overtaken_excused"] = overtaken
    return out, counts


def _bare(history: History, call: WaitCall) -> bool:
    """Whether a WAITJOB's answer is what a bare acknowledgement (``acked``, nil) or
    DEPSTATE (``gone``) says of a job acknowledged or cancelled before it: its
    OUTCOME, sent first, was overtaken (a duplicate or reordered message: TCP never
    does that)."""
    at, job_id = call.answered, call.job_id
    if not (call.kind == "gone" or (call.kind == "acked" and call.result is None)):
        return False
    return any(t <= at for t, _ in history.ack_results.get(job_id, ())) or any(
        c.time <= at for c in history.cancels.get(job_id, ())
    )


def _early_answer(history: History, call: WaitCall) -> str | None:
    """What is wrong with a WAITJOB's answer (None: nothing, or not answered yet)."""
    kind, at, job_id = call.kind, call.answered, call.job_id
    if kind in ("", DROPPED):
        return None
    if kind == "acked":
        results = {result for t, result in history.ack_results.get(job_id, ()) if t <= at}
        if not results:
            return "no ACKJOB of it answered before"
        if call.result not in results:
            return f"result {call.result!r}, its ACKJOBs gave {sorted(results, key=repr)}"
        return None
    if kind == "cancelled":
        if any(c.time <= at for c in history.cancels.get(job_id, ())):
            return None
        return "no CANCEL of it answered before"
    if kind == "gone":
        expiry = history.doomed.get(job_id)
        if expiry is not None and expiry <= at:
            return None
        return "not added to expire" if expiry is None else f"its TTL ends at {expiry}"
    if kind == "unknown":
        return f"the job is {call.view}" if call.view == HELD else None
    if kind == NIL:
        if call.timeout and at >= call.sent + call.timeout:
            return None
        return "nil before its timeout" if call.timeout else "nil without a timeout"
    return "not an answer WAITJOB gives"


def check_cancels(
    history: History, intervals: list[tuple[int, int]], margin: int
) -> tuple[list[str], dict[str, int]]:
    """Property 22, with counts: CANCELs answered, those that held the job, WORKINGs
    refused with -CANCELLED, and the deliveries after a CANCEL excused."""
    out = []
    excused = in_flight = 0
    for job_id, cancels in history.cancels.items():
        first = min(cancels, key=lambda c: c.time)
        for d in history.deliveries.get(job_id, ())[first.seen :]:
            known = history.cancel_known.get((job_id, d.node, d.incarnation))
            what = (f"{job_id.decode()} delivered by n{d.node} at {d.time}, after its "
                    f"CANCEL on n{first.node} was answered at {first.time}")  # fmt: skip
            if known is not None and known < d.time:
                out.append(f"{what}, by a node that knew it cancelled since {known}")
            elif d.time - first.time <= INFLIGHT_MS:
                in_flight += 1
            elif disturbed(intervals, margin, first.time, d.time):
                excused += 1
            else:
                out.append(f"{what}, without faults")
    for w in history.workings:
        known = history.cancel_known.get((w.job_id, w.node, w.incarnation))
        if not w.cancelled and known is not None and known < w.time:
            out.append(
                f"WORKING {w.job_id.decode()} answered on n{w.node} at {w.time}, which "
                f"knew it cancelled since {known}"
            )
    stats = {
        "cancels": sum(len(c) for c in history.cancels.values()),
        "cancels_held": sum(1 for cs in history.cancels.values() for c in cs if c.held),
        "workings_cancelled": sum(1 for w in history.workings if w.cancelled),
        "delivered_after_cancel_in_flight": in_flight,
        "delivered_after_cancel_excused": excused,
    }
    return out, stats


def check_waits_answered(history: History) -> list[str]:
    """Property 23: no WAITJOB still pending at the end."""
    return [
        f"WAITJOB {call.job_id.decode()} on n{call.node} sent at {call.sent}"
        f"{f' TIMEOUT {call.timeout}' if call.timeout else ''} never answered"
        for call in history.waits
        if not call.kind
    ]
