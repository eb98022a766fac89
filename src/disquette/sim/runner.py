"""One simulated run: build the cluster, run the workload under faults, check.

A run is a pure function of its :class:`SimConfig`, and the config of a seed
is drawn from the seed (:func:`config_for_seed`), so a seed names a run.
Everything random comes from ``random.Random(seed)``: it spawns one stream for
the network, one per node process, one for the fault schedule and one per
client, in a fixed order.

The phases of :meth:`Simulation.run`:

1. **Start and join.** Every node process starts; with more than one node the
   cluster is formed with CLUSTER MEET (a random chain, so gossip has to
   complete the mesh) and the run waits for full membership. A features run
   then writes its first queue policies and waits until every node holds them.
2. **Workload and faults.** Producers and consumers start; the fault schedule
   plays out over the fault window.
3. **Heal.** Cuts are removed, message faults stop, crashed nodes restart.
4. **Drain and settle.** Producers are done; consumers acknowledge everything
   they get. Virtual time runs until no node holds a job and membership is
   complete, or until a bound derived from the fault window passes.
5. **Check** the properties of :mod:`disquette.sim.properties` (a features run
   also waits, in step 4, for every node to hold the same policy table).

A skew run also checks every node's estimates of its peers' clocks (property 10)
before each fault, when the window closes and at the end.

A coordination run (dependencies, claims, progress logs) watches every node at
the end of each of its events (:meth:`Simulation.observe`: claims never going
back, property 12, and the first moment a holder stops a job waiting for
others, property 11); after the heal it pauses the consumers for
``progress_check`` ms and compares the holders' progress logs (property 13)
before the drain; in step 4 it also waits until no node waits for a dependency.

A flow-to-disk run (every node spilling jobs to a simulated store past a level
counted in jobs, see :mod:`disquette.sim.process`) watches every node after each
cron tick (property 17), checks the spill indexes when the window closes and at
the end (property 16), and plays the disk faults: write failures, corrupted
records (the runner picks a record on disk then, and the byte) and torn spill logs
at crashes. Its clients check every body they are given and the order GETJOB
serves (properties 14 and 15); an inspector reads jobs with QPEEK, SHOW and JSCAN.

A cron run (recurring jobs) sets its schedules on random nodes before the
window and waits until every node holds them; it has no producers or consumers:
after the window and the heal it runs ``CRON_TAIL`` ms more, then counts the
jobs of each tick (property 19) among those every node held at each crash and at
the end.

An outcomes run (NACK DELAY and backoffs, ACKJOB RESULT, WAITJOB, CANCEL) watches
every node at the end of each of its events for the cancellations it knows
(:meth:`Simulation.observe_cancels`, for property 22), stops its waiters and
canceller with the producers (a WAITJOB out still waits for its answer), is not
quiet in step 4 while a WAITJOB is unanswered, gives the cluster a query interval
more to settle, and checks properties 20 to 23 at the end.

An upgrade run (``upgrade``: from the previous release's bus to this one's;
``upgrade-next``: from this one to the next one's, rehearsed) is a rolling run
whose nodes start with the older release's speech (core/dialect.py) and come back
from each restart with the newer one: a cluster of mixed releases for most of the
window, then of the newer only. Every node reads frames with its own release's
codec, and property 24 applies.

A run never raises: an exception inside the core is reported as a violation
with the trace that led to it.
"""

from __future__ import annotations

import itertools
import random
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from disquette.core import dialect
from disquette.core.acks import GC_MAX_PERIOD
from disquette.core.cron import CATCHUP
from disquette.core.dependency import QUERY_MAX
from disquette.core.ids import is_at_least_once
from disquette.core.job import ACKED, AFTER_FAILED, WAIT_REPL, Job
from disquette.sim import properties
from disquette.sim.clients import (
    Actor,
    Canceller,
    Consumer,
    Inspector,
    PolicyAdmin,
    Producer,
    SimClient,
    Waiter,
    Workload,
    dependency_view,
    parse_reply,
)
from disquette.sim.faults import Fault, FaultPlan, FaultSchedule
from disquette.sim.history import History
from disquette.sim.loop import VirtualLoop
from disquette.sim.network import Network, NetworkFaults
from disquette.sim.process import NodeSettings, SimNode, SpillSettings
from disquette.sim.trace import Trace

#: A kind of client program (sim/clients.py).
A = TypeVar("A", bound=Actor)

START_MS = 1_700_000_000_000  # virtual time starts at a plausible unix time
BASE_PORT = 7711
STEP_MS = 100  # how often the runner looks at the cluster while waiting
JOIN_LIMIT_MS = 20_000
ADMIN_WAIT_MS = 10_000
QUIET_CONFIRM_MS = 500  # the cluster must stay quiet this long to end a run
CORRUPT_AGAIN_MS = 250  # a corruption that found no record on disk tries again then
CRON_TAIL = 10_000  # ms a cron run goes on after the heal


@dataclass
class SimConfig:
    seed: int
    nodes: int = 3
    workload: Workload = field(default_factory=Workload)
    plan: FaultPlan = field(default_factory=FaultPlan)
    settings: NodeSettings = field(default_factory=NodeSettings)
    window: int = 6000  # ms of workload under faults
    lossless: bool = False  # every acknowledged job must be delivered, whatever crashed
    # After the heal: ms of a stable cluster (producers stopped, consumers paused) after
    # which each unacknowledged job must be queued on one node at most (0: no check).
    stable_check: int = 0
    replay: str = ""  # the command-line options that name this run
    # After the heal (coordination runs): ms of a stable cluster with consumers paused
    # after which the holders' progress logs are compared (0: no check).
    progress_check: int = 0
    settle_extra: int = 0  # ms more for the cluster to settle (outcomes runs: a query's wait)
    # Upgrade runs: the speeches (SPEECHES) the nodes start with and restart with.
    upgrade: tuple[str, str] | None = None

    def settle_bound(self) -> int:
        """How long after the heal the cluster gets to deliver, acknowledge and collect.

        A job acknowledged during the window backs its GC off exponentially,
        so its next attempt after the heal may come as late as the time it
        already waited (capped like Disque's GC period); add room for failure
        detection to clear, for the retry timers of forgotten jobs and for the
        consumers to drain.
        """
        gc_wait = min(GC_MAX_PERIOD, 2 * self.window + 2000)
        retry = self.workload.retry[1] * 1000
        return gc_wait + 4 * self.settings.node_timeout + 3 * retry + 5000 + self.settle_extra


@dataclass
class Result:
    seed: int
    config: SimConfig
    violations: list[str]
    duplicates: int
    stats: dict[str, int]
    digest: str
    schedule: list[str]
    trace: list[str]

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self, trace_lines: int = 60) -> str:
        c = self.config
        lines = [
            f"seed {self.seed}: {'ok' if self.ok else 'FAILED'} ({c.nodes} nodes, "
            f"window {c.window} ms, duplicates {self.duplicates}, digest {self.digest})",
            f"replay: python -m disquette.sim {c.replay or f'--seed {self.seed}'} --verbose",
            "stats: " + " ".join(f"{k}={v}" for k, v in self.stats.items()),
            "faults: " + ("; ".join(self.schedule) or "none"),
        ]
        lines += ["violation: " + v for v in self.violations[:20]]
        if len(self.violations) > 20:
            lines.append(f"... and {len(self.violations) - 20} more violations")
        if not self.ok:
            lines.append(f"last {min(trace_lines, len(self.trace))} events:")
            lines += ["  " + t for t in self.trace[-trace_lines:]]
        return "\n".join(lines)


