"""The text of INFO: Disque's sections and fields, in Disque's order (reference 5.3).

Each section is ``# Name`` followed by ``key:value`` lines, every line ending
in ``\\r\\n``; consecutive sections are separated by one more ``\\r\\n``. The
default report has every section but Commandstats; ``all`` adds it; an unknown
section name gives an empty report.

Values that only a C build has (git SHA1, build id, gcc version, the
allocator) are filled with their neutral equivalents for a Python process;
the AOF fields come from the process's append-only file (``_persistence``).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import resource
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from disquette import DISQUE_VERSION, __version__, build
from disquette.config.command_names import COMMAND_NAMES
from disquette.core.memory import human_bytes
from disquette.state.clients import output_list_length
from disquette.state.persistence import AofStatus

if TYPE_CHECKING:
    from disquette.state.server import ServerState

#: Sections of the default report, in order; ``all`` appends commandstats.
DEFAULT_SECTIONS = ("server", "clients", "memory", "jobs", "queues", "persistence", "stats", "cpu")
ALL_SECTIONS = (*DEFAULT_SECTIONS, "commandstats")

_TABLE_ORDER = {name: i for i, name in enumerate(COMMAND_NAMES)}
_BUILD_ID = f"{int(hashlib.sha1(f'disquette-{__version__}'.encode()).hexdigest()[:16], 16):x}"


def _gcc_version() -> str:
    match = re.search(r"GCC (\d+)\.(\d+)\.(\d+)", platform.python_compiler())
    return ".".join(match.groups()) if match else "0.0.0"


def _mem_allocator() -> str:
    return "libc" if os.environ.get("PYTHONMALLOC", "").startswith("malloc") else "pymalloc"


_GCC_VERSION = _gcc_version()
_ARCH_BITS = 64 if sys.maxsize > 2**32 else 32
try:
    _PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
    _PAGE_SIZE = 4096


def rss_bytes() -> int:
    """The resident set size of this process (``/proc/self/statm``, else getrusage)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        # ru_maxrss is the peak, in KiB on Linux: the best there is without /proc.
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _lines(name: str, fields: list[tuple[str, object]]) -> str:
    return f"# {name}\r\n" + "".join(f"{key}:{value}\r\n" for key, value in fields)


