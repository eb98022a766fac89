"""The append-only file without I/O: records, the reader, loading, the rewrite snapshot.

Disque's AOF (reference section 12) is a sequence of RESP multi-bulk commands,
only ever two of them: ``LOADJOB <serialized job>`` when a job gets a local copy
(ADDJOB, a REPLJOB replica) and ``DELJOB <job id>`` when an active or queued job
goes away. There are no state-change records: a restarted node reloads its jobs
as ``active`` and their retry timers queue them again. This module holds
everything about that file that needs no file:

* :func:`loadjob_record` / :func:`deljob_record` -- the bytes of one record
  (the LOADJOB payload is :mod:`disquette.core.serialize`'s storage layout);
* :class:`AofBuffer` -- the node's ``AofSink``: records go to the AOF buffer
  while the AOF is on, and to a rewrite's buffer while a rewrite runs;
* :class:`RecordReader` -- splits bytes into records incrementally, telling a
  torn tail (:class:`AofTruncated`, the last record is a prefix of a valid one)
  from damage (:class:`AofCorrupt`), both with the file offset where the bad
  record starts, which is where a repair would cut;
* :class:`AofLoader` / :func:`load` -- apply records to a node (12.5), through
  :meth:`Node.load_job` and DELJOB deletions that write no records;
* :class:`Snapshot` -- what a rewrite writes (12.4): one LOADJOB per active or
  queued job, produced in slices over the job table's scan cursor, so a rewrite
  can run between client requests while jobs come and go.

**Format versions** (beyond Disque). A file says which format it is in with its
first record, :data:`FORMAT_RECORD`: a DELJOB of an ID no node ever makes,
``D-00000000-disquette-aof-format-000-NNNN`` (the format number in its last four
digits), which every reader of the format before versions -- Disque's, and
disquette 0.1.0's -- replays as the deletion of a job it does not hold: nothing.
A file without it is format 1 (0.1.0's, or Disque's). Format 2 (0.2.0) is format 1
with that record first, so 0.1.0 still reads it; a later format that changes the
records raises its number, and a file of a format above :data:`AOF_FORMAT` is
refused (:class:`AofNewerFormat`) at the record, before anything after it is
loaded: never misread. The record opens every file this release writes, in
front of its first record (an empty file stays empty: every release reads it); a
file of an older format is appended to as it is and takes the new format at its
next rewrite.

The server (``disquette.server.aof``) adds the file, fsync policies, threads and
the LOADING state; the simulator can use the same pieces with an in-memory
file: give the node an :class:`AofBuffer`, move ``buffer.data`` to its
simulated disk where the server would call write(2), and :func:`load` those
bytes into the node of the restarted process.

Why a rewrite can run in slices: records are idempotent facts about presence
(LOADJOB adds a job unless it is already there, DELJOB removes it), and the
rewrite's output is kept in time order -- every record the node emits during the
rewrite, interleaved with the snapshot records at the moment each slice writes
them. A job's last record in that output is then its last record in time, so
replaying the output gives exactly the job set of the moment the rewrite ends,
whatever happened between slices (the scan returns every job present for the
whole scan at least once; jobs created meanwhile are in the change records).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

from disquette import __version__
from disquette.core.ids import is_valid
from disquette.core.job import ACTIVE, QUEUED, Job
from disquette.core.serialize import BadJob, decode, encode

if TYPE_CHECKING:
    from disquette.core.node import Node

LOADJOB: Final = 0
DELJOB: Final = 1
COMMAND_NAMES: Final = (b"LOADJOB", b"DELJOB")

#: A bulk argument larger than the protocol allows is damage, not a big job.
MAX_BULK: Final = 512 << 20
#: DELJOB may name several jobs; more than this many in one record is damage.
MAX_DELJOB_IDS: Final = 1 << 20
_MAX_COUNT_DIGITS: Final = 10

#: The AOF format this release writes (1: the files of the releases before versions).
AOF_FORMAT: Final = 2
_FORMAT_ID_PREFIX: Final = b"D-00000000-disquette-aof-format-000-"

_LOADJOB_PREFIX: Final = b"*2\r\n$7\r\nLOADJOB\r\n$"
_DELJOB_PREFIX: Final = b"*2\r\n$6\r\nDELJOB\r\n$40\r\n"
_CRLF: Final = b"\r\n"
_DIGITS: Final = frozenset(b"0123456789")

#: One parsed record: kind (LOADJOB or DELJOB), its arguments, the file offset it starts at.
Record = tuple[int, list[bytes], int]


# ----------------------------------------------------------------------
# Records.


def loadjob_record(job: Job) -> bytes:
    """``LOADJOB <serialized job>`` as the AOF stores it (the storage variant of 12.2)."""
    payload = encode(job, bus=False)
    return b"*2\r\n$7\r\nLOADJOB\r\n$%d\r\n%s\r\n" % (len(payload), payload)


def deljob_record(job_id: bytes) -> bytes:
    """``DELJOB <job id>``."""
    return b"*2\r\n$6\r\nDELJOB\r\n$%d\r\n%s\r\n" % (len(job_id), job_id)


def format_id(version: int) -> bytes:
    """The job ID the format record of ``version`` deletes."""
    return _FORMAT_ID_PREFIX + b"%04d" % version


def format_of(job_id: bytes) -> int:
    """The format a DELJOB's ID declares, or 0 when it is a real job's ID."""
    if job_id.startswith(_FORMAT_ID_PREFIX) and job_id[-4:].isdigit():
        return int(job_id[-4:])
    return 0


#: The first record of every file this release writes.
FORMAT_RECORD: Final = deljob_record(format_id(AOF_FORMAT))


class AofBuffer:
    """The node's ``AofSink``: where LOADJOB and DELJOB records accumulate.

    ``enabled`` (the AOF is on) sends records to ``data``, which the owner
    writes to the file; ``rewrite``, while not None, receives a copy of every
    record for a rewrite in progress (also when the AOF is off, so that a
    rewrite's output is a consistent picture of its end). ``on_data`` is called
    when ``data`` goes from empty to non-empty, so the owner can arrange a write.
    """

    __slots__ = (
        "data",
        "enabled",
        "file_size",
        "generation",
        "last_size",
        "new_file",
        "on_data",
        "reader",
        "retire",
        "rewrite",
    )

    def __init__(self, on_data: Callable[[], None] | None = None) -> None:
        self.data = bytearray()
        self.enabled = False
        self.rewrite: bytearray | None = None
        self.on_data = on_data
        # Reading records back (flow to disk keeps a spilled job where its LOADJOB
        # already is, core/spill.py), for a shell that can: the file's generation (one
        # more each time a rewrite replaces it), the bytes in it before ``data``,
        # ``reader(generation, offset, size)`` and ``retire(generation)`` (an old file
        # no spilled job is read from any longer).
        self.generation = 0
        self.file_size = 0
        self.reader: Callable[[int, int, int], bytes] | None = None
        self.retire: Callable[[int], None] | None = None
        self.last_size = 0  # the payload size of the last LOADJOB record
        #: The owner writes ``data`` to an empty file: the first record goes after the
        #: format record (set by the owner when it starts a file).
        self.new_file = False

    def loadjob(self, job: Job) -> int:
        """Add the job's LOADJOB record; return where its payload will be in the file
        (-1 when the AOF is off or cannot be read back)."""
        payload = encode(job, bus=False)
        record = b"*2\r\n$7\r\nLOADJOB\r\n$%d\r\n%s\r\n" % (len(payload), payload)
        self.last_size = len(payload)
        self.add(record)
        if self.enabled and self.reader is not None:
            return self.file_size + len(self.data) - len(payload) - 2
        return -1

    def deljob(self, job_id: bytes) -> None:
        self.add(deljob_record(job_id))

    def moved(self, job: Job) -> None:
        """A job went to the spill log or came back (core/spill.py): a running rewrite
        may have walked past both of its places, so it gets the job's record (the AOF
        has it already)."""
        if self.rewrite is not None:
            self.rewrite += loadjob_record(job)

    def add(self, record: bytes) -> None:
        if self.enabled:
            if not self.data:
                if self.on_data is not None:
                    self.on_data()
                if self.new_file:  # the file's first record: its format first
                    self.new_file = False
                    self.data += FORMAT_RECORD
            self.data += record
        if self.rewrite is not None:
            self.rewrite += record


# ----------------------------------------------------------------------
# Reading.


class AofError(Exception):
    """The AOF cannot be loaded as it is; ``offset`` is where its bad record starts."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} (record at offset {offset})")
        self.offset = offset
        self.reason = reason


