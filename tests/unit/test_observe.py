"""Unit tests of :mod:`disquette.observe`: the latency monitor with Redis's
sparkline graph and doctor report, the slow log, the statistics, and the INFO
text builder on an in-process server state."""

from __future__ import annotations

import re

import pytest

from disquette.commands import new_state
from disquette.config import Config
from disquette.observe import info as info_mod
from disquette.state import clients
from disquette.state.latency import (
    GRAPH_COLUMNS,
    HISTORY,
    LatencyMonitor,
    _age_label,
    sparkline,
)
from disquette.state.server import ServerState
from disquette.state.slowlog import SlowLog
from disquette.state.stats import Stats
from tests.unit.core_harness import Harness, RecordingClient

# ---------------------------------------------------------------- sparkline


def test_sparkline_three_values():
    # steps = 3 chars x 4 rows = 12; min 1, range 9: steps 0, 5 (48/9), 11 (clamped 12)
    out = sparkline([1, 5, 10], ["a", "bc", ""])
    assert out.split("\n") == [
        "  #",
        "  |",
        " #|",
        "_||",
        "   ",  # margin between graph and labels
        "ab ",
        " c ",
        "",
    ]


def test_sparkline_constant_values_sit_on_the_floor():
    assert sparkline([7, 7], ["", ""]) == "  \n  \n  \n__\n"


def test_sparkline_without_labels_has_no_margin():
    out = sparkline([0, 12], ["", ""])
    assert out == " #\n |\n |\n_|\n"


def test_sparkline_wraps_at_the_column_count():
    values = list(range(GRAPH_COLUMNS + 5))
    out = sparkline(values, [""] * len(values))
    blocks = out.split("\n\n")
    assert len(blocks) == 2
    assert all(len(line) == GRAPH_COLUMNS for line in blocks[0].split("\n"))
    assert all(len(line) == 5 for line in blocks[1].strip("\n").split("\n"))


def test_sparkline_empty():
    assert sparkline([], []) == ""


@pytest.mark.parametrize(
    ("elapsed", "label"),
    [(0, "0s"), (59, "59s"), (60, "1m"), (3599, "59m"), (3600, "1h"), (86399, "23h"),
     (86400, "1d"), (864000, "10d")],
)  # fmt: skip
def test_age_labels(elapsed, label):
    assert _age_label(elapsed) == label


# ---------------------------------------------------------------- latency monitor


def test_samples_in_the_same_second_merge_keeping_the_maximum():
    mon = LatencyMonitor()
    mon.add("command", 5, now_s=100)
    mon.add("command", 9, now_s=100)
    mon.add("command", 3, now_s=100)
    mon.add("command", 4, now_s=101)
    assert mon.events["command"].samples == [(100, 9), (101, 4)]
    assert mon.events["command"].max == 9


def test_history_is_capped():
    mon = LatencyMonitor()
    for t in range(HISTORY + 10):
        mon.add("e", t + 1, now_s=t)
    samples = mon.events["e"].samples
    assert len(samples) == HISTORY
    assert samples[0] == (10, 11)


def test_reset():
    mon = LatencyMonitor()
    mon.add("a", 1, now_s=1)
    mon.add("b", 1, now_s=1)
    assert mon.reset(["a", "a", "zzz"]) == 1
    assert list(mon.events) == ["b"]
    assert mon.reset() == 1
    assert mon.reset() == 0


def test_graph_text():
    mon = LatencyMonitor()
    mon.add("command", 10, now_s=1000)
    mon.add("command", 30, now_s=1070)
    graph = mon.graph("command", now_s=1100)
    lines = graph.split("\n")
    assert lines[0] == "command - high 30 ms, low 10 ms (all time high 30 ms)"
    assert lines[1] == "-" * 80
    assert lines[2:6] == [" #", " |", " |", "_|"]
    assert lines[6] == "  "
    assert lines[7:10] == ["13", "m0", " s"]  # 1m40s -> "1m", 30s -> "30s"
    assert graph.endswith("\n")


def test_graph_unknown_event():
    assert LatencyMonitor().graph("nope") is None


def test_event_stats():
    mon = LatencyMonitor()
    for t, ms in [(100, 10), (101, 20), (102, 30)]:
        mon.add("e", ms, now_s=t)
    s = mon.stats("e", now_s=110)
    assert (s.samples, s.avg, s.mad, s.period, s.all_time_high) == (3, 20, 6, 10, 30)


def test_doctor_disabled():
    report = LatencyMonitor().doctor(0, 10000, 10, "everysec")
    assert report.startswith("I'm sorry, Dave, I can't do that.")


def test_doctor_no_spikes():
    report = LatencyMonitor().doctor(100, 10000, 10, "everysec")
    assert report.startswith("Dave, no latency spike was observed")


def test_doctor_command_event_advice():
    mon = LatencyMonitor()
    mon.add("command", 50, now_s=100)
    report = mon.doctor(5, 10000, 10, "everysec", now_s=100)
    assert report.startswith("Dave, I have observed latency spikes")
    assert (
        "1. command: 1 latency spikes (average 50ms, mean deviation 0ms, period 1.00 sec). "
        "Worst all time event 50ms.\n" in report
    )
    assert "I have a few advices for you:" in report
    # slowlog-log-slower-than 10 ms > threshold 5 ms: advise lowering it to 5000 us
    assert "'CONFIG SET slowlog-log-slower-than 5000'" in report
    assert "SLOWLOG GET" in report


