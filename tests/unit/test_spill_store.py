"""The server's spill log (server/spill.py): real segment files in a temporary folder.

Faults are injected at the file descriptor, never in the store: ``os.dup2`` puts
``/dev/full`` (every write fails with ENOSPC) over a segment's fd and the file
back over it, so the store runs its own code against a real failing disk.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from disquette import __version__
from disquette.config import Config
from disquette.core.node import Node
from disquette.server.log import Log
from disquette.server.spill import (
    FLUSH_BYTES,
    FORMAT_FILE,
    OFFSET_BITS,
    SPILL_FORMAT,
    FileSpillStore,
    apply_config,
    close_store,
    segment_name,
)
from tests.support.fuzz import examples
from tests.unit.core_harness import Harness


def files(folder: Path) -> list[str]:
    """The folder's files but the format file (test_the_folder_says_its_format)."""
    return sorted(p.name for p in folder.iterdir() if p.name != FORMAT_FILE)


def on_disk(folder: Path, loc: int, size: int) -> bytes:
    """What a segment file holds at a location (read beside the store)."""
    with open(folder / segment_name(loc >> OFFSET_BITS), "rb") as f:
        f.seek(loc & ((1 << OFFSET_BITS) - 1))
        return f.read(size)


class Opener:
    """Opens segment files as the store would and remembers their fds by file name."""

    def __init__(self) -> None:
        self.fds: dict[str, int] = {}
        self.refuse: OSError | None = None  # raised instead of opening, while set

    def __call__(self, path: str, flags: int) -> int:
        if self.refuse is not None:
            raise self.refuse
        fd = os.open(path, flags, 0o600)
        self.fds[os.path.basename(path)] = fd
        return fd


def fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


# ---------------------------------------------------------------- basics


def test_append_read_round_trip_before_and_after_flush(tmp_path):
    store = FileSpillStore(str(tmp_path / "spill"))
    first = store.append(b"hello")
    second = store.append(b"world!")
    assert (first, second) == (0, 5)  # segment 0, offsets 0 and 5
    assert store.read(first, 5) == b"hello"  # pending: served from memory
    assert store.read(second, 6) == b"world!"
    assert os.path.getsize(tmp_path / "spill" / "spill-000000.log") == 0
    store.flush()
    assert store.failed is None
    assert on_disk(tmp_path / "spill", second, 6) == b"world!"  # now in the file
    assert store.read(first, 5) == b"hello"
    assert store.read(second, 6) == b"world!"
    third = store.append(b"!!")
    assert store.read(third, 2) == b"!!"
    assert store.read(second, 8) == b"world!!!"  # across the file and the pending bytes
    store.close()


def test_segments_roll_over_at_segment_bytes(tmp_path):
    folder = tmp_path / "spill"
    store = FileSpillStore(str(folder), segment_bytes=10)
    locs = [store.append(b"abcd") for _ in range(4)]
    # 0, 4, 8 fill segment 0 past 10 bytes; the fourth record starts segment 1.
    assert locs == [0, 4, 8, 1 << OFFSET_BITS]
    assert store.current == 1
    big = store.append(b"x" * 25)  # larger than a segment: in segment 1 after 4 bytes
    assert big == 1 << OFFSET_BITS | 4
    after = store.append(b"y")
    assert after == 2 << OFFSET_BITS
    store.flush()
    assert files(folder) == ["spill-000000.log", "spill-000001.log", "spill-000002.log"]
    assert os.path.getsize(folder / "spill-000000.log") == 12
    assert os.path.getsize(folder / "spill-000001.log") == 29
    assert store.read(big, 25) == b"x" * 25
    assert [store.read(loc, 4) for loc in locs] == [b"abcd"] * 4
    store.close()


def test_drop_closes_and_deletes_the_segment(tmp_path):
    folder = tmp_path / "spill"
    opener = Opener()
    store = FileSpillStore(str(folder), segment_bytes=4, opener=opener)
    a = store.append(b"aaaa")
    store.append(b"bbbb")
    store.flush()
    fd = opener.fds["spill-000000.log"]
    assert store.disk_used() == 8
    store.drop(a >> OFFSET_BITS)  # (closed and deleted by the store's reaper thread)
    store.settle()
    assert files(folder) == ["spill-000001.log"]
    assert not fd_is_open(fd)
    assert store.disk_used() == 4
    assert store.read(a, 4) == b""  # a dropped segment reads as nothing
    store.drop(0)  # again: nothing to do
    # The current segment, all dead: appends go on in a new one.
    store.drop(store.current)
    store.settle()
    assert store.current == 2 and files(folder) == []
    loc = store.append(b"cccc")
    assert loc >> OFFSET_BITS == 2 and store.read(loc, 4) == b"cccc"
    store.close()