class AofCorrupt(AofError):
    """Bytes that no record written by a node can contain (format error or bad data)."""


class AofUnknownCommand(AofCorrupt):
    """A well-formed record whose command is neither LOADJOB nor DELJOB."""


class AofNewerFormat(AofError):
    """A record declaring a format this release cannot read: a newer release wrote the
    file. Nothing at or after ``offset`` may be loaded, and cutting it off would lose
    the jobs that follow: the file needs the release that wrote it."""

    def __init__(self, offset: int, version: int) -> None:
        super().__init__(
            offset,
            f"the append only file is in AOF format {version}, written by a newer release "
            f"than this one (disquette {__version__} reads AOF formats 1 to {AOF_FORMAT}): "
            "start the release that wrote it, or see docs/operations.md (Downgrading)",
        )
        self.version = version


def check_format(args: list[bytes], offset: int) -> int:
    """The format a DELJOB record's IDs declare (0: none); AofNewerFormat for a format
    newer than :data:`AOF_FORMAT`."""
    version = format_of(args[0]) if len(args) == 1 else 0
    if version > AOF_FORMAT:
        raise AofNewerFormat(offset, version)
    return version


class AofTruncated(AofError):
    """The file ends in the middle of a record that is otherwise well formed: a torn
    tail, as a crash during a write leaves. Everything before ``offset`` is valid."""


