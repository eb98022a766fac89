"""The append-only file of a running server: writes, fsync, rewrites, loading.

The records, the reader and the rewrite snapshot are sans-I/O
(:mod:`disquette.core.aof`); this module puts them on a disk without ever
making the event loop wait for it, except where Disque's guarantees require.

**Writing** (reference 12.3). The node appends records to an
:class:`~disquette.core.aof.AofBuffer` while commands run; the first record of
an event-loop iteration schedules one flush (``call_soon``), which runs before
the loop next waits for I/O. Replies produced meanwhile wait in the server's
outbox (server/outbox.py), which writes them at the end of the iteration, after
this flush: a client never hears of a job the file does not have, and one
write(2) -- one fsync with ``always`` -- covers every client of the iteration
(group commit).
``everysec`` gives the fsync to a background thread at most once a second (the
cron also syncs an AOF that stopped growing, so data is never more than about
a second behind); while that fsync is still running the write is postponed up
to two seconds and then done anyway (``aof_delayed_fsync``), as in Disque,
replies being released either way. ``no`` leaves syncing to the kernel.

**Failures.** A failed write keeps the records buffered, sets
``aof_last_write_status:err`` and ``ServerState.aof_write_error`` (so write
commands and PING get ``-MISCONF``) and is retried every iteration and every
second by the cron until it succeeds; a partial write is cut off the file. A
failed background fsync does the same until an fsync succeeds. With
``always`` a write or fsync failure is fatal (the reply would promise a write
that did not happen): the server logs and exits, as Disque does.

**Rewriting** (12.4) is incremental, in the event loop, not forked. Measured on
the 2-CPU dev VM with 1M queued jobs (489 MB RSS): ``fork()`` alone blocks the
parent 8.5-12 ms, growing linearly with the heap, and a Python child touches
every object's reference count while serializing, so copy-on-write ends up
duplicating most of the heap; with the fsync thread running, forking a
threaded process is also fragile. Instead, :class:`Rewrite` walks the job
table with its scan cursor in slices of about a millisecond (the batch adapts
to the measured time), each slice's LOADJOB records appended -- in time order
with every record the node emits meanwhile -- to the rewrite's output, which a
dedicated thread writes to ``temp-rewriteaof-bg-<pid>-<n>.aof`` (fsyncing
every 32 MB with ``aof-rewrite-incremental-fsync``). Why the result is exact is
explained in :mod:`disquette.core.aof`. When the walk ends the thread fsyncs
the file; the loop then writes the last records (the few produced during that
fsync), fsyncs again with ``always``, renames the file over ``appendfilename``
(atomic), swaps file descriptors, fsyncs the directory (with ``everysec`` the
fsync thread syncs the new file, then the directory) and lets the thread close
the old one (closing an unlinked big file frees its blocks, which can take
long). The longest stall is one slice plus that final step: with 1M jobs
(204 MB) bench/aof.py measured a 3.1 s rewrite whose longest PING round trip
was 4.1-4.3 ms, against 3.5 ms while idle (p99 2 ms); one run of four had a
single 28 ms outlier, from the VM's disk write path (none with the files on
tmpfs). The cost is CPU on the loop's core while it runs (about 2 us per job),
where a forked child would use another core.

**Loading** (12.5) happens at start-up after the listeners are open: the file
is read in 64 KiB chunks, each applied in one event-loop callback, so clients
are answered between chunks (``-LOADING`` for most commands; INFO shows the
progress). A torn tail is cut off with a warning when ``aof-load-truncated``
is yes, and stops the start otherwise; any other damage stops the start with
the offset of the bad record. Nothing is ever skipped silently. A file of a newer
AOF format than this release reads (its format record, core/aof.py) stops the start
with both formats named; every file this process writes (a new one, a rewrite)
starts with this release's format record, in front of its first record.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import queue
import threading
import time
from collections.abc import Callable, Generator
from typing import IO, TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr

from disquette.config import ConfigRewriteError, config_rewrite
from disquette.config.cstring import strerror
from disquette.core.aof import (
    FORMAT_RECORD,
    AofBuffer,
    AofCorrupt,
    AofError,
    AofLoader,
    AofNewerFormat,
    AofTruncated,
    AofUnknownCommand,
    RecordReader,
    Snapshot,
)
from disquette.state.persistence import (
    REWRITE_FAILED,
    REWRITE_IN_PROGRESS,
    REWRITE_STARTED,
    AofStatus,
)

if TYPE_CHECKING:
    from disquette.core.node import Node
    from disquette.server.log import Log
    from disquette.state.server import ServerState

OFF: Final = "off"
ON: Final = "on"
WAIT_REWRITE: Final = "wait-rewrite"

REWRITE_SLICE_S: Final = 0.001  # target duration of one rewrite slice
REWRITE_CHUNK: Final = 256 << 10  # bytes handed to the rewrite thread at a time
REWRITE_MAX_QUEUED: Final = 32 << 20  # the snapshot waits while the thread is this far behind
INCREMENTAL_FSYNC: Final = 32 << 20  # aof-rewrite-incremental-fsync period, in bytes
SYNC_REWRITE_BATCH: Final = 10_000  # jobs per write of SHUTDOWN REWRITE-AOF
LOAD_CHUNK: Final = 64 << 10  # bytes of AOF applied per event-loop callback while loading
POSTPONE_MAX_S: Final = 2  # everysec: longest wait for a running fsync before writing anyway
ERROR_LOG_PERIOD_S: Final = 30  # write errors are logged at most this often
AUTO_REWRITE_RETRY_S: Final = 10  # after a failed automatic rewrite
AOF_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT


@mypyc_attr(allow_interpreted_subclasses=True)  # the tests' failing disks
class DiskIO:
    """The system calls that put AOF bytes on disk. Everything that writes or syncs
    an AOF file goes through here, which is where a test injects a failing disk."""

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)


#: The disk every AOF writer uses (a module variable, read when a writer is made, so
#: that a test can put a failing one in its place, in the compiled build too).
disk = DiskIO()


def write_all(io: DiskIO, fd: int, data: bytes | bytearray) -> int:
    """Write all of ``data`` (retrying short writes); an OSError carries ``written``.

    ``data`` is passed as it is (sliced only after a short write), never through
    a memoryview, so a failed write leaves no export that would pin a bytearray.
    """
    written = 0
    total = len(data)
    while written < total:
        try:
            n = io.write(fd, data[written:] if written else data)
        except OSError as e:
            e.written = written  # type: ignore[attr-defined]
            raise
        if n <= 0:
            short = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            short.written = written  # type: ignore[attr-defined]
            raise short
        written += n
    return written


def fsync_dir(io: DiskIO, path: str = ".") -> None:
    """Make a rename in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        io.fsync(fd)
    finally:
        os.close(fd)


