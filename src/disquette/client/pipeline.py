"""Pipelines: queue commands, then send them in one go on one node.

A pipeline has the same command methods as a client, but calling one only
queues the command (and returns the pipeline, so calls chain). Executing sends
them with at most ``window`` replies outstanding and returns the results in
order. The sync and asyncio pipelines differ only in how they execute;
everything else lives here.

A pipeline goes to a single node (the client's current one, or its pinned
one); it is not retried elsewhere, and commands about jobs are not routed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from disquette.client.api import BaseClient, Call, Commands
from disquette.client.calls import Command, Pipelined

C = TypeVar("C", bound=BaseClient)


class PipelineBase(Commands, Generic[C]):
    """A pipeline on ``client`` (a sync or asyncio client), with its method defaults."""

    def __init__(self, client: C, window: int) -> None:
        self._client = client
        self.window = window
        if client._defaults:
            self._defaults = dict(client._defaults)
        self._bound: dict[str, Callable[..., Any]] = {}
        self._queued: list[Command[Any]] = []
        #: The results of the last execution.
        self.results: list[Any] | None = None

    def __len__(self) -> int:
        return len(self._queued)

    def _bind(self, builder: Callable[..., Call[Any]]) -> Callable[..., PipelineBase]:
        def queue(*args: Any, **kwargs: Any) -> PipelineBase:
            call = builder(*args, **kwargs)
            if not isinstance(call, Command):
                raise TypeError(f"{builder.__name__} cannot be used in a pipeline")
            self._queued.append(call)
            return self

        return queue

    def _take(self, raise_on_error: bool) -> Pipelined[Any]:
        queued, self._queued = self._queued, []
        return Pipelined(queued, self.window, raise_on_error=raise_on_error)