def _count(buf: bytearray, start: int, end: int, offset: int, what: str) -> int:
    digits = buf[start:end]
    if not digits or len(digits) > _MAX_COUNT_DIGITS or not _DIGITS.issuperset(digits):
        raise AofCorrupt(offset, f"invalid {what} {bytes(digits)!r}")
    return int(digits)


def _partial_line_ok(buf: bytearray, start: int, end: int) -> bool:
    """Whether ``buf[start:end]`` (a count line cut by the end of the data) can
    still become a valid count line: digits, then at most a CR."""
    tail = buf[start:end]
    if tail.endswith(b"\r"):
        tail = tail[:-1]
    return len(tail) <= _MAX_COUNT_DIGITS and _DIGITS.issuperset(tail)


def _count_line_end(buf: bytearray, pos: int, n: int, offset: int, what: str) -> int | None:
    """Where the count line whose type byte (``*`` or ``$``) is at ``pos`` ends (its CR),
    or None when the data stops inside a line that may still complete."""
    limit = pos + _MAX_COUNT_DIGITS + 3
    eol = buf.find(_CRLF, pos + 1, limit)
    if eol < 0:
        if _partial_line_ok(buf, pos + 1, min(n, limit)) and n - pos <= _MAX_COUNT_DIGITS + 2:
            return None
        raise AofCorrupt(offset, f"invalid {what} line")
    return eol


