"""Flow to disk (core/spill.py): its structures against models, and a node that spills
against one that does not, command by command.

The differential test is the heart of it: two nodes built from the same seed run the
same commands (ADDJOB with priorities, delays and retries, GETJOB, ACKJOB, FASTACK,
NACK, DEQUEUE, ENQUEUE, DELJOB, WORKING, SHOW, QLEN, QPEEK, JSCAN) through the real
command layer, one of them spilling to an in-memory store at a memory level a few
jobs above empty (keeping one or two jobs at each queue's head), the other keeping
everything in memory; every reply must be the same, and so must what an AOF written
by each reloads. Disk faults are tested apart: a damaged record drops only its job,
counted; a failed write stops spilling and loses nothing.
"""

from __future__ import annotations

import itertools
import random
import zlib

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from disquette.commands import new_state
from disquette.config import Config
from disquette.core import aof
from disquette.core.spill import (
    HASH_BITS,
    HOUSEKEEPING_S,
    SHARD_BITS,
    SHARDS,
    Damaged,
    Index,
    Run,
    Timers,
    fingerprint,
    frame,
    unframe,
)
from disquette.sim.disk import MemorySpillStore
from tests.support.fuzz import examples
from tests.unit.core_harness import Harness, RecordingClient


class Shell:
    def shutdown(self, rewrite_aof: bool) -> bool:
        return True

    def close_client(self, client) -> None:
        pass


# ---------------------------------------------------------------- the structures


@given(st.lists(st.tuples(st.sampled_from("arf"), st.integers(0, 40), st.integers(0, 3))))
def test_the_index_agrees_with_a_dict_of_lists(ops):
    index = Index()
    model: dict[int, list[tuple[int, int]]] = {}
    # Hashes that share a shard, and hashes equal to each other.
    fps = [(k % 3) << (HASH_BITS - SHARD_BITS) | (k // 6) for k in range(41)]
    for op, k, loc in ops:
        fp = fps[k]
        if op == "a":
            index.add(fp, loc, loc + 10)
            model.setdefault(fp, []).append((loc, loc + 10))
        elif op == "r":
            expected = (loc, loc + 10) in model.get(fp, [])
            assert index.remove(fp, loc) == expected
            if expected:
                model[fp].remove((loc, loc + 10))
        else:
            assert sorted(index.find(fp)) == sorted(model.get(fp, []))
        assert index.count == sum(map(len, model.values()))
    for fp, entries in model.items():
        assert sorted(index.find(fp)) == sorted(entries)
        assert (fp in index) == bool(entries)


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 50), st.integers(0, 5)),
            st.tuples(st.just("pop"), st.integers(1, 7), st.just(0)),
            st.tuples(st.just("remove"), st.integers(0, 50), st.integers(0, 5)),
        )
    )
)
def test_a_run_keeps_ctime_order(ops):
    run = Run()
    model: list[tuple[int, int]] = []
    for op, a, b in ops:
        if op == "add":
            run.add(a, b)
            model.append((a, b))
            model.sort(key=lambda e: e[0])  # stable: equal ctimes keep their order
        elif op == "pop":
            taken = run.pop_front(a)
            assert taken == model[:a]
            del model[:a]
        else:
            present = (a, b) in model
            assert run.remove(a, b) == present
            if present:
                model.remove((a, b))
        assert run.count == len(model)
        assert list(run) == model
        assert list(run.reversed()) == model[::-1]
        if model:
            assert run.first_ctime() == model[0][0]


def test_timers_come_due_in_order_and_forget_jobs_loaded_early():
    index = Index()
    timers = Timers()
    for fp in range(1, 200):
        index.add(fp, fp, 1)
        timers.add(1000 + fp % 5, fp)
    assert timers.due(999, 100) == []
    first = timers.due(1000, 1000)
    assert sorted(first) == [fp for fp in range(1, 200) if fp % 5 == 0]
    # Jobs of second 1001 loaded back another way: their entries are filtered out.
    for fp in range(1, 200):
        if fp % 5 == 1:
            index.remove(fp, fp)
            timers.gone(1001)
    assert timers.due(1001, 1000) == []
    assert len(timers.due(10_000, 1000)) == 3 * 40 - 0  # seconds 1002-1004, 40 jobs each


