"""Hypothesis: task bodies round-trip in both encodings, and no byte string crashes decode."""

from __future__ import annotations

import json

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from disquette.client.task_body import BodyError, Message, decode, encode

scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text()
json_values = st.recursive(
    scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
messages = st.builds(
    Message,
    st.text(min_size=1),
    st.lists(json_values, max_size=5).map(tuple),
    st.dictionaries(st.text(), json_values, max_size=5),
    st.dictionaries(st.text(), st.text(), max_size=3),
)


def canonical(value):
    """Lists for tuples, as both encodings give them back."""
    return json.loads(json.dumps(value))


@given(messages, st.sampled_from(["json", "msgpack"]))
def test_a_message_round_trips(message, encoding):
    back = decode(encode(message, encoding))
    assert back.task == message.task
    assert canonical(back.args) == canonical(message.args)
    assert canonical(back.kwargs) == canonical(message.kwargs)
    assert back.meta == message.meta


@given(st.binary(max_size=200))
def test_decode_never_crashes(body):
    try:
        message = decode(body)
    except BodyError:
        return
    assert isinstance(message, Message) and message.task


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=5))
def test_any_map_is_a_message_or_a_body_error(raw):
    for body in (json.dumps(raw).encode(), msgpack.packb(raw)):
        try:
            decode(body)
        except BodyError:
            pass


@given(messages)
def test_the_json_body_is_the_documented_map_byte_for_byte(message):
    """The fast encoder writes exactly what encoding the map in one piece writes."""
    body = {"v": 1, "task": message.task, "args": list(message.args)}
    if message.kwargs:
        body["kwargs"] = message.kwargs
    if message.meta:
        body["meta"] = message.meta
    expected = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    assert encode(message) == expected
