"""Prometheus metrics: one node's state in the text exposition format (``/metrics``).

The official client library does the formatting (names, label escaping, float
rendering): a custom :class:`Collector` reads the :class:`ServerState` when a scrape
asks, yields metric families, and :func:`exposition` renders them with
``generate_latest`` of a registry of its own (never the library's global one, which
would also export this process's Python runtime under names we do not own). Nothing
is kept between scrapes but what the node counts anyway: the counters are the
node's (commands, errors, bus traffic, queues' jobs in and out), the gauges are read
as they are, and rates are left to Prometheus (``rate()``).

Naming follows Prometheus's conventions: the ``disquette_`` prefix, base units
(``_seconds``, ``_bytes``), ``_total`` on counters, and the labels ``queue``,
``state``, ``command`` and ``type``. CONFIG RESETSTAT zeroes the command, error and
traffic counters, which Prometheus reads as a counter reset.

**Queue names** are bytes: a UTF-8 name is its own label value (the library escapes
backslashes, double quotes and newlines); any other (or one that starts with
``~b64~``) is ``~b64~`` followed by its URL-safe base64, as in the HTTP API's URLs
(observe/merge.py's ``name_text``).

**Cost.** The node's state is read on the event loop, at once (:class:`Scrape`: the
node's families and one tuple per exported queue, about a microsecond each), and
rendered by :func:`render`, which the HTTP route runs in a worker thread: the
formatting (several microseconds per series, in the library's Python) then shares
the interpreter with the loop, which gets it back every switch interval (5 ms),
instead of pausing every client for the whole scrape. The per-queue families cover
the ``metrics-queues-max`` longest queues (1000 by default); the others are summed
into ``disquette_queues_omitted`` and ``disquette_queues_omitted_jobs``. Every queue
still counts in the node's totals (``disquette_jobs{state="queued"}``), for a walk of
the queue table, never of the jobs. docs/operations.md has the table of metrics and
the cost measured by bench/metrics.py.

**Jobs by state** come from counters, not from a walk of the jobs: ``queued`` is the
sum of the queues' lengths (jobs on disk included), ``acked`` the node's count of
acknowledged jobs (``Node.jobs_acked``, checked against the jobs by the simulator),
``active`` the rest (it includes the jobs still waiting for their replicas, which
a synchronous ADDJOB holds for a few milliseconds).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from disquette import DISQUE_VERSION, __version__, build
from disquette.core.job import LEVELS
from disquette.core.membership import FAIL, HANDSHAKE, LEAVING, PFAIL
from disquette.observe.info import aof_status, rss_bytes
from disquette.observe.merge import name_text

if TYPE_CHECKING:
    from disquette.core.queue import Queue
    from disquette.state.server import ServerState

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
#: States of the nodes in this node's table, as ``disquette_cluster_nodes`` labels them.
NODE_STATES: Final = ("ok", "pfail", "fail", "leaving")


def oldest_age_ms(queue: Queue, now_ms: int) -> int:
    """Milliseconds since the oldest job in memory in the queue was created (0: none).

    The head of a queue is its oldest job, unless it has priorities (then the oldest
    is the oldest head of a level); jobs on disk are newer than those in memory."""
    jobs = queue.jobs
    if jobs.has_levels:
        firsts = (level.first() for p in range(LEVELS) if (level := jobs.level(p)) is not None)
        ctimes = [job.ctime for job in firsts if job is not None]
        ctime = min(ctimes) if ctimes else 0
    else:
        head = jobs.first()
        ctime = 0 if head is None else head.ctime
    return max(0, now_ms - ctime // 1_000_000) if ctime else 0


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class Scrape(Collector):
    """One scrape of a node: its state read at once (on the event loop), rendered later
    by whoever collects it (a worker thread: it touches nothing of the node's)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        families = [*self._node(), *self._commands(), *self._cluster(), *self._persistence()]
        families += self._queues()
        self.families = families
        del self.state  # nothing of the node's past this point

    def describe(self) -> Iterable[Metric]:
        return ()  # registering collects nothing

    def collect(self) -> Iterator[Metric]:
        yield from self.families
        yield from _queue_families(self.queues)
        yield from self.omitted

    # Node ---------------------------------------------------------------------------

    def _node(self) -> Iterator[Metric]:
        state = self.state
        node = state.node
        stats = state.stats
        info = GaugeMetricFamily(
            "disquette_node_info",
            "This node: its ID and versions (value 1).",
            labels=["node_id", "version", "disque_version", "build"],
        )
        info.add_metric([node.myself.decode(), __version__, DISQUE_VERSION, build.current()], 1)
        yield info
        yield _gauge(
            "disquette_uptime_seconds",
            "Seconds since the server started.",
            max(0.0, time.time() - state.start_time),
        )
        yield _gauge("disquette_loading", "1 while the AOF is being loaded.", int(node.loading))
        yield _gauge("disquette_connected_clients", "Client connections open.", len(state.clients))
        yield _gauge(
            "disquette_blocked_clients",
            "Clients blocked in GETJOB, a synchronous ADDJOB or WAITJOB.",
            len(node.blocked_clients),
        )
        yield _counter(
            "disquette_connections_received",
            "Client connections accepted.",
            stats.connections_received,
        )
        yield _counter(
            "disquette_rejected_connections",
            "Client connections refused (maxclients, protected mode).",
            stats.rejected_connections,
        )
        yield _counter(
            "disquette_net_input_bytes", "Bytes read from clients.", stats.net_input_bytes
        )
        yield _counter(
            "disquette_net_output_bytes", "Bytes written to clients.", stats.net_output_bytes
        )
        used = node.memory_used
        yield _gauge(
            "disquette_memory_used_bytes",
            "The dataset's memory, as maxmemory counts it (INFO used_memory).",
            used,
        )
        yield _gauge(
            "disquette_memory_peak_bytes",
            "The most used_memory seen.",
            stats.track_memory(used),
        )
        yield _gauge("disquette_memory_rss_bytes", "The process's resident set size.", rss_bytes())
        yield _gauge(
            "disquette_memory_max_bytes",
            "The maxmemory directive (0: unlimited).",
            node.settings.maxmemory,
        )
        yield _gauge(
            "disquette_memory_warning_level",
            "Disque's maxmemory level: 0 under 75 %, 1 above (the node starts sharing "
            "its jobs), 2 above 95 % or no maxmemory (ADDJOB is refused past 95 %).",
            node.memory_level(),
        )
        yield _gauge(
            "disquette_event_loop_lag_seconds",
            "How late the server's cron timer ran, the last time.",
            stats.loop_lag,
        )
        yield _gauge(
            "disquette_event_loop_lag_max_seconds",
            "How late the server's cron timer ran at most, since the previous scrape.",
            stats.take_lag_max(),
        )

    def _commands(self) -> Iterator[Metric]:
        stats = self.state.stats
        yield _counter(
            "disquette_commands_processed",
            "Commands run (INFO total_commands_processed).",
            stats.commands_processed,
        )
        calls = CounterMetricFamily(
            "disquette_commands", "Commands run, by command.", labels=["command"]
        )
        duration = CounterMetricFamily(
            "disquette_commands_duration_seconds",
            "Time spent running commands, by command.",
            labels=["command"],
        )
        for cmd in self.state.commands.values():
            if cmd.calls:
                calls.add_metric([cmd.name], cmd.calls)
                duration.add_metric([cmd.name], cmd.usec / 1e6)
        yield calls
        yield duration
        errors = CounterMetricFamily(
            "disquette_errors",
            "Error replies, by their prefix (ERR, NOAUTH, PAUSED, NOREPL...).",
            labels=["type"],
        )
        for kind, count in stats.errors.items():
            errors.add_metric([kind.decode(errors="replace")], count)
        yield errors

    # Cluster ------------------------------------------------------------------------

    def _cluster(self) -> Iterator[Metric]:
        node = self.state.node
        cluster = node.cluster
        bus = cluster.stats
        counts = dict.fromkeys(NODE_STATES, 0)
        for other in cluster.nodes.values():
            flags = other.flags
            if flags & HANDSHAKE:
                continue
            if flags & FAIL:
                counts["fail"] += 1
            elif flags & PFAIL:
                counts["pfail"] += 1
            elif flags & LEAVING:
                counts["leaving"] += 1
            else:
                counts["ok"] += 1
        nodes = GaugeMetricFamily(
            "disquette_cluster_nodes",
            "Nodes in this node's table (itself included), by state.",
            labels=["state"],
        )
        for name, count in counts.items():
            nodes.add_metric([name], count)
        yield nodes
        for name, doc, value in (
            ("messages_sent", "Cluster bus messages sent.", cluster.messages_sent),
            ("messages_received", "Cluster bus messages received.", cluster.messages_received),
            ("frames_sent", "Cluster bus frames (several messages each) sent.", bus.frames_sent),
            ("frames_received", "Cluster bus frames received.", bus.frames_received),
            ("sent_bytes", "Bytes written to cluster bus links.", bus.bytes_sent),
            ("received_bytes", "Bytes read from cluster bus links.", bus.bytes_received),
            ("frames_rejected", "Malformed frames that closed a link.", bus.frames_rejected),
            ("links_refused", "Links refused (cluster-secret, TLS).", bus.links_refused),
            ("links_silent", "Links closed for silence.", bus.links_silent),
        ):
            yield _counter("disquette_bus_" + name, doc, value)
        repair = node.repair
        yield _gauge(
            "disquette_cluster_data_generation",
            "This node's data generation (changes when it lost its jobs).",
            cluster.generation,
        )
        yield _counter(
            "disquette_cluster_generation_changes",
            "New data generations seen on other nodes (their copies lost).",
            repair.generation_changes,
        )
        yield _gauge(
            "disquette_repair_enabled", "1 when replica-repair is on.", int(repair.enabled)
        )
        yield _counter(
            "disquette_repair_copies_lost",
            "Copies of jobs lost with failed nodes, as repair counted them.",
            repair.copies_lost,
        )
        yield _counter(
            "disquette_repair_jobs_repaired",
            "Jobs given new replicas by repair.",
            repair.jobs_repaired,
        )
        yield _gauge(
            "disquette_repair_backlog", "Jobs waiting to be checked by repair.", repair.backlog
        )
        yield _gauge(
            "disquette_repair_in_flight", "Repairs sent, not yet confirmed.", len(repair.in_flight)
        )
        yield _gauge(
            "disquette_repair_nodes_down",
            "Failed nodes whose copies repair counts as lost.",
            len(repair.down),
        )

    def _persistence(self) -> Iterator[Metric]:
        state = self.state
        aof = aof_status(state)
        yield _gauge("disquette_aof_enabled", "1 when the AOF is on.", int(aof.state != "off"))
        yield _gauge(
            "disquette_aof_rewrite_in_progress",
            "1 while an AOF rewrite runs.",
            int(aof.rewrite_in_progress),
        )
        yield _gauge(
            "disquette_aof_last_write_ok",
            "0 after a failed AOF write (writes are refused with MISCONF), else 1.",
            int(state.aof_write_error is None),
        )
        yield _gauge(
            "disquette_aof_last_rewrite_ok",
            "0 when the last AOF rewrite failed, else 1.",
            int(aof.last_bgrewrite_ok),
        )
        yield _gauge("disquette_aof_size_bytes", "The AOF's current size.", aof.current_size)
        yield _gauge(
            "disquette_aof_base_size_bytes",
            "The AOF's size after the last rewrite (or at start).",
            aof.base_size,
        )

    # Jobs and queues -----------------------------------------------------------------

    def _queues(self) -> list[Metric]:
        """The jobs by state and the queue table (kept as :attr:`queues` and
        :attr:`omitted`: their families are made when collected)."""
        node = self.state.node
        queues = node.queues
        queued = 0
        for queue in queues.values():
            queued += len(queue)
        total = len(node.jobs) + node.spill.count
        acked = node.jobs_acked
        jobs = GaugeMetricFamily(
            "disquette_jobs",
            "Jobs held by this node, by state (active includes those awaiting replicas).",
            labels=["state"],
        )
        jobs.add_metric(["queued"], queued)
        jobs.add_metric(["active"], total - queued - acked)
        jobs.add_metric(["acked"], acked)
        limit = self.state.config.metrics_queues_max
        if len(queues) <= limit:
            shown: Iterable[Queue] = queues.values()
            omitted = omitted_jobs = 0
        else:
            shown = heapq.nlargest(limit, queues.values(), key=len)
            omitted = len(queues) - limit
            omitted_jobs = queued - sum(len(q) for q in shown)
        now_ms = node.clock()
        self.queues: list[QueueRow] = [
            (q.name, len(q), q.jobs_in, q.jobs_out, q.nacks, q.additional_deliveries,
             q.paused, len(q.blocked), oldest_age_ms(q, now_ms))
            for q in shown
        ]  # fmt: skip
        self.omitted = [
            _gauge(
                "disquette_queues_omitted",
                "Queues beyond metrics-queues-max, not exported one by one.",
                omitted,
            ),
            _gauge(
                "disquette_queues_omitted_jobs", "Jobs queued in the omitted queues.", omitted_jobs
            ),
        ]
        return [
            jobs,
            _gauge(
                "disquette_jobs_on_disk",
                "Queued jobs moved to disk (flow-to-disk).",
                node.spill.count,
            ),
            _gauge("disquette_queues", "Queues registered on this node.", len(queues)),
        ]


#: A queue as a scrape reads it: name, length, jobs in, jobs out, nacks, additional
#: deliveries, pause flags, blocked clients, age of its oldest job (ms).
QueueRow = tuple[bytes, int, int, int, int, int, int, int, int]


def _queue_families(rows: list[QueueRow]) -> Iterator[Metric]:
    label = ["queue"]
    length = GaugeMetricFamily("disquette_queue_jobs", "Jobs queued.", labels=label)
    jobs_in = CounterMetricFamily(
        "disquette_queue_jobs_in", "Jobs queued here (added, requeued, imported).", labels=label
    )
    jobs_out = CounterMetricFamily(
        "disquette_queue_jobs_out", "Jobs taken from the queue (delivered).", labels=label
    )
    nacks = CounterMetricFamily("disquette_queue_nacks", "NACKs of its jobs.", labels=label)
    additional = CounterMetricFamily(
        "disquette_queue_additional_deliveries",
        "Its jobs queued again by their retry timer.",
        labels=label,
    )
    paused = GaugeMetricFamily(
        "disquette_queue_paused", "Paused: 0 none, 1 in, 2 out, 3 all.", labels=label
    )
    blocked = GaugeMetricFamily(
        "disquette_queue_blocked_clients", "Clients blocked in GETJOB on it.", labels=label
    )
    age = GaugeMetricFamily(
        "disquette_queue_oldest_job_age_seconds",
        "Age of its oldest queued job (0: empty).",
        labels=label,
    )
    for name, n, n_in, n_out, n_nacks, n_additional, flags, n_blocked, age_ms in rows:
        labels = [name_text(name)]
        length.add_metric(labels, n)
        jobs_in.add_metric(labels, n_in)
        jobs_out.add_metric(labels, n_out)
        nacks.add_metric(labels, n_nacks)
        additional.add_metric(labels, n_additional)
        paused.add_metric(labels, flags)
        blocked.add_metric(labels, n_blocked)
        age.add_metric(labels, age_ms / 1000)
    return iter((length, jobs_in, jobs_out, nacks, additional, paused, blocked, age))


def render(scrape: Scrape) -> bytes:
    """A scrape in Prometheus's text format; safe in a worker thread."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(scrape)
    return generate_latest(registry)


def exposition(state: ServerState) -> bytes:
    """The node's metrics in Prometheus's text format (served with :data:`CONTENT_TYPE`)."""
    return render(Scrape(state))