def test_drop_of_a_segment_never_written(tmp_path):
    store = FileSpillStore(str(tmp_path), segment_bytes=4)
    store.append(b"aaaa")
    store.append(b"bbbb")  # segment 1, pending, no file yet
    store.append(b"cccc")
    store.drop(1)
    assert store.disk_used() == 8
    store.flush()
    assert files(tmp_path) == ["spill-000000.log", "spill-000002.log"]
    store.close()


def test_disk_used_counts_written_and_pending_bytes(tmp_path):
    store = FileSpillStore(str(tmp_path), segment_bytes=100)
    assert store.disk_used() == 0
    store.append(b"x" * 60)
    assert store.disk_used() == 60
    store.flush()
    store.append(b"y" * 50)  # still segment 0 (60 < 100)
    store.append(b"z" * 7)  # segment 1
    assert store.disk_used() == 117
    store.flush()
    assert (
        store.disk_used()
        == 117
        == sum((tmp_path / name).stat().st_size for name in files(tmp_path))
    )
    store.drop(0)
    assert store.disk_used() == 7
    store.close()
    assert store.disk_used() == 0


def test_a_large_pending_buffer_is_flushed_by_append(tmp_path):
    store = FileSpillStore(str(tmp_path))
    store.append(b"a" * FLUSH_BYTES)
    assert os.path.getsize(tmp_path / "spill-000000.log") == 0  # not past the limit yet
    store.append(b"b")
    assert os.path.getsize(tmp_path / "spill-000000.log") == FLUSH_BYTES + 1
    store.close()


def test_startup_discards_old_spill_files_only(tmp_path):
    for name in ("spill-000000.log", "spill-000017.log", "spill-9.log", "other.log", "spill.txt"):
        (tmp_path / name).write_bytes(b"old records")
    store = FileSpillStore(str(tmp_path))
    assert files(tmp_path) == ["other.log", "spill-000000.log", "spill.txt"]
    assert os.path.getsize(tmp_path / "spill-000000.log") == 0  # a new, empty segment 0
    store.close()


def test_the_folder_is_created(tmp_path):
    folder = tmp_path / "a" / "b" / "spill"
    store = FileSpillStore(str(folder))
    assert files(folder) == ["spill-000000.log"]
    store.close()


def test_close_deletes_every_segment_and_keeps_the_folder(tmp_path):
    folder = tmp_path / "spill"
    (folder).mkdir()
    (folder / "keep.txt").write_text("not the store's")
    opener = Opener()
    store = FileSpillStore(str(folder), segment_bytes=3, opener=opener)
    for _ in range(5):
        store.append(b"abc")
    store.flush()
    assert len(files(folder)) == 6
    store.append(b"pending")
    store.close()
    assert files(folder) == ["keep.txt"]
    assert not any(fd_is_open(fd) for fd in opener.fds.values())
    store.close()  # twice is harmless


def test_an_unusable_folder_is_a_clear_oserror(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError) as info:
        FileSpillStore(str(tmp_path / "file" / "spill"))
    assert info.value.errno in (errno.ENOTDIR, errno.EEXIST)
    assert info.value.strerror == (
        f"Can't use the flow-to-disk folder {tmp_path}/file/spill: Not a directory"
    )


def test_a_folder_held_by_another_store_is_refused(tmp_path):
    first = FileSpillStore(str(tmp_path))
    loc = first.append(b"mine")
    first.flush()
    with pytest.raises(OSError) as info:
        FileSpillStore(str(tmp_path))
    assert "another process uses it" in str(info.value.strerror)
    assert first.read(loc, 4) == b"mine"  # its files were left alone
    first.close()
    FileSpillStore(str(tmp_path)).close()  # free again


def test_a_shorter_file_reads_short(tmp_path):
    store = FileSpillStore(str(tmp_path))
    loc = store.append(b"0123456789")
    store.flush()
    os.truncate(tmp_path / "spill-000000.log", 4)
    assert store.read(loc, 10) == b"0123"
    store.close()


# ---------------------------------------------------------------- a full disk


