"""The server process: listeners, the two timers, signals and shutdown.

One node, one process, one event loop (uvloop when available). Two timers
drive the core: the server cron at ``hz`` (blocked clients' deadlines, idle
clients, idle queues, statistics; how late it runs is the event loop's lag that
``/metrics`` reports) and the job timer, re-armed 1 to 100 ms
ahead from the node's earliest awake time (Disque's processJobs). The server
is also the ``Shell`` that commands call for what only a process can do.

The cyclic garbage collector is tuned for a heap of millions of long-lived
jobs: the core creates no reference cycles on its hot paths, so full
collections (hundreds of milliseconds over a million objects) are disabled,
the young generations stay collected, and what exists at start-up is frozen.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from disquette import DISQUE_VERSION, __version__, build
from disquette.commands import acl, new_state
from disquette.core.acl import AclError
from disquette.core.client import BLOCK_NONE, Client
from disquette.core.node import Node
from disquette.core.repair import REPAIR_TICK_MS
from disquette.http.listener import HttpShell
from disquette.server import spill
from disquette.server.allocator import Allocator
from disquette.server.aof import AppendOnlyFile
from disquette.server.clock import NodeClock, host_ms
from disquette.server.cluster import ClusterShell
from disquette.server.connection import ClientConnection
from disquette.server.log import Log
from disquette.server.outbox import Outbox
from disquette.server.tls import RELOAD_DIRECTIVES, TlsShell, cluster_port, tls_in_use

CRON_STATS_MS = 100
MAX_PORT = 55535  # the cluster bus listens on port + 10000


def tune_gc() -> None:
    """Keep every collection short with millions of live jobs.

    The young generations keep CPython's default sizes (700 and 10): a pass over
    them costs at most ~2 ms even when every young object is a job that survives
    (measured: 1M ADDJOBs, max pause 2.3 ms; with a 20,000-object generation 0 a
    single pass took 9.4 ms). The old generation is never collected automatically
    — a full pass over a million jobs takes hundreds of milliseconds — and the core
    avoids reference cycles so that reference counting frees what it drops.
    """
    gc.set_threshold(700, 10, 1 << 30)
    gc.freeze()


class Server:
    def __init__(self, config: Any, log: Log, argv: list[str] | None = None) -> None:
        self.config = config
        self.log = log
        self.argv = argv or []
        self.clock = NodeClock()  # the node's clock (DEBUG CLOCK-SKEW shifts it)
        self.tls = TlsShell(config, log)  # TLS contexts (server/tls.py)
        # --- Cluster (nodes.conf, bus, cluster cron: server/cluster.py) -----------
        self.cluster = ClusterShell(config, log, self.clock.now_ms, self.tls)
        node_id = self.cluster.node_id or os.urandom(20).hex().encode()
        # --------------------------------------------------------------------------
        self.node = Node(
            config,
            node_id,
            self.clock.now_ms,
            random.Random(os.urandom(32)),
            os.urandom,
            port=cluster_port(config),
            speech=self.cluster.speech,
        )
        self.cluster.attach(self.node)  # cluster: the table from nodes.conf, the bus
        self.state = new_state(config, self.node, shell=self)
        self.state.meet_name = self.cluster.seeds.meet
        self.aof = AppendOnlyFile(config, log, self.node, self.state)  # server/aof.py
        self.state.aof = self.aof
        self.outbox = Outbox(self.aof)  # replies, written once per turn (server/outbox.py)
        if self.cluster.bus is not None:
            self.cluster.bus.before_write = self.aof.flush
        program = sys.argv[0] if sys.argv else ""
        self.state.executable = sys.executable if program.endswith(".py") else program
        config.on_change = self._config_changed
        self.listeners: list[asyncio.AbstractServer] = []
        self._done: asyncio.Future[int] | None = None
        self._last_stats_ms = 0
        self._cron_due = 0.0  # when the cron timer is due (the loop's clock): its lag
        self.allocator = Allocator()  # heap given back after the dataset shrinks
        self._repair_scheduled = False
        self._job_timer: asyncio.TimerHandle | None = None
        self._job_timer_at = 0  # ms (the node's clock) the job timer fires at
        self.node.wake_by = self._wake_by
        # Flow to disk's work between requests (core/spill.py): read-ahead, a batch at a
        # time once the replies in hand are sent (Spill.prefetch), and the rest of a
        # tick's housekeeping its time budget left (Spill.housekeep).
        flow = self.node.spill
        flow.prefetch_hook = self._between_requests(flow.prefetch, "flow-to-disk-readahead")
        flow.housekeep_hook = self._between_requests(flow.housekeep, "flow-to-disk-housekeeping")
        flow.budget_clock = time.perf_counter
        self._sigint_count = 0
        self.restart_argv: list[str] | None = None
        self.restart_delay = 0.0
        self.http = HttpShell(self.state, log, self.tls)  # the HTTP port (http/listener.py)

    def _config_changed(self, name: str, old: object) -> str | None:
        """CONFIG SET side effects on the running process (None accepts the change)."""
        if name == "loglevel":
            self.log.set_level(self.config.loglevel)
        elif name == "clock-skew-warn-ms":
            self.node.cluster.set_clock_skew_warn(self.config.clock_skew_warn_ms)
        elif name.startswith("cluster-announce-"):
            self.cluster.announce()
        elif name == "appendonly":
            return self.aof.set_appendonly()
        elif name in ("http-port", "http-bind"):
            return self.http.reconfigure()
        elif name in RELOAD_DIRECTIVES:  # new TLS contexts, for the connections to come
            error = self.tls.configure()
            if error is not None:
                self.log.warning(f"Unable to update TLS configuration: {error}")
                return f"Unable to update TLS configuration: {error}"
            return self.http.reconfigure() if name == "tls-http" else None
        if name in spill.DIRECTIVES:  # flow-to-disk-* and maxmemory (the level's base)
            return spill.apply_config(self.node, self.config, self.log, changed=name)
        return None

    def _load_aclfile(self, path: str) -> bool:
        """Check the aclfile, and seed the users from it when nodes.conf held none (the
        cluster's table, not the file, is the truth afterwards: ACL LOAD re-reads it)."""
        try:
            users = acl.read_aclfile(path)
        except (OSError, AclError) as e:
            self.log.warning(f"Aborting disquette startup because of ACL errors: {e}")
            return False
        if not any(not u.deleted for u in self.node.acl.records.values()):
            self.node.acl.replace(users)
        return True

    def protected_mode(self) -> bool:
        c = self.config
        return bool(c.protected_mode and not c.bind and not c.requirepass)

    # ------------------------------------------------------------------

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        config = self.config
        if cluster_port(config) > MAX_PORT:
            self.log.warning(
                f"Disque port number must be <= {MAX_PORT} since the cluster bus uses port + 10000"
            )
            return 1
        which = build.current()
        self.log.notice(
            f"Server started, Disque version {DISQUE_VERSION} "
            f"(disquette {__version__}, {which} build)"
        )
        if which == "pure":
            self.log.warning(
                f"The pure build runs: {build.PURE_SWITCH} is set"
                if build.pure_requested()
                else "The pure build runs: the compiled modules are missing (run `make tools` "
                "for a C compiler and Python's headers, then reinstall); it is slower"
            )
        # Flow to disk: the spill log opens before the AOF loads (loading may spill).
        if spill.apply_config(self.node, config, self.log) is not None:
            return 1  # the folder is unusable: the reason is logged
        if config.aclfile and not self._load_aclfile(config.aclfile):
            return 1
        if tls_in_use(config) and (error := self.tls.configure()) is not None:
            self.log.warning(error)
            self.log.warning("Failed to configure TLS. Check logs for more info.")
            return 1
        # --- Cluster: the bus listener and the cluster cron (fatal errors logged), before
        # the clients: a restarted node greets its peers before it answers anyone, so
        # that they see it back (its PONG clears its failure flags) as early as can be.
        if not await self.cluster.start():
            return 1
        # --------------------------------------------------------------------------
        if config.port and not await self._listen(lambda: ClientConnection(self), config.port):
            return 1
        if config.tls_port and not await self._listen(
            self.tls.accepting(lambda: ClientConnection(self), "clients"), config.tls_port
        ):
            return 1
        if config.unixsocket:
            try:
                if os.path.exists(config.unixsocket):
                    os.unlink(config.unixsocket)
                server = await loop.create_unix_server(
                    lambda: ClientConnection(self),
                    config.unixsocket,
                    backlog=config.tcp_backlog,
                    start_serving=False,
                )
                if config.unixsocketperm:
                    os.chmod(config.unixsocket, config.unixsocketperm)
            except OSError as e:
                self.log.warning(f"Opening Unix socket: {e}")
                return 1
            self.listeners.append(server)
        # The HTTP port, if http-port asks: a listener that cannot open is fatal, as the
        # client port's (the node would run without its dashboard and API).
        problem = await self.http.start()
        if problem is not None:
            self.log.warning(problem)
            await self.http.close()
            for listener in self.listeners:
                listener.close()
            return 1
        # Every client listener serves from here, together: one that answers (a readiness
        # check on the port) while another is not open yet would refuse its clients.
        for listener in self.listeners:
            await listener.start_serving()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        tune_gc()
        # --- AOF: open and load it; clients get -LOADING meanwhile (server/aof.py) ---
        if await self.aof.start():
            self._cron_due = loop.time()
            loop.call_soon(self._cron)
            loop.call_soon(self._job_tick)
            ports = f"port {config.port}" if config.port or not config.tls_port else ""
            if config.tls_port:
                ports += f"{' and ' if ports else ''}TLS port {config.tls_port}"
            self.log.notice(f"The server is now ready to accept connections on {ports}")
        elif not self._done.done():
            self._done.set_result(1)  # the AOF cannot be loaded: the reason is logged
        # --------------------------------------------------------------------------
        code = await self._done
        for listener in self.listeners:
            listener.close()
        await self.http.close()
        self.cluster.close()  # cluster: the bus links, the cron, the nodes.conf lock
        spill.close_store(self.node)  # flow to disk: the spill log's files are deleted
        for client in list(self.state.clients.values()):
            if isinstance(client, ClientConnection):
                client.close()
        if config.unixsocket and os.path.exists(config.unixsocket):
            os.unlink(config.unixsocket)
        return code

    async def _listen(self, factory: Any, port: int) -> bool:
        """Listen for clients on ``port`` (the bind addresses); False (logged) if it fails."""
        config = self.config
        try:
            server = await asyncio.get_running_loop().create_server(
                factory,
                list(config.bind) or None,
                port,
                backlog=config.tcp_backlog,
                reuse_address=True,
                start_serving=False,  # (all at once, in run)
            )
        except OSError as e:
            self.log.warning(f"Creating Server TCP listening socket *:{port}: {e}")
            return False
        self.listeners.append(server)
        return True

    def _on_signal(self, sig: int) -> None:
        if sig == signal.SIGINT:
            self._sigint_count += 1
            if self._sigint_count > 1:
                self.log.warning("You insist... exiting now.")
                os._exit(1)
        name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
        self.log.warning(f"Received {name} scheduling shutdown...")
        if not self.shutdown(False):
            self.log.warning(
                f"{name} received but errors trying to shut down the server, check the logs "
                "for more information"
            )

    # ------------------------------------------------------------------
    # Timers.

    def _cron(self) -> None:
        if self._done is None or self._done.done():
            return
        loop = asyncio.get_running_loop()
        # The event loop's lag: how late this timer runs (for /metrics).
        self.state.stats.track_lag(max(0.0, loop.time() - self._cron_due))
        now = host_ms()  # (statistics and client idle times: the host's clock)
        node = self.node
        start = time.perf_counter()
        node.cron()  # blocked clients, idle queues, a slice of replica repair
        if node.ready_queues:
            node.serve_blocked_clients()
        self._sample_latency("cron", start)
        if node.repair.scanning and not self._repair_scheduled:
            self._repair_scheduled = True
            asyncio.get_running_loop().call_later(REPAIR_TICK_MS / 1000, self._repair_tick)
        if now - self._last_stats_ms >= CRON_STATS_MS:
            self._last_stats_ms = now
            self.state.stats.sample(now)
            self.state.stats.track_memory(self.node.memory_used)
            start = time.perf_counter()
            # (The spill index's memory is outside used_memory: it shrinks as a backlog
            # on disk drains, and the heap it leaves is trimmed too.)
            if self.allocator.cron(node.used_memory + node.spill.footprint()):
                self.state.stats.heap_trims += 1
                self._sample_latency("memory-trim", start)
        self._clients_cron(now)
        self.aof.cron()
        hz = min(max(self.config.hz, 1), 500)
        self._cron_due = loop.time() + 1 / hz
        loop.call_at(self._cron_due, self._cron)

    def _repair_tick(self) -> None:
        """A slice of replica repair between crons, while a pass runs (core/repair.py)."""
        self._repair_scheduled = False
        if self._done is None or self._done.done():
            return
        start = time.perf_counter()
        repair = self.node.repair
        repair.tick(self.clock.now_ms())
        self._sample_latency("cron", start)
        if repair.scanning:
            self._repair_scheduled = True
            asyncio.get_running_loop().call_later(REPAIR_TICK_MS / 1000, self._repair_tick)

    def _between_requests(self, step: Callable[[], bool], event: str) -> Callable[[], None]:
        """A function that has ``step`` run at the next turn of the event loop, and again
        at each turn while it returns True (wants more); its runs are LATENCY's ``event``."""
        scheduled = False

        def run() -> None:
            nonlocal scheduled
            scheduled = False
            if self._done is None or self._done.done():
                return
            start = time.perf_counter()
            more = step()
            self._sample_latency(event, start)
            if more:
                soon()

        def soon() -> None:
            nonlocal scheduled
            if not scheduled:
                scheduled = True
                asyncio.get_running_loop().call_soon(run)

        return soon

    def _sample_latency(self, event: str, start: float) -> None:
        """Record a timer run that began at ``start`` (perf_counter) in the latency monitor."""
        self.state.latency.add_since(event, start, self.config.latency_monitor_threshold)

    def _clients_cron(self, now: int) -> None:
        timeout_ms = self.config.timeout * 1000
        memory = 0
        for client in list(self.state.clients.values()):
            if not isinstance(client, ClientConnection):
                continue
            memory += client.query_buffer + client.output_buffer
            if (
                timeout_ms
                and client.blocked == BLOCK_NONE
                and not client.monitor
                and now - client.last_interaction > timeout_ms
            ):
                self.log.verbose("Closing idle client")
                client.close()
        self.node.client_memory = memory

    def _job_tick(self) -> None:
        if self._done is None or self._done.done():
            return
        node = self.node
        start = time.perf_counter()
        node.process_jobs()
        if node.ready_queues:
            node.serve_blocked_clients()
        self._sample_latency("jobs-processing", start)
        self._arm_job_timer(node.next_wakeup())

    def _arm_job_timer(self, wake: int | None) -> None:
        """Run the job timer at ``wake`` (ms, the node's clock), or in 100 ms at most."""
        now = self.clock.now_ms()
        delay = 100 if wake is None else min(100, max(1, wake - now))
        self._job_timer_at = now + delay
        self._job_timer = asyncio.get_running_loop().call_later(delay / 1000, self._job_tick)

    def _wake_by(self, when: int) -> None:
        """The core needs the job timer by ``when`` (ms): bring it forward if later."""
        timer = self._job_timer
        if timer is not None and when < self._job_timer_at:
            timer.cancel()
            self._arm_job_timer(when)

    # ------------------------------------------------------------------
    # The Shell interface used by commands.

    def shutdown(self, rewrite_aof: bool) -> bool:
        self.log.warning("User requested shutdown...")
        if not self.aof.prepare_shutdown(rewrite_aof):
            return False
        self.state.stopping = True
        self.node.flush_acks()  # on their way before the bus closes
        if self.config.daemonize and self.config.pidfile:
            try:
                os.unlink(self.config.pidfile)
            except OSError:
                pass
        self.log.warning("Disque is now ready to exit, bye bye...")
        if self._done is not None and not self._done.done():
            self._done.set_result(0)
        return True

    def close_client(self, client: Client) -> None:
        if isinstance(client, ClientConnection):
            client.close()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def set_clock_skew(self, skew_ms: int) -> None:
        """DEBUG CLOCK-SKEW: the node's clock runs ``skew_ms`` ahead of the host's."""
        self.clock.skew_ms = skew_ms
        self.log.warning(
            f"The node's clock is now {skew_ms:+d} ms off the host's (DEBUG CLOCK-SKEW)"
        )

    def restart(self, delay_ms: int, rewrite_config: bool) -> bool:
        """DEBUG RESTART: rewrite the config if asked, then re-exec this process."""
        if rewrite_config and self.config.config_file:
            from disquette.config import config_rewrite

            try:
                config_rewrite(self.config)
            except Exception as e:
                self.log.warning(f"Could not rewrite the config before restarting: {e}")
                return False
        if rewrite_config and not self.aof.prepare_shutdown(False):
            return False  # RESTART shuts down gracefully: the AOF is flushed and synced
        self.state.stopping = True
        self.node.flush_acks()  # on their way before the bus closes
        self.restart_argv = [sys.executable, "-m", "disquette.server", *self.argv]
        self.restart_delay = delay_ms / 1000
        self.log.warning("Restarting the server...")
        if self._done is not None and not self._done.done():
            self._done.set_result(0)
        return True