def test_a_second_mostly_loaded_back_is_filtered_a_slice_at_a_time():
    index = Index()
    timers = Timers()
    for fp in range(1, 1001):
        index.add(fp, fp, 1)
        timers.add(7, fp)
    for fp in range(1, 901):  # 900 of its jobs leave the disk another way
        index.remove(fp, fp)
        timers.gone(7)
    assert len(timers) == 1000  # put up for filtering, not filtered yet
    timers.tidy(index, 400)
    timers.add(7, 5000)  # spilled meanwhile: at the end, filtered too
    index.add(5000, 5000, 1)
    assert len(timers) == 1001  # a filter under way keeps the bucket whole
    timers.tidy(index, 400)
    timers.tidy(index, 400)
    assert len(timers) == 101
    assert sorted(timers.due(7, 1000)) == [*range(901, 1001), 5000]
    # A second that comes due while its filter is under way is served whole.
    for fp in range(1, 1001):
        timers.add(8, fp)
    for _ in range(900):
        timers.gone(8)
    timers.tidy(index, 100)
    assert len(timers.due(8, 2000)) == 1000 and len(timers) == 0
    timers.tidy(index, 1000)  # (nothing left to filter)
    assert timers.nbytes() == 0


def test_a_record_round_trips_and_any_damage_is_detected():
    h = Harness()
    job = h.node.add_job(RecordingClient(), b"q", b"body" * 10, 0)
    record = frame(job)
    back = unframe(record)
    assert (back.id, back.body, back.queue, back.qtime, back.ctime) == (
        job.id, job.body, job.queue, job.qtime, job.ctime,
    )  # fmt: skip
    for i in range(len(record)):
        damaged = bytearray(record)
        damaged[i] ^= 0x5A
        with pytest.raises(Damaged):
            unframe(bytes(damaged))
    for cut in range(len(record)):
        with pytest.raises(Damaged):
            unframe(record[:cut])
    assert zlib.crc32(record[8:]) == int.from_bytes(record[4:8], "little")


# ---------------------------------------------------------------- a spilling node


class Side:
    """A node behind the real command layer, and the harness that runs its timers."""

    def __init__(
        self, seed: int, spills: bool, window: int, room_jobs: int, with_aof: bool = True
    ) -> None:
        self.harness = Harness(seed=seed)
        self.node = self.harness.node
        self.state = new_state(Config(), self.node, shell=Shell())
        self.state.add_client(RecordingClient(1))
        if with_aof:
            sink = aof.AofBuffer()
            sink.enabled = True
            self.node.aof = sink
        self.prefetches = 0  # read-ahead batches loaded between commands
        self._prefetch = False
        if spills:
            self.node.spill.attach(MemorySpillStore(segment_bytes=2048))
            self.node.spill.configure(True, self.node.used_memory + room_jobs * 400, 0, window)
            if seed % 2:  # read-ahead between commands, as the server does it
                self.node.spill.prefetch_hook = self._wants_prefetch

    def _wants_prefetch(self) -> None:
        self._prefetch = True

    def between_commands(self) -> None:
        """What the server's loop runs after a command's reply: read-ahead, if asked."""
        if self._prefetch:
            self._prefetch = False
            while self.node.spill.prefetch():
                self.prefetches += 1

    def run_for(self, ms: int) -> None:
        self.harness.run_for(ms)


def _pair(seed: int, window: int = 2, room_jobs: int = 1) -> tuple[Side, Side]:
    """A node that spills (second) and one that does not (first), same seed and clock."""
    return Side(seed, False, window, room_jobs), Side(seed, True, window, room_jobs)


def _run(side: Side, *argv: bytes) -> bytes:
    reply = side.state.execute(side.state.clients[1], list(argv))
    assert reply is not None
    side.between_commands()
    return reply


def _scan_set(reply: bytes) -> set[bytes]:
    # JSCAN BUSYLOOP replies in one call: the order differs between the two nodes.
    return set(reply.split(b"\r\n"))


_BY_ID = {
    "ack": b"ACKJOB", "fastack": b"FASTACK", "nack": b"NACK", "dequeue": b"DEQUEUE",
    "enqueue": b"ENQUEUE", "deljob": b"DELJOB", "working": b"WORKING", "show": b"SHOW",
}  # fmt: skip
_ADD = st.tuples(
    st.just("add"),
    st.sampled_from([b"a", b"b"]),
    st.sampled_from([0, 0, 0, 3]),  # priority
    st.sampled_from([0, 0, 0, 1, 2]),  # delay seconds
    # Retry: none, or longer than a run, so that no requeue timer (moved on with a
    # random jitter while a job is queued in memory, not on disk) comes due.
    st.sampled_from([0, 3600]),
    st.binary(min_size=0, max_size=300),
)
_OPS = st.lists(
    st.one_of(
        _ADD,
        st.tuples(st.just("get"), st.integers(1, 4), st.booleans()),
        st.tuples(st.just("get"), st.integers(1, 4), st.booleans()),
        st.tuples(st.sampled_from(sorted(_BY_ID)), st.integers(0, 1000)),
        st.tuples(st.just("peek"), st.sampled_from([b"a", b"b"]), st.integers(-5, 5)),
        st.tuples(st.just("look")),
        st.tuples(st.just("time"), st.sampled_from([50, 400, 1500, 31_000])),
    ),
    min_size=10,
    max_size=120,
)


