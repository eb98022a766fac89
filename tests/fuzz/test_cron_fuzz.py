"""Fuzzing CRON SET's arguments: whatever they are, the node answers +OK or an error
(never a crash), and a schedule it accepts is one every peer and nodes.conf accept
back (its record decodes to the same schedule), whose ticks the node can compute."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.commands import new_state
from disquette.config import Config
from disquette.core.cron import decode
from tests.support.fuzz import examples
from tests.unit.core_harness import Harness, RecordingClient

H = Harness()
STATE = new_state(Config(), H.node)
CLIENT = RecordingClient(1)
STATE.add_client(CLIENT)

FIELDS = ["*", "*/2", "*/15", "0", "5", "59", "60", "1-5", "MON-FRI", "JAN", "L", "?", "1,2",
          "30", "31", "-1", "x", ""]  # fmt: skip
OPTION_NAMES = ["REPLICATE", "RETRY", "TTL", "DELAY", "MAXLEN", "PRIORITY", "ASYNC", "DEDUP",
                "AFTER", "replicate", "async", "nosuch"]  # fmt: skip
VALUES = ["0", "1", "2", "3", "9", "10", "100", "65535", "65536", "86400", "4294967296",
          "4294967297", "-1", "abc", "", "99999999999999999999"]  # fmt: skip

expressions = st.one_of(
    st.lists(st.sampled_from(FIELDS), min_size=4, max_size=7).map(" ".join),
    st.text(max_size=30),
).map(lambda s: s.encode("utf-8", "surrogatepass"))
specs = st.one_of(
    st.tuples(st.sampled_from([b"EVERY", b"every"]), st.sampled_from(VALUES).map(str.encode)),
    st.tuples(st.sampled_from([b"SCHEDULE", b"schedule"]), expressions),
    st.tuples(st.binary(max_size=8), st.binary(max_size=8)),
)
token = st.one_of(st.sampled_from(OPTION_NAMES), st.sampled_from(VALUES)).map(str.encode)
pair = st.tuples(st.sampled_from(OPTION_NAMES[:6]), st.sampled_from(VALUES[:9])).map(
    lambda p: (p[0].encode(), p[1].encode())
)
options = st.lists(st.one_of(pair, pair, st.tuples(token)), max_size=4).map(
    lambda groups: [arg for group in groups for arg in group]
)


@settings(max_examples=examples(3000), database=None)
@given(
    st.one_of(st.just(b"s"), st.binary(max_size=210)),
    st.one_of(st.just(b"q"), st.binary(max_size=12)),
    st.binary(max_size=20),
    specs,
    options,
)
def test_cron_set_answers_ok_or_an_error_and_what_it_accepts_travels(name, queue, body, spec, opts):
    reply = STATE.execute(CLIENT, [b"CRON", b"SET", name, queue, body, *spec, *opts])
    assert reply is not None
    if not reply.startswith(b"+OK"):
        assert reply.startswith(b"-ERR "), reply
        return
    record = H.node.crons.get(name)
    assert record is not None
    copy = decode(record.encode())
    assert copy is not None and (copy.queue, copy.body, copy.every, copy.expr, copy.options) == (
        record.queue, record.body, record.every, record.expr, record.options,
    )  # fmt: skip
    H.run_for(200)  # its ticks are computed (and maybe fired) by cron
    listed = STATE.execute(CLIENT, [b"CRON", b"GET", name])
    assert listed.startswith(b"*8\r\n")
    assert STATE.execute(CLIENT, [b"CRON", b"DEL", name]) == b":1\r\n"
