"""What the sync and asyncio connection pools share: the idle list, the generation, the slots.

A pool keeps the idle connections to one node. Closing it closes those now and bumps the
generation, so that a connection in use meanwhile is closed when it comes back rather
than kept. ``max_connections`` bounds the connections out at once with a semaphore
(``threading`` or ``asyncio``: taking a slot is the one step that differs, and stays in
each pool with the locking its I/O needs). After an exchange a connection comes back
here too: kept if healthy, else discarded (see :meth:`PoolBase.exchanging`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, Protocol, TypeVar

from disquette.client.api import ClientConfig
from disquette.client.topology import Address


class Closable(Protocol):
    def close(self) -> None: ...


class Slots(Protocol):
    def release(self) -> None: ...


L = TypeVar("L", bound=Closable)
S = TypeVar("S", bound=Slots)


class PoolBase(Generic[L, S]):
    """Idle connections ``L`` to one node, at most as many out as ``slots`` allows."""

    def __init__(
        self, address: Address, config: ClientConfig, semaphore: Callable[[int], S]
    ) -> None:
        self.address = address
        self.config = config
        self._idle: list[L] = []
        self._generation = 0
        slots = config.max_connections
        self._slots = semaphore(slots) if slots else None

    def discard(self, link: L) -> None:
        """Close a connection that cannot be reused (and free its slot)."""
        link.close()
        self._free_slot()

    @contextmanager
    def exchanging(self, link: L) -> Iterator[None]:
        """Around an exchange on ``link``: one that raises (``KeyboardInterrupt``, a
        cancelled task, an error from the caller's iterable) leaves replies owed on the
        connection, so it is discarded."""
        try:
            yield
        except BaseException:
            self.discard(link)
            raise

    def give_back(self, link: L, healthy: bool) -> None:
        """After an exchange: keep the connection if it is healthy, else discard it."""
        if healthy:
            self.release(link)
        else:
            self.discard(link)

    @abstractmethod
    def release(self, link: L) -> None:
        """Keep a connection for the next call (closed instead if the pool was closed since)."""

    def _free_slot(self) -> None:
        if self._slots is not None:
            self._slots.release()
