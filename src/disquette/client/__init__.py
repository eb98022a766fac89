"""The Python client for Disque-protocol clusters (disquette or Disque itself).

``Client`` is synchronous and thread-safe; :mod:`disquette.aio` has the asyncio
client with the same methods. Both are thin I/O shells around one sans-I/O
core: :mod:`~disquette.client.connection` (protocol state of a connection),
:mod:`~disquette.client.commands` (every command: arguments, reply decoding,
routing and retry rules), :mod:`~disquette.client.topology` (nodes, priorities,
failover, job-ID routing, consumer affinity) and :mod:`~disquette.client.calls`
(the plans that tie them together). See docs/client.md.
"""

from disquette.client.api import tls_context
from disquette.client.errors import (
    AuthError,
    BadIdError,
    ConnectionFailedError,
    DisqueError,
    JobCancelledError,
    LeavingError,
    LoadingError,
    LogFullError,
    MaxLenError,
    MisconfError,
    NoJobError,
    NoPermissionError,
    NoReplicationError,
    OutOfMemoryError,
    PausedError,
    PipelineError,
    ProtocolError,
    ReplyLostError,
    ResponseError,
    StaleClaimError,
    TooLateError,
    TryAgainError,
)
from disquette.client.models import (
    Backoff,
    ClusterNode,
    CronSchedule,
    FanIn,
    Hello,
    Job,
    JobInfo,
    JobOutcome,
    NodeInfo,
    Policy,
    ProgressEntry,
    QueueStat,
)
from disquette.client.sync import Client, Pipeline
from disquette.client.topology import Affinity

__all__ = [
    "Affinity",
    "AuthError",
    "Backoff",
    "BadIdError",
    "Client",
    "ClusterNode",
    "ConnectionFailedError",
    "CronSchedule",
    "DisqueError",
    "FanIn",
    "Hello",
    "Job",
    "JobCancelledError",
    "JobInfo",
    "JobOutcome",
    "LeavingError",
    "LoadingError",
    "LogFullError",
    "MaxLenError",
    "MisconfError",
    "NoJobError",
    "NoPermissionError",
    "NoReplicationError",
    "NodeInfo",
    "OutOfMemoryError",
    "PausedError",
    "Pipeline",
    "PipelineError",
    "Policy",
    "ProgressEntry",
    "ProtocolError",
    "QueueStat",
    "ReplyLostError",
    "ResponseError",
    "StaleClaimError",
    "TooLateError",
    "TryAgainError",
    "tls_context",
]
