"""``disquette check-aof [--fix] [-y] FILE``: validate an append-only file.

(A subcommand of :mod:`disquette.cli.main`: ``add_arguments`` and ``run``.)

The counterpart of ``redis-check-aof`` / ``disque-check-aof``. The file is read
with the server's own reader (:mod:`disquette.core.aof`), LOADJOB payloads
included, and the report ends with ``AOF analyzed: size=N, ok_up_to=N,
diff=N``: ``ok_up_to`` is the end of the last good record before the first
problem, which is also where ``--fix`` cuts the file.

A torn tail (the file ends inside a record, as a crash during a write leaves)
is what ``--fix`` is for: the incomplete record is removed, nothing else. Damage
before the end is reported with its offset; ``--fix`` can cut there too, but
then also discards everything after it, so the tool first counts the complete
records it can still find after the damage and says they would be lost. Both
ask for confirmation unless ``-y`` is given. Exit status: 0 when the file is
valid or was fixed, 1 otherwise.

The report also names the file's format (its format record, see
:mod:`disquette.core.aof`): 1 for a file without one (disquette 0.1.0's, or
Disque's), up to the format this release writes. A file of a newer format is not
damage: it is reported as such and ``--fix`` refuses to cut it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import BinaryIO

from disquette import __version__
from disquette.core.aof import AOF_FORMAT, AofError, AofNewerFormat, AofTruncated, check

CHUNK = 1 << 20
RESYNC_ATTEMPTS = 1000
RECORD_START = b"*2\r\n$"


def _chunks(f: BinaryIO) -> Iterator[bytes]:
    while chunk := f.read(CHUNK):
        yield chunk


def records_after(f: BinaryIO, offset: int) -> int:
    """How many complete, valid records follow the damage at ``offset``: from the
    first place after it where valid records parse again, up to the next problem."""
    f.seek(offset + 1)
    rest = f.read()
    start = 0
    for _ in range(RESYNC_ATTEMPTS):
        start = rest.find(RECORD_START, start)
        if start < 0:
            return 0
        result = check([rest[start:]])
        if result.records:
            return result.records
        start += 1
    return 0


def _confirm(prompt: str) -> bool:
    sys.stdout.write(prompt)
    sys.stdout.flush()
    answer = sys.stdin.readline()
    return answer[:1].lower() == "y"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fix", action="store_true", help="truncate the file at the problem")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("file", help="the AOF (appendfilename in the server's dir)")


def run(args: argparse.Namespace) -> int:
    try:
        f = open(args.file, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        print(f"Cannot open file: {args.file}: {e.strerror}")
        return 1
    with f:
        result = check(_chunks(f))
        error = result.error
        if error is not None:
            print(f"0x{error.offset:016x}: {error.reason}")
        diff = result.size - result.ok_up_to
        print(f"AOF format: {result.format} ({describe_format(result.format)})")
        print(
            f"AOF analyzed: size={result.size}, ok_up_to={result.ok_up_to}, diff={diff}, "
            f"records={result.records}"
        )
        if error is None:
            print("AOF is valid")
            return 0
        if isinstance(error, AofNewerFormat):
            print("AOF is not readable by this release (not damage: --fix would lose jobs).")
            return 1
        return _fix(args, f, result.size, error) if args.fix else _not_fixed(error)


def describe_format(version: int) -> str:
    """Who writes AOF format ``version`` and who reads it."""
    if version == 1:
        return "no format record: disquette 0.1.0 or Disque wrote it; every release reads it"
    if version <= AOF_FORMAT:
        return "disquette 0.2.0 or later wrote it; 0.1.0 and Disque read it too"
    return f"a release newer than disquette {__version__} wrote it"


def _not_fixed(error: AofError) -> int:
    if isinstance(error, AofTruncated):
        print("AOF is not valid: its last record is incomplete (a torn tail).")
    else:
        print(f"AOF is not valid: bad record at offset {error.offset}.")
    print("Use the --fix option to try fixing it.")
    return 1


def _fix(args: argparse.Namespace, f: BinaryIO, size: int, error: AofError) -> int:
    cut = error.offset
    if not isinstance(error, AofTruncated):
        lost = records_after(f, cut)
        print(
            f"The damage is not a torn tail: cutting the file at offset {cut} also discards "
            f"the {size - cut} bytes after it, where {lost} complete valid record(s) were "
            "found. They would be lost."
        )
    print(f"This will shrink the AOF from {size} bytes, with {size - cut} bytes, to {cut} bytes")
    if not args.yes and not _confirm("Continue? [y/N]: "):
        print("Aborting...")
        return 1
    try:
        os.truncate(args.file, cut)
    except OSError as e:
        print(f"Failed to truncate AOF: {e.strerror}")
        return 1
    print("Successfully truncated AOF")
    return 0