class Simulation:
    def __init__(self, config: SimConfig, echo: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.loop = VirtualLoop(START_MS)
        self.trace = Trace(START_MS, echo=echo)
        master = random.Random(config.seed)
        self.network = Network(self.loop, random.Random(master.getrandbits(64)), self.trace)
        self.processes = []
        for i in range(config.nodes):
            rng = random.Random(master.getrandbits(64))
            ip = b"10.0.0.%d" % (i + 1)
            self.processes.append(
                SimNode(i, self.loop, self.network, self.trace, rng, config.settings, ip, BASE_PORT)
            )
        if config.upgrade is not None:
            for p in self.processes:
                p.speech = SPEECHES[config.upgrade[0]]
        self.fault_rng = random.Random(master.getrandbits(64))
        self.schedule = FaultSchedule.generate(
            self.fault_rng, config.plan, config.nodes, config.window
        )
        self.history = History()
        w = config.workload

        def actor(kind: type[A], name: str) -> A:
            """A client program of the run, with the next random stream of the seed."""
            rng = random.Random(master.getrandbits(64))
            return kind(name, self.loop, self.trace, rng, self.processes, self.history, w)

        self.producers = [actor(Producer, f"p{i}") for i in range(w.producers)]
        self.consumers = [actor(Consumer, f"c{i}") for i in range(w.consumers)]
        self.admin_rng = random.Random(master.getrandbits(64))
        # Features runs: the policy administrator (drawn last: other runs keep their streams).
        self.policy_admin = actor(PolicyAdmin, "qpolicy") if w.policy_writes else None
        # Flow-to-disk runs: the inspector (drawn last too), and the memory watch.
        self.inspector = actor(Inspector, "inspect") if w.inspections else None
        # Outcomes runs: the WAITJOB clients and the canceller (drawn last too).
        self.waiters = [actor(Waiter, f"w{i}") for i in range(w.waiters)]
        self.canceller = actor(Canceller, "cancel") if w.cancels else None
        self.postponed_gone = 0  # requeues postponed by node incarnations gone
        self.spill_watch = properties.SpillWatch(w.from_queues())
        self.spill_totals: Counter[str] = Counter()  # counters of incarnations gone
        if config.settings.spill is not None:
            for p in self.processes:
                p.after_cron = self.after_cron
        self.fault_start = START_MS  # (set when the window opens)
        self.violations: list[str] = []
        self.feature_stats: dict[str, int] = {}
        self.clock_checks = 0  # property 10's checks of one estimate (skew runs)
        # Coordination runs: what the observer saw on each node (by index) -- the last
        # claim of each job, and the jobs waiting for others with the dependencies they
        # still waited for -- and the dependencies each child waited for where it was
        # first seen waiting.
        self.claims_seen: list[dict[bytes, int]] = [{} for _ in self.processes]
        self.waiting_seen: list[dict[bytes, tuple[bytes, ...]]] = [{} for _ in self.processes]
        self.failed_seen = [0] * len(self.processes)  # each node's deps.failed, last seen
        self.first_after: dict[bytes, tuple[bytes, ...]] = {}
        # Cron runs: the IDs of the jobs seen for each tick's de-duplication key.
        self.cron_jobs: defaultdict[bytes, set[bytes]] = defaultdict(set)
        if w.coordination:
            for p in self.processes:
                p.observer = self.observe
        elif w.outcomes:
            for p in self.processes:
                p.observer = self.observe_cancels

    @property
    def actors(self) -> list[Actor]:
        admin = [self.policy_admin] if self.policy_admin is not None else []
        inspector = [self.inspector] if self.inspector is not None else []
        return [*self.producers, *self.consumers, *admin, *inspector, *self.clients_of_outcomes]

    @property
    def clients_of_outcomes(self) -> list[Actor]:
        """The waiters and the canceller (outcomes runs)."""
        canceller = [self.canceller] if self.canceller is not None else []
        return [*self.waiters, *canceller]

    # ------------------------------------------------------------------------------

    def run(self) -> Result:
        try:
            self._run()
        except Exception:
            self.violations.append("exception: " + traceback.format_exc(limit=12).rstrip())
        return self.result()

    def _run(self) -> None:
        if not self.start_cluster():
            return
        if self.policy_admin is not None:
            self.setup_policies(self.policy_admin)
            if self.violations:
                return
        if self.config.workload.crons:
            self.run_cron()
            return
        fault_start = self.loop.now
        self.fault_start = fault_start
        for actor in self.actors:
            actor.start()
        for fault in self.schedule.faults:
            self.loop.call_at(fault_start + fault.time, self.apply, fault)
        self.loop.run_until(fault_start + self.config.window)
        self.check_clocks()
        # Mid-traffic, deleted jobs' timers have not come due yet: one a timer kept
        # alive shows here, not at the end (where it would have fired and let go).
        self.violations += properties.check_references(self.processes)
        self.violations += properties.check_spill_index(self.processes)
        self.heal_all()
        for producer in self.producers:
            producer.stopped = True
        if self.policy_admin is not None:
            self.policy_admin.stopped = True
        for actor in self.clients_of_outcomes:
            actor.stopped = True  # (a WAITJOB out waits for its answer)
        if self.config.stable_check:
            self.check_stable_queues()
        if self.config.progress_check:
            self.check_progress_logs()
        for consumer in self.consumers:
            consumer.draining = True
        self.settle(self.loop.now + self.config.settle_bound())
        for actor in self.actors:
            actor.stopped = True
        self.check()

    def start_cluster(self) -> bool:
        """Start every node and form the cluster; False when it never formed."""
        for p in self.processes:
            p.start()
        if len(self.processes) > 1:
            self.join()
        return not self.violations

    def join(self) -> None:
        """Form the cluster with a random chain of CLUSTER MEETs."""
        order = list(self.processes)
        self.admin_rng.shuffle(order)
        for a, b in itertools.pairwise(order):
            reply = self.admin(a, [b"CLUSTER", b"MEET", b.ip, b"%d" % b.port])
            if reply != b"OK":
                self.violations.append(f"CLUSTER MEET on {a.name} replied {reply!r}")
                return
        deadline = self.loop.now + JOIN_LIMIT_MS
        while self.loop.now < deadline:
            self.loop.run_until(self.loop.now + STEP_MS)
            if not properties.check_membership(self.processes):
                return
        self.violations += [
            "cluster never formed: " + v for v in properties.check_membership(self.processes)
        ]

    def setup_policies(self, admin: PolicyAdmin) -> None:
        """Features runs: the first policies, written on one node, known to every node
        before the window opens."""
        admin.setup(self.processes[admin.rng.randrange(len(self.processes))])
        deadline = self.loop.now + JOIN_LIMIT_MS
        while not properties.policies_agree(self.processes):
            if self.loop.now >= deadline:
                self.violations += properties.check_policies(self.processes, self.history)
                return
            self.loop.run_until(self.loop.now + STEP_MS)

    def run_cron(self) -> None:
        """Cron runs: the schedules, the window of faults, the heal, ``CRON_TAIL`` ms of a
        healed cluster, then property 19. The nodes are past their start's hold-back."""
        self.loop.run_until(max(self.loop.now, START_MS + CATCHUP))
        for i, spec in enumerate(self.config.workload.crons):
            process = self.processes[self.admin_rng.randrange(len(self.processes))]
            argv = [b"CRON", b"SET", b"c%d" % i, b"q0", b"tick", *spec]
            reply = self.admin(process, argv)
            if reply != b"OK":
                self.violations.append(f"{b' '.join(argv).decode()} replied {reply!r}")
                return
        deadline = self.loop.now + JOIN_LIMIT_MS
        while len({p.node.crons.digest for p in self.processes if p.node is not None}) > 1:
            if self.loop.now >= deadline:
                self.violations.append("the schedules never reached every node")
                return
            self.loop.run_until(self.loop.now + STEP_MS)
        fault_start = self.fault_start = self.loop.now
        for fault in self.schedule.faults:
            self.loop.call_at(fault_start + fault.time, self.apply, fault)
        self.loop.run_until(fault_start + self.config.window)
        self.heal_all()
        self.loop.run_until(self.loop.now + CRON_TAIL)
        end = self.loop.now
        ticks: dict[bytes, list[int]] = {}
        for p in self.processes:
            self.note_cron_jobs(p)
            assert p.node is not None
            for record in p.node.crons.records.values():
                ticks[record.name] = []
                tick = record.following(record.since // 1000 - 1)
                while tick is not None and (following := record.following(tick)) is not None:
                    if following * 1000 > end:
                        break
                    if tick * 1000 >= record.since:
                        ticks[record.name].append(tick)
                    tick = following
        disturbed = [(fault_start + a, fault_start + b) for a, b in self.schedule.disturbances()]
        after = 2 * self.config.settings.node_timeout + CATCHUP + 1000
        violations, stats = properties.check_cron(ticks, self.cron_jobs, disturbed, after)
        self.violations += violations
        stats["cron_ticks_fired"] = sum(p.node.crons.fired for p in self.processes if p.node)
        stats["cron_fire_errors"] = sum(p.node.crons.errors for p in self.processes if p.node)
        self.feature_stats.update(stats)

    def note_cron_jobs(self, process: SimNode) -> None:
        """Cron runs: the jobs of ticks a node holds now (at a crash, and at the end)."""
        node = process.node
        if node is None:
            return
        for (_queue, key), job in node.dedup_index.items():
            if key.startswith(b"cron:") and job.state != WAIT_REPL:
                self.cron_jobs[key].add(job.id)
        for (_queue, key), jobs in node.dedup_others.items():
            self.cron_jobs[key].update(j.id for j in jobs if j.state != WAIT_REPL)

    def admin(self, process: SimNode, argv: list[bytes]) -> object:
        """Run one administrative request on a node from a short-lived client; a request
        that blocks (a synchronous ADDJOB) is waited for, virtual time running meanwhile,
        for up to ``ADMIN_WAIT_MS``."""
        replies: list[object] = []
        client = SimClient(process, "admin", lambda _client, value: replies.append(value))
        process.connect_client(client, lambda: None)
        self.trace.record(self.loop.now, "admin", process.name, *argv)
        raw = process.execute(client, argv)
        if raw is not None:
            replies.append(parse_reply(raw))
        deadline = self.loop.now + ADMIN_WAIT_MS
        while not replies and process.alive and self.loop.now < deadline:
            self.loop.run_until(self.loop.now + STEP_MS)
        if process.alive:
            process.disconnect_client(client)
        return replies[0] if replies else None

    # Faults ----------------------------------------------------------------------

    def apply(self, fault: Fault) -> None:
        self.check_clocks()
        self.trace.record(self.loop.now, "fault", fault.kind, *map(str, fault.args))
        kind = fault.kind
        if kind == "crash":
            self.crash(self.processes[fault.args[0]])
        elif kind == "restart":
            process = self.processes[fault.args[0]]
            if not process.alive:
                if self.config.upgrade is not None:
                    process.speech = SPEECHES[self.config.upgrade[1]]
                process.start()
        elif kind == "partition":
            if fault.args[0] == "oneway":
                self.network.cut(fault.args[1], fault.args[2])
            else:
                self.network.partition([list(g) for g in fault.args])
        elif kind == "heal":
            self.network.heal()
        elif kind == "break":
            links = list(self.network.connections.values())
            if links:
                self.network.break_link(self.fault_rng.choice(links))
        elif kind in ("leave", "stay"):
            self.set_leaving(self.processes[fault.args[0]], kind == "leave")
        elif kind == "net":
            drop, duplicate, reorder = fault.args
            f = self.network.faults
            f.drop, f.duplicate, f.reorder = drop, duplicate, reorder
        elif kind == "skew":
            self.skew(self.processes[fault.args[0]], fault.args[1])
        elif kind == "unskew":
            self.skew(self.processes[fault.args[0]], 0)
        elif kind in ("diskfail", "diskok"):
            process = self.processes[fault.args[0]]
            process.disk_failing = kind == "diskfail"
            if process.store is not None:
                process.store.fail_writes = process.disk_failing
            self.spill_totals["spill_write_failures"] += kind == "diskfail"
        elif kind == "corrupt":
            self.corrupt(self.processes[fault.args[0]])

    def corrupt(self, process: SimNode) -> None:
        """Flip a byte of one record of a node's spill log (one not damaged yet, picked
        now); with none on disk, try again a little later while the window lasts.
        The history keeps whether that node held the job's last copy."""
        entries = [e for e in process.spilled() if e[3] is not None]
        if not entries:
            if self.loop.now + CORRUPT_AGAIN_MS < self.fault_start + self.config.window:
                self.loop.call_later(CORRUPT_AGAIN_MS, self.corrupt, process)
            return
        _fp, loc, size, job = self.fault_rng.choice(entries)
        at = self.fault_rng.randrange(size)
        assert job is not None and process.store is not None
        last = not any(
            p.settings.appendonly and job.id in p.storage.aof
            if p.node is None
            else (copy := p.copy(job.id)) is not None and copy.state != ACKED
            for p in self.processes
            if p is not process
        )
        self.trace.record(self.loop.now, "corrupt", process.name, job.id, at, last)
        now = self.loop.now
        self.history.copy_corrupted(job.id, process.index, last, now, job.state, job.retry)
        process.store.corrupt(loc, at)
        process.disk_changes += 1
        self.spill_totals["records_corrupted"] += 1

    def after_cron(self, process: SimNode) -> None:
        """Flow-to-disk runs: property 17 after each cron tick of a node."""
        self.spill_watch.after_cron(process, self.loop.now)

    def skew(self, process: SimNode, offset: int) -> None:
        """Set a machine's clock ``offset`` ms off virtual time. Every clock's
        ``clock_settled`` becomes its highest reading so far: a sample whose PING leaves
        later is taken with every clock holding still (property 10)."""
        for p in self.processes:
            p.clock_settled = max(p.clock_settled, p.clock())
        process.clock_offset = offset
        process.clock_settled = max(process.clock_settled, process.clock())

    def check_clocks(self) -> None:
        """Skew runs: property 10 on every estimate that can be checked now."""
        if not self.config.plan.skews:
            return
        violations, checked = properties.check_clocks(self.processes)
        self.violations += violations
        self.clock_checks += checked

    def crash(self, process: SimNode) -> None:
        if not process.alive:
            return
        if self.config.workload.crons:
            self.note_cron_jobs(process)
        self.count_spills(process, self.spill_totals)  # (the incarnation goes)
        self.spill_watch.forget(process.index)
        tear = -1
        store = process.store
        rate = self.config.plan.tear_rate
        if store is not None and rate and self.fault_rng.random() < rate:
            tear = self.fault_rng.randint(0, len(store.pending))
            self.trace.record(self.loop.now, "tear", process.name, tear, len(store.pending))
        if process.node is not None:
            self.postponed_gone += process.node.postponed
        jobs = process.crash(tear)
        self.note_dead_letters(jobs)
        self.waiting_seen[process.index].clear()
        self.failed_seen[process.index] = 0
        if self.config.settings.appendonly:
            return  # the copies come back from the AOF
        self.claims_seen[process.index].clear()  # a new life: the node holds no job
        for job in jobs:
            if job.state == ACKED:
                continue
            last = not any(
                (other := p.copy(job.id)) is not None and other.state != ACKED
                for p in self.processes
                if p.node is not None
            )
            self.history.copy_destroyed(job.id, process.index, last, self.loop.now)
        self.note_lost_progress()

    def note_lost_progress(self) -> None:
        """Coordination runs, after a crash without an AOF: the progress entries of jobs
        not acknowledged that no running node holds any longer (a crash destroyed
        their every copy)."""
        acked = self.history.acked
        for entry in self.history.progress:
            if entry.lost or entry.job_id in acked:
                continue
            copies = [p.copy(entry.job_id) for p in self.processes if p.node]
            if not any(
                job is not None
                and job.extra is not None
                and any(text == entry.text for _, _, text in job.extra.log or ())
                for job in copies
            ):
                entry.lost = self.loop.now

    def observe(self, process: SimNode) -> None:
        """Coordination runs, at the end of every event of a running node: property 12
        on its claims, and property 11's evidence: for each job waiting for others
        there, the dependencies it stopped waiting for since the node's previous
        event, each with what it looks like to the cluster now (when the node settled
        it), and whether the job was released or failed (a failed job may be gone
        already, leaving its tombstone; the first release and failure anywhere are
        kept)."""
        node = process.node
        assert node is not None
        index = process.index
        h = self.history
        self.violations += properties.observe_claims(process, self.claims_seen[index], h.deliveries)
        seen = self.waiting_seen[index]
        jobs = node.jobs
        for job_id, before in list(seen.items()):
            job = jobs.get(job_id)
            after = job.extra.after if job is not None and job.extra is not None else ()
            if after == before:
                continue
            if job is None:
                del seen[job_id]  # deleted while waiting: failed (or acknowledged) and collected
                continue
            settled = {d: dependency_view(self.processes, h, d) for d in before if d not in after}
            h.dependencies_settled(job_id, index, self.loop.now, settled, process.incarnation)
            if after:
                seen[job_id] = after
                continue
            del seen[job_id]
            failed = bool(job.extra.after_flags & AFTER_FAILED)  # type: ignore[union-attr]
            if job_id not in (h.failures if failed else h.releases):
                self.stopped_waiting(process, job_id, failed)
        deps = node.deps
        if deps.failed != self.failed_seen[index]:
            self.failed_seen[index] = deps.failed
            for job_id in deps.gone:
                if job_id not in h.failures and (
                    job_id in h.children or job_id in self.first_after
                ):
                    self.stopped_waiting(process, job_id, True)
        for wait in node.deps.waits.values():  # (every waiting job is in some wait)
            for job in wait.jobs:
                if job.waiting and job.id not in seen and jobs.get(job.id) is job:
                    seen[job.id] = job.extra.after  # type: ignore[union-attr]
                    self.first_after.setdefault(job.id, job.extra.after)  # type: ignore[union-attr]

    def observe_cancels(self, process: SimNode) -> None:
        """Outcomes runs, at the end of every event of a running node: the first moment
        it knows each job cancelled so far (in this life), for property 22."""
        node = process.node
        assert node is not None
        h = self.history
        for job_id in h.cancels:
            key = (job_id, process.index, process.incarnation)
            if key not in h.cancel_known and node.outcomes.is_cancelled(job_id):
                h.cancel_known[key] = self.loop.now

    def note_dead_letters(self, jobs: list[Job]) -> None:
        """Features runs: record the dead letters among ``jobs`` (a crashed node's, or what
        the nodes hold at the end), delivered or not."""
        if not self.config.workload.deadletter:
            return
        for job in jobs:
            extra = job.extra
            if extra is not None and extra.origin_id is not None:
                self.history.dead_letter(
                    job.id, extra.origin_id, job.ctime // 1_000_000, job.body or b""
                )

    def set_leaving(self, process: SimNode, leaving: bool) -> None:
        if process.alive:
            reply = self.admin(process, [b"CLUSTER", b"LEAVING", b"yes" if leaving else b"no"])
            if reply != b"OK":
                self.violations.append(f"CLUSTER LEAVING on {process.name} replied {reply!r}")

    def heal_all(self) -> None:
        self.trace.record(self.loop.now, "heal-all")
        self.network.faults = NetworkFaults()
        self.network.heal()
        for p in self.processes:
            if not p.alive:
                p.start()
            if p.node is not None and p.node.leaving:
                self.set_leaving(p, False)

    # Settling and checking --------------------------------------------------------

    def check_progress_logs(self) -> None:
        """Property 13 (coordination runs): consumers paused while the healed cluster
        settles, then every live holder's progress log."""
        for consumer in self.consumers:
            consumer.paused = True
        self.loop.run_until(self.loop.now + self.config.progress_check)
        violations, stats = properties.check_progress(self.processes, self.history)
        self.violations += violations
        self.feature_stats.update(stats)
        for consumer in self.consumers:
            consumer.paused = False

    def check_stable_queues(self) -> None:
        """Property 6: consumers paused while the healed cluster settles, then one
        queued copy per unacknowledged job."""
        for consumer in self.consumers:
            consumer.paused = True
        self.loop.run_until(self.loop.now + self.config.stable_check)
        self.violations += properties.check_single_queued(self.processes)
        for consumer in self.consumers:
            consumer.paused = False

    def stopped_waiting(self, process: SimNode, job_id: bytes, failed: bool) -> None:
        """A job waiting for others was released (or failed) on a node: the history keeps
        the first of each, with what its dependencies look like now."""
        h = self.history
        child = h.children.get(job_id)
        after = child.after if child is not None else self.first_after.get(job_id, ())
        views = {d: dependency_view(self.processes, h, d) for d in after}
        h.released(job_id, process.index, self.loop.now, failed, views, process.incarnation)

    def quiet(self) -> bool:
        """No job anywhere (but those waiting for their TTL, as the checks allow) and,
        for a cluster, complete membership (and, in coordination runs, no node waiting
        for a dependency)."""
        if any(p.node is None for p in self.processes):
            return False
        if self.config.workload.coordination and any(
            p.node.deps.waits for p in self.processes if p.node is not None
        ):
            return False
        if any(waiter.waiting is not None for waiter in self.waiters):
            return False  # a WAITJOB is not answered yet
        faulty = self.config.plan.faulty
        jobs = sum(len(p.node.jobs) + p.node.spill.count for p in self.processes if p.node)
        if jobs > properties.tolerated(self.history, faulty):
            return False  # (looking at every job is slow: this is the common case)
        if jobs and properties.check_collected(self.processes, self.history, faulty):
            return False
        if self.policy_admin is not None and not properties.policies_agree(self.processes):
            return False
        return len(self.processes) == 1 or not properties.check_membership(self.processes)

    def settle(self, deadline: int) -> None:
        quiet_since = None
        while self.loop.now < deadline:
            self.loop.run_until(self.loop.now + STEP_MS)
            if not self.quiet():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = self.loop.now
            elif self.loop.now - quiet_since >= QUIET_CONFIRM_MS:
                return

    def check(self) -> None:
        c = self.config
        self.violations += properties.check_delivery(
            self.history, c.plan.faulty, excuse_crashes=not c.lossless
        )
        self.violations += properties.check_collected(self.processes, self.history, c.plan.faulty)
        self.violations += properties.check_duplicates(self.history, c.plan.faulty)
        self.violations += properties.check_references(self.processes)
        if c.nodes > 1:
            self.violations += properties.check_membership(self.processes)
        self.check_clocks()
        self.check_features()
        if c.settings.spill is not None:
            self.check_flow()
        self.violations += self.network.unreadable  # (property 24: any run)
        if c.upgrade is not None:
            self.violations += properties.check_dialects(self.processes)

    def check_flow(self) -> None:
        """Flow-to-disk runs: properties 14 to 17 (17 was watched all along)."""
        self.violations += properties.check_bodies(self.history)
        self.violations += properties.check_spill_index(self.processes)
        self.violations += self.spill_watch.violations

    @staticmethod
    def count_spills(process: SimNode, totals: Counter[str]) -> None:
        """Add a node incarnation's flow-to-disk counters to ``totals``."""
        node = process.node
        if node is None or process.store is None:
            return
        spill = node.spill
        totals.update(
            jobs_spilled=spill.spilled,
            jobs_loaded=spill.loaded,
            readahead_misses=spill.readahead_misses,
            readahead_batches=spill.readahead_loads,
            spill_read_errors=spill.read_errors,
            spill_compactions=spill.compactions,
        )

    def flow_stats(self) -> dict[str, int]:
        """The counts a flow-to-disk run reports (``properties.FLOW_STATS``)."""
        totals = Counter(self.spill_totals)  # (the incarnations gone, and the live ones)
        for p in self.processes:
            self.count_spills(p, totals)
        h = self.history
        lost = sum(
            1
            for job_id in h.added
            if job_id in h.corrupted and job_id not in h.deliveries and job_id not in h.children
        )
        totals.update(
            lost_to_corruption=lost,
            memory_checks=self.spill_watch.checks,
            peak_jobs_in_memory=self.spill_watch.peak_jobs,
            **h.inspected,
        )
        return {name: totals[name] for name in properties.FLOW_STATS}

    def check_features(self) -> None:
        """Features runs: properties 7 to 9 (policies, dead letters, de-duplication)."""
        w = self.config.workload
        if self.policy_admin is not None:
            self.violations += properties.check_policies(self.processes, self.history)
        if w.deadletter:
            for p in self.processes:
                if p.node is not None:
                    self.note_dead_letters(list(p.node.jobs.values()))
            disturbed, margin = self.disturbances()
            violations, stats = properties.check_dead_letters(self.history, disturbed, margin)
            self.violations += violations
            self.feature_stats.update(stats)
        if w.dedup:
            violations, stats = properties.check_dedup(self.history)
            self.violations += violations
            self.feature_stats.update(stats)
        if w.coordination:
            self.check_coordination()
        if w.outcomes:
            self.check_outcomes()

    def disturbances(self) -> tuple[list[tuple[int, int]], int]:
        """When the schedule's faults were on, in virtual ms, and the margin after each
        (two node timeouts: failure detection and reconnection), see property 8."""
        start = self.fault_start
        intervals = [(start + a, start + b) for a, b in self.schedule.disturbances()]
        return intervals, 2 * self.config.settings.node_timeout

    def check_outcomes(self) -> None:
        """Outcomes runs: properties 20 to 23."""
        h = self.history
        disturbed, margin = self.disturbances()
        violations, stats = properties.check_postponed(h, disturbed, margin)
        self.feature_stats.update(stats)
        self.violations += violations
        plan = self.config.plan
        violations, stats = properties.check_waitjobs(h, plan.duplicate > 0 or plan.reorder > 0)
        self.feature_stats.update(stats)
        self.violations += violations
        violations, stats = properties.check_cancels(h, disturbed, margin)
        self.feature_stats.update(stats)
        self.violations += violations + properties.check_waits_answered(h)
        live = sum(p.node.postponed for p in self.processes if p.node is not None)
        self.feature_stats["requeues_postponed"] = self.postponed_gone + live

    def check_coordination(self) -> None:
        """Coordination runs: properties 11 and 12 at the end (13 ran before the drain)."""
        c = self.config
        faulty = c.plan.faulty
        violations, stats = properties.check_dependencies(self.history, faulty, not c.lossless)
        self.violations += violations + properties.check_waits(self.processes)
        self.feature_stats.update(stats)
        latency = self.network.faults.latency_max
        violations, stats = properties.check_claims(self.history, faulty, latency)
        self.violations += violations
        self.feature_stats.update(stats)

    def result(self) -> Result:
        h = self.history
        stats = {
            "added": len(h.added),
            "add_errors": sum(h.add_errors.values()),
            "delivered": sum(len(d) for d in h.deliveries.values()),
            "acked": len(h.acked),
            # (Jobs waiting for others are counted by property 11: failing some is right.)
            # (Cancelled jobs are not lost: nobody needs to take them.)
            "lost": sum(1 for jid in h.added if not _taken(h, jid)),
            "lost_retried": sum(
                1 for jid in h.added if not _taken(h, jid) and is_at_least_once(jid)
            ),
            # What a lossless run would not excuse (repair must save these).
            "lost_unexcused": len(
                properties.check_delivery(h, self.config.plan.faulty, excuse_crashes=False)
            ),
            "crashes": sum(p.crashes for p in self.processes),
            "messages": self.network.sent,
            "dropped": self.network.dropped,
            "events": self.loop.events_run,
            "virtual_ms": self.loop.now - START_MS,
        }
        if self.policy_admin is not None:
            stats["policy_writes"] = len(h.policy_writes)
        if self.config.plan.skews:
            stats["clock_checks"] = self.clock_checks
        if self.config.settings.spill is not None:
            stats.update(self.flow_stats())
        if self.config.upgrade is not None:
            stats.update(self.dialect_stats())
        stats.update(self.feature_stats)
        return Result(
            self.config.seed,
            self.config,
            self.violations,
            h.duplicates,
            stats,
            self.trace.digest(),
            self.schedule.describe(),
            self.trace.tail(),
        )

    def dialect_stats(self) -> dict[str, int]:
        """Upgrade runs: what the running nodes' codecs skipped and trimmed, and the
        messages they withheld from peers lacking a feature."""
        nodes = [p.node for p in self.processes if p.node is not None]
        return {
            "bus_skipped": sum(n.dialect.codec.skipped for n in nodes),
            "bus_trimmed": sum(n.dialect.codec.trimmed for n in nodes),
            "bus_withheld": sum(n.dialect.withheld for n in nodes),
            "bus_unreadable": len(self.network.unreadable),
        }


def _taken(h: History, job_id: bytes) -> bool:
    """Whether an added job was delivered, or needed not be (cancelled, or waiting for
    others: property 11 counts those)."""
    return job_id in h.deliveries or job_id in h.children or job_id in h.cancels


# Seeds -> configurations -------------------------------------------------------------

KINDS = ("none", "network", "partition", "crash", "mixed")
#: The releases upgrade runs go from and to, as the bus sees them (core/dialect.py).
SPEECHES = {
    "previous": dialect.V1,
    "this": dialect.CURRENT,
    "next": dialect.rehearsal(f"version={dialect.PROTOCOL + 1},release=next,add=next,probe"),
}
UPGRADES = {"upgrade": ("previous", "this"), "upgrade-next": ("this", "next")}
MODES = ("normal", "long", "rolling", "rolling-norepair", "federation", "features", "skew",
         "coordination", "flow", "rate", "fair", "cron",
         "outcomes", "upgrade", "upgrade-next")  # fmt: skip
REPLAY_OPTIONS = {"normal": "", "long": " --long", "rolling": " --rolling",
                  "rolling-norepair": " --rolling --no-repair",
                  "upgrade": " --upgrade", "upgrade-next": " --upgrade-next",
                  "federation": " --federation", "features": " --features",
                  "skew": " --skew", "coordination": " --coordination",
                  "flow": " --flow-to-disk", "rate": " --rate", "fair": " --fair",
                  "cron": " --cron", "outcomes": " --outcomes"}  # fmt: skip
FEDERATION_KINDS = ("partition", "crash", "mixed")
FEATURES_KINDS = ("none", "partition", "crash", "mixed")
COORDINATION_KINDS = FEATURES_KINDS
OUTCOMES_KINDS = FEATURES_KINDS
# The counts an outcomes run adds to its stats (see properties 20 to 23).
OUTCOME_STATS = properties.OUTCOME_STATS
# The counts a coordination run adds to its stats (see properties 11 to 13).
COORDINATION_STATS = (
    *properties.DEPENDENCY_STATS,
    *properties.CLAIM_STATS,
    *properties.PROGRESS_STATS,
)
# The counts a features run adds to its stats (see properties 8 and 9).
FEATURE_STATS = (
    "policy_writes",
    "dead_letters",
    "dead_lettered_jobs",
    "dead_letters_extra",
    "delivered_after_dead_letter",
    "gone_without_dead_letter",
    "nacks_past_bounds_queued",
    *properties.DEDUP_STATS,
)


def config_for_seed(seed: int, mode: str = "normal", nodes: int | None = None) -> SimConfig:
    """The run a seed names in a mode: its cluster size, workload and fault plan.

    * ``normal``: two or three nodes, a few seconds of faults, a dozen jobs: the
      runs of the normal test suite;
    * ``long``: three to seven nodes, up to a minute of faults, hundreds of jobs;
    * ``rolling``: five nodes crashed and restarted one after the other without
      persistence, each down for longer than twice the node timeout, under a
      backlog of REPLICATE 3 jobs: replica repair must lose no acknowledged job
      (a lossless run);
    * ``rolling-norepair``: the same runs with ``replica-repair no`` (Disque's
      behaviour), where jobs whose every holder went down are lost;
    * ``upgrade`` and ``upgrade-next``: rolling runs whose nodes start as the
      previous release (bus protocol 1), or as this one, and come back from each
      restart as this one, or as the next one rehearsed (core/dialect.py). Property
      24 applies;
    * ``federation``: three to five nodes, producers on node 0 only and consumers on
      the others only, so that every job consumed travels by NEEDJOBS/YOURJOBS and
      is acknowledged away from where it was added, under partitions and crashes;
    * ``features``: three to five nodes, queue policies written during the window
      by an administrator, poison jobs NACKed until they are dead-lettered, the
      dead-letter queue consumed, and every ADDJOB de-duplicated and sent again
      when its reply is lost; no faults, partitions, crashes or everything (the
      seed modulo 4). Properties 7 to 9 apply;
    * ``skew``: three to five nodes, the normal workload, any kind of fault
      schedule (the seed modulo 5, as ``normal``) plus one to four episodes of a
      node's clock set up to 3 s ahead or behind. Property 10 applies;
    * ``coordination``: three to five nodes, producers adding chains, fan-ins and
      fan-outs of jobs that wait for each other (AFTER, IFGONE fail or release),
      some rooted in a job that expires unacknowledged, consumers taking jobs with
      claims, passing them back, and writing progress logs with WORKING; no
      faults, partitions, crashes or everything (the seed modulo 4). Properties 11
      to 13 apply;
    * ``flow``: two to four nodes spilling jobs to disk past a level of a few jobs
      in memory (windows of one to four jobs per queue), a backlog that builds
      (consumers start late) and drains, priorities, long retries and delays (so
      replicas and delayed jobs spill too), NACKs, an inspector (QPEEK, SHOW,
      JSCAN), any kind of fault schedule (the seed modulo 5, as ``normal``) plus
      disk faults: write failures, corrupted records, torn spill logs at crashes,
      sometimes a disk limit. Properties 14 to 17 apply;
    * ``cron``: three to five nodes, one to three recurring-job schedules (every 1 to
      3 s or a cron expression with seconds, various REPLICATE and ASYNC) and no
      other client, any kind of fault schedule (the seed modulo 5, as ``normal``).
      Property 19 applies.
    * ``outcomes``: two or three nodes, jobs added with a BACKOFF (fixed or
      exponential) and a short RETRY, some added to expire; consumers NACK some
      (often with a DELAY of one to three seconds), acknowledge with a RESULT,
      work on some with WORKING until -CANCELLED stops them; a canceller CANCELs
      jobs queued or being worked on (from another node than the worker's), and
      two waiters run WAITJOB on random nodes, with a TIMEOUT or without, for jobs
      added and for IDs nobody added; no faults, partitions, crashes or
      everything (the seed modulo 4). Properties 20 to 23 apply.

    The choice is drawn from its own stream (seeded with a string, so it does
    not depend on the hash seed) and does not touch the run's own streams.
    """
    if mode in ("rolling", "rolling-norepair"):
        return _rolling_config(seed, nodes or 5, repair=mode == "rolling")
    if mode in ("upgrade", "upgrade-next"):
        config = _rolling_config(seed, nodes or 5, repair=True)
        steps = UPGRADES[mode]
        return replace(config, upgrade=steps, replay=_replay(seed, mode, nodes))
    if mode in _MODE_CONFIGS:
        return _MODE_CONFIGS[mode](seed, nodes)
    long = mode == "long"
    rng = random.Random(f"disquette-sim-config:{seed}")
    n = nodes if nodes is not None else (rng.randint(3, 7) if long else rng.choice((2, 3, 3, 3)))
    window = rng.randint(10_000, 60_000) if long else rng.randint(3000, 6000)
    jobs = rng.randint(20, 200) if long else rng.randint(4, 12)
    workload = Workload(
        producers=rng.randint(1, 3) if long else 1,
        consumers=rng.randint(1, 4) if long else rng.randint(1, 2),
        jobs=jobs,
        max_replicate=min(3, n),
        async_rate=rng.choice((0.0, 0.25, 0.5)),
    )
    draw = _Draw(seed, mode, nodes, rng, n, window)
    return draw.config(workload, draw.plan(long))


def _rolling_config(seed: int, nodes: int, repair: bool) -> SimConfig:
    rng = random.Random(f"disquette-sim-rolling:{seed}")
    # A crashed node is flagged FAIL a little more than a node timeout after it died; its
    # copies count as lost replica-repair-delay later, and must be repaired before it
    # comes back (empty) and the next node goes down, maybe at once. Outages last over
    # twice the node timeout: a delay of half of it leaves time for the repair.
    timeout = NodeSettings.node_timeout
    extra = {"replica_repair": repair, "replica_repair_delay": timeout // 2}
    settings = NodeSettings(extra=extra)
    outage = (2 * timeout + 500, 3 * timeout)
    window = rng.randint(15_000, 25_000)
    plan = FaultPlan(crashes=nodes * 2, rolling=True, outage=outage)
    workload = Workload(
        producers=2,
        consumers=1,
        jobs=rng.randint(10, 25),
        min_replicate=2,  # a copy survives every single crash
        max_replicate=min(3, nodes),
        think=(100, 600),  # more adds than consumes: a backlog that outlives the holders
        process_time=(100, 300),
    )
    mode = "rolling" if repair else "rolling-norepair"
    replay = _replay(seed, mode, nodes if nodes != 5 else None)
    # A few retry periods once failure detection has cleared the restarted nodes.
    stable = 4 * timeout + 3 * workload.retry[1] * 1000
    return SimConfig(
        seed, nodes, workload, plan, settings, window, repair, replay=replay, stable_check=stable
    )


def schedule_kind(seed: int, mode: str) -> str:
    """The kind of fault schedule a seed runs in a mode (rolling runs: the mode)."""
    if mode.startswith(("rolling", "upgrade")):
        return mode
    kinds = {
        "federation": FEDERATION_KINDS,
        "features": FEATURES_KINDS,
        "coordination": COORDINATION_KINDS,
        "rate": FEATURES_KINDS,
        "fair": FEATURES_KINDS,
        "outcomes": OUTCOMES_KINDS,
    }.get(mode, KINDS)
    return kinds[seed % len(kinds)]


@dataclass(frozen=True)
class _Draw:
    """A mode's config as it is drawn from its own stream: the cluster's size and the
    window first (:meth:`start`), then the clients (:meth:`clients`), the fault plan
    (:meth:`plan`) and persistence (:meth:`config`), each from where the last left it."""

    seed: int
    mode: str
    nodes: int | None  # the size asked for (None: drawn)
    rng: random.Random
    n: int  # the cluster's size
    window: int

    @classmethod
    def start(
        cls,
        seed: int,
        mode: str,
        nodes: int | None,
        sizes: Sequence[int] = (3, 4, 5),
        windows: tuple[int, int] = (4000, 8000),
    ) -> _Draw:
        """The stream ``disquette-sim-<mode>:<seed>``, a size among ``sizes`` unless
        ``nodes`` is given, and a window of ``windows`` ms."""
        rng = random.Random(f"disquette-sim-{mode}:{seed}")
        n = nodes or rng.choice(sizes)
        return cls(seed, mode, nodes, rng, n, rng.randint(*windows))

    def clients(
        self,
        jobs: tuple[int, int],
        producers: tuple[int, int] | None = (1, 2),
        consumers: tuple[int, int] = (1, 3),
        async_rates: tuple[float, ...] = (0.0, 0.25),
    ) -> Workload:
        """A workload of producers (None: one, not drawn), consumers and jobs per
        producer drawn in those ranges, up to three replicas, a share of ASYNC adds
        among ``async_rates``; a mode's other settings replace the defaults after."""
        rng = self.rng
        return Workload(
            producers=rng.randint(*producers) if producers else 1,
            consumers=rng.randint(*consumers),
            jobs=rng.randint(*jobs),
            max_replicate=min(3, self.n),
            async_rate=rng.choice(async_rates),
        )

    def plan(self, long: bool = False) -> FaultPlan:
        """The faults of the seed's schedule kind in this mode."""
        kind = schedule_kind(self.seed, self.mode)
        return _plan(self.rng, kind, self.n, self.window, long)

    def config(self, workload: Workload, plan: FaultPlan | None = None) -> SimConfig:
        """The config of ``workload`` and ``plan`` (None: :meth:`plan`, drawn now): a
        quarter of the runs with crashes persist jobs in the AOF (then nothing may be
        lost), drawn last."""
        if plan is None:
            plan = self.plan()
        persistent = plan.crashes > 0 and self.rng.random() < 0.25
        settings = NodeSettings(appendonly=persistent)
        replay = _replay(self.seed, self.mode, self.nodes)
        return SimConfig(
            self.seed, self.n, workload, plan, settings, self.window, persistent, replay=replay
        )


def _federation_config(seed: int, nodes: int | None) -> SimConfig:
    draw = _Draw.start(seed, "federation", nodes, windows=(3000, 8000))
    workload = replace(
        draw.clients(jobs=(8, 30)),
        think=(0, 100),
        producer_nodes=(0,),
        consumer_nodes=tuple(range(1, draw.n)),
    )
    return draw.config(workload)


def _features_config(seed: int, nodes: int | None) -> SimConfig:
    draw = _Draw.start(seed, "features", nodes)
    rng = draw.rng
    workload = replace(
        draw.clients(jobs=(8, 20)),
        at_most_once_rate=0.0,  # a NACKed at-most-once job is never queued again
        add_timeout=rng.choice((500, 1000, 2000)),  # short ones time out under faults
        dedup=True,
        add_attempts=4,
        resend_rate=0.2,
        poison_rate=rng.choice((0.2, 0.4)),
        deadletter=b"dlq",
        policy_writes=rng.randint(3, 10),
    )
    return draw.config(workload)


def _skew_config(seed: int, nodes: int | None) -> SimConfig:
    draw = _Draw.start(seed, "skew", nodes)
    workload = draw.clients(
        jobs=(6, 16), producers=None, consumers=(1, 2), async_rates=(0.0, 0.25, 0.5)
    )
    plan = replace(draw.plan(), skews=draw.rng.randint(1, 4))
    return draw.config(workload, plan)


def _coordination_config(seed: int, nodes: int | None) -> SimConfig:
    draw = _Draw.start(seed, "coordination", nodes)
    rng = draw.rng
    workload = replace(
        draw.clients(jobs=(10, 24)),
        groups=rng.choice((0.5, 0.8)),
        release_rate=0.3,
        doomed_rate=rng.choice((0.2, 0.4)),
        claim_rate=0.75,
        claim_ack_rate=0.5,
        working_rate=0.4,
        progress_rate=0.8,
        working_again_rate=0.3,
        abandon_rate=0.5,
    )
    config = draw.config(workload)
    # Long enough for failure detection to clear and the logs to be sent again after the
    # heal, and for consumers busy with a job to finish (up to three WORKINGs).
    return replace(config, progress_check=4 * config.settings.node_timeout + 5000)


def _outcomes_config(seed: int, nodes: int | None) -> SimConfig:
    draw = _Draw.start(seed, "outcomes", nodes, sizes=(2, 3, 3), windows=(3000, 5000))
    rng = draw.rng
    workload = replace(
        draw.clients(jobs=(6, 12), producers=None, consumers=(1, 2)),
        at_most_once_rate=0.0,  # a NACKed at-most-once job is never queued again
        nack_rate=0.25,
        working_rate=0.25,
        working_again_rate=0.7,
        forget_rate=0.0,
        expiring_rate=0.1,
        doomed_ttl=(2, 3),
        backoff_rate=0.4,
        nack_delay_rate=0.6,
        result_rate=0.6,
        cancels=rng.randint(1, 3),
        waiters=2,
        waits=rng.randint(3, 6),
        wait_timeout_rate=0.4,
        unknown_rate=0.1,
    )
    config = draw.config(workload)
    # A waiter's node asks again at growing intervals, up to QUERY_MAX apart.
    return replace(config, settle_extra=QUERY_MAX)


def _flow_config(seed: int, nodes: int | None) -> SimConfig:
    draw = _Draw.start(seed, "flow", nodes, sizes=(2, 3, 3, 4))
    rng, window = draw.rng, draw.window
    workload = replace(
        draw.clients(
            jobs=(15, 40), producers=(1, 3), consumers=(1, 2), async_rates=(0.0, 0.25, 0.5)
        ),
        # Past flow to disk's horizon (10 s) a replica not queued, or a delayed job, spills.
        retry=(1, 14),
        delay_rate=0.15,
        delay=(1, 14),
        nack_rate=0.1,
        priority_rate=rng.choice((0.0, 0.3)),
        consume_after=rng.choice(((0, 50), (window // 4, window // 2), (window // 2, window))),
        inspections=rng.randint(10, 30),
        check_bodies=True,
    )
    plan = draw.plan()
    plan = replace(
        plan,
        disk_failures=rng.randint(0, 2),
        corruptions=rng.choice((0, 1, 2, 3)),
        tear_rate=0.5 if plan.crashes else 0.0,
    )
    spill = SpillSettings(
        level=rng.choice((0, 1, 3, 6, 12)),
        window=rng.randint(1, 4),
        max_disk=rng.choice((0, 0, 0, 4000, 12000)),
        segment_bytes=rng.choice((512, 2048, 8192)),
    )
    config = draw.config(workload, plan)
    return replace(config, settings=replace(config.settings, spill=spill))


def _replay(seed: int, mode: str, nodes: int | None) -> str:
    return f"--seed {seed}" + REPLAY_OPTIONS[mode] + (f" --nodes {nodes}" if nodes else "")


CRON_SPECS = (
    (b"EVERY", b"1"), (b"EVERY", b"2"), (b"EVERY", b"3"), (b"SCHEDULE", b"*/2 * * * * *"),
)  # fmt: skip
CRON_OPTIONS = ((), (b"REPLICATE", b"1"), (b"REPLICATE", b"2"), (b"ASYNC",),
                (b"REPLICATE", b"2", b"ASYNC"), (b"RETRY", b"0", b"REPLICATE", b"1"))  # fmt: skip


def _cron_config(seed: int, nodes: int | None) -> SimConfig:
    draw = _Draw.start(seed, "cron", nodes, windows=(3000, 6000))
    rng = draw.rng
    crons = tuple(
        rng.choice(CRON_SPECS) + rng.choice(CRON_OPTIONS) for _ in range(rng.randint(1, 3))
    )
    return draw.config(Workload(producers=0, consumers=0, jobs=0, crons=crons))


#: The modes drawn from a stream of their own (:meth:`_Draw.start`), by name.
_MODE_CONFIGS: dict[str, Callable[[int, int | None], SimConfig]] = {
    "federation": _federation_config,
    "features": _features_config,
    "skew": _skew_config,
    "coordination": _coordination_config,
    "flow": _flow_config,
    "cron": _cron_config,
    "outcomes": _outcomes_config,
}


def _plan(rng: random.Random, kind: str, nodes: int, window: int, long: bool) -> FaultPlan:
    scale = 4 if long else 1
    plan = FaultPlan()
    if kind in ("network", "mixed"):
        plan = replace(
            plan,
            drop=rng.choice((0.0, 0.01, 0.05)),
            duplicate=rng.choice((0.0, 0.02, 0.05)),
            reorder=rng.choice((0.0, 0.05, 0.2)),
        )
        if not plan.faulty:
            plan = replace(plan, drop=0.02)
    if kind in ("partition", "mixed"):
        plan = replace(plan, partitions=rng.randint(1, 2 * scale), link_breaks=rng.randint(0, 3))
    if kind == "mixed":
        plan = replace(plan, leaving=rng.randint(0, scale))
    if kind in ("crash", "mixed"):
        plan = replace(
            plan, crashes=rng.randint(1, 2 * scale), max_down=rng.randint(1, max(1, nodes - 1))
        )
    return plan


def run_seed(
    seed: int,
    mode: str = "normal",
    nodes: int | None = None,
    echo: Callable[[str], None] | None = None,
) -> Result:
    if mode == "rate":  # (its own runner: sim/ratesim.py)
        from disquette.sim.ratesim import run_rate_seed

        return run_rate_seed(seed, nodes, echo)
    if mode == "fair":  # (its own runner: sim/fairsim.py)
        from disquette.sim.fairsim import run_fair_seed

        return run_fair_seed(seed, nodes, echo)
    return Simulation(config_for_seed(seed, mode, nodes), echo=echo).run()
