"""A simulated node process: one core, its command pipeline, timers and disk.

:class:`SimNode` plays the role the server process plays for a real node: it
builds a :class:`~disquette.core.node.Node` and a
:class:`~disquette.state.server.ServerState` around a bus endpoint, runs the
same timers as the server (the cron at ``hz``, the job timer re-armed 1 to
100 ms ahead from ``next_wakeup()``, the cluster cron every 100 ms, replica
repair slices while a pass runs), runs
client requests through ``ServerState.execute`` exactly like a connection
does, and ends every event the way the server ends an event-loop iteration
(:meth:`SimNode.settle`: serve blocked clients, write the AOF; then, in the
simulator only, call the runner's ``observer`` if it set one: coordination runs
watch every node's claims and waiting jobs there).

A crash discards the process: the Node and everything in memory are gone, the
timers stop, connections and connected clients drop. What is on disk survives
in :class:`Storage` — nodes.conf, which the membership saves through it (it is
the core's ``ConfigStore``), and the AOF when the node runs with
``appendonly`` (records are on disk at the end of each event, like
``appendfsync always``) — and :meth:`SimNode.start` builds a fresh process
from it, as a restarted server loads its files.

Flow to disk (:class:`SpillSettings`): each incarnation gets a new, empty
:class:`~disquette.sim.disk.MemorySpillStore` (the server discards its spill log at
startup: only the AOF brings jobs back), attached before the AOF loads. The
machine's disk outlives crashes: a write failure that is on (``disk_failing``)
stays on for the next store. The node's level is counted in jobs, not bytes:
memory accounting is the build's own (a job costs more in the pure build than in
the compiled one, see :mod:`disquette.core.memory`), so a byte level would spill at
different moments in the two builds and their histories would part. At the end of
every event the process sets the core's level to 1 byte while it holds more than
``level`` jobs in memory (over the level: the core spills down to its queue
windows, the margin it keeps under the level being larger than a simulated
dataset) and to an unreachable one otherwise, and records each change in the
trace. :meth:`SimNode.copy` and :meth:`SimNode.spilled` look at a node's jobs, on
disk included, without loading any back (a lookup in the registry would: its miss
handler is flow to disk's).

Each process reads the virtual time through its machine's clock,
:meth:`SimNode.clock`: virtual time plus :attr:`SimNode.clock_offset`, which the
skew fault (and ``DEBUG CLOCK-SKEW``) sets and which outlives crashes, as a host's
clock does. The node's timers are kept on that clock and converted to virtual time
when scheduled.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from disquette.commands import new_state
from disquette.config import Config
from disquette.core import aof
from disquette.core.client import Client
from disquette.core.dialect import CURRENT, Speech
from disquette.core.job import Job
from disquette.core.membership import CRON_PERIOD_MS, parse_nodes_conf
from disquette.core.node import Node
from disquette.core.repair import REPAIR_TICK_MS
from disquette.core.spill import SHARDS, Damaged, fingerprint, unframe
from disquette.sim.disk import MemorySpillStore
from disquette.sim.loop import Timer, VirtualLoop
from disquette.sim.network import Network, NodeBus
from disquette.sim.trace import Trace
from disquette.state.server import ServerState

JOB_TIMER_MAX_MS = 100
SPILL_ON = 1  # the core's level while the node is over its level: every job is past it
SPILL_OFF = 1 << 62  # and while it is under: a level no dataset reaches


class Storage:
    """What a node keeps across crashes: its files (the membership's ``ConfigStore``)."""

    def __init__(self) -> None:
        self.nodes_conf = b""
        self.aof = bytearray()

    def save(self, content: bytes, fsync: bool) -> None:
        self.nodes_conf = content


@dataclass
class SpillSettings:
    """Flow to disk on a simulated node (see the module docstring)."""

    level: int = 0  # jobs in memory past which the node is over its level (0: always)
    window: int = 2  # jobs kept at each queue's head (``Spill.window``)
    max_disk: int = 0  # bytes the spill log may hold (0: no limit)
    segment_bytes: int = 4096  # the store's segment size


@dataclass
class NodeSettings:
    """The configuration every simulated node starts with."""

    hz: int = 10
    node_timeout: int = 2000  # ms, cluster-node-timeout
    appendonly: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # other Config attributes
    spill: SpillSettings | None = None  # flow to disk (None: off)


class SimShell:
    """The ``Shell`` commands see: a simulated process cannot shut down or sleep."""

    def __init__(self, process: SimNode) -> None:
        self.process = process

    def shutdown(self, rewrite_aof: bool) -> bool:
        return False

    def close_client(self, client: Client) -> None:
        self.process.disconnect_client(client)

    def sleep(self, seconds: float) -> None:
        """DEBUG SLEEP does not advance virtual time."""

    def restart(self, delay_ms: int, rewrite_config: bool) -> bool:
        return False

    def set_clock_skew(self, skew_ms: int) -> None:
        """DEBUG CLOCK-SKEW sets the machine's clock (the runner's skew fault does more:
        it also tells property 10 that the clocks changed)."""
        self.process.clock_offset = skew_ms


class SimNode:
    """One node process; ``node`` is None while it is down."""

    def __init__(
        self,
        index: int,
        loop: VirtualLoop,
        network: Network,
        trace: Trace,
        rng: random.Random,
        settings: NodeSettings,
        ip: bytes,
        port: int,
    ) -> None:
        self.index = index
        self.name = f"n{index}"
        self.loop = loop
        self.network = network
        self.trace = trace
        self.rng = rng  # the process's own stream; each incarnation draws its seeds here
        self.settings = settings
        self.ip = ip
        self.port = port
        self.storage = Storage()
        self.node_id = b""  # the identity in nodes.conf, once the process has started
        self.node: Node | None = None
        self.state: ServerState | None = None
        self.bus: NodeBus | None = None
        self.incarnation = 0
        self.clients: dict[Client, Callable[[], None]] = {}  # client -> on_disconnect
        self.crashes = 0
        self.repair_scheduled = False  # a replica repair slice is due (while a pass runs)
        self.job_timer: Timer | None = None  # the job timer of the running incarnation
        self.clock_offset = 0  # ms this machine's clock is ahead of virtual time
        #: This clock's highest reading when a clock of the run last changed: a PING it
        #: sends later samples clocks that all held still since (set by the runner).
        self.clock_settled = 0
        #: Called at the end of every event the running node handled (set by the
        #: runner to watch claims and waiting jobs in coordination runs).
        self.observer: Callable[[SimNode], None] | None = None
        #: Called right after each cron tick of the running node (set by the runner to
        #: watch memory in flow-to-disk runs: the tick ends with the core's spilling).
        self.after_cron: Callable[[SimNode], None] | None = None
        self.store: MemorySpillStore | None = None  # the running incarnation's spill log
        #: The release its next incarnation runs, as the bus sees it (core/dialect.py):
        #: upgrade runs start some nodes with an older speech and restart them newer.
        self.speech: Speech = CURRENT
        self.disk_failing = False  # the machine's disk refuses writes (a disk fault)
        self.spilling = False  # over its flow-to-disk level (as last set)
        self.disk_changes = 0  # records damaged by the runner (see ``spilled``)
        self._spilled: tuple[tuple[Any, ...], list[tuple[int, int, int, Job | None]]] = ((), [])

    @property
    def alive(self) -> bool:
        return self.node is not None

    def clock(self) -> int:
        """This machine's clock (ms): what its node reads as the time."""
        return self.loop.now + self.clock_offset

    def config(self) -> Config:
        s = self.settings
        config = Config()
        config.port = self.port
        config.hz = s.hz
        config.cluster_node_timeout = s.node_timeout
        config.appendonly = s.appendonly
        config.slowlog_log_slower_than = -1  # wall-clock timings have no place here
        for name, value in s.extra.items():
            setattr(config, name, value)
        return config

    # Life cycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start a process from what is on disk (nodes.conf, and the AOF if enabled)."""
        assert self.node is None
        self.incarnation += 1
        self.repair_scheduled = False
        config = self.config()
        now = self.loop.now
        loaded = parse_nodes_conf(self.storage.nodes_conf, self.clock())
        node_id = loaded.myself if loaded is not None else self.rng.randbytes(20).hex().encode()
        node_rng = random.Random(self.rng.getrandbits(64))
        bus = NodeBus(self.network, self.index, self.ip, self.port, self.settle)
        node = Node(
            config,
            node_id,
            self.clock,
            node_rng,
            node_rng.randbytes,
            port=self.port,
            bus=bus,
            speech=self.speech,
        )
        bus.node = node
        node.cluster.on_log = self._log
        if s_spill := self.settings.spill:
            # Before the AOF loads (loading may spill); over the level while it does.
            store = self.store = MemorySpillStore(s_spill.segment_bytes)
            store.fail_writes = self.disk_failing
            node.spill.attach(store)
            self.spilling = bool(config.appendonly and self.storage.aof)
            level = SPILL_ON if self.spilling else SPILL_OFF
            node.spill.configure(True, level, s_spill.max_disk, s_spill.window)
            node.spill.log = self._spill_log
        node.cluster.set_clock_skew_warn(config.clock_skew_warn_ms)
        node.cluster.start(
            self.storage, loaded, keep_generation=bool(config.appendonly and self.storage.aof)
        )
        if config.appendonly:
            sink = aof.AofBuffer()
            sink.enabled = True
            sink.new_file = not self.storage.aof  # (an empty file: its format record first)
            node.aof = sink
            aof.load(
                node,
                bytes(self.storage.aof),
                enqueue=config.aof_enqueue_jobs_once,
                truncated_ok=True,
            )
        self.node_id = node_id
        self.node = node
        self.bus = bus
        self.state = new_state(config, node, shell=SimShell(self))
        self.network.attach(bus)
        self.trace.record(now, "start", self.name, self.incarnation, len(node.jobs))
        self._gauge(node)
        gen = self.incarnation
        hz_ms = max(1, 1000 // min(max(config.hz, 1), 500))
        self.loop.call_later(hz_ms, self._cron, gen, hz_ms)
        node.wake_by = self._wake_by
        node.spill.prefetch_hook = self._prefetch_soon
        self.job_timer = self.loop.call_later(1, self._job_tick, gen)
        self.loop.call_later(CRON_PERIOD_MS, self._cluster_cron, gen)

    def crash(self, tear: int = -1) -> list[Job]:
        """Kill the process (kill -9): memory is lost; return the jobs it held (those
        on disk too, as read from their records: its spill log is discarded). With
        ``tear`` >= 0 the spill log's pending bytes are torn after that many."""
        node = self.node
        assert node is not None and self.bus is not None
        jobs = list(node.jobs.values())
        jobs += [job for _, _, _, job in self.spilled() if job is not None]
        if self.store is not None:
            if tear >= 0:
                self.store.tear(tear)
            self.store = None
        self.network.detach(self.bus)
        self.node = None
        self.state = None
        self.bus = None
        self.crashes += 1
        self.trace.record(self.loop.now, "crash", self.name, len(jobs))
        clients = list(self.clients.values())
        self.clients.clear()
        for on_disconnect in clients:
            on_disconnect()
        return jobs

    def settle(self) -> None:
        """The end of an event-loop iteration: serve blocked clients, write the AOF (and
        let the observer look)."""
        node = self.node
        if node is None:
            return
        if node.ready_queues:
            node.serve_blocked_clients()
        sink = node.aof
        if isinstance(sink, aof.AofBuffer) and sink.data:
            self.storage.aof += sink.data
            sink.data.clear()
        if self.settings.spill is not None:
            self._gauge(node)
        if self.observer is not None:
            self.observer(self)

    def _gauge(self, node: Node) -> None:
        """Flow to disk: set the core's level for the next event from the jobs held in
        memory (see the module docstring); a change goes to the trace."""
        s_spill = self.settings.spill
        if s_spill is None:
            return
        over = len(node.jobs) > s_spill.level
        if over != self.spilling:
            self.spilling = over
            self.trace.record(self.loop.now, "spill", self.name, "on" if over else "off")
        node.spill.threshold = SPILL_ON if over else SPILL_OFF

    def _log(self, level: str, text: str) -> None:
        """The node's notable events (FAIL flags, generation changes) go to the trace."""
        if level in ("notice", "warning"):
            self.trace.record(self.loop.now, "log", self.name, text)

    def _spill_log(self, text: str) -> None:
        """Flow to disk's log lines (write failures, damaged records) go to the trace."""
        self._log("warning", text)

    # Looking without touching -------------------------------------------------------------

    def copy(self, job_id: bytes) -> Job | None:
        """The running node's copy of a job: the one in memory, else one read from its
        record on disk (a copy nobody must change; a damaged record is no copy), else
        None. Nothing is loaded back (the registry's miss handler is not called)."""
        job = self.in_memory(job_id)
        node = self.node
        if job is not None or node is None or not node.spill.count:
            return job
        found = node.spill.peek(fingerprint(job_id))
        return found if found is not None and found.id == job_id else None

    def in_memory(self, job_id: bytes) -> Job | None:
        """The running node's copy of a job if it is in memory (None otherwise)."""
        node = self.node
        if node is None:
            return None
        jobs = node.jobs
        miss = jobs.miss
        jobs.miss = None
        try:
            return jobs.get(job_id)
        finally:
            jobs.miss = miss

    def spilled(self) -> list[tuple[int, int, int, Job | None]]:
        """Every entry of the running node's spill index, as (ID hash, location, size,
        the job its record holds or None when the record is damaged), read from the
        store without loading anything back."""
        node = self.node
        store = self.store
        if node is None or store is None or not node.spill.count:
            return []
        # Walking the index's every shard is slow: the last walk serves while nothing
        # that moves an entry or changes a record has happened since (the counters of
        # what flow to disk did, the live bytes by segment, the runner's corruptions).
        spill = node.spill
        key = (self.incarnation, spill.spilled, spill.loaded, spill.read_errors, spill.bytes,
               tuple(spill.seg_live.items()), self.disk_changes)  # fmt: skip
        if self._spilled[0] == key:
            return self._spilled[1]
        out: list[tuple[int, int, int, Job | None]] = []
        index = spill.index
        for shard in range(SHARDS):
            for fp, loc, size in index.shard(shard):
                try:
                    job: Job | None = unframe(store.read(loc, size))
                except Damaged:
                    job = None
                out.append((fp, loc, size, job))
        self._spilled = (key, out)
        return out

    # Timers (as the server runs them) ------------------------------------------------------

    def _cron(self, gen: int, period: int) -> None:
        node = self.node
        if node is None or gen != self.incarnation:
            return
        node.cron()
        if self.after_cron is not None:
            self.after_cron(self)
        self.settle()
        if node.repair.scanning and not self.repair_scheduled:
            self.repair_scheduled = True
            self.loop.call_later(REPAIR_TICK_MS, self._repair_tick, gen)
        self.loop.call_later(period, self._cron, gen, period)

    def _repair_tick(self, gen: int) -> None:
        node = self.node
        if node is None or gen != self.incarnation:
            return
        self.repair_scheduled = False
        node.repair.tick(self.clock())
        self.settle()
        if node.repair.scanning:
            self.repair_scheduled = True
            self.loop.call_later(REPAIR_TICK_MS, self._repair_tick, gen)

    def _prefetch_soon(self) -> None:
        self.loop.call_later(0, self._prefetch, self.incarnation)

    def _prefetch(self, gen: int) -> None:
        """Read-ahead between requests, a batch a turn (as the server)."""
        node = self.node
        if node is None or gen != self.incarnation:
            return
        if node.spill.prefetch():
            self._prefetch_soon()
        self.settle()

    def _job_tick(self, gen: int) -> None:
        node = self.node
        if node is None or gen != self.incarnation:
            return
        node.process_jobs()
        self.settle()
        self._arm_job_timer(node.next_wakeup(), gen)

    def _arm_job_timer(self, wake: int | None, gen: int) -> None:
        now = self.clock()  # (``wake`` is on the node's clock)
        delay = JOB_TIMER_MAX_MS if wake is None else min(JOB_TIMER_MAX_MS, max(1, wake - now))
        self.job_timer = self.loop.call_later(delay, self._job_tick, gen)

    def _wake_by(self, when: int) -> None:
        """The core needs the job timer by ``when`` (its clock): bring it forward (as the
        server)."""
        timer = self.job_timer
        if timer is not None and when - self.clock_offset < timer.when:
            timer.cancel()
            self._arm_job_timer(when, self.incarnation)

    def _cluster_cron(self, gen: int) -> None:
        node = self.node
        if node is None or gen != self.incarnation:
            return
        node.cluster.cron()
        self.settle()
        self.loop.call_later(CRON_PERIOD_MS, self._cluster_cron, gen)

    # Clients -----------------------------------------------------------------------------

    def connect_client(self, client: Client, on_disconnect: Callable[[], None]) -> None:
        assert self.state is not None
        self.state.add_client(client)
        self.clients[client] = on_disconnect

    def disconnect_client(self, client: Client) -> None:
        """The connection closes (either side): the node forgets the client."""
        on_disconnect = self.clients.pop(client, None)
        if self.state is not None:
            self.state.remove_client(client)
        if on_disconnect is not None:
            on_disconnect()

    def execute(self, client: Client, argv: list[bytes]) -> bytes | None:
        """Run one request as a client connection does; None when it blocked."""
        assert self.state is not None
        response = self.state.execute(client, argv)
        self.settle()
        return response