def test_a_full_disk_keeps_everything_pending_until_it_heals(tmp_path):
    folder = tmp_path / "spill"
    opener = Opener()
    store = FileSpillStore(str(folder), segment_bytes=1 << 20, opener=opener)
    before = store.append(b"written before")
    store.flush()
    fd = opener.fds["spill-000000.log"]
    healthy = os.dup(fd)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, fd)  # the segment's fd now fails every write with ENOSPC
    try:
        during = store.append(b"appended while full")
        store.flush()  # never raises
        path = folder / "spill-000000.log"
        assert store.failed == f"Can't write the spill log {path}: No space left on device"
        assert store.read(during, 19) == b"appended while full"  # still pending
        # More than FLUSH_BYTES pending, and a new segment: append still never raises.
        bulk = [store.append(bytes([i]) * 400_000) for i in range(4)]
        assert store.current == 1
        assert store.failed is not None
        store.flush()
        assert "No space left on device" in str(store.failed)
        assert [store.read(loc, 1) for loc in bulk] == [bytes([i]) for i in range(4)]
        assert store.disk_used() == 14 + 19 + 4 * 400_000
        assert os.path.getsize(path) == 14  # nothing more reached the disk
    finally:
        os.dup2(healthy, fd)  # the disk has room again
        os.close(healthy)
        os.close(full)
    store.flush()
    assert store.failed is None
    assert on_disk(folder, before, 14) == b"written before"
    assert on_disk(folder, during, 19) == b"appended while full"
    for i, loc in enumerate(bulk):
        assert on_disk(folder, loc, 400_000) == bytes([i]) * 400_000
    assert store.disk_used() == sum((folder / name).stat().st_size for name in files(folder))
    store.close()


def test_a_segment_that_cannot_be_created_stays_pending(tmp_path):
    opener = Opener()
    store = FileSpillStore(str(tmp_path), segment_bytes=4, opener=opener)
    store.append(b"aaaa")
    opener.refuse = OSError(errno.ENOSPC, "No space left on device")
    loc = store.append(b"bbbb")  # segment 1: its file cannot be created
    store.flush()
    assert store.failed == (
        f"Can't write the spill log {tmp_path / 'spill-000001.log'}: No space left on device"
    )
    assert os.path.getsize(tmp_path / "spill-000000.log") == 4  # segment 0 was written
    assert store.read(loc, 4) == b"bbbb"
    opener.refuse = None
    store.flush()
    assert store.failed is None
    assert on_disk(tmp_path, loc, 4) == b"bbbb"
    store.close()


# ---------------------------------------------------------------- against a model


class StoreModel(RuleBasedStateMachine):
    """Random appends, reads, flushes and drops agree with a dict of what was stored."""

    records = Bundle("records")
    folder = Path()  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[int, bytes] = {}
        self.store: FileSpillStore | None = None

    @initialize(segment_bytes=st.integers(1, 64))
    def open_store(self, segment_bytes: int) -> None:
        self.store = FileSpillStore(str(self.folder), segment_bytes=segment_bytes)
        self.segment_bytes = segment_bytes

    @rule(target=records, data=st.binary(min_size=1, max_size=40))
    def append(self, data: bytes) -> int:
        assert self.store is not None
        before = self.store.current
        loc = self.store.append(data)
        segment = loc >> OFFSET_BITS
        assert segment in (before, before + 1) and segment == self.store.current
        for other, value in self.stored.items():  # never overlaps another record
            if other >> OFFSET_BITS == segment:
                assert other + len(value) <= loc or loc + len(data) <= other
        self.stored[loc] = data
        return loc

    @rule(loc=records)
    def read(self, loc: int) -> None:
        assert self.store is not None
        expected = self.stored.get(loc, b"")  # b"": its segment was dropped
        assert self.store.read(loc, len(expected) or 1) == (expected or b"")

    @rule(loc=records, cut=st.integers(0, 39))
    def read_part(self, loc: int, cut: int) -> None:
        assert self.store is not None
        if loc in self.stored:
            data = self.stored[loc]
            cut = min(cut, len(data) - 1)
            assert self.store.read(loc + cut, len(data) - cut) == data[cut:]

    @rule()
    def flush(self) -> None:
        assert self.store is not None
        self.store.flush()
        assert self.store.failed is None

    @precondition(lambda self: self.store is not None and self.store.current > 0)
    @rule(loc=consumes(records))
    def drop_its_segment(self, loc: int) -> None:
        assert self.store is not None
        segment = loc >> OFFSET_BITS
        self.store.drop(segment)  # the current one too: appends go to a new one
        for other in [o for o in self.stored if o >> OFFSET_BITS == segment]:
            del self.stored[other]
        self.store.settle()
        assert not (self.folder / segment_name(segment)).exists()

    @invariant()
    def disk_used_is_what_live_segments_hold(self) -> None:
        if self.store is None:
            return
        live = {loc >> OFFSET_BITS for loc in self.stored} | {self.store.current}
        expected = sum(len(v) for v in self.stored.values())
        assert self.store.disk_used() == expected
        on_disk = set(files(self.folder))
        assert on_disk <= {segment_name(s) for s in live}

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()
            assert list(self.folder.iterdir()) == []


