"""The rate runs: consumers on every node pulling from queues with cluster-wide limits.

A run writes two policies before its window opens, ``rate L`` on queue ``qr`` and
``concurrency C`` on queue ``qc``, fills both queues with a backlog larger than
the window can drain (jobs added on random nodes, REPLICATE 1 to 3, ASYNC), and
starts consumers, each on a node of its own (every node has one), that loop:
GETJOB (NOHANG or blocking, COUNT 1 to 3) from both queues, work on each job for
a while, then ACKJOB it on that node or another, or NACK it; now and then a
consumer rests for up to two seconds, so that demand moves between the nodes and
their shares follow it. In half of the runs the nodes' clocks are set apart by up
to 50 or 200 ms each way, which moves their epoch edges apart. The fault schedule is one of none,
partitions, crashes or both (the seed modulo 4), as in the features runs.

The clients keep the measure (property 18 of :mod:`disquette.sim.properties`):
the time of every job of ``qr`` handed out, and the number of jobs of ``qc``
held, from the GETJOB reply that gave them to the ACKJOB or NACK that returned
them (a job whose node died before the consumer could return it is dropped by
the consumer then: the node's retry timer owns it). Nodes count a job back
when the acknowledgement reaches the node that delivered it, never earlier, so
the clients' count is the one that matters to a user.

The run ends when the window closes: the faults are what is being measured, and
the properties of a drained cluster are the other modes' business.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from disquette.sim import properties
from disquette.sim.clients import Actor, Workload, is_error
from disquette.sim.process import SimNode
from disquette.sim.runner import (
    STEP_MS,
    Result,
    SimConfig,
    Simulation,
    _plan,
    _replay,
    schedule_kind,
)

RATE_QUEUE = b"qr"
CONC_QUEUE = b"qc"
POLICY_WAIT_MS = 10_000
IDLE_RATE = 0.1  # batches after which a consumer rests a while
IDLE_MS = (300, 2000)


@dataclass
class Limits:
    """A rate run's limits and consumers."""

    rate: int
    concurrency: int
    consumers: int
    backlog: int
    work: tuple[int, int]  # ms a consumer spends on a job
    skew: int = 0  # each node's clock is set up to this many ms off, ahead or behind


class Watch:
    """What the consumers measured: deliveries of ``qr``, jobs of ``qc`` held."""

    def __init__(self) -> None:
        self.rate_times: list[int] = []
        self.held = 0
        self.peak = 0

    def got(self, item: list[Any], home: int, now: int) -> None:
        """A job of a GETJOB reply (queue, ID, body) from node ``home``."""
        if item[0] == RATE_QUEUE:
            self.rate_times.append(now)
        else:
            self.held += 1
            self.peak = max(self.peak, self.held)

    def returned(self, queue: bytes, job_id: bytes) -> None:
        if queue == CONC_QUEUE:
            self.held -= 1


class RateConsumer(Actor):
    """GETJOB from the run's queues on its node, work, ACKJOB (maybe elsewhere) or
    NACK, again."""

    QUEUES: tuple[bytes, ...] = (RATE_QUEUE, CONC_QUEUE)

    def __init__(self, *args: Any, home: int, watch: Watch, limits: Limits) -> None:
        super().__init__(*args)
        self.home = home
        self.watch = watch
        self.limits = limits

    def step(self) -> None:
        if self.stopped:
            return
        process = self.processes[self.home]
        if not process.alive:
            self.loop.call_later(STEP_MS, self.step)
            return
        rng = self.rng
        argv = [b"GETJOB"]
        if rng.random() < 0.5:
            argv += [b"TIMEOUT", b"%d" % rng.randint(50, 1000)]
        else:
            argv.append(b"NOHANG")
        argv += [b"COUNT", b"%d" % rng.randint(1, 3), b"FROM", *self.QUEUES]
        self.request(process, argv, lambda value: self.got(process, value))

    def got(self, process: SimNode, value: Any) -> None:
        if not isinstance(value, list) or not value:
            self.later((0, 50), self.step)
            return
        for item in value:
            self.watch.got(item, self.home, self.loop.now)
        self.work(process, [(item[0], item[1]) for item in value])

    def work(self, process: SimNode, jobs: list[tuple[bytes, bytes]]) -> None:
        if not jobs:
            if self.rng.random() < IDLE_RATE:  # demand moves between nodes
                self.later(IDLE_MS, self.step)
            else:
                self.step()
            return
        self.loop.call_later(self.rng.randint(*self.limits.work), self.finish, process, jobs)

    def finish(self, process: SimNode, jobs: list[tuple[bytes, bytes]]) -> None:
        (queue, job_id), rest = jobs[0], jobs[1:]
        live = self.live_processes()
        target = process if process.alive or not live else self.rng.choice(live)
        if self.rng.random() < 0.2 and live:
            target = self.rng.choice(live)
        if not target.alive:
            self.watch.returned(queue, job_id)  # nobody to tell: the retry timer takes it
            self.work(process, rest)
            return
        command = b"NACK" if self.rng.random() < 0.1 else b"ACKJOB"
        self.watch.returned(queue, job_id)  # returned as the command goes (client done)

        def done(value: Any) -> None:
            if is_error(value):
                self.trace.record(self.loop.now, "rate", self.name, "return failed")
            self.work(process, rest)

        self.request(target, [command, job_id], done)


