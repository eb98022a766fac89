"""Fuzzing the rate and concurrency options and the limited GETJOB path.

QPOLICY SET with any ``rate`` / ``concurrency`` values (numbers at and beyond their
range, garbage) answers OK or the option's error, never anything else; and any
sequence of GETJOB (NOHANG, COUNT), ACKJOB, NACK, DELJOB, policy changes and time
passing on a node with a limited queue keeps the books right: the jobs the node
counts in flight are exactly those it handed out and got nothing back for, never
more than the concurrency, and no second sees more deliveries than the rate and
its burst.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from disquette.commands import new_state
from disquette.config import Config
from disquette.core.ratelimit import EPOCH
from tests.support.fuzz import fuzz_settings
from tests.unit.core_harness import Harness, RecordingClient

FUZZ = fuzz_settings(500, database=None)
VALUES = st.one_of(
    st.sampled_from([b"0", b"1", b"-1", b"4294967296", b"4294967297", b"1e3", b"x", b""]),
    st.integers(-5, 50).map(lambda n: b"%d" % n),
    st.binary(max_size=6),
)
OPTIONS = st.sampled_from([b"rate", b"concurrency", b"RATE", b"Concurrency"])


@FUZZ
@given(st.lists(st.tuples(OPTIONS, VALUES), min_size=1, max_size=3))
def test_any_limit_value_gets_ok_or_its_error(pairs):
    h = Harness()
    state = new_state(Config(), h.node)
    client = RecordingClient()
    state.add_client(client)
    argv = [b"QPOLICY", b"SET", b"p", b"q"] + [x for pair in pairs for x in pair]
    reply = state.execute(client, argv)
    good = all(v.isdigit() and 1 <= int(v) <= 1 << 32 for _, v in pairs)
    if good:
        assert reply == b"+OK\r\n"
    else:
        assert reply.startswith(b"-ERR ") and b"must be a positive number" in reply


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("get"), st.integers(1, 4)),
        st.tuples(st.just("ack"), st.integers(0, 9)),
        st.tuples(st.just("nack"), st.integers(0, 9)),
        st.tuples(st.just("del"), st.integers(0, 9)),
        st.tuples(st.just("wait"), st.integers(1, 1500)),
        st.tuples(st.just("policy"), st.integers(1, 6)),
    ),
    max_size=40,
)


@FUZZ
@given(st.integers(1, 6), st.integers(1, 4), STEPS)
def test_the_books_stay_right_whatever_consumers_do(rate, concurrency, steps):
    h = Harness()
    node = h.node
    node.policies.set(b"p", b"q", {"rate": rate, "concurrency": concurrency})
    for n in range(30):
        node.add_job(None, b"q", b"%d" % n, 0, repl=1, retry=3600)
    h.run_for(2 * EPOCH)
    out: list[bytes] = []  # handed out, nothing back yet
    times: list[int] = []
    for kind, n in steps:
        limit = node.rates.limits.get(b"q")
        if kind == "get":
            jobs = node.get_jobs([b"q"], n)
            out += [job.id for job in jobs]
            times += [h.clock.now] * len(jobs)
        elif kind == "wait":
            h.run_for(n)
        elif kind == "policy":  # the limits change under the consumers
            node.policies.set(b"p", b"q", {"rate": n, "concurrency": n})
            rate = concurrency = max(rate, n)  # (what was handed out stays out)
        elif out:
            job_id = out.pop(n % len(out))
            {"ack": node.ack_jobs, "nack": lambda ids: node.requeue_jobs(ids, True),
             "del": node.delete_jobs}[kind]([job_id])  # fmt: skip
        assert limit is not None and limit is node.rates.limits[b"q"]
        assert limit.inflight == len(out) == len(node.rates.held) <= concurrency
        assert set(node.rates.held) == set(out)
        assert 0 <= limit.tokens <= max(1, limit.burst)
    for t in times:  # a node alone holds the whole limit: rate plus its burst a second
        assert sum(1 for u in times if t <= u < t + 1000) <= rate + -(-rate // 10)
