"""The server as commands see it, and the pipeline every request goes through.

:class:`ServerState` gathers what Disque's ``server`` struct holds besides the
jobs: configuration, the command table (given: commands/table.py builds it),
connected clients, statistics, the slow log and latency monitor, and the hooks
through which a command asks the shell for something only the shell can do (shut
down, close a connection, sleep). :meth:`ServerState.execute` applies Disque's
processing order (reference section 1.2): QUIT, lookup, arity, NOAUTH, the
permissions of a restricted user (state/access.py, beyond Disque), OOM, MISCONF, LOADING,
MONITOR feed, execution, statistics and slow log (error replies are counted by
their prefix here, for ``/metrics``). :meth:`ServerState.execute_run`
runs a pipelined run of one command in one go when none of those steps but the
statistics has anything to say, which is what makes pipelined ADDJOB cheap.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from time import perf_counter_ns  # (a global: no module lookup per call)
from typing import Any, Final, Protocol

from disquette import DISQUE_VERSION
from disquette.core.client import REPLY_ON, REPLY_SKIP, REPLY_SKIP_NEXT, Client
from disquette.core.errors import DisqueError
from disquette.core.node import Node
from disquette.protocol import reply
from disquette.protocol.quoting import monitor_line
from disquette.state import access as acl
from disquette.state.acllog import AclLog
from disquette.state.command import NO_RUN, Command
from disquette.state.latency import LatencyMonitor
from disquette.state.persistence import AofControl
from disquette.state.slowlog import SlowLog
from disquette.state.stats import Stats

QUIT: Final = b"quit"


class Shell(Protocol):
    """What commands need from the process around them."""

    def shutdown(self, rewrite_aof: bool) -> bool: ...

    def close_client(self, client: Client) -> None: ...

    def sleep(self, seconds: float) -> None: ...

    def restart(self, delay_ms: int, rewrite_config: bool) -> bool: ...

    def set_clock_skew(self, skew_ms: int) -> None: ...


class ServerState:
    def __init__(
        self, config: Any, node: Node, commands: dict[bytes, Command], shell: Shell | None = None
    ) -> None:
        self.config = config
        self.node = node
        self.shell = shell
        self.commands = commands
        self.clients: dict[int, Client] = {}
        self.monitors: list[Client] = []
        self.next_client_id = 1
        self.stats = Stats()
        self.slowlog = SlowLog()
        self.latency = LatencyMonitor()
        self.start_time = time.time()
        self.run_id = os.urandom(20).hex()
        self.version = DISQUE_VERSION
        self.aof_write_error: str | None = None  # strerror of the last failed AOF write
        self.aof: AofControl | None = None  # the process's AOF (disquette.server.aof)
        self.clients_paused_until = 0  # ms, CLIENT PAUSE
        self.stopping = False  # set by SHUTDOWN and DEBUG RESTART: run nothing more
        self.executable = ""
        #: The shell's resolver for CLUSTER MEET with a name (server/seeds.py):
        #: ``(name, port, bus_port)``; None (the simulator): names are refused.
        self.meet_name: Callable[[bytes, int, int], None] | None = None
        # Users (state/access.py): whether a ``default`` record exists (then it, not
        # requirepass alone, says whether connections authenticate), and ACL LOG.
        self.acl_default = False
        self.acl_log = AclLog()
        node.acl.on_change = lambda: acl.refresh_clients(self)
        acl.refresh_clients(self)

    # ------------------------------------------------------------------

    def new_client_id(self) -> int:
        cid = self.next_client_id
        self.next_client_id += 1
        return cid

    def add_client(self, client: Client) -> None:
        self.clients[client.id] = client
        if self.acl_default:
            client.acl = acl.restriction(acl.lookup(self, client.username))
        self.stats.connections_received += 1

    def remove_client(self, client: Client) -> None:
        self.clients.pop(client.id, None)
        if client.monitor:
            client.monitor = False
            self.monitors.remove(client)
        if client.blocked:
            self.node.client_gone(client)

    # ------------------------------------------------------------------

    def execute(self, client: Client, argv: list[bytes]) -> bytes | None:
        """Run one request; return its reply, or None for none (blocked, suppressed)."""
        name = argv[0].lower()
        cmd = self.commands.get(name)
        if cmd is None:
            if name == QUIT:
                client.close_after_reply = True
                return self._reply_mode(client, reply.OK)
            return self._refuse(client, reply.err(b"unknown command '" + argv[0] + b"'"))
        arity = cmd.arity
        if (arity > 0 and len(argv) != arity) or len(argv) < -arity:
            error = reply.err(f"wrong number of arguments for '{cmd.name}' command")
            return self._refuse(client, error)
        config = self.config
        if (
            (config.requirepass or self.acl_default)
            and not client.authenticated
            and cmd.name != "auth"
            and not (cmd.name == "hello" and len(argv) > 1)  # HELLO <protover> AUTH ...
            and acl.auth_required(self)
        ):
            return self._refuse(client, reply.NOAUTH)
        if client.acl is not None:  # a user with restricted permissions
            denied = acl.denied(self, client, cmd, argv)
            if denied is not None:
                return self._refuse(client, denied)
        if (
            config.maxmemory
            and cmd.denyoom
            and self.node.memory_high()
            and (not self.node.reclaim_memory())
        ) or (cmd.denyoom and self.node.spill.store is not None and not self.node.spill.admit()):
            return self._refuse(client, self._oom(cmd, argv))
        if self.aof_write_error is not None and (cmd.write or cmd.name == "ping"):
            error = reply.error("MISCONF Errors writing to the AOF file: " + self.aof_write_error)
            return self._refuse(client, error)
        if self.node.loading and not cmd.loading:
            return self._refuse(client, reply.LOADING)
        if self.monitors:
            self.feed_monitors(client, argv)

        client.last_command = cmd.name_bytes
        start = perf_counter_ns()
        try:
            response = cmd.proc(self, client, argv)
        except DisqueError as e:
            response = e.reply
        self._account(cmd, (argv,), (perf_counter_ns() - start) // 1000)
        if response is not None and response.startswith(b"-"):
            self.stats.count_error(response)
        if client.reply_mode != REPLY_ON:
            return self._reply_mode(client, response)
        if client.resp3 and response is not None:
            return reply.resp3(response)
        return response

    def _oom(self, cmd: Command, argv: list[bytes]) -> bytes:
        """Disque's OOM refusal; beyond Disque, for an ADDJOB whose job cannot fit in
        what maxmemory leaves while the dataset itself is under 75 % of it (the memory
        is high because the clients' buffers hold that job as it arrives), why
        (Node.check_fits). A node whose dataset fills its memory says Disque's words."""
        if cmd.name == "addjob":
            try:
                self.node.check_fits(argv[1], argv[2])
            except DisqueError as e:
                return e.reply
        return reply.OOM

    def execute_run(self, client: Client, requests: list[Any], start: int) -> tuple[int, bytes]:
        """Run the leading requests of a pipeline, from ``requests[start]``, that are
        one command with a run procedure, together; return how many ran and their
        replies (none ran: run them one by one).

        Only when :meth:`execute` would go straight to the command for each of them:
        replies on, nobody monitoring, no AOF error, not loading, authenticated, and
        memory under the OOM threshold (the run procedure stops where memory, or
        anything else, would make a request take another path).
        """
        cmd = self.commands.get(requests[start][0].lower())
        if cmd is None or cmd.run is None:
            return NO_RUN
        config = self.config
        node = self.node
        if (
            client.reply_mode != REPLY_ON
            or self.monitors
            or self.aof_write_error is not None
            or node.loading
            or ((config.requirepass or self.acl_default) and not client.authenticated)
            or client.acl is not None
            or (config.maxmemory and cmd.denyoom and node.memory_high())
            or (cmd.denyoom and node.spill.store is not None and not node.spill.admit())
        ):
            return NO_RUN
        begin = perf_counter_ns()
        count, replies = cmd.run(self, client, requests, start)
        elapsed_us = (perf_counter_ns() - begin) // 1000
        if count:
            client.last_command = cmd.name_bytes
            self._account(cmd, requests[start : start + count], elapsed_us)
        return count, replies

    def _account(self, cmd: Command, requests: Sequence[list[bytes]], elapsed_us: int) -> None:
        """Statistics, slow log and latency monitor for ``requests`` of ``cmd`` that ran
        in ``elapsed_us`` (several for a run: each is logged with its share)."""
        count = len(requests)
        cmd.calls += count
        cmd.usec += elapsed_us
        self.stats.commands_processed += count
        config = self.config
        each_us = elapsed_us // count
        if each_us >= config.slowlog_log_slower_than >= 0:
            now = int(time.time())
            for argv in requests:
                self.slowlog.add(argv, each_us, now, config.slowlog_max_len)
        if config.latency_monitor_threshold and (
            elapsed_us // 1000 >= config.latency_monitor_threshold
        ):
            self.latency.add("fast-command" if cmd.fast else "command", elapsed_us // 1000)

    def _refuse(self, client: Client, error: bytes) -> bytes | None:
        """An error reply given before the command ran: counted, then CLIENT REPLY."""
        self.stats.count_error(error)
        return self._reply_mode(client, error)

    @staticmethod
    def _reply_mode(client: Client, response: bytes | None) -> bytes | None:
        """Apply CLIENT REPLY: OFF drops replies, SKIP drops exactly the next one."""
        mode = client.reply_mode
        if mode == REPLY_ON:
            return response
        if mode == REPLY_SKIP:
            client.reply_mode = REPLY_ON
        elif mode == REPLY_SKIP_NEXT:
            client.reply_mode = REPLY_SKIP
        return None

    def feed_monitors(self, client: Client, argv: list[bytes]) -> None:
        line = monitor_line(time.time(), client, argv)
        for monitor in self.monitors:
            monitor.push(line)
