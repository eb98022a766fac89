"""The spill log: the files flow-to-disk moves job records to, and its directives.

When the dataset passes ``flow-to-disk-level``, the core (core/spill.py) writes
whole job records to a store the shell gives it and drops them from memory; it
keeps an index of where each record is and reads it back when the job is needed.
:class:`FileSpillStore` is the server's store: a folder of append-only segment
files, ``spill-000000.log``, ``spill-000001.log``, ... (the segment number,
zero-padded to six digits and longer past 999999), the way Kafka's log segments
and RabbitMQ's message store keep messages on disk:

- **Locations.** A record is stored at the end of the current segment and is
  known by ``segment << 40 | offset``. A segment starts when the current one has
  reached ``segment_bytes`` (a record never spans two segments, so one larger
  than a segment has one of its own). Segment numbers only grow.
- **Appends never wait and never fail.** Records go to a pending buffer per
  segment, served to reads at once, and reach the file when the core's cron
  calls :meth:`~FileSpillStore.flush` (or when more than a megabyte is pending),
  with positioned writes. A failed write (a full disk, an I/O error) loses
  nothing: the bytes stay pending, :attr:`~FileSpillStore.failed` says why, the
  core stops spilling, and the next flush tries again. Nothing is fsynced.
- **Space comes back by whole segments.** The core counts the live records of
  each segment and drops a segment (closes and deletes its file) when none is
  left; a segment mostly dead is compacted by the core (its live records
  appended again), never rewritten in place here. The file is closed and deleted
  by a thread of its own: freeing 64 MB of a file takes the kernel tens of
  milliseconds, which the event loop does not wait for.
- **It says its format.** Beside the segments, a file ``spill-format`` names the
  format of the records (:data:`SPILL_FORMAT`) and the release that writes them;
  it is written when the store opens and deleted with the segments. The log is
  never read across restarts (below), so a folder left by another release is never
  read at all: what it holds is deleted at open, whichever release wrote it (0.1.0,
  format 1, wrote no such file).
- **It promises nothing across restarts.** Every job on disk is also where the
  node keeps what survives a restart (the AOF) or nowhere, as in memory, so the
  log is discarded: the store deletes old ``spill-*.log`` files when it opens and
  its own when it closes. It holds an exclusive lock (``flock``) on the folder
  meanwhile, so two nodes pointed at one folder cannot delete each other's
  records: the second one fails to open it.

:func:`apply_config` is the server's side of the five ``flow-to-disk``
directives: it opens the store the first time flow-to-disk is on (at start-up
or by CONFIG SET) and gives the core its level, disk limit and read-ahead. An open store
stays open (and in its folder) until the server stops, since the core may still
hold records in it after flow-to-disk is turned off; so CONFIG SET
``flow-to-disk-dir`` is refused while it is open.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from disquette import __version__
from disquette.config.cstring import strerror
from disquette.config.table import flow_to_disk_threshold

if TYPE_CHECKING:
    from disquette.config.model import Config
    from disquette.core.node import Node
    from disquette.server.log import Log

#: Bits of a location that hold the offset in its segment (segments up to 1 TiB).
OFFSET_BITS = 40
OFFSET_MASK = (1 << OFFSET_BITS) - 1
#: Pending bytes past which an append flushes without waiting for the cron.
FLUSH_BYTES = 1 << 20
#: The default size at which a new segment starts.
SEGMENT_BYTES = 64 << 20
#: The spill log's format (1: 0.1.0's, which did not say it), and the file that says it.
SPILL_FORMAT = 2
FORMAT_FILE = "spill-format"
#: Segment files are private: they hold job bodies.
FILE_MODE = 0o600
SEGMENT_FLAGS = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC

#: ``opener(path, flags) -> fd`` opens a segment file (as for the built-in ``open``).
Opener = Callable[[str, int], int]

#: The CONFIG SET parameters :func:`apply_config` acts on (the level may be a share of
#: maxmemory).
DIRECTIVES = (
    "flow-to-disk",
    "flow-to-disk-level",
    "flow-to-disk-dir",
    "flow-to-disk-max-size",
    "flow-to-disk-readahead",
    "maxmemory",
)


def format_text() -> bytes:
    """What ``spill-format`` holds: the format and the release that writes it."""
    return b"disquette spill log format %d (disquette %s)\n" % (SPILL_FORMAT, __version__.encode())


def segment_name(segment: int) -> str:
    """The file name of a segment: ``spill-000042.log``."""
    return f"spill-{segment:06d}.log"


def _open_segment(path: str, flags: int) -> int:
    return os.open(path, flags, FILE_MODE)


class _Segment:
    """One segment file: its fd (-1 until first written), bytes on disk, bytes pending."""

    __slots__ = ("fd", "path", "pending", "written")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1
        self.written = 0
        self.pending = bytearray()

    @property
    def size(self) -> int:
        return self.written + len(self.pending)


class FileSpillStore:
    """Job records in segment files of ``folder`` (the core's ``SpillStore``).

    ``opener`` opens a segment file (default ``os.open`` with mode 0600); tests
    pass their own to hold on to the fds and inject faults at the file level.
    Raises :class:`OSError` with a message naming the folder when the folder
    cannot be created, locked or written.
    """

    def __init__(
        self,
        folder: str,
        segment_bytes: int = SEGMENT_BYTES,
        opener: Opener | None = None,
    ) -> None:
        if not 0 < segment_bytes <= OFFSET_MASK:
            raise ValueError(f"segment_bytes must be from 1 to {OFFSET_MASK}")
        self.folder = os.path.abspath(folder)
        self.segment_bytes = segment_bytes
        #: The segment appends go to now.
        self.current = 0
        #: Why the last write failed (None while writes succeed).
        self.failed: str | None = None
        self._opener: Opener = opener or _open_segment
        self._segments: dict[int, _Segment] = {}  # increasing numbers (insertion order)
        self._pending = 0  # bytes pending over all segments
        self._bytes = 0  # bytes held over all segments, written and pending
        self._leftovers: list[str] = []  # files whose deletion failed (retried by close)
        self._lock_fd = -1
        self._closed = False
        # Dropped segments are closed and deleted by a thread (started at the first);
        # an Event put among them is set once those before it are gone.
        self._doomed: queue.SimpleQueue[_Segment | threading.Event | None] = queue.SimpleQueue()
        self._reaper: threading.Thread | None = None
        try:
            os.makedirs(self.folder, exist_ok=True)
            self._lock_fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            for old in glob.glob(os.path.join(glob.escape(self.folder), "spill-*.log")):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(old)
            self._write_format()
            # Segment 0's file now: an unwritable folder fails here, not at the first spill.
            first = self._new_segment(0)
            first.fd = self._opener(first.path, SEGMENT_FLAGS)
        except OSError as e:
            self.close()
            reason = (
                "another process uses it (each node needs a folder of its own)"
                if isinstance(e, BlockingIOError)  # (the flock)
                else strerror(e)
            )
            raise OSError(
                e.errno, f"Can't use the flow-to-disk folder {self.folder}: {reason}"
            ) from e

    # ------------------------------------------------------------------
    # The SpillStore protocol.

    def append(self, data: bytes) -> int:
        """Store ``data`` at the end of the current segment; return its location.

        Never raises for an I/O error: see :attr:`failed`.
        """
        segment = self._segments[self.current]
        if segment.size >= self.segment_bytes:
            self.current += 1
            segment = self._new_segment(self.current)
        offset = segment.size
        segment.pending += data
        self._pending += len(data)
        self._bytes += len(data)
        if self._pending > FLUSH_BYTES and self.failed is None:
            self.flush()
        return self.current << OFFSET_BITS | offset

    def read(self, loc: int, size: int) -> bytes:
        """The ``size`` bytes at ``loc``: fewer when the file is shorter (damage), none
        when the segment was dropped. Raises :class:`OSError` on an I/O error."""
        segment = self._segments.get(loc >> OFFSET_BITS)
        if segment is None or size <= 0:
            return b""
        offset = loc & OFFSET_MASK
        head = b""
        if offset < segment.written:
            want = min(size, segment.written - offset)
            head = _pread(segment.fd, want, offset)
            if len(head) < want or want == size:
                return head
            size -= want
            offset = segment.written
        start = offset - segment.written
        return head + bytes(segment.pending[start : start + size])

    def drop(self, segment: int) -> None:
        """Close and delete a segment's file (its records are all dead); the current
        one's appends then go to a new segment."""
        dropped = self._segments.pop(segment, None)
        if dropped is not None:
            self._pending -= len(dropped.pending)
            self._bytes -= dropped.size
            if dropped.fd >= 0:
                if self._reaper is None:
                    self._reaper = threading.Thread(
                        target=self._reap, name="spill-reaper", daemon=True
                    )
                    self._reaper.start()
                self._doomed.put(dropped)
        if segment == self.current:
            self.current += 1
            self._new_segment(self.current)

    def disk_used(self) -> int:
        """Bytes held: written to the segment files plus pending."""
        return self._bytes

    def flush(self) -> None:
        """Write the pending bytes, oldest segment first; on an error keep the rest pending
        and set :attr:`failed`, on success clear it. Never raises, never fsyncs."""
        if not self._pending:
            self.failed = None
            return
        for segment in self._segments.values():
            if not segment.pending:
                continue
            try:
                if segment.fd < 0:
                    segment.fd = self._opener(segment.path, SEGMENT_FLAGS)
                pending = segment.pending
                while pending:
                    written = os.pwrite(segment.fd, pending, segment.written)
                    if written <= 0:  # (never for a file; would loop forever)
                        raise OSError(errno.EIO, os.strerror(errno.EIO))
                    del pending[:written]
                    segment.written += written
                    self._pending -= written
            except OSError as e:
                self.failed = f"Can't write the spill log {segment.path}: {strerror(e)}"
                return
        self.failed = None

    def close(self) -> None:
        """Close every fd, delete every segment file, release the folder (which stays)."""
        if self._closed:
            return
        self._closed = True
        if self._reaper is not None:  # the dropped segments first
            self._doomed.put(None)
            self._reaper.join()
            self._reaper = None
        for segment in self._segments.values():
            self._delete(segment)
        self._segments.clear()
        self._pending = self._bytes = 0
        for path in [*self._leftovers, os.path.join(self.folder, FORMAT_FILE)]:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._leftovers.clear()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # (releases the flock)
            self._lock_fd = -1

    # ------------------------------------------------------------------

    def _write_format(self) -> None:
        path = os.path.join(self.folder, FORMAT_FILE)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        try:
            os.write(fd, format_text())
        finally:
            os.close(fd)

    def _new_segment(self, number: int) -> _Segment:
        segment = _Segment(os.path.join(self.folder, segment_name(number)))
        self._segments[number] = segment
        return segment

    def settle(self) -> None:
        """Wait until the segments dropped so far are closed and deleted."""
        if self._reaper is not None:
            done = threading.Event()
            self._doomed.put(done)
            done.wait()

    def _reap(self) -> None:
        """The reaper thread: close and delete dropped segments, until told to stop."""
        while (item := self._doomed.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()
            else:
                self._delete(item)

    def _delete(self, segment: _Segment) -> None:
        if segment.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(segment.fd)
            segment.fd = -1
            try:
                os.unlink(segment.path)
            except FileNotFoundError:
                pass
            except OSError:
                self._leftovers.append(segment.path)


def _pread(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes at ``offset``, fewer only at the end of the file."""
    data = os.pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        chunk = os.pread(fd, size - got, offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


# --------------------------------------------------------------------------
# The directives on a running server.


def spill_folder(config: Config) -> str:
    """The absolute folder of the spill log: ``flow-to-disk-dir`` relative to ``dir``."""
    return os.path.abspath(os.path.join(config.dir, config.flow_to_disk_dir))


def apply_config(node: Node, config: Config, log: Log, changed: str | None = None) -> str | None:
    """Give the node's spill controller the flow-to-disk settings of ``config``.

    Opens the spill log (a :class:`FileSpillStore` in :func:`spill_folder`) and
    attaches it when flow-to-disk is on and none is attached, then configures the
    core (on or off, the threshold in bytes, the disk limit). Returns ``None``, or
    an error after logging it: the folder cannot be used (the server does not
    start; CONFIG SET fails and is undone), or ``changed`` (the CONFIG SET
    parameter that calls) is ``flow-to-disk-dir`` while the log is open elsewhere.
    """
    spill = node.spill
    folder = spill_folder(config)
    store = spill.store
    opened_in = store.folder if isinstance(store, FileSpillStore) else folder
    if changed == "flow-to-disk-dir" and opened_in != folder:
        return (
            f"flow-to-disk-dir can't change while the spill log is open in {opened_in} "
            "(it stays there until the server restarts)"
        )
    if config.flow_to_disk and store is None:
        try:
            store = FileSpillStore(folder)
        except OSError as e:
            message = f"flow-to-disk can't be turned on: {e.strerror}"
            log.warning(message)
            return message
        spill.log = log.warning
        spill.attach(store)
        log.notice(f"flow-to-disk: the spill log is in {folder}")
    threshold = flow_to_disk_threshold(config)
    if config.flow_to_disk and threshold > config.maxmemory // 100 * 95 and config.maxmemory:
        log.warning(
            f"flow-to-disk-level ({threshold} bytes) is past 95% of maxmemory: the node "
            "refuses new jobs before any job spills to disk"
        )
    spill.configure(
        config.flow_to_disk,
        threshold,
        config.flow_to_disk_max_size,
        config.flow_to_disk_readahead,
    )
    return None


def close_store(node: Node) -> None:
    """At shutdown: close the node's spill log (deleting its files) and detach it."""
    spill = node.spill
    if spill.store is not None:
        spill.store.close()
        spill.attach(None)
