"""The :class:`Config` object: the server's settings, one attribute per directive.

A ``Config`` is plain data. It is filled with the defaults of the directive
table (:mod:`disquette.config.table`) when created, changed by the loader
(config file and command line) and by CONFIG SET, and read by everything
else. Attribute names are the directive names with ``-`` turned into ``_``,
except ``rename-command``, which accumulates into :attr:`rename_commands`.

Side effects on a running server (resizing the client limit, starting or
stopping the AOF, reclaiming memory after ``maxmemory`` shrinks, ...) are not
done here: CONFIG SET calls the :attr:`on_change` hook the server registers,
see :data:`ChangeHook`.
"""

from __future__ import annotations

from collections.abc import Callable

from disquette.config.table import PARAMS, ClientLimit

#: ``on_change(name, old_value) -> error or None``.
#:
#: Called by :func:`~disquette.config.runtime.config_set` after a value was
#: validated and stored on the ``Config`` (so the hook reads the new value
#: from the object), with the canonical parameter name (``"maxclients"``) and
#: the value it replaced. It is called on every successful CONFIG SET, also
#: when the value did not change. Returning ``None`` accepts the change;
#: returning a string rejects it: the old value is put back (and for ``dir``
#: the old directory too) and CONFIG SET replies ``-ERR <string>``, e.g.
#: ``"Unable to turn on AOF. Check server logs."``. The hook is never called
#: while a configuration file is loaded.
ChangeHook = Callable[[str, object], "str | None"]


