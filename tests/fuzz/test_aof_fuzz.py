"""Property tests of the AOF loader on random and damaged files.

The loader must never crash (only :class:`~disquette.core.aof.AofError` escapes),
never silently drop a complete valid record (every record that ends before the
first damaged byte is applied whenever loading succeeds), cut a torn tail only
where the last complete record ends, and read the same records however the file
is split into chunks.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disquette.core.aof import (
    AofError,
    AofLoader,
    AofTruncated,
    RecordReader,
    deljob_record,
    load,
    loadjob_record,
)
from disquette.core.job import ACTIVE, QUEUED, Job
from tests.support.fuzz import examples, fuzz_settings
from tests.unit.core_harness import Harness

FAST = fuzz_settings(1500, HealthCheck.data_too_large)
FILES = settings(FAST, max_examples=examples(400))  # generating whole files of jobs costs more

ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def job_id(n: int, retry: int) -> bytes:
    digits = bytes(ALPHABET[(n >> (6 * i)) % 64] for i in range(24))
    return b"D-0123abcd-" + digits + (b"-0001" if retry else b"-0000")


@st.composite
def jobs(draw: st.DrawFn) -> Job:
    retry = draw(st.sampled_from([0, 1, 60]))
    job = Job(
        job_id(draw(st.integers(0, 50)), retry),
        draw(st.binary(min_size=1, max_size=12)),
        draw(st.binary(max_size=80)),
        draw(st.sampled_from([ACTIVE, QUEUED])),
        1,
        draw(st.integers(0, 2**62)),
        draw(st.sampled_from([1_600_000_000, 1_800_000_000])),  # expired or not
        draw(st.integers(0, 100)),
        retry,
    )
    job.nodes_delivered = tuple(draw(st.lists(st.binary(min_size=40, max_size=40), max_size=3)))
    job.nacks = draw(st.integers(0, 5))
    return job


records = st.lists(
    st.one_of(
        jobs().map(loadjob_record), st.integers(0, 50).map(lambda n: deljob_record(job_id(n, 1)))
    ),
    max_size=12,
)


def boundaries(parts: list[bytes]) -> list[int]:
    """The end offset of each record."""
    ends, pos = [], 0
    for part in parts:
        pos += len(part)
        ends.append(pos)
    return ends


def try_load(data: bytes, truncated_ok: bool) -> AofLoader | AofError:
    try:
        return load(Harness().node, data, enqueue=True, truncated_ok=truncated_ok)
    except AofError as e:
        return e


@FAST
@given(st.binary(max_size=400), st.booleans())
def test_random_bytes_never_crash(data, truncated_ok):
    try_load(data, truncated_ok)


@FILES
@given(records, st.data())
def test_damage_never_drops_a_complete_valid_record_silently(parts, data):
    original = b"".join(parts)
    kind = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate", "garbage-tail"]))
    pos = data.draw(st.integers(0, len(original)))
    if kind == "flip" and pos < len(original):
        damaged = original[:pos] + bytes([original[pos] ^ data.draw(st.integers(1, 255))]) \
            + original[pos + 1 :]  # fmt: skip
    elif kind == "insert":
        damaged = original[:pos] + data.draw(st.binary(min_size=1, max_size=8)) + original[pos:]
    elif kind == "delete":
        damaged = original[:pos] + original[pos + data.draw(st.integers(1, 8)) :]
    elif kind == "garbage-tail":
        damaged = original + data.draw(st.binary(min_size=1, max_size=50))
    else:
        damaged = original[:pos]
    first_diff = next(
        (i for i, (a, b) in enumerate(zip(original, damaged, strict=False)) if a != b),
        min(len(original), len(damaged)),
    )
    untouched = sum(1 for end in boundaries(parts) if end <= first_diff)
    for truncated_ok in (False, True):
        result = try_load(damaged, truncated_ok)
        if isinstance(result, AofLoader):
            assert result.records >= untouched
            if not truncated_ok:
                assert result.truncated_at is None
        elif untouched:  # the damage is reported where it is, not before
            assert result.offset >= boundaries(parts)[untouched - 1]


@FILES
@given(records, st.data())
def test_a_torn_tail_loads_every_complete_record(parts, data):
    original = b"".join(parts)
    cut = data.draw(st.integers(0, len(original)))
    ends = [0, *boundaries(parts)]
    complete = sum(1 for end in ends[1:] if end <= cut)
    tolerant = try_load(original[:cut], truncated_ok=True)
    assert isinstance(tolerant, AofLoader)
    assert tolerant.records == complete
    strict = try_load(original[:cut], truncated_ok=False)
    if cut in ends:
        assert isinstance(strict, AofLoader) and strict.records == complete
    else:
        assert isinstance(strict, AofTruncated)
        assert strict.offset == max(end for end in ends if end <= cut)
        assert tolerant.truncated_at == strict.offset


@FILES
@given(records, st.lists(st.integers(1, 64), max_size=40))
def test_records_do_not_depend_on_chunking(parts, sizes):
    data = b"".join(parts)
    whole = RecordReader()
    expected = whole.feed(data)
    reader = RecordReader()
    got = []
    pos = 0
    for size in sizes:
        got += reader.feed(data[pos : pos + size])
        pos += size
    got += reader.feed(data[pos:])
    reader.finish()
    assert got == expected