@settings(max_examples=examples(150))
@given(st.integers(0, 2**32), st.lists(_ADD, min_size=10, max_size=40), _OPS)
def test_a_spilling_node_answers_as_one_that_keeps_everything_in_memory(seed, backlog, ops):
    plain, spilling = _pair(seed)
    pair = (plain, spilling)
    ids: list[bytes] = []
    for op in backlog + ops:
        kind = op[0]
        if kind == "add":
            _, queue, priority, delay, retry, body = op
            argv = [b"ADDJOB", queue, body, b"0", b"TTL", b"7200", b"RETRY", b"%d" % retry]
            if delay:
                argv += [b"DELAY", b"%d" % delay]
            if priority:
                argv += [b"PRIORITY", b"%d" % priority]
            replies = [_run(s, *argv) for s in pair]
            if replies[0].startswith(b"+"):
                ids.append(replies[0][1:-2])
        elif kind == "get":
            _, count, withcounters = op
            argv = [b"GETJOB", b"NOHANG", b"COUNT", b"%d" % count]
            if withcounters:
                argv.append(b"WITHCOUNTERS")
            replies = [_run(s, *argv, b"FROM", b"a", b"b") for s in pair]
        elif kind == "peek":
            replies = [_run(s, b"QPEEK", op[1], b"%d" % op[2]) for s in pair]
        elif kind == "look":
            replies = [_run(s, b"QLEN", b"a") + _run(s, b"QLEN", b"b") for s in pair]
            scans = [_scan_set(_run(s, b"JSCAN", b"BUSYLOOP", b"REPLY", b"all")) for s in pair]
            assert scans[0] == scans[1]
        elif kind == "time":
            for s in pair:
                s.run_for(op[1])
            replies = [b""]
        else:
            if not ids:
                continue
            job_id = ids[op[1] % len(ids)]
            replies = [_run(s, _BY_ID[kind], job_id) for s in pair]
        if len(replies) == 2:
            assert replies[0] == replies[1], (op, replies)
    # What each AOF reloads is the same set of jobs with the same bodies.
    reloaded = []
    for s in pair:
        h = Harness(seed=seed + 1)
        h.clock.now = s.harness.clock.now
        aof.load(h.node, bytes(s.node.aof.data), enqueue=False, truncated_ok=False)  # type: ignore[union-attr]
        reloaded.append({job.id: job.body for job in h.node.jobs.values()})
    assert reloaded[0] == reloaded[1]
    spill = spilling.node.spill
    spilled, loaded = (min(n, 20) // 5 * 5 for n in (spill.spilled, spill.loaded))
    event(f"jobs spilled: {spilled}+, loaded: {loaded}+")
    event(f"read-ahead between commands: {min(spilling.prefetches, 3)}+")
    queued = sum(q.spilled.count for q in spilling.node.queues.values() if q.spilled)
    assert queued <= spill.count
    assert spill.read_errors == 0


def _pipelined(side: Side, requests: list[list[bytes]]) -> bytes:
    """Requests run as the server runs a pipeline: runs where it makes them, else one
    by one."""
    out = []
    start = 0
    while start < len(requests):
        count, replies = side.state.execute_run(side.state.clients[1], requests, start)
        if count:
            out.append(replies)
            start += count
        else:
            out.append(_run(side, *requests[start]))
            start += 1
    return b"".join(out)


@settings(max_examples=examples(60))
@given(
    st.integers(0, 2**32),
    st.lists(
        st.tuples(
            st.sampled_from([b"a", b"b"]),
            st.sampled_from([0, 0, 4]),  # priority
            st.integers(1, 40),  # ADDJOBs in the run
            st.integers(0, 30),  # jobs then taken (and acknowledged)
        ),
        min_size=3,
        max_size=12,
    ),
)
def test_runs_of_addjob_past_the_level_go_to_disk_and_answer_the_same(seed, rounds):
    """Without the AOF, a run of pipelined ADDJOBs past the level writes the jobs behind
    a queue's head window straight to the spill log (Spill.arrive); the node answers
    every command as one that keeps everything in memory and serves the same jobs in
    the same order."""
    plain, spilling = (Side(seed, s, 3, 4, with_aof=False) for s in (False, True))
    node = spilling.node
    seq = 0
    for queue, priority, adds, takes in rounds:
        requests = []
        for _ in range(adds):
            argv = [b"ADDJOB", queue, b"job %d " % seq + b"x" * (seq % 50), b"0", b"TTL", b"7200"]
            if priority:
                argv += [b"PRIORITY", b"%d" % priority]
            requests.append(argv)
            seq += 1
        replies = [_pipelined(s, requests) for s in (plain, spilling)]
        assert replies[0] == replies[1]
        get = [b"GETJOB", b"NOHANG", b"COUNT", b"%d" % takes, b"WITHCOUNTERS", b"FROM", b"a", b"b"]
        taken = [_run(s, *get) for s in (plain, spilling)] if takes else [b"", b""]
        assert taken[0] == taken[1]
        ids = [line for line in taken[0].split(b"\r\n") if line.startswith(b"D-")]
        if ids:
            assert _run(plain, b"ACKJOB", *ids) == _run(spilling, b"ACKJOB", *ids)
        for look in ([b"QLEN", b"a"], [b"QLEN", b"b"], [b"QPEEK", b"a", b"-3"]):
            assert _run(plain, *look) == _run(spilling, *look)
    event(f"jobs spilled: {min(node.spill.spilled, 40) // 10 * 10}+")
    drain = [b"GETJOB", b"NOHANG", b"COUNT", b"1000", b"FROM", b"a", b"b"]
    assert _run(plain, *drain) == _run(spilling, *drain)
    assert node.spill.read_errors == 0


def test_a_run_past_the_level_registers_only_the_queues_head():
    """The jobs behind a queue's head window are never registered: the registry holds
    the window, the spill log the rest, and they come back in order."""
    _, s = _pair(3, window=4, room_jobs=0)
    s.node.aof = None
    node = s.node
    requests = [[b"ADDJOB", b"q", b"job %d" % i + b"y" * 100, b"0"] for i in range(200)]
    ids = [line[1:] for line in _pipelined(s, requests).split(b"\r\n") if line]
    assert len(ids) == 200 and node.spill.spilled >= 190
    assert len(node.jobs) <= 10 and node.spill.count == 200 - len(node.jobs)
    assert node.spill.loaded == 0  # none loaded back: they never were in memory
    assert _drain(s, 9) == ids


def _drain(side: Side, count: int) -> list[bytes]:
    """GETJOB COUNT ``count`` and ACKJOB of what it gave from queue ``q`` until it
    is empty: the IDs served, in order."""
    served: list[bytes] = []
    get = [b"GETJOB", b"NOHANG", b"COUNT", b"%d" % count, b"FROM", b"q"]
    while (reply := _run(side, *get)) != b"*-1\r\n":
        got = [line for line in reply.split(b"\r\n") if line.startswith(b"D-")]
        served += got
        _run(side, b"ACKJOB", *got)
    return served


def _backlog(state: Side, n: int, queue: bytes = b"q") -> list[bytes]:
    body = b"job %d " + b"x" * 100
    return [_run(state, b"ADDJOB", queue, body % i, b"0")[1:-2] for i in range(n)]


def test_a_backlog_spills_and_drains_in_order_with_its_segments_dropped():
    _, s = _pair(7, window=4)
    node = s.node
    store = node.spill.store
    ids = _backlog(s, 300)
    assert node.spill.count > 250
    assert int(_run(s, b"QLEN", b"q")[1:-2]) == 300
    served = []
    while True:
        reply = _run(s, b"GETJOB", b"NOHANG", b"COUNT", b"7", b"FROM", b"q")
        if reply == b"*-1\r\n":
            break
        got = [line for line in reply.split(b"\r\n") if line.startswith(b"D-")]
        served += got
        _run(s, b"ACKJOB", *got)
        s.run_for(100)
    assert served == ids
    assert node.spill.count == 0 and node.spill.bytes == 0
    assert list(store.segments) in ([store.current], [])  # type: ignore[union-attr]
    assert node.spill.readahead_hits > node.spill.readahead_misses


def test_read_ahead_between_commands_fills_the_head_a_consumer_takes():
    """With a shell that reads ahead between commands, a GETJOB that leaves the head
    short asks for it; the batches loaded then make the next GETJOB COUNT a hit, and a
    COUNT larger than the window sets the head kept in memory (nothing of it spills)."""
    _, s = _pair(5, window=4, room_jobs=0)
    s.node.aof = None
    node = s.node
    s.node.spill.prefetch_hook = s._wants_prefetch
    ids = _backlog(s, 120)
    spill = node.spill
    served: list[bytes] = []
    for _ in range(5):
        reply = s.state.execute(
            s.state.clients[1], [b"GETJOB", b"NOHANG", b"COUNT", b"10", b"FROM", b"q"]
        )
        got = [line for line in reply.split(b"\r\n") if line.startswith(b"D-")]
        served += got
        assert s._prefetch  # the head was left short of 10: read-ahead wanted
        s.between_commands()
        assert len(node.queues.get(b"q").jobs) >= 10  # ready for the next one
        node.spill.make_room()  # memory past the level: the head stays
        assert len(node.queues.get(b"q").jobs) >= 10
        _run(s, b"ACKJOB", *got)
    assert s.prefetches >= 3
    misses = spill.readahead_misses
    assert served + _drain(s, 10) == ids
    assert spill.readahead_misses == misses  # every later GETJOB found its jobs loaded


def _corrupt(side: Side, job_id: bytes) -> None:
    """Damage the record of a spilled job."""
    store = side.node.spill.store
    assert isinstance(store, MemorySpillStore)
    [(loc, _)] = side.node.spill.index.find(fingerprint(job_id))
    store.corrupt(loc)


def test_a_damaged_record_drops_its_job_only_and_is_counted():
    _, s = _pair(3, window=1)
    node = s.node
    ids = _backlog(s, 40)
    victim = ids[-10]  # spilled: near the far end of the queue
    _corrupt(s, victim)
    logged: list[str] = []
    node.spill.log = logged.append
    assert _run(s, b"QLEN", b"q") == b":40\r\n"  # not read yet: still counted
    assert _run(s, b"SHOW", victim) == b"$-1\r\n"  # not a wrong job: no job
    assert node.spill.read_errors == 1 and "damaged" in logged[0]
    # Out of its queue at once (the simulator's seed 8 of --flow-to-disk found it
    # listed there still: QLEN counted a job the node no longer held).
    assert _run(s, b"QLEN", b"q") == b":39\r\n"
    served = []
    for _ in range(60):
        reply = _run(s, b"GETJOB", b"NOHANG", b"FROM", b"q")
        if reply == b"*-1\r\n":
            break
        served.append(reply.split(b"\r\n")[5])  # *1 *3 $1 q $40 <id> $n <body>
    assert served == ids[:-10] + ids[-9:]


def test_a_queue_whose_jobs_on_disk_are_all_damaged_serves_what_is_left():
    # Found by the simulator (seeds 16 and 25 of --flow-to-disk): NEEDJOBS and GETJOB
    # fetched from a queue whose spilled records all turned out damaged, and popped
    # from an empty list.
    _, s = _pair(3, window=1)
    node = s.node
    ids = _backlog(s, 30)
    on_disk = [job_id for job_id in ids if fingerprint(job_id) in node.spill.index]
    assert on_disk and node.spill.count == len(on_disk)
    for job_id in on_disk:
        _corrupt(s, job_id)
    reply = _run(s, b"GETJOB", b"NOHANG", b"COUNT", b"100", b"FROM", b"q")
    in_memory = [job_id for job_id in ids if job_id not in on_disk]
    assert reply.count(b"\r\n$40\r\n") == len(in_memory)
    assert all(job_id in reply for job_id in in_memory)
    assert _run(s, b"QLEN", b"q") == b":0\r\n"
    assert node.spill.read_errors == len(on_disk) and node.spill.count == 0


def test_a_failed_write_stops_spilling_and_loses_nothing():
    _, s = _pair(5, window=1)
    node = s.node
    store = node.spill.store
    assert isinstance(store, MemorySpillStore)
    store.fail_writes = True
    ids = _backlog(s, 60)
    s.run_for(300)
    assert store.failed is not None
    on_disk = node.spill.count
    more = _backlog(s, 60)
    assert node.spill.count == on_disk  # stopped
    assert _run(s, b"INFO", b"flowtodisk").count(b"flow_to_disk_status:err") == 1
    store.fail_writes = False
    s.run_for(300)
    assert store.failed is None
    bodies = []
    for _ in range(200):
        reply = _run(s, b"GETJOB", b"NOHANG", b"FROM", b"q")
        if reply == b"*-1\r\n":
            break
        bodies.append(reply.split(b"\r\n")[7])
    assert bodies == [b"job %d " % i + b"x" * 100 for i in range(60)] * 2
    assert len(ids + more) == 120


def test_spilled_jobs_expire_and_delayed_jobs_come_due():
    _, s = _pair(9, window=1)
    node = s.node
    for i in range(30):
        _run(s, b"ADDJOB", b"q", b"short %d" % i, b"0", b"TTL", b"5", b"RETRY", b"1")
    for i in range(30):
        _run(s, b"ADDJOB", b"d", b"late %d" % i, b"0", b"DELAY", b"20", b"RETRY", b"1")
    s.run_for(200)
    assert node.spill.count > 20
    assert _run(s, b"QLEN", b"d") == b":0\r\n"
    s.run_for(8000)
    assert _run(s, b"QLEN", b"q") == b":0\r\n"  # expired, spilled ones too
    s.run_for(15_000)
    assert _run(s, b"QLEN", b"d") == b":30\r\n"


def test_compaction_rewrites_sparse_segments():
    _, s = _pair(11, window=1)
    node = s.node
    store = node.spill.store
    assert isinstance(store, MemorySpillStore)
    ids = _backlog(s, 400)
    rng = random.Random(1)
    gone = rng.sample(ids[50:], 300)
    _run(s, b"DELJOB", *gone)  # loads them back to delete them
    before = store.disk_used()
    for _ in range(int(SHARDS / 256) + 5):
        s.run_for(100)
    assert node.spill.compactions >= 1
    assert store.disk_used() < before
    left = [i for i in ids if i not in set(gone)]
    served = []
    while True:
        reply = _run(s, b"GETJOB", b"NOHANG", b"COUNT", b"50", b"FROM", b"q")
        if reply == b"*-1\r\n":
            break
        served += [line for line in reply.split(b"\r\n") if line.startswith(b"D-")]
    assert served == left


def test_a_compaction_bounded_by_time_goes_on_between_ticks():
    """With a clock, a tick's housekeeping stops at its time budget and asks to go on
    (the server then calls housekeep() at the next turns of its loop)."""
    _, s = _pair(11, window=1)
    node = s.node
    store = node.spill.store
    assert isinstance(store, MemorySpillStore)
    ids = _backlog(s, 2000)
    gone = random.Random(1).sample(ids[50:], 1500)
    _run(s, b"DELJOB", *gone)
    before = store.disk_used()
    reads = itertools.count()
    node.spill.budget_clock = lambda: next(reads) * HOUSEKEEPING_S / 2  # (late at once)
    asked = []
    node.spill.housekeep_hook = lambda: asked.append(node.spill.compactions)
    for _ in range(100):  # ticks until one starts a compaction
        s.run_for(100)
        if node.spill.compactions:
            break
    assert asked == [1]  # (the tick's slice ran out of time)
    unfinished = store.disk_used()  # (records copied, their old segments still there)
    for _ in range(10_000):
        if not node.spill.housekeep():  # (one a turn of the server's loop)
            break
    assert store.disk_used() < min(before, unfinished)
    left = [i for i in ids if i not in set(gone)]
    served = []
    while (reply := _run(s, b"GETJOB", b"NOHANG", b"COUNT", b"50", b"FROM", b"q")) != b"*-1\r\n":
        served += [line for line in reply.split(b"\r\n") if line.startswith(b"D-")]
    assert served == left


def test_a_job_delivered_from_disk_keeps_its_retry_before_it_is_queued_again():
    _, s = _pair(13, window=1)
    ids = [_run(s, b"ADDJOB", b"q", b"j%d" % i, b"0", b"RETRY", b"2")[1:-2] for i in range(20)]
    s.run_for(5000)  # their requeue times pass, on disk
    assert s.node.spill.count > 10
    served = []
    for _ in range(20):
        served.append(_run(s, b"GETJOB", b"NOHANG", b"FROM", b"q").split(b"\r\n")[5])
    assert served == ids
    s.run_for(1000)  # under the 2 s retry (and jitter)
    assert _run(s, b"QLEN", b"q") == b":0\r\n"
    s.run_for(2000)
    assert _run(s, b"QLEN", b"q") == b":20\r\n"  # then every one is queued again
