"""The simulator's spill store: flow to disk's segments in memory, with disk faults.

It keeps the :class:`~disquette.core.spill.SpillStore` contract the server's
files keep (appends readable at once, a failed write kept pending and retried,
segments rolled at a size and dropped whole) so the core cannot tell them
apart, and lets a run inject what disks do: a write that fails (``fail_writes``:
appends stay pending and ``failed`` is set until the fault clears), a flipped
byte in a stored record (:meth:`corrupt`), and a torn tail at a crash
(:meth:`tear`: the pending bytes are cut short, as a process killed mid-write
leaves them). Nothing survives a restart: the server discards its spill log at
startup, and the simulated process makes a new store.
"""

from __future__ import annotations

from typing import Final

from disquette.core.spill import SEGMENT_SHIFT

OFFSET_MASK: Final = (1 << SEGMENT_SHIFT) - 1


class MemorySpillStore:
    def __init__(self, segment_bytes: int = 1 << 20) -> None:
        self.segment_bytes = segment_bytes
        self.segments: dict[int, bytearray] = {}  # written
        self.pending = bytearray()  # appended to the current segment, not written yet
        self.current = 0
        self.failed: str | None = None
        self.fail_writes = False
        self.reads = 0
        self.writes = 0

    def _written(self, segment: int) -> bytearray:
        data = self.segments.get(segment)
        if data is None:
            data = self.segments[segment] = bytearray()
        return data

    def append(self, data: bytes) -> int:
        size = len(self._written(self.current)) + len(self.pending)
        if size and size + len(data) > self.segment_bytes:
            self.flush()
            if self.pending:  # the current segment cannot be closed with bytes pending
                offset = size
            else:
                self.current += 1
                offset = 0
        else:
            offset = size
        self.pending += data
        return self.current << SEGMENT_SHIFT | offset

    def read(self, loc: int, size: int) -> bytes:
        self.reads += 1
        segment = loc >> SEGMENT_SHIFT
        offset = loc & OFFSET_MASK
        written = self.segments.get(segment, bytearray())
        if segment == self.current:
            whole = bytes(written) + bytes(self.pending)
            return whole[offset : offset + size]
        return bytes(written[offset : offset + size])

    def drop(self, segment: int) -> None:
        self.segments.pop(segment, None)
        if segment == self.current:  # its pending bytes are dead too
            self.pending.clear()
            self.current += 1

    def disk_used(self) -> int:
        return sum(map(len, self.segments.values())) + len(self.pending)

    def flush(self) -> None:
        if not self.pending:
            self.failed = None
            return
        if self.fail_writes:
            self.failed = "No space left on device (simulated)"
            return
        self._written(self.current).extend(self.pending)
        self.pending.clear()
        self.writes += 1
        self.failed = None

    def close(self) -> None:
        self.segments.clear()
        self.pending.clear()

    # Faults.

    def corrupt(self, loc: int, at: int = 8) -> None:
        """Flip a byte of the record at ``loc`` (written or pending): the one ``at`` bytes
        into it (by default the first of its queue time, past the length and the
        checksum), or the last byte stored there if the record is shorter."""
        segment = loc >> SEGMENT_SHIFT
        offset = loc & OFFSET_MASK
        written = self._written(segment)
        if offset < len(written):
            written[offset + at if offset + at < len(written) else offset] ^= 0xFF
        elif segment == self.current:
            start = offset - len(written)
            if start < len(self.pending):
                self.pending[min(start + at, len(self.pending) - 1)] ^= 0xFF

    def tear(self, keep: int) -> None:
        """A crash in the middle of a write: only ``keep`` pending bytes reach the disk."""
        self._written(self.current).extend(self.pending[:keep])
        self.pending.clear()