def _server(state: ServerState) -> str:
    uname = os.uname()
    uptime = max(0, int(time.time() - state.start_time))
    config = state.config
    speech = state.node.dialect.speech
    return _lines(
        "Server",
        [
            ("disque_version", DISQUE_VERSION),
            ("disque_git_sha1", "00000000"),
            ("disque_git_dirty", 0),
            ("disque_build_id", _BUILD_ID),
            ("disquette_build", build.current()),
            ("os", f"{uname.sysname} {uname.release} {uname.machine}"),
            ("arch_bits", _ARCH_BITS),
            ("multiplexing_api", "epoll"),
            ("gcc_version", _GCC_VERSION),
            ("process_id", os.getpid()),
            ("run_id", state.run_id),
            ("tcp_port", config.port),
            ("uptime_in_seconds", uptime),
            ("uptime_in_days", uptime // 86400),
            ("hz", config.hz),
            ("executable", state.executable or ""),
            ("config_file", config.config_file or ""),
            # Beyond Disque (after its fields): the release, and what it speaks on the bus.
            ("disquette_version", speech.release.decode(errors="replace")),
            ("bus_protocol_version", speech.version),
            ("bus_protocol_oldest", speech.oldest),
            ("bus_features", ",".join(sorted(f.decode() for f in speech.features))),
        ],
    )


def _clients(state: ServerState) -> str:
    longest_output = biggest_input = 0
    for client in state.clients.values():
        longest_output = max(longest_output, getattr(client, "output_buffer", 0))
        biggest_input = max(biggest_input, getattr(client, "query_buffer", 0))
    return _lines(
        "Clients",
        [
            ("connected_clients", len(state.clients)),
            ("client_longest_output_list", output_list_length(longest_output)),
            ("client_biggest_input_buf", biggest_input),
            ("blocked_clients", len(state.node.blocked_clients)),
        ],
    )


def _memory(state: ServerState) -> str:
    used = state.node.memory_used
    peak = state.stats.track_memory(used)
    rss = rss_bytes()
    # Disque divides RSS by the allocator's count; an empty dataset counts 0 here.
    ratio = rss / used if used else 0.0
    return _lines(
        "Memory",
        [
            ("used_memory", used),
            ("used_memory_human", human_bytes(used)),
            ("used_memory_rss", rss),
            ("used_memory_peak", peak),
            ("used_memory_peak_human", human_bytes(peak)),
            ("mem_fragmentation_ratio", f"{ratio:.2f}"),
            ("mem_allocator", _mem_allocator()),
            ("mem_heap_trims", state.stats.heap_trims),
            # The interpreter's small objects alive: what a leak grows, whatever the
            # allocator keeps of freed memory (RSS's noise).
            ("mem_allocated_blocks", sys.getallocatedblocks()),
        ],
    )


def _jobs(state: ServerState) -> str:
    node = state.node
    return _lines("Jobs", [("registered_jobs", len(node.jobs) + node.spill.count)])  # + on disk


def _queues(state: ServerState) -> str:
    return _lines("Queues", [("registered_queues", len(state.node.queues))])


def _extensions(state: ServerState) -> str:
    """Beyond Disque, asked by name only: policies, de-duplication, dead letters,
    dependencies, progress logs, rate limits, postponed requeues, overflow,
    cancellations, results, WAITJOB, recurring jobs and delivery tags."""
    node = state.node
    deps = node.deps
    return _lines(
        "Extensions",
        [
            ("queue_policies", len(node.policies)),
            ("dedup_keys", len(node.dedup_index)),
            ("dedup_hits", node.dedup_hits),
            ("jobs_dead_lettered", node.dead_lettered),
            ("jobs_dropped_by_limits", node.dropped_by_limits),
            ("dependencies_pending", len(deps.waits)),
            ("dependencies_watched", len(deps.watchers)),
            ("dependencies_gone_remembered", len(deps.gone)),
            ("jobs_released", deps.released),
            ("jobs_failed_by_dependencies", deps.failed),
            ("progress_logs_unconfirmed", len(node.progress_pending)),
            ("jobs_postponed", node.postponed),
            ("jobs_dropped_oldest", node.dropped_oldest),
            ("jobs_cancelled", node.outcomes.cancelled),
            ("job_results_stored", node.outcomes.results),
            ("job_outcomes_kept", len(node.outcomes)),
            ("job_outcomes_evicted", node.outcomes.evicted),
            ("waitjob_clients", sum(len(w.clients) for w in deps.waits.values())),
            ("rate_limited_queues", len(node.rates.limits)),
            ("jobs_in_flight_limited", len(node.rates.held)),
            ("jobs_throttled", node.rates.throttled),
            ("cron_schedules", len(node.crons)),
            ("cron_ticks_fired", node.crons.fired),
            ("cron_fire_errors", node.crons.errors),
            ("cron_ticks_skipped", node.crons.skipped),
            ("job_tags", len(node.tags)),
            ("job_tag_entries", node.tags.entries()),
        ],
    )


def _flowtodisk(state: ServerState) -> str:
    """Beyond Disque, asked by name only (``INFO flowtodisk``): where the jobs are,
    memory or disk, and what moving them costs (core/spill.py)."""
    node = state.node
    spill = node.spill
    store = spill.store
    failed = None if store is None else store.failed
    return _lines(
        "Flow-to-disk",
        [
            ("flow_to_disk", "yes" if spill.enabled else "no"),
            ("flow_to_disk_status", "ok" if failed is None else "err"),
            ("flow_to_disk_last_error", failed or ""),
            ("flow_to_disk_level", spill.threshold),
            ("flow_to_disk_max_size", spill.max_disk),
            ("jobs_in_memory", len(node.jobs)),
            ("bytes_in_memory", node.used_memory),
            ("jobs_on_disk", spill.count),
            ("bytes_on_disk", spill.bytes),
            ("disk_used", 0 if store is None else store.disk_used()),
            ("spill_index_bytes", spill.index_bytes() if spill.count else 0),
            ("jobs_spilled", spill.spilled),
            ("jobs_loaded", spill.loaded),
            ("instantaneous_spilled_per_sec", spill.spilled_per_sec),
            ("instantaneous_loaded_per_sec", spill.loaded_per_sec),
            ("readahead_hits", spill.readahead_hits),
            ("readahead_misses", spill.readahead_misses),
            ("readahead_batches", spill.readahead_loads),
            ("spill_segments", len(spill.seg_total)),
            ("spill_compactions", spill.compactions),
            ("spill_read_errors", spill.read_errors),
        ],
    )


def aof_status(state: ServerState) -> AofStatus:
    """The AOF's state (INFO persistence, /metrics).

    The values come from the process's AOF (disquette.server.aof); a state
    without one (the simulator, unit tests) shows an AOF in its configured
    state with no rewrite ever run and nothing buffered."""
    if state.aof is not None:
        return state.aof.status()
    return AofStatus(state="on" if state.config.appendonly else "off")


def _persistence(state: ServerState) -> str:
    node = state.node
    aof = aof_status(state)
    fields: list[tuple[str, object]] = [
        ("loading", int(node.loading)),
        ("aof_enabled", int(aof.state != "off")),
        ("aof_state", aof.state),
        ("aof_rewrite_in_progress", int(aof.rewrite_in_progress)),
        ("aof_rewrite_scheduled", int(aof.rewrite_scheduled)),
        ("aof_last_rewrite_time_sec", aof.last_rewrite_time_sec),
        ("aof_current_rewrite_time_sec", aof.current_rewrite_time_sec),
        ("aof_last_bgrewrite_status", "ok" if aof.last_bgrewrite_ok else "err"),
        ("aof_last_write_status", "ok" if state.aof_write_error is None else "err"),
    ]
    if aof.state != "off":
        fields += [
            ("aof_current_size", aof.current_size),
            ("aof_base_size", aof.base_size),
            ("aof_pending_rewrite", int(aof.rewrite_scheduled)),
            ("aof_buffer_length", aof.buffer_length),
            ("aof_rewrite_buffer_length", aof.rewrite_buffer_length),
            ("aof_pending_bio_fsync", aof.pending_bio_fsync),
            ("aof_delayed_fsync", aof.delayed_fsync),
        ]
    if node.loading:
        # Redis's arithmetic: the percentage over total + 1, a 1 s ETA until a
        # second has passed.
        start = aof.loading_start_time or int(time.time())
        total = aof.loading_total_bytes
        loaded = aof.loading_loaded_bytes
        elapsed = max(0, int(time.time()) - start)
        perc = loaded / (total + 1) * 100
        eta = elapsed * (total - loaded) // loaded if elapsed and loaded else 1
        fields += [
            ("loading_start_time", start),
            ("loading_total_bytes", total),
            ("loading_loaded_bytes", loaded),
            ("loading_loaded_perc", f"{perc:.2f}"),
            ("loading_eta_seconds", eta),
        ]
    return _lines("Persistence", fields)


def _stats(state: ServerState) -> str:
    stats = state.stats
    return _lines(
        "Stats",
        [
            ("total_connections_received", stats.connections_received),
            ("total_commands_processed", stats.commands_processed),
            ("instantaneous_ops_per_sec", stats.ops_per_sec),
            ("total_net_input_bytes", stats.net_input_bytes),
            ("total_net_output_bytes", stats.net_output_bytes),
            ("instantaneous_input_kbps", f"{stats.input_kbps:.2f}"),
            ("instantaneous_output_kbps", f"{stats.output_kbps:.2f}"),
            ("rejected_connections", stats.rejected_connections),
            ("latest_fork_usec", 0),
        ],
    )


def _cpu(state: ServerState) -> str:
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return _lines(
        "CPU",
        [
            ("used_cpu_sys", f"{me.ru_stime:.2f}"),
            ("used_cpu_user", f"{me.ru_utime:.2f}"),
            ("used_cpu_sys_children", f"{children.ru_stime:.2f}"),
            ("used_cpu_user_children", f"{children.ru_utime:.2f}"),
        ],
    )


def _commandstats(state: ServerState) -> str:
    # Disque walks its static command table: original names, table order,
    # renamed commands included, commands never called left out.
    commands = sorted(state.commands.values(), key=lambda c: _TABLE_ORDER.get(c.name, 99))
    return _lines(
        "Commandstats",
        [
            (
                f"cmdstat_{cmd.name}",
                f"calls={cmd.calls},usec={cmd.usec},usec_per_call={cmd.usec / cmd.calls:.2f}",
            )
            for cmd in commands
            if cmd.calls
        ],
    )


def _cluster(state: ServerState) -> str:
    # Beyond Disque, and only on request (not in default or all): bus traffic, peers'
    # clock skew and repair.
    node = state.node
    cluster = node.cluster
    return _lines(
        "Cluster",
        [
            *cluster.traffic_fields(),
            *node.dialect.info_fields(),
            *cluster.clock_fields(),
            *node.repair.info_fields(),
        ],
    )


_SECTIONS: dict[str, Callable[[ServerState], str]] = {
    "server": _server,
    "clients": _clients,
    "memory": _memory,
    "jobs": _jobs,
    "queues": _queues,
    "persistence": _persistence,
    "stats": _stats,
    "cpu": _cpu,
    "commandstats": _commandstats,
    "cluster": _cluster,
    "extensions": _extensions,
    "flowtodisk": _flowtodisk,
}


def sections_for(name: str) -> tuple[str, ...]:
    """The sections INFO ``name`` reports (``name`` compared case-insensitively)."""
    name = name.lower()
    if name == "default":
        return DEFAULT_SECTIONS
    if name == "all":
        return ALL_SECTIONS
    return (name,) if name in _SECTIONS else ()


def info_text(state: ServerState, section: str = "default") -> bytes:
    """The INFO report for ``section``: every requested section, blank-line separated."""
    return "\r\n".join(_SECTIONS[name](state) for name in sections_for(section)).encode()
