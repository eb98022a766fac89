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
from disquette.core.schedule import RESOLUTION
from disquette.sim.history import History
from disquette.sim.process import SimNode

BAD_FLAGS = (
    (PFAIL, "fail?"),
    (FAIL, "fail"),
    (HANDSHAKE, "handshake"),
    (NOADDR, "noaddr"),
    (LEAVING, "leaving"),
)


def check_delivery(history: History, faulty: bool, excuse_crashes: bool = True) -> list[str]:
    out = []
    for job_id, added in history.added.items():
        if job_id in history.deliveries or (faulty and not is_at_least_once(job_id)):
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


def _names(indexes: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(f"n{i}" for i in indexes) + "]"
