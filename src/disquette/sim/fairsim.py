"""The fair runs: consumers on every node pulling from group-fair queues (ADDJOB GROUP).

A run is a rate run (:mod:`disquette.sim.ratesim`: consumers on every node, each on a
node of its own, GETJOB, work, ACKJOB maybe elsewhere or NACK, the same faults and
clock skews) over two other queues:

* ``qf``, with no limit: one *heavy* group holds a backlog no node drains in the
  first second, and three to six *light* groups five to fifteen jobs each, added on
  random nodes. Property F (fairness share): each node hands out the jobs of its
  groups in turn, so in the first second of consumption a node's light jobs make at
  least the share strict turns would give them if the heavy group always came first
  in a round, less what a reply crossing the second's edge may hide (three jobs per
  consumer of the node). The share is worked out from the node's own queue when the
  consumers start; a node that crashed during that second is not judged.
* ``qg``, with the policy ``group-rate L group-concurrency C``: two or three groups
  with a backlog each; property 18 (:func:`disquette.sim.properties.check_limits`)
  must hold for every group, with its fault bounds.

The clients measure: each job of ``qf`` handed out (node, time, group, read from its
body ``group:n``), each job of ``qg`` handed out and returned, by group.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from disquette.sim import properties
from disquette.sim.ratesim import Limits, RateConsumer, RateSimulation, Watch, limited_config
from disquette.sim.runner import Result, SimConfig

FAIR_QUEUE = b"qf"
GROUP_QUEUE = b"qg"
HEAVY = b"heavy"
SHARE_MS = 1000  # the first second of consumption, where shares are judged


@dataclass
class FairLimits(Limits):
    """A fair run's light groups and heavy backlog (``rate`` and ``concurrency`` are
    the per-group limits of ``qg``, ``backlog`` the jobs of each of its groups)."""

    light_groups: int = 3
    light_jobs: int = 5
    heavy_per_node: int = 300
    limited_groups: int = 2


class FairWatch(Watch):
    """What the consumers measured: ``qf`` deliveries by node, ``qg``'s by group."""

    def __init__(self) -> None:
        super().__init__()
        self.fair: list[tuple[int, int, bytes]] = []  # (node, time, group) of qf
        self.group_times: dict[bytes, list[int]] = {}
        self.group_held: Counter[bytes] = Counter()
        self.group_peak: Counter[bytes] = Counter()
        self.out: dict[bytes, bytes] = {}  # job ID -> group of the qg jobs out

    def got(self, item: list[Any], home: int, now: int) -> None:
        queue, job_id, body = item[0], item[1], item[2]
        group = body.split(b":")[0]
        if queue == FAIR_QUEUE:
            self.fair.append((home, now, group))
            return
        self.group_times.setdefault(group, []).append(now)
        self.out[job_id] = group
        self.group_held[group] += 1
        self.group_peak[group] = max(self.group_peak[group], self.group_held[group])

    def returned(self, queue: bytes, job_id: bytes) -> None:
        group = self.out.pop(job_id, None)
        if group is not None:
            self.group_held[group] -= 1


class FairConsumer(RateConsumer):
    QUEUES = (FAIR_QUEUE, GROUP_QUEUE)


def turn_share(counts: dict[bytes, int], delivered: int) -> int:
    """The light jobs among the first ``delivered`` of a node whose queue holds
    ``counts`` jobs by group, served in strict turns with the heavy group first in
    every round (the worst place for the light groups)."""
    left = dict(counts)
    light = 0
    while delivered > 0 and any(left.values()):
        for group in sorted(left, key=lambda g: g != HEAVY):
            if left[group] and delivered > 0:
                left[group] -= 1
                delivered -= 1
                light += group != HEAVY
    return light