class Config:
    """Every setting of a disquette node (defaults: reference section 13)."""

    __slots__ = (*(p.attr for p in PARAMS), "config_file", "on_change")

    daemonize: bool
    pidfile: str
    port: int
    tcp_backlog: int
    #: Addresses to listen on; empty = all interfaces (IPv4 and IPv6).
    bind: list[str]
    unixsocket: str | None
    unixsocketperm: int
    #: Idle client timeout in seconds (0 = never).
    timeout: int
    #: Seconds; CONFIG SET stores yes/no here as 1/0, like Disque.
    tcp_keepalive: int
    #: "debug", "verbose", "notice" or "warning".
    loglevel: str
    #: Empty string = standard output.
    logfile: str
    syslog_enabled: bool
    syslog_ident: str
    #: "user" or "local0".."local7".
    syslog_facility: str
    databases: int
    #: The working directory after the last ``dir`` (CONFIG GET shows ``os.getcwd()``).
    dir: str
    #: ``None`` = no authentication.
    requirepass: str | None
    #: Beyond Disque: the users file of ACL SAVE and ACL LOAD (``None``: none).
    aclfile: str | None
    #: Beyond Disque: ACL LOG's entries kept.
    acllog_max_len: int
    #: Lowercase original command name -> lowercase new name ("" = removed).
    rename_commands: dict[str, str]
    maxclients: int
    #: Bytes (0 is only reachable through CONFIG SET).
    maxmemory: int
    #: "acks" or "noeviction".
    maxmemory_policy: str
    maxmemory_samples: int
    activerehashing: bool
    hz: int
    #: The configured AOF state ("yes" in CONFIG GET while the rewrite is pending too).
    appendonly: bool
    appendfilename: str
    #: "always", "everysec" or "no".
    appendfsync: str
    no_appendfsync_on_rewrite: bool
    auto_aof_rewrite_percentage: int
    auto_aof_rewrite_min_size: int
    aof_rewrite_incremental_fsync: bool
    aof_load_truncated: bool
    aof_enqueue_jobs_once: bool
    cluster_config_file: str
    #: Milliseconds.
    cluster_node_timeout: int
    #: Microseconds; negative disables the slow log.
    slowlog_log_slower_than: int
    #: Negative values come from the file only and mean "unbounded" (C unsigned wrap).
    slowlog_max_len: int
    #: Milliseconds; 0 disables the latency monitor.
    latency_monitor_threshold: int
    #: Limits of the ``normal`` client class.
    client_output_buffer_limit: ClientLimit
    #: Milliseconds; 0 disables the watchdog (CONFIG SET only).
    watchdog_period: int
    protected_mode: bool
    #: Beyond Disque: the cluster bus HMAC secret (``None`` = links are not authenticated).
    cluster_secret: str | None
    #: Beyond Disque: re-replicate the copies lost with failed nodes (core/repair.py).
    replica_repair: bool
    #: Milliseconds a node must stay FAIL before its copies count as lost; 0 means
    #: twice ``cluster_node_timeout``.
    replica_repair_delay: int
    #: Beyond Disque (Redis's): the address announced to the cluster ("" and 0: the bound).
    cluster_announce_ip: str
    cluster_announce_port: int
    cluster_announce_bus_port: int
    #: Beyond Disque: host:port[@bus-port] words, where to look for the cluster.
    cluster_seeds: list[str]
    #: Beyond Disque: the skew of a peer's clock (ms) logged as a warning; 0: never.
    clock_skew_warn_ms: int
    #: Beyond Disque: seconds a job's outcome (result, cancellation) is kept.
    result_ttl: int
    #: Beyond Disque: the queues /metrics exports one by one (the longest).
    metrics_queues_max: int
    #: Beyond Disque: move whole job records to a spill log on disk past
    #: ``flow_to_disk_level`` (core/spill.py, server/spill.py).
    flow_to_disk: bool
    #: Normalised: a share of maxmemory ("60%", 1 to 95) or bytes ("536870912");
    #: :func:`~disquette.config.table.flow_to_disk_threshold` turns it into bytes.
    flow_to_disk_level: str
    #: The spill log's folder, relative to ``dir`` unless absolute.
    flow_to_disk_dir: str
    #: Bytes the spill log may hold on disk (past it ADDJOB gets -OOM); 0: the disk's room.
    flow_to_disk_max_size: int
    #: Jobs kept in memory at each queue's head, and loaded back at a time.
    flow_to_disk_readahead: int
    #: Beyond Disque: the largest job body ADDJOB accepts, in bytes.
    job_max_size: int
    #: Beyond Disque: the HTTP port (JSON API, /metrics, dashboard); 0 = off.
    http_port: int
    #: Beyond Disque: addresses the HTTP port listens on; empty = like ``bind``.
    http_bind: list[str]
    #: Beyond Disque: TLS (config/tls.py, server/tls.py). The TLS client port; 0 = off.
    tls_port: int
    #: Paths (``None`` = unset) and the private key's passphrase.
    tls_cert_file: str | None
    tls_key_file: str | None
    tls_key_file_pass: str | None
    tls_ca_cert_file: str | None
    tls_ca_cert_dir: str | None
    #: "yes" (a client certificate is required), "no" or "optional".
    tls_auth_clients: str
    #: Normalised ("TLSv1.2 TLSv1.3"); ``None`` = TLS 1.2 and 1.3.
    tls_protocols: str | None
    #: OpenSSL's TLS 1.2 cipher list and TLS 1.3 suites; ``None`` = OpenSSL's defaults.
    tls_ciphers: str | None
    tls_ciphersuites: str | None
    tls_prefer_server_ciphers: bool
    tls_session_caching: bool
    #: The cluster bus over TLS with mutual authentication (its port follows tls-port).
    tls_cluster: bool
    #: The HTTP port over TLS (HTTPS) with the same certificate.
    tls_http: bool

    #: Absolute path of the configuration file, ``None`` when there is none.
    config_file: str | None
    #: Registered by the server, see :data:`ChangeHook`.
    on_change: ChangeHook | None

    def __init__(self) -> None:
        for param in PARAMS:
            setattr(self, param.attr, param.fresh_default())
        self.config_file = None
        self.on_change = None

    def values(self) -> dict[str, object]:
        """Every setting by attribute name (for comparisons and debugging)."""
        out = {p.attr: getattr(self, p.attr) for p in PARAMS}
        out["config_file"] = self.config_file
        return out

    def copy(self) -> Config:
        """An independent copy (same hook)."""
        other = Config.__new__(Config)
        for name, value in self.values().items():
            if isinstance(value, list | dict):
                value = value.copy()
            setattr(other, name, value)
        other.on_change = self.on_change
        return other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self.values() == other.values()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.values().items())
        return f"Config({fields})"
