"""Serialized jobs: round trips of both variants, and untrusted input never crashes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.core import serialize
from disquette.core.job import (
    ACKED,
    BCAST_QUEUED,
    DELIVERED,
    FIELDS,
    MAX_GROUP,
    PRIORITY_SHIFT,
    QUEUED,
    Extra,
    Job,
)
from tests.support.fuzz import examples

NODE_A = b"a" * 40
NODE_B = b"b" * 40
JOB_ID = b"D-aaaaaaaa-" + b"x" * 24 + b"-05a1"


def make_job(**fields) -> Job:
    job = Job(JOB_ID, b"queue", b"body\r\n\x00", QUEUED, 3, 1_700_000_000_000_000_123,
              1_800_000_000, 5, 30)  # fmt: skip
    job.nacks = 2
    job.additional_deliveries = 7
    job.gc_retry = 3
    job.flags = BCAST_QUEUED | DELIVERED
    job.nodes_delivered = (NODE_A, NODE_B)
    for k, v in fields.items():
        setattr(job, k, v)
    return job


def fields(job: Job) -> dict:
    return {name: getattr(job, name) for name in FIELDS if name not in ("awake", "waiter")}


def test_storage_round_trip_keeps_everything():
    job = make_job()
    data = serialize.encode(job, bus=False)
    copy, used = serialize.decode(data, bus=False)
    assert used == len(data)
    assert fields(copy) == fields(job)


def test_bus_variant_sends_relative_ttl_plus_one_and_drops_delivered():
    job = make_job()
    data = serialize.encode(job, bus=True, now_s=1_799_999_000)
    copy, _ = serialize.decode(data, bus=True, now_s=2_000_000_000)
    assert copy.etime == 2_000_000_000 + 1000 + 1
    assert copy.flags == BCAST_QUEUED


def test_extensions_round_trip_in_both_variants():
    origin = b"D-bbbbbbbb-" + b"y" * 24 + b"-05a1"
    extra = Extra(b"key \x00\r\n", origin, b"orders", 4, 70_000)
    job = make_job(extra=extra, flags=BCAST_QUEUED | 7 << PRIORITY_SHIFT)
    for bus in (False, True):
        data = serialize.encode(job, bus=bus, now_s=1_799_999_000)
        copy, used = serialize.decode(data, bus=bus, now_s=1_799_999_000)
        assert used == len(data)
        assert copy.extra == extra and copy.priority == 7 and copy.dedup == b"key \x00\r\n"
    assert serialize.encode(make_job(extra=Extra(b"k")), bus=False).endswith(b"\x01\x01\0\0\0k")


def test_a_group_rides_with_the_job_and_a_bad_one_is_refused():
    extra = Extra()
    extra.group = b"tenant-1"
    job = make_job(extra=extra)
    for bus in (False, True):
        data = serialize.encode(job, bus=bus, now_s=1_799_999_000)
        copy, _ = serialize.decode(data, bus=bus, now_s=1_799_999_000)
        assert copy.extra == extra and copy.group == b"tenant-1"
    data = serialize.encode(job, bus=False)
    assert data.endswith(b"\x07\x08\0\0\0tenant-1")  # tag 7: skipped by older releases
    for bad in (b"", b"g" * (MAX_GROUP + 1)):
        extra.group = bad
        with pytest.raises(serialize.BadJob, match="bad group"):
            serialize.decode(serialize.encode(job, bus=False), bus=False)


def test_a_job_without_extensions_keeps_disques_layout():
    data = serialize.encode(make_job(), bus=False)
    assert data.endswith(NODE_B)  # the node list ends the record, as in Disque
    assert serialize.decode(data, bus=False)[0].extra is None


def test_unknown_extension_tags_are_skipped():
    data = serialize.encode(make_job(extra=Extra(b"k")), bus=False)
    unknown = b"\x09\x03\0\0\0abc"
    data = (int.from_bytes(data[:4], "little") + len(unknown)).to_bytes(4, "little") + data[4:]
    copy, _ = serialize.decode(data + unknown, bus=False)
    assert copy.dedup == b"k"


def test_layout_matches_the_reference_offsets():
    data = serialize.encode(make_job(state=ACKED), bus=False)
    assert int.from_bytes(data[0:4], "little") == len(data) - 4
    assert data[4:44] == JOB_ID
    assert data[44] == ACKED | (3 << 4)
    assert int.from_bytes(data[46:48], "little") == 3
    assert int.from_bytes(data[52:60], "little") == 1_700_000_000_000_000_123
    assert int.from_bytes(data[72:76], "little") == 5 and data[76:81] == b"queue"


@settings(max_examples=examples(3000))
@given(st.binary(max_size=400))
def test_garbage_is_rejected_cleanly(data):
    try:
        serialize.decode(data, bus=True, now_s=0)
    except serialize.BadJob:
        pass


@settings(max_examples=examples(2000))
@given(st.integers(0, 200), st.integers(0, 7), st.binary(max_size=8))
def test_corrupted_valid_jobs_never_crash(pos, bit, junk):
    data = bytearray(serialize.encode(make_job(), bus=False))
    if pos < len(data):
        data[pos] ^= 1 << bit
    data = bytes(data) + junk
    try:
        serialize.decode(data, bus=False)
    except serialize.BadJob:
        pass


def test_out_of_range_fields_are_clamped():
    """Values the layout cannot hold are clamped (the second, slower encoding path)."""
    job = make_job(repl=70_000, delay=-1, retry=1 << 40, nacks=-5, gc_retry=20, flags=0x10F)
    job.additional_deliveries = 1 << 20
    copy, _ = serialize.decode(serialize.encode(job, bus=False), bus=False)
    assert (copy.repl, copy.delay, copy.retry, copy.nacks, copy.gc_retry, copy.flags) == (
        0xFFFF, 0, 0xFFFFFFFF, 0, 15, 0x0F,
    )  # fmt: skip
    assert copy.additional_deliveries == 0xFFFF and copy.state == QUEUED
    expired = make_job(etime=100)  # the bus variant's remaining TTL cannot go below 0
    copy, _ = serialize.decode(serialize.encode(expired, bus=True, now_s=1000), bus=True, now_s=7)
    assert copy.etime == 7


def test_malformed_jobs_say_what_is_wrong():
    good = serialize.encode(make_job(), bus=False)
    queue_len_at = 72  # the queue name's length closes the fixed part

    def error(data: bytes) -> str:
        try:
            serialize.decode(data, bus=False)
        except serialize.BadJob as e:
            return str(e)
        raise AssertionError("decoded")

    def patched(at: int, value: int) -> bytes:
        return good[:at] + value.to_bytes(4, "little") + good[at + 4 :]

    assert error(good[:3]) == "truncated length"
    assert error(good[:60]) == "truncated job"
    assert error(good[:-1]) == "truncated job"
    assert error(patched(0, 79) + b"x" * 200) == "truncated job"
    assert error(good[:4] + b"X" + good[5:]) == "invalid job ID"
    assert error(good[:44] + b"\x0f" + good[45:]) == "invalid job state"
    assert error(good[:45] + b"\xa0" + good[46:]) == "invalid priority"  # 10 > 9
    assert error(good[:59] + b"\x80" + good[60:]) == "invalid ctime"  # negative
    assert error(patched(queue_len_at, len(good))) == "truncated string"
    assert error(patched(queue_len_at, len(good) - queue_len_at - 6)) == "truncated string length"
    body_len_at = queue_len_at + 4 + len(b"queue")
    assert error(patched(body_len_at, len(good))) == "truncated string"
    assert error(patched(body_len_at, len(good) - body_len_at - 6)) == "truncated node list"
    assert error(patched(0, len(good) - 5)[:-1]) == "bad node list length"  # a node ID short
    # Bytes after the node list are extensions (beyond Disque): a node ID left over
    # is read as one, and is not a well-formed one.
    assert error(patched(len(good) - 84, 1)) == "truncated extension"
