"""Micro-benchmark of the request reader (not a test).

Measures nanoseconds per request for the two typical traffic shapes, one
ADDJOB per feed and 16 ADDJOBs pipelined in one feed, for the reader, for a
few alternative fast paths that were tried while writing it (interpreted here;
the split path was the reader's own until the byte scanner, compiled in the
compiled build, replaced it), and for hiredis.Reader parsing the same bytes
(requests are RESP arrays, so hiredis can read them, though without Disque's inline
requests, limits or error texts).

Run: PYTHONPATH=src python bench/reader_micro.py [--quick]
"""

from __future__ import annotations

import sys
import time
import timeit
from collections.abc import Callable

from disquette.protocol.reader import RequestReader

try:
    import hiredis
except ImportError:  # pragma: no cover - hiredis is a dependency
    hiredis = None

BODY = bytes(range(48, 112))  # 64 bytes
ADDJOB = b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$64\r\n" + BODY + b"\r\n$1\r\n0\r\n"
PIPELINE = ADDJOB * 16
STREAM_COUNT = 20000
STREAM = ADDJOB * STREAM_COUNT


def bench_reader(data: bytes) -> Callable[[], object]:
    feed = RequestReader().feed
    return lambda: feed(data)


def bench_hiredis(data: bytes) -> Callable[[], object]:
    reader = hiredis.Reader()
    feed = reader.feed
    gets = reader.gets

    def run() -> list:
        feed(data)
        out = []
        while (req := gets()) is not False:
            out.append(req)
        return out

    return run


# -- alternative fast paths that were measured and not kept --------------------

_COUNTS = {b"*%d" % n: n for n in range(1, 4097)}
_HEADERS = [b"$%d" % n for n in range(16384)]
_INTS = {b"%d" % n: n for n in range(16384)}


def find_loop(data: bytes) -> list:
    """Walk the frames with find() and start offsets, one argument at a time."""
    out = []
    pos = 0
    n = len(data)
    find = data.find
    ints = _INTS
    while pos < n:
        r = find(b"\r", pos)
        count = ints.get(data[pos + 1 : r])
        pos = r + 2
        argv = []
        for _ in range(count):
            r = find(b"\r", pos)
            end = r + 2 + ints[data[pos + 1 : r]]
            argv.append(data[r + 2 : end])
            pos = end + 2
        out.append(argv)
    return out


def split_each(data: bytes) -> list:
    """The split fast path checking each request's headers on its own (the
    reader checks all the headers of a feed with one map instead)."""
    parts = data.split(b"\r\n")
    last = len(parts) - 1
    out = []
    i = 0
    header_of = _HEADERS.__getitem__
    while i < last:
        c = _COUNTS[parts[i]]
        j = i + c + c + 1
        argv = parts[i + 2 : j : 2]
        if parts[i + 1 : j : 2] != list(map(header_of, map(len, argv))):
            break
        out.append(argv)
        i = j
    return out


def split_zip(data: bytes) -> list:
    """The split fast path, checking each header in a Python loop."""
    parts = data.split(b"\r\n")
    last = len(parts) - 1
    out = []
    i = 0
    headers = _HEADERS
    while i < last:
        c = _COUNTS[parts[i]]
        j = i + c + c + 1
        argv = parts[i + 2 : j : 2]
        for h, a in zip(parts[i + 1 : j : 2], argv, strict=True):
            if headers[len(a)] != h:
                return out
        out.append(argv)
        i = j
    return out


def ns_per_request(fn: Callable[[], object], per_call: int, quick: bool) -> float:
    # CPU time of this thread, best of many short runs: the figures stay
    # meaningful on a machine that is busy with other work.
    timer = timeit.Timer(fn, timer=time.thread_time)
    number = 2000 if quick else 5000
    best = min(timer.repeat(number=number, repeat=5 if quick else 25))
    return best / number / per_call * 1e9


def bench_stream(make: Callable[[bytes], Callable[[], object]]) -> Callable[[], object]:
    """Many requests arriving in 16 KiB reads: most feeds start and end mid-request."""
    reads = [STREAM[i : i + 16384] for i in range(0, len(STREAM), 16384)]
    if make is bench_hiredis:
        reader = hiredis.Reader()
        feed, gets = reader.feed, reader.gets

        def run_hiredis() -> None:
            for data in reads:
                feed(data)
                while gets() is not False:
                    pass

        return run_hiredis

    def run() -> None:
        feed = RequestReader().feed
        for data in reads:
            feed(data)

    return run


def main() -> None:
    quick = "--quick" in sys.argv
    expected = [[b"ADDJOB", b"q", BODY, b"0"]] * 16
    rows: list[tuple[str, Callable[[bytes], Callable[[], object]]]] = [
        ("RequestReader.feed", bench_reader),
        ("  tried: find loop", lambda d: lambda: find_loop(d)),
        ("  tried: split, check per request", lambda d: lambda: split_each(d)),
        ("  tried: split, Python check loop", lambda d: lambda: split_zip(d)),
    ]
    if hiredis is not None:
        rows.append(("hiredis.Reader", bench_hiredis))
    print(f"ns per request; stream = {STREAM_COUNT} ADDJOBs fed in 16 KiB reads")
    print(f"{'':34} {'1 ADDJOB/feed':>14} {'16 ADDJOB/feed':>15} {'stream':>8}")
    for name, make in rows:
        assert make(PIPELINE)() == expected, name
        one = ns_per_request(make(ADDJOB), 1, quick)
        many = ns_per_request(make(PIPELINE), 16, quick)
        stream = ""
        if make in (bench_reader, bench_hiredis):
            run = bench_stream(make)
            timer = timeit.Timer(run, timer=time.thread_time)
            best = min(timer.repeat(number=1, repeat=3 if quick else 10))
            stream = f"{best / STREAM_COUNT * 1e9:8.0f}"
        print(f"{name:34} {one:14.0f} {many:15.0f} {stream:>8}")


if __name__ == "__main__":
    main()
