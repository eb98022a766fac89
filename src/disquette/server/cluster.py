"""The cluster side of the server process: nodes.conf, the bus, the cluster cron.

:class:`ClusterShell` is created before the node, because the node's identity
lives in nodes.conf (``cluster-config-file``, relative to ``dir``): the file is
opened and locked exclusively for the life of the process, so a second server
pointed at it refuses to start; when it is missing or empty the node gets a
new random ID and the file is written (and fsynced) at once. A file that does
not parse is fatal at start-up, with the offending line.

What the node speaks on the bus is this release's (core/dialect.py), unless
``DISQUETTE_BUS_REHEARSAL`` describes another one: the rehearsal of the next
release's upgrade (a wrong value is fatal at start-up, and a rehearsing node says so
in its log).

Then :meth:`ClusterShell.attach` gives the membership its table and the file
to save into (and the data generation: kept when a non-empty AOF is about to be
loaded, new otherwise), and the node its :class:`~disquette.server.bus.ClusterBus`;
:meth:`ClusterShell.start` listens on the bus port (the announced client port + 10000:
``tls-port``'s with ``tls-cluster yes``, see server/tls.py) and runs the cluster cron
every 100 ms, and resolves the names of ``cluster-seeds`` and CLUSTER MEET
(server/seeds.py).

nodes.conf is replaced atomically: the new content goes to a temporary file
that is locked before it is renamed over the old one (fsynced, with its
directory, when the core asks: creation, CLUSTER RESET, CLUSTER SAVECONFIG),
so the path always names a complete file this process holds locked.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from disquette.core import dialect
from disquette.core.membership import (
    BUS_PORT_OFFSET,
    CRON_PERIOD_MS,
    NodesConf,
    NodesConfError,
    parse_nodes_conf,
)
from disquette.server.bus import ClusterBus
from disquette.server.log import LEVELS
from disquette.server.seeds import Seeds
from disquette.server.tls import TlsShell, cluster_port

if TYPE_CHECKING:
    from disquette.core.node import Node
    from disquette.server.log import Log


class NodesConfLocked(Exception):
    """Another process holds nodes.conf."""


class NodesConfFile:
    """nodes.conf on disk, locked by this process (the core's ``ConfigStore``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def open(self) -> bytes:
        """Lock the file (creating it empty if missing) and return its content."""
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise NodesConfLocked(
                    f"Sorry, the cluster configuration file {self.path} is already used by a "
                    "different Disque node. Please make sure that different nodes use "
                    "different cluster configuration files."
                ) from None
            # The owner may have renamed a new file over the path meanwhile: lock that one.
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            mine = os.fstat(fd)
            if current is not None and (current.st_dev, current.st_ino) == (
                mine.st_dev,
                mine.st_ino,
            ):
                self.fd = fd
                break
            os.close(fd)
        else:
            raise NodesConfLocked(f"Can't lock the cluster configuration file {self.path}")
        chunks = []
        while chunk := os.read(self.fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)

    def save(self, content: bytes, fsync: bool) -> None:
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
            os.rename(tmp, self.path)
        except BaseException:
            os.close(fd)
            raise
        if fsync:
            directory = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        old, self.fd = self.fd, fd
        if old >= 0:
            os.close(old)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class ClusterShell:
    """nodes.conf, the cluster bus and the cluster cron of one server process."""

    def __init__(
        self, config: Any, log: Log, clock: Callable[[], int], tls: TlsShell | None = None
    ) -> None:
        self.config = config
        self.log = log
        self.tls = tls
        self.file = NodesConfFile(os.path.abspath(config.cluster_config_file))
        self.loaded: NodesConf | None = None
        #: Why the server cannot start (reported by :meth:`start`), or None.
        self.error: str | None = None
        try:
            self.loaded = parse_nodes_conf(self.file.open(), clock())
        except NodesConfLocked as e:
            self.error = str(e)
        except NodesConfError as e:
            self.error = str(e)
        except OSError as e:
            self.error = f"Can't open the cluster configuration file {self.file.path}: {e}"
        #: What the node speaks on the bus (a rehearsal's speech, or this release's).
        self.speech = dialect.CURRENT
        self.rehearsal = os.environ.get(dialect.REHEARSAL_VARIABLE, "")
        if self.rehearsal:
            try:
                self.speech = dialect.rehearsal(self.rehearsal)
            except ValueError as e:
                self.error = self.error or str(e)
        self.node: Node | None = None
        self.bus: ClusterBus | None = None
        self._cron_handle: asyncio.Handle | None = None

    @property
    def node_id(self) -> bytes | None:
        """The identity nodes.conf holds (None for a new node)."""
        return self.loaded.myself if self.loaded is not None else None

    def attach(self, node: Node) -> None:
        """Give the node its table, nodes.conf and bus (before the loop runs)."""
        self.node = node
        secret = self.config.cluster_secret
        self.bus = ClusterBus(
            node,
            self.log,
            bind=list(self.config.bind),
            secret=secret.encode("utf-8", "surrogateescape") if secret else None,
            tls=self.tls,
        )
        node.bus = self.bus
        self.seeds = Seeds(node, self.config, self.log)  # names (server/seeds.py)
        node.cluster.on_log = self._log_event
        node.cluster.set_clock_skew_warn(self.config.clock_skew_warn_ms)
        if self.error is None:
            node.cluster.start(self.file, self.loaded, keep_generation=self._has_aof())
        self.announce()

    def announce(self) -> None:
        """cluster-announce-ip, -port and -bus-port: what the peers are told (at start,
        and again on CONFIG SET)."""
        config = self.config
        assert self.node is not None
        self.node.cluster.set_announced(
            config.cluster_announce_ip.encode(),
            config.cluster_announce_port,
            config.cluster_announce_bus_port,
        )

    def _has_aof(self) -> bool:
        """Whether the node is about to reload jobs from a non-empty AOF (it then keeps
        its data generation; otherwise it starts without its jobs and takes a new one)."""
        if not self.config.appendonly:
            return False
        try:
            return os.path.getsize(self.config.appendfilename) > 0
        except OSError:
            return False

    async def start(self) -> bool:
        """Listen on the bus port and start the cron; False (logged) when impossible."""
        if self.error is not None:
            self.log.warning(self.error)
            return False
        if self.rehearsal:
            self.log.warning(
                f"Bus rehearsal ({dialect.REHEARSAL_VARIABLE}): this node speaks as "
                f"{self.speech.describe()}{', probing its peers' if self.speech.probe else ''}"
            )
        assert self.bus is not None
        port = cluster_port(self.config) + BUS_PORT_OFFSET
        try:
            await self.bus.listen(cluster_port(self.config), self.config.tcp_backlog)
        except OSError as e:
            self.log.warning(f"Creating the cluster bus listening socket *:{port}: {e}")
            return False
        self.seeds.start()
        # The first run at once: a restarted node greets its peers before anything else.
        self._cron_handle = asyncio.get_running_loop().call_soon(self._cron)
        return True

    def close(self) -> None:
        if self._cron_handle is not None:
            self._cron_handle.cancel()
            self._cron_handle = None
        if self.bus is not None:
            self.bus.close()
            self.seeds.close()
        self.file.close()

    def _cron(self) -> None:
        node = self.node
        assert node is not None
        node.cluster.cron()
        if node.ready_queues:
            node.serve_blocked_clients()
        self._cron_handle = asyncio.get_running_loop().call_later(CRON_PERIOD_MS / 1000, self._cron)

    def _log_event(self, level: str, text: str) -> None:
        self.log.write(LEVELS[level], text)
