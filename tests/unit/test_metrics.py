"""The metrics exposition (observe/metrics.py) on a node with a virtual clock: what each
family reads, the queues left out past metrics-queues-max, and the counters behind it
(error replies by prefix, the event loop's lag: observe/stats.py)."""

from __future__ import annotations

from base64 import urlsafe_b64decode

import pytest
from prometheus_client.parser import text_string_to_metric_families

from disquette.commands import new_state
from disquette.config import Config
from disquette.observe import merge, metrics
from disquette.state.server import ServerState
from disquette.state.stats import MAX_ERROR_TYPES, OTHER_ERRORS, Stats
from tests.unit.core_harness import Harness, RecordingClient


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.fixture
def state(harness: Harness) -> ServerState:
    st = new_state(Config(), harness.node)
    st.add_client(RecordingClient(1))
    return st


def run(state: ServerState, *argv: bytes) -> bytes | None:
    return state.execute(state.clients[1], list(argv))


def scrape(state: ServerState) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of a scrape: {sample name: {sorted labels: value}}."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(metrics.exposition(state).decode()):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def per_queue(samples, name: str) -> dict[str, float]:
    return {dict(labels)["queue"]: value for labels, value in samples.get(name, {}).items()}


def test_jobs_by_state_follow_the_commands(state, harness):
    ids = [run(state, b"ADDJOB", b"q", b"body%d" % i, b"0")[1:-2] for i in range(4)]  # type: ignore[index]
    run(state, b"GETJOB", b"FROM", b"q")
    run(state, b"GETJOB", b"FROM", b"q")
    run(state, b"ACKJOB", ids[0])  # alone in its cluster: the job goes at once
    s = scrape(state)
    jobs = {dict(k)["state"]: v for k, v in s["disquette_jobs"].items()}
    assert jobs == {"queued": 2, "active": 1, "acked": 0}
    assert per_queue(s, "disquette_queue_jobs") == {"q": 2}
    assert per_queue(s, "disquette_queue_jobs_in_total") == {"q": 4}
    assert per_queue(s, "disquette_queue_jobs_out_total") == {"q": 2}
    assert s["disquette_commands_total"][(("command", "addjob"),)] == 4
    assert s["disquette_commands_total"][(("command", "getjob"),)] == 2


def test_oldest_job_age_reads_the_virtual_clock(state, harness):
    run(state, b"ADDJOB", b"old", b"a", b"0")
    harness.clock.advance(3000)
    run(state, b"ADDJOB", b"old", b"b", b"0")
    run(state, b"ADDJOB", b"new", b"c", b"0", b"PRIORITY", b"5")
    harness.clock.advance(500)
    run(state, b"ADDJOB", b"new", b"d", b"0", b"PRIORITY", b"9")
    ages = per_queue(scrape(state), "disquette_queue_oldest_job_age_seconds")
    assert ages == {"old": 3.5, "new": 0.5}  # with priorities: the oldest of any level
    run(state, b"GETJOB", b"FROM", b"old")
    run(state, b"GETJOB", b"FROM", b"old")
    assert per_queue(scrape(state), "disquette_queue_oldest_job_age_seconds")["old"] == 0


def test_pause_and_blocked_clients(state, harness):
    run(state, b"PAUSE", b"q", b"out")
    run(state, b"PAUSE", b"r", b"all")
    s = scrape(state)
    assert per_queue(s, "disquette_queue_paused") == {"q": 2, "r": 3}
    waiter = RecordingClient(2)
    state.add_client(waiter)
    state.execute(waiter, [b"GETJOB", b"FROM", b"w"])
    s = scrape(state)
    assert per_queue(s, "disquette_queue_blocked_clients")["w"] == 1
    assert s["disquette_blocked_clients"][()] == 1


def test_queues_past_the_limit_are_summed(state):
    state.config.metrics_queues_max = 2
    for i, name in enumerate([b"a", b"b", b"c", b"d"]):
        for _ in range(i + 1):
            run(state, b"ADDJOB", name, b"x", b"0")
    s = scrape(state)
    assert per_queue(s, "disquette_queue_jobs") == {"d": 4, "c": 3}
    assert s["disquette_queues_omitted"][()] == 2
    assert s["disquette_queues_omitted_jobs"][()] == 3
    assert s["disquette_queues"][()] == 4
    state.config.metrics_queues_max = 0
    s = scrape(state)
    assert "disquette_queue_jobs" not in s and s["disquette_queues_omitted_jobs"][()] == 10


def test_hostile_queue_names_parse_back(state):
    names = [b'q"uote', b"back\\slash", b"new\nline", b"\xff\xfe", "caf\u00e9".encode()]
    for name in names:
        run(state, b"ADDJOB", name, b"x", b"0")
    labels = set(per_queue(scrape(state), "disquette_queue_jobs"))
    assert labels == {merge.name_text(n) for n in names}
    assert 'q"uote' in labels and "back\\slash" in labels and "new\nline" in labels
    (b64,) = [label for label in labels if label.startswith(merge.B64_PREFIX)]
    assert urlsafe_b64decode(b64[len(merge.B64_PREFIX) :]) == b"\xff\xfe"


def test_errors_by_prefix_from_the_pipeline(state):
    run(state, b"NOSUCHCOMMAND")
    run(state, b"ADDJOB", b"q")  # arity
    run(state, b"PAUSE", b"q", b"in")
    run(state, b"ADDJOB", b"q", b"x", b"0")  # -PAUSED
    state.config.requirepass = "secret"
    state.clients[1].authenticated = False
    run(state, b"PING")
    errors = {dict(k)["type"]: v for k, v in scrape(state)["disquette_errors_total"].items()}
    assert errors == {"ERR": 2, "PAUSED": 1, "NOAUTH": 1}


def test_error_types_are_bounded():
    stats = Stats()
    stats.count_error(b"-ERR syntax error\r\n")
    stats.count_error(b"-NOREPL\r\n")
    stats.count_error(b"-\r\n")
    stats.count_error(b"-" + b"X" * 100 + b"\r\n")
    assert stats.errors == {b"ERR": 1, b"NOREPL": 1, OTHER_ERRORS: 2}
    for i in range(200):
        stats.count_error(b"-E%d boom\r\n" % i)
    assert len(stats.errors) == MAX_ERROR_TYPES
    stats.reset()
    assert stats.errors == {}


def test_lag_max_spans_the_time_between_scrapes():
    stats = Stats()
    stats.track_lag(0.2)
    stats.track_lag(0.01)
    assert stats.loop_lag == 0.01
    assert stats.take_lag_max() == 0.2
    assert stats.take_lag_max() == 0.01  # the next span starts from the last reading
    stats.track_lag(0.05)
    assert stats.take_lag_max() == 0.05


def test_every_family_has_a_conventional_name_and_type(state):
    run(state, b"ADDJOB", b"q", b"x", b"0")
    run(state, b"BOGUS")
    for family in text_string_to_metric_families(metrics.exposition(state).decode()):
        assert family.name.startswith("disquette_")
        assert family.type in ("gauge", "counter"), family.name
        assert family.documentation
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name == family.name + "_total"
            assert not sample.name.endswith(("_ms", "_milliseconds", "_kb"))