def test_doctor_fsync_always_advice_only_with_always():
    mon = LatencyMonitor()
    mon.add("aof-fsync-always", 50, now_s=100)
    assert "relax the fsync policy" in mon.doctor(5, 1000, 10, "always", now_s=100)
    assert "relax the fsync policy" not in mon.doctor(5, 1000, 10, "everysec", now_s=100)


def test_doctor_hz_advice_depends_on_hz():
    mon = LatencyMonitor()
    mon.add("jobs-processing", 50, now_s=100)
    assert "CONFIG SET hz 100" in mon.doctor(5, 1000, 10, "everysec", now_s=100)
    assert "CONFIG SET hz 100" not in mon.doctor(5, 1000, 100, "everysec", now_s=100)


# ---------------------------------------------------------------- slow log


def test_slowlog_entries_newest_first_and_trimmed():
    log = SlowLog()
    for i in range(5):
        log.add([b"PING", b"%d" % i], 10, 1000 + i, max_len=3)
    assert [e.id for e in log.entries] == [4, 3, 2]
    assert log.entries[0].args == [b"PING", b"4"]
    assert log.entries[0].time == 1004
    log.reset()
    assert not log.entries
    log.add([b"PING"], 1, 1, max_len=3)
    assert log.entries[0].id == 5  # ids keep growing across resets


def test_slowlog_argument_truncation():
    log = SlowLog()
    log.add([b"X"] * 40, 1, 1, max_len=10)
    args = log.entries[0].args
    assert len(args) == 32 and args[-1] == b"... (9 more arguments)"
    log.add([b"X", b"y" * 129], 1, 1, max_len=10)
    assert log.entries[0].args[1] == b"y" * 128 + b"... (1 more bytes)"


def test_slowlog_exactly_32_arguments_are_kept_whole():
    log = SlowLog()
    argv = [b"%d" % i for i in range(32)]
    log.add(argv, 1, 1, max_len=10)
    assert log.entries[0].args == argv


# ---------------------------------------------------------------- stats


def test_stats_rates_and_reset():
    stats = Stats()
    stats.sample(1000)
    stats.commands_processed = 100
    stats.net_input_bytes = 10240
    stats.sample(1100)  # 100 commands in 100 ms = 1000/s, for 1 of 16 samples
    assert stats.ops_per_sec == 1000 // 16
    assert stats.input_kbps == pytest.approx(100 / 16)
    stats.reset()
    assert stats.ops_per_sec == 0
    assert stats.commands_processed == 0


def test_peak_memory_survives_reset():
    stats = Stats()
    assert stats.track_memory(500) == 500
    assert stats.track_memory(100) == 500
    stats.reset()
    assert stats.track_memory(10) == 500


# ---------------------------------------------------------------- INFO text


@pytest.fixture
def state() -> ServerState:
    harness = Harness()
    st = new_state(Config(), harness.node)
    st.add_client(RecordingClient(1))
    return st


def sections(text: bytes) -> list[str]:
    return re.findall(r"^# (\w+)\r$", text.decode(), re.M)


def test_sections_for():
    assert info_mod.sections_for("default") == info_mod.DEFAULT_SECTIONS
    assert info_mod.sections_for("ALL") == info_mod.ALL_SECTIONS
    assert info_mod.sections_for("Cpu") == ("cpu",)
    assert info_mod.sections_for("nope") == ()


def test_info_text_layout(state):
    text = info_mod.info_text(state)
    assert sections(text) == ["Server", "Clients", "Memory", "Jobs", "Queues", "Persistence",
                              "Stats", "CPU"]  # fmt: skip
    assert text.count(b"\r\n\r\n#") == 7
    assert info_mod.info_text(state, "nope") == b""


def test_info_commandstats(state):
    state.execute(state.clients[1], [b"PING"])
    state.execute(state.clients[1], [b"PING"])
    state.execute(state.clients[1], [b"TIME"])
    text = info_mod.info_text(state, "commandstats").decode()
    lines = text.split("\r\n")
    assert lines[0] == "# Commandstats"
    assert lines[1].startswith("cmdstat_ping:calls=2,usec=")
    assert lines[2].startswith("cmdstat_time:calls=1,usec=")
    assert lines[3] == ""


def test_info_values(state):
    state.config.appendonly = True
    state.aof_write_error = "No space left on device"
    state.node.loading = True
    text = info_mod.info_text(state, "persistence").decode()
    assert "aof_state:on\r\n" in text
    assert "aof_last_write_status:err\r\n" in text
    assert "aof_delayed_fsync:0\r\n" in text
    assert "loading:1\r\n" in text
    assert "loading_loaded_perc:0.00\r\n" in text
    assert "loading_eta_seconds:" in text


def test_info_memory_with_empty_dataset(state):
    state.node.used_memory = 0
    state.node.client_memory = 0
    text = info_mod.info_text(state, "memory").decode()
    assert "used_memory:0\r\n" in text
    assert "used_memory_human:0B\r\n" in text
    assert "mem_fragmentation_ratio:0.00\r\n" in text


def test_output_list_length():
    assert clients.output_list_length(0) == 0
    assert clients.output_list_length(1) == 1
    assert clients.output_list_length(16384) == 1
    assert clients.output_list_length(16385) == 2


def test_rss_is_positive():
    assert info_mod.rss_bytes() > 0