class FairSimulation(RateSimulation):
    NAME = "fair"
    CONSUMER = FairConsumer

    def __init__(self, config: SimConfig, limits: FairLimits, echo: Any = None) -> None:
        super().__init__(config, limits, echo)
        self.fair_limits = limits
        self.fair_watch: FairWatch = self.watch  # type: ignore[assignment]
        self.counts: list[dict[bytes, int]] = []  # qf's jobs by group, each node's
        self.share_crashes = -1  # the crashes by the end of the judged second
        self.share_stats = {"fair_light_delivered": 0, "fair_light_share": 0}

    def new_watch(self) -> Watch:
        return FairWatch()

    def policies(self) -> list[list[bytes]]:
        limits = self.limits
        rate, concurrency = b"%d" % limits.rate, b"%d" % limits.concurrency
        return [[b"g", GROUP_QUEUE, b"group-rate", rate, b"group-concurrency", concurrency]]

    def backlog(self) -> None:
        limits = self.fair_limits
        jobs = [(HEAVY, limits.heavy_per_node * len(self.processes))]
        jobs += [(b"light%d" % g, limits.light_jobs) for g in range(limits.light_groups)]
        jobs += [(b"g%d" % g, limits.backlog) for g in range(limits.limited_groups)]
        for group, count in jobs:
            queue = FAIR_QUEUE if group == HEAVY or group.startswith(b"light") else GROUP_QUEUE
            for i in range(count):
                process = self.rng.choice(self.processes)
                self.add(process, queue, b"%s:%d" % (group, i), b"GROUP", group)
        for process in self.processes:
            fair = None if process.node is None else process.node.queues.get(FAIR_QUEUE)
            counts: Counter[bytes] = Counter()
            for job in [] if fair is None else fair.jobs:
                counts[job.group or b""] += 1
            self.counts.append(dict(counts))
        self.loop.call_at(self.loop.now + SHARE_MS, self._share_end)

    def _share_end(self) -> None:
        self.share_crashes = sum(p.crashes for p in self.processes)

    def check_window(self, faults: int, skew: int) -> None:
        watch = self.fair_watch
        limits = self.limits
        for group, times in sorted(watch.group_times.items()):
            for violation in properties.check_limits(
                times, watch.group_peak[group], limits.rate, limits.concurrency,
                len(self.processes), faults, skew,
            ):  # fmt: skip
                self.violations.append(f"group {group.decode()}: {violation}")
        start = self.fault_start
        if self.share_crashes:
            return  # a node crashed in the judged second: shares are not judged
        consumers = Counter(c.home for c in self.rate_consumers)
        for home, counts in enumerate(self.counts):
            firsts = [g for n, t, g in watch.fair if n == home and t < start + SHARE_MS]
            light = sum(1 for g in firsts if g != HEAVY)
            share = turn_share(counts, len(firsts)) - 3 * consumers[home]
            self.share_stats["fair_light_delivered"] += light
            self.share_stats["fair_light_share"] += max(share, 0)
            if light < share:
                self.violations.append(
                    f"node n{home} handed out {light} light jobs among its first "
                    f"{len(firsts)} of {FAIR_QUEUE.decode()}, under their share {share} "
                    f"(its queue: {counts})"
                )

    def result(self) -> Result:
        result = super().result()
        watch = self.fair_watch
        result.stats.update(
            rate_busiest_second=max(
                (properties.busiest_second(sorted(t)) for t in watch.group_times.values()),
                default=0,
            ),
            rate_delivered=sum(len(t) for t in watch.group_times.values()),
            concurrency_peak=max(watch.group_peak.values(), default=0),
            fair_delivered=len(watch.fair),
            **self.share_stats,
        )
        return result


def fair_config(seed: int, nodes: int | None = None) -> tuple[SimConfig, FairLimits]:
    """A fair run: two to five nodes, small group limits (so that they bind), a window
    of three to five seconds, the rate runs' fault kinds (seed modulo 4)."""
    rng = random.Random(f"disquette-sim-fair:{seed}")
    n = nodes or rng.randint(2, 5)
    window = rng.randint(3000, 5000)
    rate = rng.choice((2, 3, 5, 8, 13))
    limits = FairLimits(
        rate=rate,
        concurrency=rng.choice((1, 2, 3, 5)),
        consumers=rng.randint(n, 2 * n),
        backlog=rate * window // 1000 + 10,
        work=rng.choice(((5, 20), (10, 40), (20, 80))),
        skew=rng.choice((0, 0, 50, 200)),
        light_groups=rng.randint(3, 6),
        light_jobs=rng.randint(5, 15),
        limited_groups=rng.randint(2, 3),
    )
    return limited_config(seed, "fair", rng, n, window, nodes), limits


def run_fair_seed(seed: int, nodes: int | None = None, echo: Any = None) -> Result:
    config, limits = fair_config(seed, nodes)
    return FairSimulation(config, limits, echo).run()
