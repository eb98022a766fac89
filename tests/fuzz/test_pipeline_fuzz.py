"""Differential fuzzing of pipelined runs: requests executed as the connection does for
a pipeline (runs of one command through :meth:`ServerState.execute_run`, the rest
through :meth:`ServerState.execute`) must give the same replies and leave the node in
the same state as the same requests executed one at a time. Two nodes with the same
seed and clock make the same job IDs, so replies compare byte for byte."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.commands import new_state
from disquette.config import Config
from disquette.core.job import FIELDS
from disquette.state.server import ServerState
from tests.support.fuzz import examples
from tests.unit.core_harness import Harness, RecordingClient

QUEUES = st.sampled_from([b"a", b"b", b"c"])
NUMBERS = st.sampled_from([b"0", b"1", b"5", b"100", b"-1", b"x", b"86400", b"99999999"])
OPTIONS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from([b"REPLICATE", b"RETRY", b"TTL", b"MAXLEN", b"DELAY"]), NUMBERS),
        st.just((b"ASYNC",)),
    ),
    max_size=2,
)


@st.composite
def addjob(draw) -> list[bytes]:
    name = draw(st.sampled_from([b"ADDJOB", b"addjob", b"AddJob"]))
    argv = [name, draw(QUEUES), draw(st.binary(max_size=8)), draw(NUMBERS)]
    for option in draw(OPTIONS):
        argv += option
    return argv[: draw(st.integers(2, len(argv)))] if draw(st.booleans()) else argv


OTHER = st.sampled_from(
    [
        [b"QLEN", b"a"],
        [b"PAUSE", b"a", b"in"],
        [b"PAUSE", b"a", b"none"],
        [b"GETJOB", b"NOHANG", b"FROM", b"b"],
        [b"PING"],
    ]
)
# Runs of the same ADDJOB are what pipelining producers send; repeat some.


def _flatten(items: list) -> list[list[bytes]]:
    return [
        r for item in items for r in ([item[0]] * item[1] if isinstance(item, tuple) else [item])
    ]


REQUESTS = st.lists(
    st.one_of(addjob(), OTHER, st.tuples(addjob(), st.integers(2, 40))), min_size=1, max_size=30
).map(_flatten)


def node_state(h: Harness) -> dict:
    return {
        job.id: tuple(getattr(job, slot) for slot in FIELDS if slot != "waiter")
        for job in h.node.jobs.values()
    } | {b"used": h.node.used_memory, b"random": h.node.rng.random()}


def fresh(maxmemory: int) -> tuple[Harness, ServerState, RecordingClient]:
    h = Harness(seed=3, maxmemory=maxmemory)
    config = Config()
    config.maxmemory = maxmemory
    state = new_state(config, h.node)
    client = RecordingClient(1)
    state.add_client(client)
    return h, state, client


@settings(max_examples=examples(300))
@given(requests=REQUESTS, maxmemory=st.sampled_from([1 << 30, 705_000, 720_000, 600_000]))
def test_pipelined_runs_are_one_by_one(requests, maxmemory):
    h1, one_state, one_client = fresh(maxmemory)
    expected = [one_state.execute(one_client, argv) for argv in requests]

    h2, state, client = fresh(maxmemory)
    got: list = []
    i = 0
    while i < len(requests):
        count, replies = state.execute_run(client, requests, i)
        if count:
            got += [b"+%s\r\n" % jid for jid in replies[1:-2].split(b"\r\n+")]
            assert len(got) == i + count
            i += count
        else:
            got.append(state.execute(client, requests[i]))
            i += 1
    assert got == expected
    assert node_state(h2) == node_state(h1)
    addjobs = state.commands[b"addjob"]
    assert (addjobs.calls, state.stats.commands_processed) == (
        one_state.commands[b"addjob"].calls,
        one_state.stats.commands_processed,
    )


def test_a_run_of_addjobs_is_made_in_one_go():
    _, state, client = fresh(1 << 30)
    requests = [[b"ADDJOB", b"q", b"x", b"0"]] * 50 + [[b"QLEN", b"q"]]
    count, replies = state.execute_run(client, requests, 0)
    assert count == 50
    assert replies.count(b"\r\n") == 50
    assert state.execute_run(client, requests, 50) == (0, b"")  # QLEN has no run
    assert state.execute(client, requests[50]) == b":50\r\n"