class RecordReader:
    """Splits AOF bytes into records as they arrive (any chunking gives the same records).

    :meth:`feed` returns the complete records of the data so far, raising
    :class:`AofCorrupt` at the first impossible byte; :meth:`finish` is called
    at the end of the file and raises :class:`AofTruncated` if a record was
    left incomplete. A count or length that cannot belong to a record written
    by a node (a command name that is not LOADJOB/DELJOB, a LOADJOB bulk whose
    job length disagrees with it, a job ID that is not 40 bytes) is damage even
    when the data stops right after it, so damage is never mistaken for a torn
    tail that could be cut off.
    """

    __slots__ = ("_buf", "offset")

    def __init__(self) -> None:
        self._buf = bytearray()
        #: File offset of the end of the last complete record (where a torn tail starts).
        self.offset = 0

    @property
    def pending(self) -> int:
        """Bytes received past the last complete record."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Record]:
        buf = self._buf
        buf += data
        records: list[Record] = []
        pos = 0
        n = len(buf)
        base = self.offset
        while pos < n:
            record = self._parse(buf, pos, n, base + pos)
            if record is None:
                break
            records.append((record[0], record[1], base + pos))
            pos = record[2]
        if pos:
            del buf[:pos]
            self.offset = base + pos
        return records

    def finish(self) -> None:
        """The file ends here: a pending partial record is a torn tail."""
        if self._buf:
            raise AofTruncated(self.offset, "unexpected end of file in the last record")

    @staticmethod
    def _parse(
        buf: bytearray, pos: int, n: int, offset: int
    ) -> tuple[int, list[bytes], int] | None:
        """One record at ``pos``: (kind, args, end position), or None if incomplete."""
        # The common record, LOADJOB as the server writes it.
        if buf.startswith(_LOADJOB_PREFIX, pos):
            start = pos + len(_LOADJOB_PREFIX)
            eol = buf.find(_CRLF, start, start + _MAX_COUNT_DIGITS + 2)
            if eol >= 0:
                size = _count(buf, start, eol, offset, "bulk length")
                return RecordReader._loadjob_payload(buf, eol + 2, size, n, offset)
        elif buf.startswith(_DELJOB_PREFIX, pos):
            start = pos + len(_DELJOB_PREFIX)
            end = start + 40
            if end + 2 <= n:
                if buf[end : end + 2] != _CRLF:
                    raise AofCorrupt(offset, "bulk argument not followed by CRLF")
                jid = bytes(buf[start:end])
                if not is_valid(jid):
                    raise AofCorrupt(offset, f"invalid job ID {jid!r} in DELJOB")
                return DELJOB, [jid], end + 2
        return RecordReader._parse_general(buf, pos, n, offset)

    @staticmethod
    def _loadjob_payload(
        buf: bytearray, start: int, size: int, n: int, offset: int
    ) -> tuple[int, list[bytes], int] | None:
        if size > MAX_BULK:
            raise AofCorrupt(offset, f"LOADJOB bulk length {size} is too large")
        if n - start >= 4:
            (inner,) = struct.unpack_from("<I", buf, start)
            if inner + 4 != size:
                raise AofCorrupt(
                    offset, f"LOADJOB bulk length {size} disagrees with the job's length {inner}"
                )
        end = start + size
        if end + 2 > n:
            return None
        if buf[end : end + 2] != _CRLF:
            raise AofCorrupt(offset, "bulk argument not followed by CRLF")
        return LOADJOB, [bytes(buf[start:end])], end + 2

    @staticmethod
    def _parse_general(
        buf: bytearray, pos: int, n: int, offset: int
    ) -> tuple[int, list[bytes], int] | None:
        if buf[pos] != 0x2A:  # '*'
            raise AofCorrupt(offset, f"expected '*', got {bytes(buf[pos : pos + 1])!r}")
        eol = _count_line_end(buf, pos, n, offset, "multi-bulk count")
        if eol is None:
            return None
        argc = _count(buf, pos + 1, eol, offset, "multi-bulk count")
        if argc < 2:
            raise AofCorrupt(offset, f"a record needs at least 2 arguments, not {argc}")
        pos = eol + 2
        kind = -1
        args: list[bytes] = []
        for i in range(argc):
            if pos >= n:
                return None
            if buf[pos] != 0x24:  # '$'
                raise AofCorrupt(offset, f"expected '$', got {bytes(buf[pos : pos + 1])!r}")
            eol = _count_line_end(buf, pos, n, offset, "bulk length")
            if eol is None:
                return None
            size = _count(buf, pos + 1, eol, offset, "bulk length")
            start = eol + 2
            if kind == LOADJOB:
                return RecordReader._loadjob_payload(buf, start, size, n, offset)
            if i == 0:
                if size > 64:
                    raise AofCorrupt(offset, f"command name of {size} bytes")
            elif size != 40:
                raise AofCorrupt(offset, f"DELJOB argument of {size} bytes is not a job ID")
            end = start + size
            if end + 2 > n:
                return None
            if buf[end : end + 2] != _CRLF:
                raise AofCorrupt(offset, "bulk argument not followed by CRLF")
            arg = bytes(buf[start:end])
            pos = end + 2
            if i == 0:
                name = arg.upper()
                if name == b"LOADJOB":
                    if argc != 2:
                        raise AofCorrupt(offset, f"LOADJOB with {argc - 1} arguments")
                    kind = LOADJOB
                elif name == b"DELJOB":
                    if argc - 1 > MAX_DELJOB_IDS:
                        raise AofCorrupt(offset, f"DELJOB with {argc - 1} arguments")
                    kind = DELJOB
                else:
                    shown = arg.decode("utf-8", "backslashreplace")
                    raise AofUnknownCommand(
                        offset, f"Unknown command '{shown}' reading the append only file"
                    )
            else:
                if not is_valid(arg):
                    raise AofCorrupt(offset, f"invalid job ID {arg!r} in DELJOB")
                args.append(arg)
        return kind, args, pos


def decode_loadjob(payload: bytes, offset: int) -> Job:
    """The job of a LOADJOB record, or :class:`AofCorrupt` ("corrupted LOADJOB data")."""
    try:
        job, used = decode(payload, bus=False)
    except BadJob as e:
        raise AofCorrupt(offset, f"corrupted LOADJOB data: {e}") from None
    if used != len(payload):
        raise AofCorrupt(offset, "corrupted LOADJOB data: trailing bytes after the job")
    return job


# ----------------------------------------------------------------------
# Loading.


class AofLoader:
    """Applies records to a node (reference 12.5); counts what it did.

    ``enqueue`` is ``aof-enqueue-jobs-once``: jobs recorded as queued go back
    into their queues at once instead of waiting for their retry timer.
    """

    __slots__ = (
        "deleted",
        "dropped",
        "enqueue",
        "format",
        "loaded",
        "node",
        "records",
        "truncated_at",
    )

    def __init__(self, node: Node, enqueue: bool) -> None:
        self.node = node
        self.enqueue = enqueue
        self.records = 0
        self.loaded = 0  # jobs registered
        self.dropped = 0  # expired or already known
        self.deleted = 0  # jobs removed by DELJOB records
        self.truncated_at: int | None = None  # where a tolerated torn tail starts
        self.format = 1  # the file's format (its format record, 1 when it has none)

    def apply(self, records: list[Record]) -> None:
        node = self.node
        for kind, args, offset in records:
            if kind == LOADJOB:
                if node.load_job(decode_loadjob(args[0], offset), self.enqueue):
                    self.loaded += 1
                else:
                    self.dropped += 1
            else:
                version = check_format(args, offset)
                if version:
                    self.format = version
                    continue
                sink, node.aof = node.aof, None  # replaying a deletion records nothing
                try:
                    for job_id in args:
                        job = node.jobs.get(job_id)
                        if job is not None:
                            node.delete_job(job)
                            self.deleted += 1
                finally:
                    node.aof = sink
        self.records += len(records)


def load(node: Node, data: bytes, *, enqueue: bool, truncated_ok: bool) -> AofLoader:
    """Load a whole AOF held in memory into ``node`` (the simulator's restart).

    A torn tail is left out when ``truncated_ok`` (the loader's ``truncated_at``
    says where it starts); otherwise :class:`AofTruncated` propagates, as does
    any :class:`AofCorrupt`.
    """
    reader = RecordReader()
    loader = AofLoader(node, enqueue)
    loader.apply(reader.feed(data))
    try:
        reader.finish()
    except AofTruncated as e:
        if not truncated_ok:
            raise
        loader.truncated_at = e.offset
    return loader


class CheckResult:
    """What :func:`check` found: the valid prefix, the records in it, the first error."""

    __slots__ = ("error", "format", "ok_up_to", "records", "size")

    def __init__(
        self, size: int, ok_up_to: int, records: int, error: AofError | None, format: int = 1
    ) -> None:
        self.size = size
        self.ok_up_to = ok_up_to
        self.records = records
        self.error = error
        self.format = format  # the format its format record declares (1: none)


def check(chunks: Iterable[bytes]) -> CheckResult:
    """Validate an AOF read as ``chunks`` (records and LOADJOB payloads), without a node."""
    reader = RecordReader()
    size = records = 0
    version = 1
    chunks = iter(chunks)
    try:
        for chunk in chunks:
            size += len(chunk)
            for kind, args, offset in reader.feed(chunk):
                if kind == LOADJOB:
                    decode_loadjob(args[0], offset)
                elif declared := check_format(args, offset):
                    version = declared
                    continue  # (says what the file is; not one of its records)
                records += 1
        reader.finish()
    except AofNewerFormat as newer:  # (mypyc: one type per variable name)
        for chunk in chunks:
            size += len(chunk)
        return CheckResult(size, newer.offset, records, newer, newer.version)
    except AofError as e:
        for chunk in chunks:  # the size of the rest of the file
            size += len(chunk)
        return CheckResult(size, e.offset, records, e, version)
    return CheckResult(size, size, records, None, version)


# ----------------------------------------------------------------------
# Rewriting.


def _live(job: Job) -> bool:
    return job.state == ACTIVE or job.state == QUEUED


class Snapshot:
    """The LOADJOB records of every active or queued job, taken a slice at a time.

    The job table is walked with its scan cursor (every job present for the
    whole walk is visited at least once, whatever is added or removed between
    slices); a visited job is encoded when its turn comes in :meth:`take`, from
    its state at that moment, and skipped if it has gone meanwhile.
    """

    __slots__ = ("_cursor", "_pending", "_scanned", "_spill_cursor", "_spilled", "node")

    SCAN_COUNT = 64

    def __init__(self, node: Node) -> None:
        self.node = node
        self._cursor = 0
        self._scanned = False
        self._pending: list[Job] = []
        # Then the spilled jobs (core/spill.py), copies read from the spill log; a job
        # moving between memory and the log meanwhile is recorded then (AofBuffer.moved).
        self._spill_cursor = 0
        self._spilled = not node.spill.count

    @property
    def done(self) -> bool:
        return self._scanned and not self._pending and self._spilled

    def take(self, limit: int) -> bytes:
        """Records for up to ``limit`` jobs (fewer at the end; b"" once done)."""
        out: list[bytes] = []
        pending = self._pending
        if pending:  # visited by an earlier call: changed or gone since, maybe
            get = self.node.jobs.get
            while pending and len(out) < limit:
                job = pending.pop()
                if (job.state == ACTIVE or job.state == QUEUED) and get(job.id) is job:
                    out.append(loadjob_record(job))
        jobs = self.node.jobs
        while len(out) < limit and not self._scanned:
            self._cursor, found = jobs.scan(self._cursor, self.SCAN_COUNT, False, _live)
            self._scanned = self._cursor == 0
            room = limit - len(out)
            if len(found) > room:
                rest = found[room:]
                rest.reverse()
                self._pending = rest
                del found[room:]
            out.extend(map(loadjob_record, found))
        spill = self.node.spill
        while len(out) < limit and self._scanned and not self._pending and not self._spilled:
            cursor = self._spill_cursor
            self._spill_cursor, found = spill.scan(cursor, self.SCAN_COUNT, False, _live)
            self._spilled = self._spill_cursor == 0
            out.extend(map(loadjob_record, found))
        return b"".join(out)
