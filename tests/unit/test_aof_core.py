"""The AOF without I/O: record bytes, the incremental reader, loading rules (reference
12.5), the records the node emits (12.1), and the sliced rewrite snapshot (12.4)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.core import aof
from disquette.core.aof import (
    AofBuffer,
    AofCorrupt,
    AofLoader,
    AofTruncated,
    AofUnknownCommand,
    RecordReader,
    Snapshot,
    check,
    deljob_record,
    load,
    loadjob_record,
)
from disquette.core.job import (
    ACKED,
    ACTIVE,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    DELIVERED,
    FIELDS,
    QUEUED,
    WAIT_REPL,
    Job,
)
from disquette.core.membership import ClusterNode
from disquette.core.serialize import encode
from tests.support.fuzz import examples
from tests.unit.core_harness import Harness, RecordingClient

OTHER = b"f" * 40
STRANGER = b"e" * 40


def make_job(n: int = 0, state: int = QUEUED, retry: int = 30, **fields) -> Job:
    jid = b"D-01234567-" + (b"%024d" % n) + (b"-05a1" if retry else b"-05a0")
    job = Job(jid, b"q", b"body %d" % n, state, 1, 1_700_000_000_000_000_000 + n,
              1_800_000_000, 0, retry)  # fmt: skip
    job.nodes_delivered = (b"0123456789abcdef0123456789abcdef01234567",)
    for k, v in fields.items():
        setattr(job, k, v)
    return job


def recorded(h: Harness) -> AofBuffer:
    buffer = AofBuffer()
    buffer.enabled = True
    h.node.aof = buffer
    return buffer


def records_of(data: bytes) -> list[tuple[int, list[bytes], int]]:
    reader = RecordReader()
    out = reader.feed(data)
    reader.finish()
    return out


# ---------------------------------------------------------------- record bytes


def test_deljob_record_bytes():
    jid = make_job().id
    assert deljob_record(jid) == b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + jid + b"\r\n"


def test_loadjob_record_is_the_storage_serialization():
    job = make_job(nodes_delivered=(OTHER, STRANGER), nacks=3, gc_retry=2, flags=DELIVERED)
    payload = encode(job, bus=False)
    assert loadjob_record(job) == b"*2\r\n$7\r\nLOADJOB\r\n$%d\r\n%s\r\n" % (len(payload), payload)


@settings(max_examples=examples(300))
@given(
    queue=st.binary(max_size=40),
    body=st.binary(max_size=300),
    nodes=st.lists(st.binary(min_size=40, max_size=40), max_size=4),
    state=st.integers(0, 3),
    gc_retry=st.integers(0, 20),
    flags=st.integers(0, 300),
    repl=st.integers(0, 70_000),
    etime=st.integers(-5, 2**33),
    ctime=st.integers(0, 2**63 - 1),
    delay=st.integers(-1, 2**33),
    retry=st.integers(-1, 2**33),
    nacks=st.integers(0, 70_000),
    deliveries=st.integers(0, 70_000),
)
def test_loadjob_record_matches_encode_even_out_of_range(
    queue, body, nodes, state, gc_retry, flags, repl, etime, ctime, delay, retry, nacks,
    deliveries,
):  # fmt: skip
    job = Job(make_job().id, queue, body, state, repl, ctime, etime, delay, retry)
    job.nodes_delivered = tuple(nodes)
    job.gc_retry, job.flags = gc_retry, flags
    job.nacks, job.additional_deliveries = nacks, deliveries
    payload = encode(job, bus=False)
    assert loadjob_record(job) == b"*2\r\n$7\r\nLOADJOB\r\n$%d\r\n%s\r\n" % (len(payload), payload)


def test_buffer_routes_records():
    buffer = AofBuffer()
    job = make_job()
    buffer.loadjob(job)
    assert buffer.data == b""  # off: nothing
    buffer.rewrite = bytearray()
    buffer.deljob(job.id)
    assert buffer.data == b"" and buffer.rewrite == deljob_record(job.id)
    calls = []
    buffer.on_data = lambda: calls.append(1)
    buffer.enabled = True
    buffer.loadjob(job)
    buffer.deljob(job.id)
    assert buffer.data == loadjob_record(job) + deljob_record(job.id)
    assert buffer.rewrite == deljob_record(job.id) + loadjob_record(job) + deljob_record(job.id)
    assert calls == [1]  # only when the buffer stops being empty


# ---------------------------------------------------------------- the reader


def sample_file(n: int = 6) -> tuple[bytes, list[int]]:
    """LOADJOB/DELJOB records, with their start offsets."""
    parts = []
    for i in range(n):
        job = make_job(i)
        parts.append(deljob_record(make_job(i - 1).id) if i % 3 == 2 else loadjob_record(job))
    offsets = []
    pos = 0
    for part in parts:
        offsets.append(pos)
        pos += len(part)
    return b"".join(parts), offsets


def test_reader_gives_kind_args_and_offsets():
    data, offsets = sample_file()
    records = records_of(data)
    assert [r[2] for r in records] == offsets
    assert [r[0] for r in records] == [aof.LOADJOB, aof.LOADJOB, aof.DELJOB] * 2
    assert records[2][1] == [make_job(1).id]


def test_reader_is_independent_of_chunking():
    data, _ = sample_file(9)
    expected = records_of(data)
    rng = random.Random(5)
    for _ in range(50):
        reader = RecordReader()
        got = []
        pos = 0
        while pos < len(data):
            step = rng.randint(1, 40)
            got += reader.feed(data[pos : pos + step])
            pos += step
        reader.finish()
        assert got == expected


def test_reader_accepts_the_general_forms():
    jid, jid2 = make_job(1).id, make_job(2).id
    data = (
        b"*3\r\n$6\r\ndeljob\r\n$40\r\n" + jid + b"\r\n$40\r\n" + jid2 + b"\r\n"
        b"*2\r\n$7\r\nLoadJob\r\n$" + b"%d" % len(encode(make_job(3), bus=False)) + b"\r\n"
        + encode(make_job(3), bus=False) + b"\r\n"
    )  # fmt: skip
    records = records_of(data)
    assert records[0][:2] == (aof.DELJOB, [jid, jid2])
    assert records[1][0] == aof.LOADJOB


def test_every_prefix_is_a_torn_tail_at_the_last_record_start():
    data, offsets = sample_file()
    ends = [*offsets[1:], len(data)]
    for cut in range(len(data)):
        reader = RecordReader()
        records = reader.feed(data[:cut])
        assert len(records) == sum(1 for end in ends if end <= cut)
        last_start = max(o for o in offsets if o <= cut)
        if cut in offsets:
            reader.finish()  # a clean record boundary
            continue
        with pytest.raises(AofTruncated) as e:
            reader.finish()
        assert e.value.offset == last_start


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"+OK\r\n", "expected '*'"),
        (b"*x\r\n", "invalid multi-bulk count"),
        (b"*1\r\n$6\r\nDELJOB\r\n", "at least 2 arguments"),
        (b"*2\r\n#6\r\n", "expected '$'"),
        (b"*2\r\n$6\r\nDELJOB\r\n$39\r\n", "not a job ID"),
        (b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + b"x" * 40 + b"\r\n", "invalid job ID"),
        (b"*3\r\n$7\r\nLOADJOB\r\n", "LOADJOB with 2 arguments"),
        (b"*2\r\n$7\r\nLOADJOB\r\n$999\r\n\x10\x00\x00\x00", "disagrees"),
        (b"*2\r\n$7\r\nLOADJOB\r\n$999999999999\r\n", "invalid bulk length"),
        (b"*2\r\n$7\r\nLOADJOB\r\n$600000000\r\n", "too large"),
        (b"*2\r\n$3\r\nFOOBAR\r\n", "not followed by CRLF"),
        (b"*2\r\n$100\r\n", "command name of 100 bytes"),
        (b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + b"D" * 45, "not followed by CRLF"),
        (b"*22222222222222\r\n", "invalid multi-bulk count line"),
    ],
)
def test_damage_is_corruption_not_a_torn_tail(data, reason):
    good, _ = sample_file(2)
    reader = RecordReader()
    with pytest.raises(AofCorrupt) as e:
        reader.feed(good + data)
        reader.finish()
    assert e.value.offset == len(good)
    assert reason in e.value.reason


def test_unknown_command():
    with pytest.raises(AofUnknownCommand) as e:
        records_of(b"*2\r\n$4\r\nPING\r\n$1\r\nx\r\n")
    assert e.value.reason == "Unknown command 'PING' reading the append only file"
    assert e.value.offset == 0


def test_corrupted_loadjob_payload():
    job_bytes = bytearray(encode(make_job(), bus=False))
    job_bytes[44] = 9  # state 9
    data = b"*2\r\n$%d\r\n" % 7 + b"LOADJOB\r\n$%d\r\n" % len(job_bytes) + job_bytes + b"\r\n"
    h = Harness()
    with pytest.raises(AofCorrupt) as e:
        load(h.node, bytes(data), enqueue=False, truncated_ok=True)
    assert e.value.reason.startswith("corrupted LOADJOB data")
    result = check([bytes(data)])
    assert result.ok_up_to == 0 and isinstance(result.error, AofCorrupt)


def test_check_reports_size_prefix_and_records():
    data, offsets = sample_file()
    result = check([data[:100], data[100:]])
    assert (result.size, result.ok_up_to, result.records, result.error) == (
        len(data), len(data), len(offsets), None
    )  # fmt: skip
    torn = data[: offsets[-1] + 7]
    result = check(iter([torn]))
    assert (result.size, result.ok_up_to, result.records) == (len(torn), offsets[-1], 5)
    assert isinstance(result.error, AofTruncated)


# ---------------------------------------------------------------- loading (12.5)


def test_loaded_jobs_come_back_active_with_a_fresh_requeue_time():
    h = Harness()
    now = h.clock.now
    job = make_job(delay=5, retry=30, flags=BCAST_QUEUED)
    loader = load(h.node, loadjob_record(job), enqueue=False, truncated_ok=False)
    assert (loader.loaded, loader.records) == (1, 1)
    got = h.node.jobs.get(job.id)
    assert got.state == ACTIVE
    assert now + 35_000 - 250 <= got.qtime < now + 35_000 + 250
    assert got.flags & BCAST_WILLQUEUE
    assert not h.node.queues.get(b"q")  # not queued until its timer fires
    h.run_for(36_000, step=100)
    assert got.state == QUEUED


def test_retry_zero_jobs_are_never_requeued_on_load():
    h = Harness()
    job = make_job(retry=0)
    load(h.node, loadjob_record(job), enqueue=True, truncated_ok=False)
    got = h.node.jobs.get(job.id)
    assert (got.state, got.qtime) == (ACTIVE, 0)
    h.run_for(5_000, step=100)
    assert got.state == ACTIVE


def test_enqueue_once_puts_queued_jobs_back_in_order():
    h = Harness()
    jobs = [make_job(i) for i in range(5)]
    active = make_job(9, state=ACTIVE)
    data = b"".join(loadjob_record(j) for j in reversed([*jobs, active]))
    load(h.node, data, enqueue=True, truncated_ok=False)
    queue = h.node.queues.get(b"q")
    assert [j.id for j in queue.jobs] == [j.id for j in jobs]  # ctime order
    assert h.node.jobs.get(active.id).state == ACTIVE


def test_expired_duplicate_and_deleted_jobs():
    h = Harness()
    now_s = h.clock.now // 1000
    expired = make_job(1, etime=now_s)
    dup = make_job(2)
    gone = make_job(3)
    data = (
        loadjob_record(expired) + loadjob_record(dup)
        + loadjob_record(make_job(2, body=b"other")) + loadjob_record(gone)
        + deljob_record(gone.id) + deljob_record(make_job(4).id)
    )  # fmt: skip
    buffer = recorded(h)
    loader = load(h.node, data, enqueue=False, truncated_ok=False)
    assert (loader.loaded, loader.dropped, loader.deleted) == (2, 2, 1)
    assert h.node.jobs.get(expired.id) is None
    assert h.node.jobs.get(dup.id).body == b"body 2"  # the first record wins
    assert h.node.jobs.get(gone.id) is None
    assert buffer.data == b""  # replaying a file writes nothing
    assert h.node.aof is buffer


def test_nodes_delivered_keeps_known_nodes_and_this_one():
    h = Harness()
    node = h.node
    node.cluster.nodes[OTHER] = ClusterNode(OTHER, b"127.0.0.1", 7712, 0, h.clock.now)
    job = make_job(nodes_delivered=(b"9" * 40, OTHER, STRANGER))  # written under another ID
    load(node, loadjob_record(job), enqueue=False, truncated_ok=False)
    assert node.jobs.get(job.id).nodes_delivered == (node.myself, OTHER)
    alone = make_job(2)
    load(node, loadjob_record(alone), enqueue=False, truncated_ok=False)
    assert node.jobs.get(alone.id).nodes_delivered is node.myself_only


def test_torn_tail_is_left_out_only_when_allowed():
    data, offsets = sample_file()
    torn = data[:-3]
    with pytest.raises(AofTruncated):
        load(Harness().node, torn, enqueue=False, truncated_ok=False)
    loader = load(Harness().node, torn, enqueue=False, truncated_ok=True)
    assert loader.truncated_at == offsets[-1]
    assert loader.records == len(offsets) - 1


def test_loader_counts_records():
    h = Harness()
    loader = AofLoader(h.node, enqueue=False)
    data, offsets = sample_file()
    loader.apply(records_of(data))
    assert loader.records == len(offsets)


# ---------------------------------------------------------------- records the node emits (12.1)


def test_node_records_follow_section_12_1():
    h = Harness()
    node = h.node
    buffer = recorded(h)
    client = RecordingClient()
    queued = node.add_job(client, b"q", b"a", 0)
    delayed = node.add_job(client, b"q", b"b", 0, delay=10)
    records = records_of(bytes(buffer.data))
    assert [r[0] for r in records] == [aof.LOADJOB, aof.LOADJOB]
    assert aof.decode_loadjob(records[0][1][0], 0).state == QUEUED
    assert aof.decode_loadjob(records[1][1][0], 0).state == ACTIVE
    buffer.data.clear()
    node.get_jobs([b"q"], 1)  # state changes write nothing
    node.requeue_jobs([queued.id], nack=True)
    assert buffer.data == b""
    node.ack_jobs([queued.id])
    assert bytes(buffer.data) == deljob_record(queued.id)
    buffer.data.clear()
    node.ack_jobs([queued.id])  # already acked: nothing more
    node.delete_jobs([delayed.id])
    assert bytes(buffer.data) == deljob_record(delayed.id)
    buffer.data.clear()
    short = node.add_job(client, b"q", b"c", 0, ttl=1)
    buffer.data.clear()
    h.run_for(3_000, step=100)  # expiry
    assert bytes(buffer.data) == deljob_record(short.id)
    buffer.data.clear()
    fast = node.add_job(client, b"q", b"d", 0)
    buffer.data.clear()
    node.fast_ack([fast.id])
    assert bytes(buffer.data) == deljob_record(fast.id)


def test_flush_all_records_deletions():
    h = Harness()
    buffer = recorded(h)
    jobs = [h.node.add_job(RecordingClient(), b"q", b"x", 0) for _ in range(3)]
    buffer.data.clear()
    h.node.flush_all()
    assert sorted(r[1][0] for r in records_of(bytes(buffer.data))) == sorted(j.id for j in jobs)


# ---------------------------------------------------------------- the rewrite snapshot (12.4)


def test_snapshot_has_active_and_queued_jobs_only():
    h = Harness()
    node = h.node
    client = RecordingClient()
    jobs = [node.add_job(client, b"q", b"%d" % i, 0) for i in range(10)]
    node.ack_jobs([jobs[0].id, jobs[1].id])  # acked and collected
    node.get_jobs([b"q"], 2)  # two become active
    snapshot = Snapshot(node)
    data = b""
    while not snapshot.done:
        data += snapshot.take(3)
    assert snapshot.take(3) == b""
    ids = sorted(r[1][0][4:44] for r in records_of(data))
    assert ids == sorted(j.id for j in jobs[2:])


def test_snapshot_skips_acked_and_wait_repl_jobs():
    h = Harness()
    for state, n in ((ACKED, 1), (WAIT_REPL, 2), (ACTIVE, 3)):
        h.node.register(make_job(n, state=state))
    snapshot = Snapshot(h.node)
    records = records_of(snapshot.take(100))
    assert [r[1][0][4:44] for r in records] == [make_job(3).id]


@settings(max_examples=examples(60))
@given(seed=st.integers(0, 2**32 - 1), preload=st.integers(0, 300))
def test_rewrite_in_slices_with_concurrent_changes_replays_to_the_live_state(seed, preload):
    """Snapshot slices interleaved with the records of concurrent changes, in time
    order, load back into exactly the live job set at the end of the rewrite."""
    rng = random.Random(seed)
    h = Harness(seed=seed)
    node = h.node
    client = RecordingClient()
    buffer = AofBuffer()
    node.aof = buffer
    for i in range(preload):
        node.add_job(client, b"q%d" % (i % 3), b"x", 0, retry=rng.choice([0, 5]))
    buffer.rewrite = output = bytearray()
    snapshot = Snapshot(node)
    while not snapshot.done:
        output += snapshot.take(rng.randint(1, 40))
        for _ in range(rng.randint(0, 8)):
            action = rng.random()
            ids = [j.id for j in node.jobs.values()]
            if action < 0.4 or not ids:
                node.add_job(client, b"q%d" % rng.randint(0, 2), b"y", 0)
            elif action < 0.6:
                node.ack_jobs([rng.choice(ids)])
            elif action < 0.7:
                node.delete_jobs([rng.choice(ids)])
            elif action < 0.8:
                node.get_jobs([b"q0", b"q1"], 2)
            else:
                h.run_for(rng.randint(0, 700), step=100)
    live = {j.id for j in node.jobs.values() if j.state in (ACTIVE, QUEUED)}
    fresh = Harness(seed=seed + 1)
    fresh.clock.now = h.clock.now
    load(fresh.node, bytes(output), enqueue=False, truncated_ok=False)
    assert set(j.id for j in fresh.node.jobs.values()) == live


def _fields(job: Job) -> dict:
    return {k: getattr(job, k) for k in FIELDS if k not in ("awake", "waiter")}


@settings(max_examples=examples(500))
@given(
    queue=st.binary(max_size=20),
    body=st.binary(max_size=60),
    nodes=st.lists(st.binary(min_size=40, max_size=40), max_size=3),
    flip=st.tuples(st.integers(0, 400), st.integers(1, 255)),
    cut=st.integers(0, 400),
)
def test_decode_loadjob_agrees_with_serialize(queue, body, nodes, flip, cut):
    """A LOADJOB payload is taken when serialize.decode takes all of it, as that job."""
    job = make_job(queue=queue, body=body, nodes_delivered=tuple(nodes), nacks=4, gc_retry=3)
    good = encode(job, bus=False)
    damaged = bytearray(good)
    if flip[0] < len(damaged):
        damaged[flip[0]] ^= flip[1]
    for payload in (good, bytes(damaged), good[:cut], good + b"x"):
        try:
            expected, used = aof.decode(payload, bus=False)
            if used != len(payload):
                expected = None
        except aof.BadJob:
            expected = None
        try:
            got = aof.decode_loadjob(payload, 0)
        except AofCorrupt:
            got = None
        assert (got is None) == (expected is None)
        if got is not None:
            assert _fields(got) == _fields(expected)
