"""The options of the ``disque`` format, parsed and checked on the driver.

Spark hands a data source its options as case-insensitive strings. They are
turned here into one frozen dataclass per role (sink, stream source, peek),
every value checked, so that a typo or an out-of-range number stops the query
with a clear :class:`OptionError` when the writer or reader is created on the
driver: before any task runs, before any job is added, fetched or acknowledged.
An option the role does not know is an error too (``replicat=2`` must not be
silently ignored).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from disquette.client.api import tls_context
from disquette.client.models import Backoff
from disquette.client.topology import format_address, parse_address

#: Jobs per micro-batch when the executors read (a disquette cluster) and
#: ``maxJobsPerTrigger`` is not given: enough that Spark's own cost per micro-batch
#: (checkpoint files, planning, task launch: a few hundred ms) stays small against
#: reading, as Spark's Kafka and file sources read all that is there by default. Nothing
#: grows with it but the tags' names a node keeps (8 bytes a job) and what a replayed
#: micro-batch may duplicate; the tasks read it chunk by chunk.
PLANNED_JOBS_PER_TRIGGER = 500_000
#: The most a micro-batch may take when the executors read (its offset holds counts).
MAX_PLANNED_JOBS_PER_TRIGGER = 10_000_000
#: Jobs per micro-batch when the driver reads (plain Disque, ``readMode=driver``) and
#: ``maxJobsPerTrigger`` is not given: the driver holds every body of the batch.
DRIVER_JOBS_PER_TRIGGER = 10_000
#: The most job IDs one micro-batch read by the driver may hold: they are all written
#: in its offset.
MAX_JOBS_PER_TRIGGER = 100_000

#: Options Spark itself passes to data sources (lower case).
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation"})


class OptionError(ValueError):
    """An option of the ``disque`` format is missing, unknown or invalid."""


class _Reader:
    """Typed access to the raw options; remembers which ones were read."""

    def __init__(self, options: Mapping[str, str], role: str) -> None:
        self._options = {key.lower(): value for key, value in options.items()}
        self._role = role
        self._known: dict[str, str] = {}  # lower case -> documented spelling

    def text(self, name: str) -> str | None:
        self._known[name.lower()] = name
        value = self._options.get(name.lower())
        return None if value is None else value.strip()

    def required(self, name: str, hint: str) -> str:
        value = self.text(name)
        if not value:
            raise OptionError(f"the {self._role} needs the option {name!r} ({hint})")
        return value

    def integer(self, name: str, low: int, high: int | None = None) -> int | None:
        text = self.text(name)
        if text is None:
            return None
        try:
            value = int(text)
        except ValueError:
            raise OptionError(f"option {name!r} must be an integer, not {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f"at least {low}" if high is None else f"between {low} and {high}"
            raise OptionError(f"option {name!r} must be {bounds}, not {value}")
        return value

    def setting(self, name: str, default: int, low: int, high: int) -> int:
        value = self.integer(name, low, high)
        return default if value is None else value

    def flag(self, name: str) -> bool:
        text = self.text(name)
        if text is None:
            return False
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise OptionError(f"option {name!r} must be true or false, not {text!r}")

    def choice(self, name: str, choices: tuple[str, ...]) -> str:
        text = (self.text(name) or choices[0]).lower()
        if text not in choices:
            raise OptionError(f"option {name!r} must be one of {', '.join(choices)}, not {text!r}")
        return text

    def subset(self, name: str, choices: tuple[str, ...]) -> tuple[str, ...]:
        """A comma-separated list of some of ``choices`` (none when not given)."""
        text = self.text(name)
        if not text:
            return ()
        names = tuple(dict.fromkeys(n.strip().lower() for n in text.split(",")))
        unknown = [n for n in names if n not in choices]
        if unknown:
            raise OptionError(
                f"option {name!r} takes some of {', '.join(choices)}, not {', '.join(unknown)}"
            )
        return names

    def backoff(self, name: str) -> Backoff | None:
        text = self.text(name)
        if text is None:
            return None
        try:
            return Backoff.of(text)
        except ValueError as exc:
            raise OptionError(
                f"option {name!r} must be fixed:<seconds> or exponential:<base>:<cap>, "
                f"not {text!r} ({exc})"
            ) from None

    def nodes(self) -> tuple[str, ...]:
        text = self.required("nodes", 'the cluster, e.g. "host:7711,host:7712"')
        nodes = []
        for item in text.split(","):
            try:
                nodes.append(format_address(parse_address(item)))
            except ValueError:
                raise OptionError(f"option 'nodes': {item.strip()!r} is not host:port") from None
        return tuple(dict.fromkeys(nodes))

    def names(self, name: str, hint: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in self.required(name, hint).split(","))
        if not all(names):
            raise OptionError(f"option {name!r} has an empty queue name")
        return names

    def check_unknown(self) -> None:
        unknown = sorted(set(self._options) - set(self._known) - _SPARK_OPTIONS)
        if unknown:
            raise OptionError(
                f"unknown option(s) for the {self._role}: {', '.join(unknown)}; "
                f"known: {', '.join(sorted(self._known.values()))}"
            )


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """Where the cluster is and how to log in: what every role needs.

    ``tls=true`` connects with TLS, trusting the CA file ``tlsCaCert`` (the system's
    CAs otherwise) and showing the client certificate ``tlsCert`` with its key
    ``tlsKey`` (for ``tls-auth-clients``); giving a file implies ``tls``. The paths are
    read where a connection is made (the files must be on the executors too).
    """

    nodes: tuple[str, ...]
    password: str | None
    tls: bool = False
    tls_ca_cert: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    user: str | None = None  # an ACL user (docs/security.md); None: the default user

    @classmethod
    def read(cls, r: _Reader) -> ConnectOptions:
        ca, cert, key = (r.text(name) or None for name in ("tlsCaCert", "tlsCert", "tlsKey"))
        if key and not cert:
            raise OptionError("option 'tlsKey' needs 'tlsCert' (the certificate of the key)")
        tls = r.flag("tls") or any((ca, cert, key))
        password, user = r.text("password") or None, r.text("user") or None
        return cls(r.nodes(), password, tls, ca, cert, key, user)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context these options ask for (None: plaintext)."""
        if not self.tls:
            return None
        return tls_context(self.tls_ca_cert, self.tls_cert, self.tls_key)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """How rows become ADDJOB commands (see docs/spark.md for each option)."""

    connect: ConnectOptions
    queue: str | None
    timeout_ms: int
    replicate: int | None
    delay: int | None
    retry: int | None
    ttl: int | None
    maxlen: int | None
    async_: bool
    window: int
    #: None: chosen by the sink (:class:`~disquette.spark.addjob.ConnectionPlan`).
    connections_per_node: int | None
    #: ADDJOB PRIORITY (disquette's extension); None: the server's default.
    priority: int | None
    #: ADDJOB DEDUP with a key per row (disquette's extension).
    dedup: bool
    #: ADDJOB BACKOFF (disquette's extension); None: the queue's policy's, or none.
    backoff: Backoff | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        r = _Reader(options, "disque sink")
        parsed = cls(
            connect=ConnectOptions.read(r),
            queue=r.text("queue") or None,
            timeout_ms=r.setting("timeout", 5000, 1, 86_400_000),
            replicate=r.integer("replicate", 1, 255),
            delay=r.integer("delay", 0),
            retry=r.integer("retry", 0),
            ttl=r.integer("ttl", 1),
            maxlen=r.integer("maxlen", 1),
            async_=r.flag("async"),
            window=r.setting("window", 1000, 1, 100_000),
            connections_per_node=r.integer("connectionsPerNode", 1, 64),
            priority=r.integer("priority", 0, 9),
            dedup=r.flag("dedup"),
            backoff=r.backoff("backoff"),
        )
        r.check_unknown()
        return parsed


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What the stream source and the peek read, and how much at a time."""

    connect: ConnectOptions
    queues: tuple[str, ...]
    body_as_string: bool
    #: ``maxJobsPerTrigger`` (None: not given, the default of the way the jobs are read).
    max_jobs_per_trigger: int | None
    num_partitions: int
    #: Job fields added as columns (disquette's: priority, dedup, progress, claim).
    job_fields: tuple[str, ...]
    #: Where the stream source takes jobs: "auto" (executors when the cluster's GETJOB
    #: knows TAG, else the driver) or "driver" (always, as against plain Disque).
    read_mode: str

    @classmethod
    def parse(cls, options: Mapping[str, str], role: str = "disque source") -> SourceOptions:
        r = _Reader(options, role)
        read_mode = r.choice("readMode", ("auto", "driver"))
        most = MAX_JOBS_PER_TRIGGER if read_mode == "driver" else MAX_PLANNED_JOBS_PER_TRIGGER
        parsed = cls(
            connect=ConnectOptions.read(r),
            queues=r.names("queues", 'the queues to read, e.g. "a,b"'),
            body_as_string=r.choice("bodyType", ("binary", "string")) == "string",
            max_jobs_per_trigger=r.integer("maxJobsPerTrigger", 1, most),
            num_partitions=r.setting("numPartitions", 2, 1, 1024),
            job_fields=r.subset("jobFields", ("priority", "dedup", "progress", "claim")),
            read_mode=read_mode,
        )
        r.check_unknown()
        return parsed

    def jobs_per_trigger(self, planned: bool) -> int:
        """The most jobs a micro-batch takes, read by the executors (``planned``) or by
        the driver; :class:`OptionError` when the driver reads and the option asks
        more than an offset may hold (a cluster that turned out to be plain Disque)."""
        given = self.max_jobs_per_trigger
        if planned:
            return PLANNED_JOBS_PER_TRIGGER if given is None else given
        if given is None:
            return DRIVER_JOBS_PER_TRIGGER
        if given > MAX_JOBS_PER_TRIGGER:
            raise OptionError(
                f"option 'maxJobsPerTrigger' must be at most {MAX_JOBS_PER_TRIGGER} when the "
                f"driver reads (plain Disque, whose GETJOB has no TAG, or readMode=driver: "
                f"every job ID of a micro-batch is in its offset), not {given}"
            )
        return given
