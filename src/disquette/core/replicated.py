"""A cluster-wide table of named records, last writer wins (beyond Disque).

Queue policies (:mod:`disquette.core.policy`) and recurring jobs
(:mod:`disquette.core.cron`) are tables every node holds whole. They spread
the same way, which this module is:

* Each record carries a version, a Lamport counter and the ID of the node that
  wrote it: the greater version wins, so any two nodes that saw the same writes
  hold the same table, whatever the order they arrived in (equal counters are
  broken by node ID). A deletion is a version too (a tombstone, kept so that an
  old copy of the record cannot come back).
* A write is sent to every linked node at once. Besides, each node sends a
  digest of its table (a hash of every name and version) to one linked node per
  second, and a node whose digest differs answers with its whole table; the
  receiver merges it and, when it held versions the sender lacked, answers with
  its own. Partitions heal, and a node that joins later or restarts without its
  file learns the table.
* The table is saved in nodes.conf, one ``vars <name> <hex>`` line per record,
  so it survives restarts with or without the AOF.

A table is told its two message types (a digest, and records with the
``FULL_TABLE`` flag when they are the whole table), its nodes.conf variable and
how to decode a record; a subclass keeps what it derives from the records in
:meth:`ReplicatedTable.changed`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

import msgpack
from mypy_extensions import mypyc_attr

from disquette.core import messages as msg
from disquette.core.messages import Message

if TYPE_CHECKING:
    from disquette.core.node import Node

SYNC_PERIOD: Final = 1000  # ms between digests sent to a random linked node
NODE_ID_LEN: Final = 40
MAX_COUNTER: Final = 1 << 62  # a version counter from a peer beyond it is refused


class Record(Protocol):
    """What the table needs of a record: its name, version and tombstone flag."""

    name: bytes
    counter: int
    origin: bytes
    deleted: bool

    def encode(self) -> bytes: ...


R = TypeVar("R", bound=Record)


def unpack(data: bytes, fields: int) -> tuple[Any, ...] | None:
    """A record's fields from a peer or a file, None unless they are ``fields`` of them."""
    try:
        record = msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=True)
    except Exception:  # msgpack raises several unrelated types on bad input
        return None
    return record if type(record) is tuple and len(record) == fields else None


def valid_version(counter: object, origin: object, deleted: object) -> bool:
    """Whether a decoded record's version fields are acceptable from a peer or a file."""
    return (
        type(counter) is int
        and 0 < counter < MAX_COUNTER
        and type(origin) is bytes
        and len(origin) == NODE_ID_LEN
        and type(deleted) is bool
    )


@mypyc_attr(allow_interpreted_subclasses=True)  # the cron table (core/cron.py) is not compiled
class ReplicatedTable(Generic[R]):
    """The records of one table this node knows (tombstones included), by name."""

    def __init__(
        self,
        node: Node,
        digest_type: int,
        records_type: int,
        var: bytes,
        decode: Callable[[bytes], R | None],
        tombstone: Callable[[bytes, int, bytes], R],
    ) -> None:
        self.node = node
        self.digest_type = digest_type
        self.records_type = records_type
        self.var = var
        self.decode = decode
        self.tombstone = tombstone  # (name, counter, origin) -> a deleted record
        self.records: dict[bytes, R] = {}
        self.counter = 0  # the greatest counter seen (Lamport clock)
        self._digest = 0
        self._next_sync = 0

    def get(self, name: bytes) -> R | None:
        record = self.records.get(name)
        return None if record is None or record.deleted else record

    # Writes ------------------------------------------------------------------

    def write(self, record: R) -> None:
        """A new version written here (its counter from :meth:`next_counter`), sent to
        every linked node."""
        self.merge([record])
        update = (self.records_type, (record.encode(),), 0)
        for node_id in self.node.linked_nodes():
            self.node.send(node_id, update)

    def next_counter(self) -> int:
        """The counter of a write made here: above every version seen."""
        return self.counter + 1

    def delete(self, name: bytes) -> bool:
        """A tombstone written here; False when no such record lives."""
        if self.get(name) is None:
            return False
        self.write(self.tombstone(name, self.next_counter(), self.node.myself))
        return True

    def merge(self, records: Iterable[R]) -> bool:
        """Keep the newer version of each record; True when the table changed."""
        changed = False
        for record in records:
            self.counter = max(self.counter, record.counter)
            current = self.records.get(record.name)
            if current is None or (record.counter, record.origin) > (
                current.counter,
                current.origin,
            ):
                self.records[record.name] = record
                changed = True
        if changed:
            digest = hashlib.blake2b(digest_size=8)
            for name in sorted(self.records):
                r = self.records[name]
                digest.update(b"%d:%s:%d:%s:%d;" % (len(name), name, r.counter, r.origin,
                                                     r.deleted))  # fmt: skip
            self._digest = int.from_bytes(digest.digest(), "big")
            self.changed()
        return changed

    def changed(self) -> None:
        """The table changed (a subclass derives its views here): nodes.conf keeps it."""
        self.node.cluster.save_later()

    def load(self, records: Iterable[bytes]) -> None:
        """The records nodes.conf held (invalid ones are skipped)."""
        self.merge(r for r in map(self.decode, records) if r is not None)

    # Anti-entropy ------------------------------------------------------------

    @property
    def digest(self) -> int:
        """A hash of every name and version (0 for an empty table)."""
        return self._digest

    def cron(self, now: int) -> None:
        """Every second, send the digest to one random linked node (not while the table
        is empty: a node that holds records sends its digest to this one)."""
        if now < self._next_sync or not self.records:
            return
        self._next_sync = now + SYNC_PERIOD
        linked = self.node.linked_nodes()
        if linked:
            self.node.send(self.node.rng.choice(linked), (self.digest_type, self._digest))

    def table_message(self) -> Message:
        """The whole table (``FULL_TABLE``: the receiver answers with its own if it knows
        more)."""
        records = tuple(r.encode() for r in self.records.values())
        return (self.records_type, records, msg.FULL_TABLE)

    def config_lines(self) -> bytes:
        """nodes.conf's ``vars <var>`` lines."""
        return b"".join(b"vars %s %s\n" % (self.var, r.encode().hex().encode())
                        for r in self.records.values())  # fmt: skip

    def install(self) -> None:
        """Register the handlers of the table's two message types."""
        self.node.message_handlers[self.digest_type] = self.on_digest
        self.node.message_handlers[self.records_type] = self.on_records

    def on_digest(self, node: Node, sender: bytes, message: Message) -> None:
        """A peer's digest: when it differs from ours, the peer gets our table."""
        if message[1] != self._digest:
            self.node.send(sender, self.table_message())

    def on_records(self, node: Node, sender: bytes, message: Message) -> None:
        """Records from a peer (a write, or its whole table): merge them. A peer whose
        whole table lacks a version this node holds gets this node's table back."""
        received = [r for r in map(self.decode, message[1]) if r is not None]
        self.merge(received)
        if message[2] & msg.FULL_TABLE:
            theirs = {r.name: (r.counter, r.origin) for r in received}
            if any(theirs.get(r.name) != (r.counter, r.origin) for r in self.records.values()):
                self.node.send(sender, self.table_message())
