"""Fault schedules: what goes wrong in a run, and when.

A :class:`FaultPlan` says which faults a run may suffer and how many; from it
and the run's seed, :meth:`FaultSchedule.generate` draws a concrete timeline of
:class:`Fault` events inside the fault window:

* ``crash`` / ``restart``: a node process dies (memory lost) and comes back
  from its files after an outage; never more than ``max_down`` nodes are down
  at once;
* ``partition`` / ``heal``: the nodes are split in two groups, or one node is
  isolated, or one direction between two nodes is cut; partitions do not
  overlap;
* ``break``: one open bus connection resets;
* ``leave`` / ``stay``: a node is told CLUSTER LEAVING yes, and later no;
* ``net``: the network starts dropping, duplicating and reordering messages
  at the plan's rates for the whole window;
* ``skew`` / ``unskew``: a node's machine clock is set up to ``max_skew`` ms
  ahead of or behind virtual time, and later put right; a node's episodes do
  not overlap;
* ``diskfail`` / ``diskok`` (flow-to-disk runs): a node's disk refuses writes
  for a while (its spill log keeps appends pending and flow to disk stops), then
  writes again; a node's episodes do not overlap;
* ``corrupt``: a byte flips in one record of a node's spill log (the runner picks
  the record and the byte when it happens, among those on disk then); the node
  must notice (a checksum), drop that job and keep every other copy.

At the end of the window the runner heals everything: cuts removed, message
faults off, every crashed node restarted, no node leaving. Clocks are not healed:
a skew still on then stays on to the end of the run, and the cluster must drain
and collect with it; so does a disk failure (the spill log is written again when
it ends, or never: nothing may be lost either way). Schedules are plain data, so
a failing run can print the one it used. Skews, then disk faults, are drawn last,
so a plan without them draws what it always drew. Neither disk fault makes a run
*faulty* (see :attr:`FaultPlan.faulty`): a write failure loses nothing, and a
damaged record is excused by its own rule (property 1).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


@dataclass
class FaultPlan:
    crashes: int = 0  # crash-and-restart cycles
    max_down: int = 1  # nodes down at the same time, at most
    outage: tuple[int, int] = (300, 4000)  # ms a crashed node stays down
    rolling: bool = False  # crash the nodes one after another, in turn, never two at once
    partitions: int = 0
    partition_length: tuple[int, int] = (300, 4000)  # ms
    link_breaks: int = 0
    leaving: int = 0  # episodes of a node marked leaving for a while
    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    skews: int = 0  # episodes of a node's clock set off virtual time
    max_skew: int = 3000  # ms, either way
    skew_length: tuple[int, int] = (1000, 5000)  # ms
    disk_failures: int = 0  # episodes of a node's disk refusing writes
    failure_length: tuple[int, int] = (200, 3000)  # ms
    corruptions: int = 0  # records damaged in spill logs
    tear_rate: float = 0.0  # crashes that tear the spill log's pending bytes

    @property
    def faulty(self) -> bool:
        return bool(
            self.crashes
            or self.partitions
            or self.link_breaks
            or self.leaving
            or self.drop
            or self.duplicate
            or self.reorder
            or self.skews
        )


@dataclass(frozen=True)
class Fault:
    time: int  # ms since the start of the fault window
    kind: str  # crash, restart, partition, heal, break, leave, stay, net, skew, unskew,
    # diskfail, diskok, corrupt
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return f"+{self.time}ms {self.kind} {' '.join(map(str, self.args))}".rstrip()


UNDOING = ("restart", "heal", "stay", "unskew", "diskok")


@dataclass
class FaultSchedule:
    faults: list[Fault]
    length: int  # ms, the fault window

    @classmethod
    def generate(
        cls, rng: random.Random, plan: FaultPlan, nodes: int, length: int
    ) -> FaultSchedule:
        faults: list[Fault] = []
        if plan.drop or plan.duplicate or plan.reorder:
            faults.append(Fault(0, "net", (plan.drop, plan.duplicate, plan.reorder)))
        faults += (_rolling if plan.rolling else _crashes)(rng, plan, nodes, length)
        faults += _partitions(rng, plan, nodes, length)
        for _ in range(plan.link_breaks):
            faults.append(Fault(rng.randrange(length), "break"))
        for _ in range(plan.leaving):
            start, node = rng.randrange(length), rng.randrange(nodes)
            faults.append(Fault(start, "leave", (node,)))
            end = start + rng.randint(*plan.outage)
            if end < length:
                faults.append(Fault(end, "stay", (node,)))
        faults += _skews(rng, plan, nodes, length)
        faults += _disk_faults(rng, plan, nodes, length)
        # At the same instant, a restart, heal, stay, unskew or diskok comes before what it
        # undoes.
        faults.sort(key=lambda f: (f.time, f.kind not in UNDOING))
        return cls(faults, length)

    def describe(self) -> list[str]:
        return [str(f) for f in self.faults]

    def disturbances(self) -> list[tuple[int, int]]:
        """When something was wrong, as (start, end) ms since the window's start: each
        crash to its restart, partition or cut to its heal, leaving episode to its
        end, clock skew to its unskew, link break (an instant), and network faults (the
        whole window); those still on at the end of the window end with it (the
        runner heals them; a skew stays on, but counts as ended there)."""
        out: list[tuple[int, int]] = []
        down: dict[int, int] = {}  # node -> crashed at
        leaving: dict[int, int] = {}
        skewed: dict[int, int] = {}
        cut: int | None = None
        for f in self.faults:
            if f.kind == "crash":
                down[f.args[0]] = f.time
            elif f.kind == "restart" and f.args[0] in down:
                out.append((down.pop(f.args[0]), f.time))
            elif f.kind == "leave":
                leaving.setdefault(f.args[0], f.time)
            elif f.kind == "stay" and f.args[0] in leaving:
                out.append((leaving.pop(f.args[0]), f.time))
            elif f.kind == "skew":
                skewed.setdefault(f.args[0], f.time)
            elif f.kind == "unskew" and f.args[0] in skewed:
                out.append((skewed.pop(f.args[0]), f.time))
            elif f.kind == "partition":
                cut = f.time if cut is None else cut
            elif f.kind == "heal" and cut is not None:
                out.append((cut, f.time))
                cut = None
            elif f.kind == "break":
                out.append((f.time, f.time))
            elif f.kind == "net":
                out.append((0, self.length))
        starts = [*down.values(), *leaving.values(), *skewed.values(),
                  *([] if cut is None else [cut])]  # fmt: skip
        out += [(start, self.length) for start in starts]
        return sorted(out)


def _crashes(rng: random.Random, plan: FaultPlan, nodes: int, length: int) -> list[Fault]:
    """Crash intervals, keeping at most ``max_down`` nodes down at any moment."""
    intervals: list[tuple[int, int, int]] = []  # (start, end, node)
    for _ in range(plan.crashes):
        start = rng.randrange(length)
        end = start + rng.randint(*plan.outage)
        victim = rng.randrange(nodes)
        overlapping = [iv for iv in intervals if iv[0] < end and start < iv[1]]
        if any(iv[2] == victim for iv in overlapping):
            continue
        if _max_overlap(overlapping, start, end) + 1 > plan.max_down:
            continue
        intervals.append((start, end, victim))
    faults = []
    for start, end, victim in intervals:
        faults.append(Fault(start, "crash", (victim,)))
        if end < length:
            faults.append(Fault(end, "restart", (victim,)))
    return faults


def _rolling(rng: random.Random, plan: FaultPlan, nodes: int, length: int) -> list[Fault]:
    """Rolling restarts: each node in turn goes down and comes back before the next."""
    order = list(range(nodes))
    rng.shuffle(order)
    faults = []
    t = rng.randint(0, plan.outage[0])
    for i in range(plan.crashes):
        end = t + rng.randint(*plan.outage)
        if t >= length:
            break
        victim = order[i % nodes]
        faults.append(Fault(t, "crash", (victim,)))
        if end < length:
            faults.append(Fault(end, "restart", (victim,)))
        t = end + rng.randint(0, plan.outage[0])
    return faults


def _max_overlap(intervals: list[tuple[int, int, int]], start: int, end: int) -> int:
    """The most intervals alive at one instant of [start, end)."""
    points = sorted({start, *(iv[0] for iv in intervals if start <= iv[0] < end)})
    return max((sum(1 for iv in intervals if iv[0] <= t < iv[1]) for t in points), default=0)


def _partitions(rng: random.Random, plan: FaultPlan, nodes: int, length: int) -> list[Fault]:
    faults = []
    t = 0
    for _ in range(plan.partitions):
        t += rng.randint(0, max(1, length // max(1, plan.partitions)))
        if t >= length or nodes < 2:
            break
        duration = rng.randint(*plan.partition_length)
        order = list(range(nodes))
        rng.shuffle(order)
        shape = rng.random()
        if shape < 0.2:
            groups: tuple[Any, ...] = ("oneway", order[0], order[1])
        elif shape < 0.6:
            groups = ((order[0],), tuple(order[1:]))  # isolate one node
        else:
            split = rng.randint(1, nodes - 1)
            groups = (tuple(order[:split]), tuple(order[split:]))
        faults.append(Fault(t, "partition", groups))
        t += duration
        if t < length:
            faults.append(Fault(t, "heal"))
    return faults


def _skews(rng: random.Random, plan: FaultPlan, nodes: int, length: int) -> list[Fault]:
    """Clock skew episodes: a node's clock off by up to ``max_skew`` ms either way, then
    put right (unless the window ends first); one overlapping another episode of its
    node is left out."""
    episodes: list[tuple[int, int, int]] = []  # (start, end, node)
    faults = []
    for _ in range(plan.skews):
        start, node = rng.randrange(length), rng.randrange(nodes)
        end = start + rng.randint(*plan.skew_length)
        skew = rng.randint(-plan.max_skew, plan.max_skew)
        if any(n == node and s < end and start < e for s, e, n in episodes):
            continue
        episodes.append((start, end, node))
        faults.append(Fault(start, "skew", (node, skew)))
        if end < length:
            faults.append(Fault(end, "unskew", (node,)))
    return faults


def _disk_faults(rng: random.Random, plan: FaultPlan, nodes: int, length: int) -> list[Fault]:
    """Write failure episodes (one overlapping another of its node is left out) and
    corrupted records (at a moment and on a node: the record is picked then)."""
    episodes: list[tuple[int, int, int]] = []  # (start, end, node)
    faults = []
    for _ in range(plan.disk_failures):
        start, node = rng.randrange(length), rng.randrange(nodes)
        end = start + rng.randint(*plan.failure_length)
        if any(n == node and s < end and start < e for s, e, n in episodes):
            continue
        episodes.append((start, end, node))
        faults.append(Fault(start, "diskfail", (node,)))
        if end < length:
            faults.append(Fault(end, "diskok", (node,)))
    for _ in range(plan.corruptions):
        faults.append(Fault(rng.randrange(length), "corrupt", (rng.randrange(nodes),)))
    return faults
