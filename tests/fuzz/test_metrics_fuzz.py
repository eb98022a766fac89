"""Fuzzing what reaches ``/metrics`` from clients: queue names (any bytes) and error
replies (counted by their prefix).

hypothesis drives the request pipeline in-process (a node on a virtual clock, as
test_commands_fuzz.py): random queue names become label values that Prometheus's
own parser reads back exactly as observe/merge.py's ``name_text`` made them (a UTF-8
name as it is, any other as ``~b64~`` base64 that decodes to the name), whatever quotes,
backslashes, newlines or bytes they hold; random error replies never raise and never
grow the table of error types past its bound.
"""

from __future__ import annotations

from base64 import urlsafe_b64decode

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from disquette.commands import new_state
from disquette.config import Config
from disquette.observe import merge, metrics
from disquette.state.stats import MAX_ERROR_TYPES, Stats
from tests.support.fuzz import fuzz_settings
from tests.unit.core_harness import Harness, RecordingClient

FUZZ = fuzz_settings(300)

NAMES = st.one_of(
    st.binary(min_size=1, max_size=40),
    st.text(alphabet='"\\\n\r\t {}=,#a\u00e9\u2028\x00', min_size=1, max_size=20).map(str.encode),
)


@FUZZ
@given(st.lists(NAMES, min_size=1, max_size=8, unique=True))
def test_any_queue_name_parses_back(names):
    state = new_state(Config(), Harness().node)
    client = RecordingClient(1)
    state.add_client(client)
    for name in names:
        assert state.execute(client, [b"ADDJOB", name, b"body", b"0"]).startswith(b"+")  # type: ignore[union-attr]
    text = metrics.exposition(state).decode()
    (family,) = [
        f for f in text_string_to_metric_families(text) if f.name == "disquette_queue_jobs"
    ]
    labels = {s.labels["queue"]: s.value for s in family.samples}
    assert labels == {merge.name_text(name): 1 for name in names}
    for label, name in zip(map(merge.name_text, names), names, strict=True):
        if label.startswith(merge.B64_PREFIX):
            assert urlsafe_b64decode(label[len(merge.B64_PREFIX) :]) == name
        else:
            assert label.encode() == name


@FUZZ
@given(st.lists(st.binary(max_size=60).map(lambda b: b"-" + b), max_size=200))
def test_any_error_reply_is_counted_within_bounds(replies):
    stats = Stats()
    for reply in replies:
        stats.count_error(reply)
    assert sum(stats.errors.values()) == len(replies)
    assert len(stats.errors) <= MAX_ERROR_TYPES