class Worker:
    """A background thread running blocking file operations in order (Disque's bio);
    ``done(result, error)`` callbacks run in the event loop."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # Not "_thread": mypyc would name its C field "__thread", a C keyword.
        self._runner = threading.Thread(target=self._run, name=name, daemon=True)
        self._runner.start()

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        done: Callable[[Any, OSError | None], None] | None = None,
    ) -> None:
        self._jobs.put((fn, args, done))

    def _run(self) -> None:
        while True:
            fn, args, done = self._jobs.get()
            result: Any = None
            error: OSError | None = None
            try:
                result = fn(*args)
            except OSError as e:
                error = e
            if done is None:
                continue
            try:
                self.loop.call_soon_threadsafe(done, result, error)
            except RuntimeError:  # the loop is closed: the process is exiting
                return


def _close(fd: int) -> None:
    os.close(fd)


class Rewrite:
    """A background rewrite in progress (see the module docstring)."""

    def __init__(self, aof: AppendOnlyFile, temp: str, fd: int) -> None:
        self.aof = aof
        self.temp = temp
        self.fd = fd
        self.snapshot = Snapshot(aof.node)
        # Records in time order (changes and snapshot slices) not yet given to the thread.
        self.output = bytearray()
        self.queued = 0  # bytes given to the thread and not yet written
        self.written = 0  # bytes in the temporary file
        self.since_fsync = 0  # (thread) bytes written since the last incremental fsync
        self.batch = 256  # jobs per slice, adapted to REWRITE_SLICE_S
        self.start = time.time()
        self.cancelled = False
        self.opened = False  # the format record was handed off

    def run_slice(self) -> None:
        if self.cancelled:
            return
        aof = self.aof
        assert aof.loop is not None
        if self.queued >= REWRITE_MAX_QUEUED:
            aof.loop.call_later(0.001, self.run_slice)
            return
        started = time.perf_counter()
        self.output += self.snapshot.take(self.batch)
        elapsed = time.perf_counter() - started
        scale = REWRITE_SLICE_S / max(elapsed, 1e-5)
        self.batch = max(16, min(100_000, int(self.batch * min(2.0, max(0.5, scale)))))
        done = self.snapshot.done
        if len(self.output) >= REWRITE_CHUNK or done:
            self.hand_off()
        if done:
            aof.rewrite_io.submit(aof.io.fsync, self.fd, done=self._synced)
        else:
            aof.loop.call_soon(self.run_slice)

    def hand_off(self) -> None:
        """Give the output so far to the rewrite thread."""
        if not self.output:
            return
        data = self.take_output()
        self.queued += len(data)
        self.aof.rewrite_io.submit(self._write, data, done=self._written)

    def take_output(self) -> bytes:
        """The output so far, emptied; the file's format record in front of its first
        records (a rewrite of nothing leaves an empty file)."""
        data = bytes(self.output)
        self.output.clear()
        if data and not self.opened:
            self.opened = True
            data = FORMAT_RECORD + data
        return data

    def _write(self, data: bytes) -> int:
        """(Rewrite thread.) Append ``data`` to the temporary file."""
        io = self.aof.io
        written = write_all(io, self.fd, data)
        self.since_fsync += written
        if self.aof.config.aof_rewrite_incremental_fsync and self.since_fsync >= INCREMENTAL_FSYNC:
            io.fsync(self.fd)
            self.since_fsync = 0
        return written

    def _written(self, written: int | None, error: OSError | None) -> None:
        if self.cancelled:
            return
        if error is not None:
            self.aof.rewrite_failed(self, f"writing the temporary file: {strerror(error)}")
            return
        assert written is not None
        self.queued -= written
        self.written += written

    def _synced(self, _result: None, error: OSError | None) -> None:
        if self.cancelled:
            return
        if error is not None:
            self.aof.rewrite_failed(self, f"fsync of the temporary file: {strerror(error)}")
            return
        self.aof.rewrite_done(self)

    def cancel(self) -> None:
        """Stop: the temporary file is removed now, closed by the thread later."""
        self.cancelled = True
        try:
            os.unlink(self.temp)
        except OSError:
            pass
        self.aof.rewrite_io.submit(_close, self.fd)


class AppendOnlyFile:
    """The AOF of one server process (implements ``AofControl`` for the commands)."""

    def __init__(self, config: Any, log: Log, node: Node, state: ServerState) -> None:
        self.config = config
        self.log = log
        self.node = node
        self.server_state = state
        self.io = disk
        self.state = OFF
        self.fd = -1
        self.buffer = AofBuffer(self._schedule_flush)
        # Flow to disk reads spilled jobs back from their LOADJOB records: a read-only fd
        # per file generation, kept after a rewrite replaced the file until no spilled
        # job is read from it (core/spill.py retires it).
        self.readers: dict[int, int] = {}
        # A replaced generation's records that never reached its file (they were in the
        # buffer when the rewrite switched files): its size, then those bytes.
        self.tails: dict[int, tuple[int, bytes]] = {}
        self.buffer.reader = self._read_back
        self.buffer.retire = self._retire
        self._flush_scheduled = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self._bio: Worker | None = None
        self._rewrite_io: Worker | None = None
        # Sizes and sync state of the file being appended to.
        self._current_size = 0
        self.base_size = 0
        self.synced_size = 0  # bytes covered by the last fsync started (-1: retry)
        self.last_fsync = 0.0
        self.postponed_since = 0.0
        self.delayed_fsync = 0
        self.fsyncs_pending = 0
        self.write_error: str | None = None
        self.fsync_error: str | None = None
        self._last_error_log = 0.0
        self._last_write_retry = 0.0
        # Rewrites.
        self.rewrite: Rewrite | None = None
        self.rewrite_scheduled = False  # retry a failed rewrite of wait-rewrite
        self.rewrite_seq = 0
        self.last_rewrite_ok = True
        self.last_rewrite_time = -1
        self._auto_rewrite_after = 0.0
        # Loading.
        self.loading_start = 0
        self.loading_total = 0
        self.loading_loaded = 0
        self._stop_loading = False
        # A client served before the file is read must get -LOADING too.
        node.loading = bool(config.appendonly or config.aof_enqueue_jobs_once)

    # ------------------------------------------------------------------
    # Threads.

    @property
    def bio(self) -> Worker:
        if self._bio is None:
            assert self.loop is not None
            self._bio = Worker("aof-fsync", self.loop)
        return self._bio

    @property
    def rewrite_io(self) -> Worker:
        if self._rewrite_io is None:
            assert self.loop is not None
            self._rewrite_io = Worker("aof-rewrite", self.loop)
        return self._rewrite_io

    # ------------------------------------------------------------------
    # Start-up.

    async def start(self) -> bool:
        """Open and load the AOF as the server starts; False means exit with status 1
        (the reason is logged) or a shutdown requested while loading."""
        self.loop = asyncio.get_running_loop()
        config = self.config
        path = config.appendfilename
        if config.appendonly:
            try:
                self.fd = os.open(path, AOF_FLAGS, 0o644)
            except OSError as e:
                self.log.warning(f"Can't open the append-only file: {strerror(e)}")
                return False
        if config.appendonly or config.aof_enqueue_jobs_once:
            try:
                if not await self._load_at_start(path):
                    return False
            finally:
                self.node.loading = False
        if config.aof_enqueue_jobs_once:
            config.aof_enqueue_jobs_once = False
            if config.config_file:
                try:
                    config_rewrite(config)
                except ConfigRewriteError as error:  # (mypyc: one type per variable name)
                    self.log.warning(
                        f"aof-enqueue-jobs-once was used but could not be turned off in the "
                        f"config file: {error}"
                    )
        if config.appendonly:
            self._switch_on(self.fd)
        return True

    async def _load_at_start(self, path: str) -> bool:
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as e:
            self.log.warning(
                f"Fatal error: can't open the append log file for reading: {strerror(e)}"
            )
            return False
        with f:
            loading = self._loading(f, path)
            try:
                while True:
                    next(loading)
                    await asyncio.sleep(0)
            except StopIteration as stop:
                return bool(stop.value)

    @property
    def current_size(self) -> int:
        return self._current_size

    @current_size.setter
    def current_size(self, size: int) -> None:
        self._current_size = size
        self.buffer.file_size = size  # where the buffered records will start in the file

    def _switch_on(self, fd: int) -> None:
        self.state = ON
        self.fd = fd
        self.buffer.enabled = True
        self.node.aof = self.buffer
        self.current_size = self.base_size = self.synced_size = os.fstat(fd).st_size
        self.buffer.new_file = not self.current_size  # (its format record first)
        self.last_fsync = time.time()
        self._open_reader()

    def _open_reader(self) -> None:
        """A new file generation, and a read-only fd on it (none: spilled jobs are not
        read back from the AOF, they go to the spill log)."""
        buffer = self.buffer
        old = buffer.generation
        buffer.generation = old + 1
        if old in self.readers and not self.node.spill.uses(old):
            self._retire(old)
        try:
            self.readers[buffer.generation] = os.open(self.config.appendfilename, os.O_RDONLY)
            buffer.reader = self._read_back
        except OSError as e:
            self.log.warning(f"Can't open the AOF for reading back spilled jobs: {strerror(e)}")
            buffer.reader = None

    def _read_back(self, generation: int, offset: int, size: int) -> bytes:
        """Bytes of the AOF of ``generation`` at ``offset``, buffered ones included (for
        a replaced generation, the ones its file never got)."""
        fd = self.readers.get(generation)
        if fd is None:
            raise OSError(f"AOF generation {generation} is not open")
        pending: bytes | bytearray
        if generation == self.buffer.generation:
            written, pending = self._current_size, self.buffer.data
        else:
            written, pending = self.tails.get(generation, (offset + size, b""))
        if offset >= written:
            return bytes(pending[offset - written : offset - written + size])
        data = os.pread(fd, min(size, written - offset), offset)
        if offset + size > written:
            data += bytes(pending[: offset + size - written])
        return data

    def _retire(self, generation: int) -> None:
        self.tails.pop(generation, None)
        fd = self.readers.pop(generation, None)
        if fd is not None:
            os.close(fd)

    def _loading(self, f: IO[bytes], path: str) -> Generator[None, None, bool]:
        """Load the open file ``f`` into the node, yielding between chunks; the value
        is False when the file cannot be loaded (logged) or loading was stopped."""
        node = self.node
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return True
        started = time.perf_counter()
        self.loading_start = int(time.time())
        self.loading_total = size
        self.loading_loaded = 0
        reader = RecordReader()
        loader = AofLoader(node, self.config.aof_enqueue_jobs_once)
        sink, node.aof = node.aof, None
        node.loading = True
        try:
            while not self._stop_loading:
                chunk = f.read(LOAD_CHUNK)
                if not chunk:
                    break
                loader.apply(reader.feed(chunk))
                self.loading_loaded += len(chunk)
                yield
            if self._stop_loading:
                return False
            reader.finish()
        except AofTruncated as truncated:  # (mypyc: one type per variable name)
            if not self._truncated_tail(path, truncated):
                return False
        except AofError as error:
            self._corrupt(path, error)
            return False
        except OSError as e:
            self.log.warning(f"Unrecoverable error reading the append only file: {strerror(e)}")
            return False
        finally:
            node.aof = sink
            node.loading = False
        gc.freeze()  # the loaded jobs are long-lived: keep them out of collections
        self.log.notice(
            f"DB loaded from append only file: {time.perf_counter() - started:.3f} seconds "
            f"({loader.loaded} jobs, {loader.records} records)"
        )
        return True

    def _truncated_tail(self, path: str, e: AofTruncated) -> bool:
        if self.config.aof_load_truncated:
            self.log.warning(f"!!! Warning: short read while loading the AOF file {path}!!!")
            self.log.warning(f"!!! Truncating the AOF at offset {e.offset} !!!")
            try:
                os.truncate(path, e.offset)
            except OSError as err:
                self.log.warning(f"Error truncating the AOF file: {strerror(err)}")
            else:
                self.log.warning("AOF loaded anyway because aof-load-truncated is enabled")
                return True
        self.log.warning(
            f"Unexpected end of file reading the append only file {path} at offset "
            f"{e.offset}. You can: 1) Make a backup of your AOF file, then use "
            f"'disquette check-aof --fix {path}'. 2) Alternatively you can set the "
            "'aof-load-truncated' configuration option to yes and restart the server."
        )
        return False

    def _corrupt(self, path: str, e: AofError) -> None:
        if isinstance(e, AofNewerFormat):
            self.log.warning(f"Can't load the append only file {path}: {e.reason}.")
            return
        if isinstance(e, AofUnknownCommand):
            self.log.warning(f"{e.reason} (offset {e.offset})")
        elif isinstance(e, AofCorrupt) and e.reason.startswith("corrupted LOADJOB data"):
            self.log.warning(
                f"Unrecoverable error loading AOF: {e.reason} (record at offset {e.offset})."
            )
        else:
            self.log.warning(
                f"Bad file format reading the append only file {path} at offset {e.offset}: "
                f"{e.reason}."
            )
        self.log.warning(
            f"Nothing after offset {e.offset} was loaded. Make a backup of your AOF file, "
            f"then inspect it with 'disquette check-aof {path}'; 'disquette check-aof --fix "
            f"{path}' cuts the file at that offset, losing what follows."
        )

    def stop_loading(self) -> None:
        """A shutdown while loading: stop at the next chunk."""
        self._stop_loading = True

    # ------------------------------------------------------------------
    # Writing.

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self.loop is not None:
            self._flush_scheduled = True
            self.loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def flush(self, force: bool = False) -> None:
        """Write the buffered records (fsync as the policy says); the turn's replies
        follow (server/outbox.py). ``force`` writes even while a background fsync
        runs."""
        if self.buffer.data:
            self._write(force)

    def _write(self, force: bool) -> None:
        policy = self.config.appendfsync
        now = time.time()
        if policy == "everysec" and not force and self.fsyncs_pending:
            if not self.postponed_since:
                self.postponed_since = now
                return
            if now - self.postponed_since < POSTPONE_MAX_S:
                return
            self.delayed_fsync += 1
            self.log.notice(
                "Asynchronous AOF fsync is taking too long (disk is busy?). Writing the AOF "
                "buffer without waiting for fsync to complete, this may slow down Disque."
            )
        self.postponed_since = 0.0
        data = self.buffer.data
        started = time.perf_counter()
        try:
            written = write_all(self.io, self.fd, data)
        except OSError as e:
            self._write_failed(e, getattr(e, "written", 0), policy, now)
            return
        self._latency("aof-write", started)
        data.clear()
        self.current_size += written
        if self.write_error is not None:
            self.log.warning("AOF write error looks solved, Disque can write again.")
            self.write_error = None
            self._update_error()
        if self.config.no_appendfsync_on_rewrite and self.rewrite is not None:
            return
        if policy == "always":
            started = time.perf_counter()
            try:
                self.io.fsync(self.fd)
            except OSError as e:
                self._fatal(
                    f"Can't persist AOF for fsync error when the AOF fsync policy is 'always': "
                    f"{strerror(e)}. Exiting..."
                )
            self._latency("aof-fsync-always", started)
            self.last_fsync = now
            self.synced_size = self.current_size
        elif policy == "everysec" and int(now) > int(self.last_fsync):
            if not self.fsyncs_pending:
                self._background_fsync()
            self.last_fsync = now

    def _write_failed(self, error: OSError, written: int, policy: str, now: float) -> None:
        log_it = now - self._last_error_log > ERROR_LOG_PERIOD_S
        if log_it:
            self._last_error_log = now
        if written:
            if log_it:
                self.log.warning(
                    f"Short write while writing to the AOF file: (nwritten={written}, "
                    f"expected={len(self.buffer.data)}): {strerror(error)}"
                )
            try:
                os.ftruncate(self.fd, self.current_size)
                written = 0
            except OSError as e:
                if log_it:
                    self.log.warning(
                        "Could not remove short write from the append-only file. Disque may "
                        f"refuse to load the AOF the next time it starts. ftruncate: {strerror(e)}"
                    )
        elif log_it:
            self.log.warning(f"Error writing to the AOF file: {strerror(error)}")
        if policy == "always":
            self._fatal(
                "Can't recover from AOF write error when the AOF fsync policy is 'always'. "
                "Exiting..."
            )
        if written:
            self.current_size += written
            del self.buffer.data[:written]
        self.write_error = strerror(error)
        self._update_error()

    def _background_fsync(self) -> None:
        self.fsyncs_pending += 1
        self.synced_size = self.current_size
        self.bio.submit(self.io.fsync, self.fd, done=self._fsynced)

    def _fsynced(self, _result: None, error: OSError | None) -> None:
        self.fsyncs_pending -= 1
        if error is not None:
            if self.fsync_error is None:
                self.log.warning(f"Error syncing the AOF file: {strerror(error)}")
            self.fsync_error = strerror(error)
            self.synced_size = -1  # the cron tries again
            self._update_error()
        elif self.fsync_error is not None:
            self.log.warning("AOF fsync error looks solved, Disque can write again.")
            self.fsync_error = None
            self._update_error()

    def _update_error(self) -> None:
        self.server_state.aof_write_error = self.write_error or self.fsync_error

    def _latency(self, event: str, started: float) -> None:
        self.server_state.latency.add_since(event, started, self.config.latency_monitor_threshold)

    def _fatal(self, message: str) -> None:
        self.log.warning(message)
        os._exit(1)

    # ------------------------------------------------------------------
    # The server cron.

    def cron(self) -> None:
        """Retry postponed or failed writes, keep everysec within a second, start
        scheduled and automatic rewrites."""
        now = time.time()
        config = self.config
        if self.state == ON:
            if self.buffer.data and (
                self.postponed_since
                or (self.write_error is not None and now - self._last_write_retry >= 1)
            ):
                self._last_write_retry = now
                self.flush()
            if (
                config.appendfsync == "everysec"
                and self.synced_size < self.current_size
                and now - self.last_fsync >= 1
                and not self.fsyncs_pending
                and not (config.no_appendfsync_on_rewrite and self.rewrite is not None)
            ):
                self._background_fsync()
                self.last_fsync = now
        if self.rewrite is not None:
            return
        if self.rewrite_scheduled:
            self.start_rewrite()
        elif (
            self.state == ON
            and config.auto_aof_rewrite_percentage
            and self.current_size > config.auto_aof_rewrite_min_size
            and now >= self._auto_rewrite_after
        ):
            base = self.base_size or 1
            growth = self.current_size * 100 // base - 100
            if growth >= config.auto_aof_rewrite_percentage:
                self.log.notice(f"Starting automatic rewriting of AOF on {growth}% growth")
                if not self.start_rewrite():
                    self._auto_rewrite_after = now + AUTO_REWRITE_RETRY_S

    # ------------------------------------------------------------------
    # Rewrites.

    def bgrewriteaof(self) -> str:
        if self.rewrite is not None:
            return REWRITE_IN_PROGRESS
        return REWRITE_STARTED if self.start_rewrite() else REWRITE_FAILED

    def start_rewrite(self) -> bool:
        """Start a background rewrite (with the AOF on or off)."""
        self.rewrite_seq += 1
        temp = f"temp-rewriteaof-bg-{os.getpid()}-{self.rewrite_seq}.aof"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as e:
            # A forked Disque child would fail here after BGREWRITEAOF's reply; INFO
            # shows the failure the same way (aof_last_bgrewrite_status:err).
            self.log.warning(f"Can't start the background AOF rewrite: {strerror(e)}")
            self.last_rewrite_ok = False
            return False
        rewrite = Rewrite(self, temp, fd)
        self.rewrite = rewrite
        self.rewrite_scheduled = False
        self.buffer.rewrite = rewrite.output
        self.node.aof = self.buffer
        self.log.notice("Background append only file rewriting started")
        assert self.loop is not None
        self.loop.call_soon(rewrite.run_slice)
        return True

    def _detach(self, rewrite: Rewrite) -> None:
        self.rewrite = None
        self.buffer.rewrite = None
        if self.state == OFF:
            self.node.aof = None
        self.last_rewrite_time = int(time.time() - rewrite.start)

    def rewrite_done(self, rewrite: Rewrite) -> None:
        """The snapshot is on disk: add the last records, rename, switch files."""
        started = time.perf_counter()
        diff = rewrite.take_output()
        always = self.config.appendfsync == "always" and self.state != OFF
        try:
            write_all(self.io, rewrite.fd, diff)
            if always:
                self.io.fsync(rewrite.fd)
            os.rename(rewrite.temp, self.config.appendfilename)
        except OSError as e:
            self.rewrite_failed(rewrite, f"finishing the rewrite: {strerror(e)}")
            return
        size = rewrite.written + len(diff)
        self._detach(rewrite)
        self.last_rewrite_ok = True
        if self.state == OFF:
            self.rewrite_io.submit(_close, rewrite.fd)
        else:
            old = self.fd
            was_waiting = self.state == WAIT_REWRITE
            generation = self.buffer.generation
            tail = (self._current_size, bytes(self.buffer.data))
            self._switch_on(rewrite.fd)
            # Everything in the buffer also went to the rewrite, hence to the new file;
            # jobs spilled to their records there are still read from the old file, so
            # what it never got is kept for them (found by bench/flow_to_disk.py part 7).
            if tail[1] and generation in self.readers:
                self.tails[generation] = tail
            self.buffer.data.clear()
            self.current_size = self.base_size = size
            self.synced_size = size if always else rewrite.written
            if self.config.appendfsync == "everysec":
                self._background_fsync()  # the residual diff now, before the directory
            if old >= 0:
                self.bio.submit(_close, old)
            if self.write_error is not None or self.fsync_error is not None:
                self.log.warning("AOF write error looks solved, Disque can write again.")
                self.write_error = self.fsync_error = None
                self._update_error()
            if was_waiting:
                self.log.notice("AOF is now on: the rewrite of the initial file is complete.")
        if always:
            try:
                fsync_dir(self.io)
            except OSError as e:
                self._fatal(f"Can't persist the AOF rename: {strerror(e)}. Exiting...")
        else:
            # After the new file's fsync, in order.
            self.bio.submit(fsync_dir, self.io, done=self._dir_synced)
        self._latency("aof-rewrite-done", started)
        self.log.notice(
            f"Residual parent diff successfully flushed to the rewritten AOF "
            f"({len(diff) / 1048576:.2f} MB)"
        )
        self.log.notice("Background AOF rewrite finished successfully")

    def _dir_synced(self, _result: None, error: OSError | None) -> None:
        if error is not None:
            self.log.warning(
                f"Can't fsync the AOF directory after the rewrite: {strerror(error)}; the "
                "rename may be lost if the machine crashes."
            )

    def rewrite_failed(self, rewrite: Rewrite, reason: str) -> None:
        self.log.warning(f"Background AOF rewrite terminated with error: {reason}")
        rewrite.cancel()
        self._detach(rewrite)
        self.last_rewrite_ok = False
        if self.state == WAIT_REWRITE:
            self.rewrite_scheduled = True
        else:
            self._auto_rewrite_after = time.time() + AUTO_REWRITE_RETRY_S

    def _kill_rewrite(self) -> None:
        rewrite = self.rewrite
        if rewrite is not None:
            rewrite.cancel()
            self._detach(rewrite)
            self.last_rewrite_time = -1

    def rewrite_now(self) -> bool:
        """SHUTDOWN REWRITE-AOF: write the file synchronously (AOF on or off)."""
        temp = f"temp-rewriteaof-{os.getpid()}.aof"
        snapshot = Snapshot(self.node)
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                opened = False
                while not snapshot.done:
                    records = snapshot.take(SYNC_REWRITE_BATCH)
                    if records and not opened:
                        opened = True
                        records = FORMAT_RECORD + records
                    write_all(self.io, fd, records)
                self.io.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, self.config.appendfilename)
            fsync_dir(self.io)
        except OSError as e:
            self.log.warning(f"Error rewriting the append only file: {strerror(e)}")
            try:
                os.unlink(temp)
            except OSError:
                pass
            return False
        self.log.notice("SYNC append only file rewrite performed")
        return True

    # ------------------------------------------------------------------
    # CONFIG SET appendonly, SHUTDOWN, DEBUG LOADAOF, INFO.

    def set_appendonly(self) -> str | None:
        """The ``appendonly`` value changed: start or stop; an error text refuses it."""
        if self.config.appendonly:
            if self.state == OFF:
                if self.rewrite is None and not self.start_rewrite():
                    self.log.warning(
                        "Disque needs to enable the AOF but can't trigger a background AOF "
                        "rewrite operation. Check the above logs for more info about the error."
                    )
                    return "Unable to turn on AOF. Check server logs."
                self.state = WAIT_REWRITE
                self.last_fsync = time.time()
        elif self.state != OFF:
            self.flush(force=True)
            if self.rewrite is not None:
                self.log.notice("Killing running AOF rewrite")
                self._kill_rewrite()
            self.state = OFF
            self.buffer.enabled = False
            self.buffer.data.clear()
            self.node.aof = None
            fd, self.fd = self.fd, -1
            if fd >= 0:
                self.bio.submit(self.io.fsync, fd)
                self.bio.submit(_close, fd)
            self.write_error = self.fsync_error = None
            self._update_error()
        return None

    def prepare_shutdown(self, rewrite_aof: bool) -> bool:
        """Disque's shutdown steps for the AOF; False refuses the shutdown (logged)."""
        if self.node.loading:
            self.stop_loading()
            return True
        if self.state != OFF:
            if self.rewrite is not None:
                if self.state == WAIT_REWRITE:
                    self.log.warning("Writing initial AOF, can't exit.")
                    return False
                self.log.warning("There is a background AOF rewrite in progress. Stopping it!")
                self._kill_rewrite()
            self.flush(force=True)
            if self.buffer.data:
                self.log.warning(
                    f"{len(self.buffer.data)} bytes of AOF records could not be written "
                    f"before exiting: {self.write_error}"
                )
            self.log.notice("Calling fsync() on the AOF file.")
            try:
                self.io.fsync(self.fd)
            except OSError as e:
                self.log.warning(f"Fail to fsync the AOF file: {strerror(e)}.")
        else:
            self._kill_rewrite()
        if rewrite_aof:
            self.log.notice("Rewriting the AOF file before exiting.")
            if not self.rewrite_now():
                return False
        return True

    def loadaof(self) -> bool:
        if self.state == ON:
            self.flush(force=True)
        if self.rewrite is not None:
            self._kill_rewrite()
            if self.state == WAIT_REWRITE:
                self.rewrite_scheduled = True
        node = self.node
        sink, node.aof = node.aof, None  # the jobs come back from the file: no DELJOB
        node.flush_all()
        node.aof = sink
        path = self.config.appendfilename
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as e:
            self.log.warning(f"DEBUG LOADAOF: can't open the append log file: {strerror(e)}")
            return False
        with f:
            if os.fstat(f.fileno()).st_size == 0:
                return False
            loading = self._loading(f, path)
            try:
                while True:
                    next(loading)
            except StopIteration as stop:
                if not stop.value:
                    self._fatal("DEBUG LOADAOF: the AOF cannot be loaded. Exiting...")
        if self.state == ON:
            self.current_size = self.base_size = os.fstat(self.fd).st_size
        return True

    def status(self) -> AofStatus:
        rewrite = self.rewrite
        return AofStatus(
            state=self.state,
            rewrite_in_progress=rewrite is not None,
            rewrite_scheduled=self.rewrite_scheduled,
            last_rewrite_time_sec=self.last_rewrite_time,
            current_rewrite_time_sec=(
                int(time.time() - rewrite.start) if rewrite is not None else -1
            ),
            last_bgrewrite_ok=self.last_rewrite_ok,
            current_size=self.current_size,
            base_size=self.base_size,
            buffer_length=len(self.buffer.data),
            rewrite_buffer_length=(
                len(rewrite.output) + rewrite.queued if rewrite is not None else 0
            ),
            pending_bio_fsync=self.fsyncs_pending,
            delayed_fsync=self.delayed_fsync,
            loading_start_time=self.loading_start,
            loading_total_bytes=self.loading_total,
            loading_loaded_bytes=self.loading_loaded,
        )