def test_random_interleavings_agree_with_a_model(tmp_path, monkeypatch):
    monkeypatch.setattr(StoreModel, "folder", tmp_path / "model")
    run_state_machine_as_test(
        StoreModel, settings=settings(max_examples=examples(150), stateful_step_count=60)
    )


# ---------------------------------------------------------------- the directives


def told(node: Node) -> tuple[bool, int, int, int]:
    """What apply_config told the core's flow to disk: on, level, disk limit, window."""
    spill = node.spill
    return (spill.enabled, spill.threshold, spill.max_disk, spill.window)


def config_in(folder: Path, **values: object) -> Config:
    config = Config()
    config.dir = str(folder)
    for name, value in values.items():
        setattr(config, name, value)
    return config


def test_apply_config_opens_the_spill_log_when_flow_to_disk_is_on(tmp_path):
    node, log = Harness().node, Log("warning", str(tmp_path / "log"))
    config = config_in(tmp_path, maxmemory=100 << 20)
    assert apply_config(node, config, log) is None
    assert node.spill.store is None and not (tmp_path / "spill").exists()
    assert told(node) == (False, (100 << 20) // 100 * 60, 0, 256)
    config.flow_to_disk = True
    config.flow_to_disk_max_size = 1 << 30
    assert apply_config(node, config, log) is None
    store = node.spill.store
    assert store is not None and store.folder == str(tmp_path / "spill")
    assert files(tmp_path / "spill") == ["spill-000000.log"]
    assert told(node) == (True, (100 << 20) // 100 * 60, 1 << 30, 256)
    config.maxmemory = 200 << 20  # CONFIG SET maxmemory: a new threshold, the same store
    assert apply_config(node, config, log, changed="maxmemory") is None
    assert node.spill.store is store
    assert told(node) == (True, (200 << 20) // 100 * 60, 1 << 30, 256)
    config.flow_to_disk = False  # turned off: the store stays for the records it holds
    assert apply_config(node, config, log, changed="flow-to-disk") is None
    assert node.spill.store is store and told(node)[0] is False
    config.flow_to_disk_dir = "elsewhere"
    assert apply_config(node, config, log, changed="flow-to-disk-dir") == (
        f"flow-to-disk-dir can't change while the spill log is open in {tmp_path / 'spill'} "
        "(it stays there until the server restarts)"
    )
    close_store(node)
    assert node.spill.store is None and files(tmp_path / "spill") == []
    log.close()


def test_apply_config_reports_an_unusable_folder(tmp_path):
    (tmp_path / "file").write_text("")
    node, log = Harness().node, Log("warning", str(tmp_path / "log"))
    config = config_in(tmp_path, flow_to_disk=True, flow_to_disk_dir="file/spill")
    untouched = told(node)
    error = apply_config(node, config, log)
    assert error == (
        "flow-to-disk can't be turned on: Can't use the flow-to-disk folder "
        f"{tmp_path}/file/spill: Not a directory"
    )
    assert node.spill.store is None and told(node) == untouched
    log.close()
    assert error in (tmp_path / "log").read_text()


def test_an_absolute_flow_to_disk_dir_ignores_dir(tmp_path):
    node, log = Harness().node, Log("warning", str(tmp_path / "log"))
    config = config_in(tmp_path / "data", flow_to_disk=True, flow_to_disk_dir=str(tmp_path / "s"))
    assert apply_config(node, config, log) is None
    assert node.spill.store is not None and node.spill.store.folder == str(tmp_path / "s")
    close_store(node)
    log.close()


def test_the_folder_says_its_format(tmp_path):
    """spill-format names the format and the release; it goes with the segments."""
    (tmp_path / FORMAT_FILE).write_bytes(b"disquette spill log format 9 (disquette 9.0.0)\n")
    store = FileSpillStore(str(tmp_path))  # another release's folder: never read, replaced
    text = (tmp_path / FORMAT_FILE).read_bytes()
    assert text == b"disquette spill log format %d (disquette %s)\n" % (
        SPILL_FORMAT,
        __version__.encode(),
    )
    store.close()
    assert not (tmp_path / FORMAT_FILE).exists()