class RateSimulation(Simulation):
    NAME = "rate"  # (the streams the run draws from)
    CONSUMER: type[RateConsumer] = RateConsumer

    def __init__(self, config: SimConfig, limits: Limits, echo: Any = None) -> None:
        super().__init__(config, echo)
        self.limits = limits
        self.watch = self.new_watch()
        rng = random.Random(f"disquette-sim-{self.NAME}-clients:{config.seed}")
        self.rng = rng
        args = (self.loop, self.trace)
        rest = (self.processes, self.history, config.workload)
        self.rate_consumers = []
        for i in range(limits.consumers):
            consumer_rng = random.Random(rng.getrandbits(64))
            home = i % config.nodes
            consumer = self.CONSUMER(
                f"r{i}", *args, consumer_rng, *rest, home=home, watch=self.watch, limits=limits
            )
            self.rate_consumers.append(consumer)

    def new_watch(self) -> Watch:
        return Watch()

    def policies(self) -> list[list[bytes]]:
        """The policies the run writes: name, pattern, then options and values."""
        limits = self.limits
        return [
            [b"lr", RATE_QUEUE, b"rate", b"%d" % limits.rate],
            [b"lc", CONC_QUEUE, b"concurrency", b"%d" % limits.concurrency],
        ]

    def add(self, process: SimNode, queue: bytes, body: bytes, *options: bytes) -> None:
        """One job of the backlog: REPLICATE 1 to 3, ASYNC."""
        repl = self.rng.randint(1, min(3, len(self.processes)))
        argv = [b"ADDJOB", queue, body, b"0", b"REPLICATE", b"%d" % repl, b"RETRY", b"60",
                b"ASYNC", *options]  # fmt: skip
        self.admin(process, argv)

    def backlog(self) -> None:
        """The queues' jobs, added on random nodes."""
        for i in range(self.limits.backlog):
            process = self.rng.choice(self.processes)
            self.add(process, (RATE_QUEUE, CONC_QUEUE)[i % 2], b"j%d" % i)

    def _run(self) -> None:
        if not self.start_cluster():
            return
        limits = self.limits
        node = self.rng.choice(self.processes)
        deadline = self.loop.now + POLICY_WAIT_MS
        for policy in self.policies():
            argv = [b"QPOLICY", b"SET", *policy]
            reply = self.admin(node, argv)
            while (
                is_error(reply) and "finish the upgrade" in str(reply) and self.loop.now < deadline
            ):  # a peer's VERSION is still on its way: its features are not known yet
                self.loop.run_until(self.loop.now + STEP_MS)
                reply = self.admin(node, argv)
            if reply != b"OK":
                self.violations.append(f"QPOLICY SET replied {reply!r}")
                return
        deadline = self.loop.now + POLICY_WAIT_MS
        while not properties.policies_agree(self.processes) and self.loop.now < deadline:
            self.loop.run_until(self.loop.now + STEP_MS)
        self.backlog()
        offsets = [self.rng.randint(-limits.skew, limits.skew) for _ in self.processes]
        for process, offset in zip(self.processes, offsets, strict=True):
            if offset:
                self.skew(process, offset)
        self.fault_start = self.loop.now
        for consumer in self.rate_consumers:
            consumer.start()
        for fault in self.schedule.faults:
            self.loop.call_at(self.fault_start + fault.time, self.apply, fault)
        self.loop.run_until(self.fault_start + self.config.window)
        for consumer in self.rate_consumers:
            consumer.stopped = True
        crashes = sum(p.crashes for p in self.processes)
        faults = 0 if not (self.config.plan.partitions or crashes) else crashes + 1
        self.check_window(faults, max(offsets) - min(offsets))

    def check_window(self, faults: int, skew: int) -> None:
        """The run's properties, once the window closed (``faults``: 0 without faults,
        else the crashes plus one; ``skew``: the clocks' spread, ms)."""
        limits = self.limits
        self.violations += properties.check_limits(
            self.watch.rate_times, self.watch.peak, limits.rate, limits.concurrency,
            len(self.processes), faults, skew,
        )  # fmt: skip

    def result(self) -> Result:
        result = super().result()
        limits = self.limits
        result.stats.update(
            rate=limits.rate,
            rate_busiest_second=properties.busiest_second(sorted(self.watch.rate_times)),
            rate_delivered=len(self.watch.rate_times),
            concurrency=limits.concurrency,
            concurrency_peak=self.watch.peak,
        )
        return result


def rate_config(seed: int, nodes: int | None = None) -> tuple[SimConfig, Limits]:
    """A rate run: two to five nodes, small limits (so that they bind), a window of
    three to five seconds, no faults, partitions, crashes or both (seed modulo 4)."""
    rng = random.Random(f"disquette-sim-rate:{seed}")
    n = nodes or rng.randint(2, 5)
    window = rng.randint(3000, 5000)
    rate = rng.choice((2, 3, 5, 8, 13, 20))
    limits = Limits(
        rate=rate,
        concurrency=rng.choice((1, 2, 3, 5, 8)),
        consumers=rng.randint(n, 2 * n),
        backlog=2 * (rate * window // 1000 + 20),
        work=rng.choice(((1, 30), (20, 200), (100, 600))),
        skew=rng.choice((0, 0, 50, 200)),
    )
    return limited_config(seed, "rate", rng, n, window, nodes), limits


def limited_config(
    seed: int, mode: str, rng: random.Random, n: int, window: int, nodes: int | None
) -> SimConfig:
    """The configuration of a run of ``mode`` whose clients are its own consumers (no
    generic producers or consumers): ``n`` nodes, the window, the faults drawn from
    ``rng`` for the seed's kind."""
    plan = _plan(rng, schedule_kind(seed, mode), n, window, long=False)
    workload = Workload(producers=0, consumers=0)
    return SimConfig(seed, n, workload, plan, window=window, replay=_replay(seed, mode, nodes))


def run_rate_seed(seed: int, nodes: int | None = None, echo: Any = None) -> Result:
    config, limits = rate_config(seed, nodes)
    return RateSimulation(config, limits, echo).run()
