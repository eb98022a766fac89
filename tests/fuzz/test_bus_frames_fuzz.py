"""Property tests of the cluster bus framing: what a peer sends can only be a valid
frame or a FrameError, however it is cut, corrupted or made up.

Valid frames round-trip through any split of the byte stream; random bytes,
corrupted frames and arbitrary msgpack documents never raise anything but
:class:`FrameError`; a length prefix over the limit is refused before the
payload arrives. A frame of a newer protocol version keeps the messages this
release knows, in order, and leaves out (and counts) the others, while one of
this version or older is refused for the same messages. Frames that pass
validation are then fed to a node's membership and version handshake
(core/dialect.py), which must take any of them without an exception. The
cluster-secret handshake helpers are checked the same way.
"""

from __future__ import annotations

import os
import random

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disquette.core import messages as msg
from disquette.core.dialect import CURRENT, PROTOCOL, codec_for
from disquette.core.membership import FAIL, LEAVING, MYSELF, NOADDR, PFAIL
from disquette.core.messages import SHAPES, Header
from disquette.core.node import Node
from disquette.protocol import bus_auth
from disquette.protocol.frames import (
    MAX_FRAME_BYTES,
    VERSION_SHIFT,
    FrameError,
    FrameReader,
    decode_frame,
    encode_frame,
    encode_payload,
)
from tests.support.fuzz import examples, fuzz_settings
from tests.unit.core_harness import Settings

FUZZ = fuzz_settings(2000, HealthCheck.data_too_large)

HEX = "0123456789abcdef"
node_ids = st.text(HEX, min_size=40, max_size=40).map(str.encode)
ints = st.integers(-(1 << 63), (1 << 64) - 1)
small = st.integers(0, 1 << 32)
blobs = st.binary(max_size=64)
flag_bits = st.integers(0, 0xFFFF)
gossip_entry = st.tuples(
    node_ids, ints, ints, st.binary(max_size=64), st.integers(0, 0xFFFF), flag_bits
)
gossip = st.lists(gossip_entry, max_size=3).map(tuple)
# SETACK and GOTACK: flat job_id, number pairs.
id_number_pairs = st.lists(st.tuples(blobs, small), max_size=3).map(
    lambda pairs: tuple(x for pair in pairs for x in pair)
)
# PROGRESS: flat ms, node_id, text triples.
log_entries = st.lists(st.tuples(ints, node_ids, blobs), max_size=3).map(
    lambda entries: tuple(x for entry in entries for x in entry)
)
# RATEDEMAND: flat queue, rate, concurrency, held quadruples.
demands = st.lists(st.tuples(blobs, ints, ints, ints), max_size=3).map(
    lambda entries: tuple(x for entry in entries for x in entry)
)
# ADDRESS: flat node_id, bus port pairs.
bus_ports = st.lists(st.tuples(node_ids, st.integers(0, 0xFFFF)), max_size=3).map(
    lambda pairs: tuple(x for pair in pairs for x in pair)
)
versions = st.integers(1, 0xFF)
names = st.binary(min_size=1, max_size=64)
headers = st.builds(
    Header, node_ids, st.integers(0, 0xFFFF), flag_bits, st.integers(0, (1 << 64) - 1)
)

FIELD = {
    msg.PING: (gossip, ints),
    msg.PONG: (gossip, ints, ints),
    msg.MEET: (gossip, ints),
    msg.FAIL: (node_ids,),
    msg.REPLJOB: (blobs, small),
    msg.GOTJOB: (st.lists(blobs, max_size=3).map(tuple),),
    msg.ENQUEUE: (blobs, small),
    msg.QUEUED: (blobs, small),
    msg.SETACK: (id_number_pairs,),
    msg.WILLQUEUE: (blobs,),
    msg.GOTACK: (id_number_pairs,),
    msg.DELJOB: (st.lists(blobs, max_size=3).map(tuple),),
    msg.NEEDJOBS: (blobs, small),
    msg.YOURJOBS: (st.lists(blobs, max_size=3).map(tuple),),
    msg.WORKING: (blobs,),
    msg.PAUSE: (blobs, small),
    msg.HOLDERS: (blobs, st.lists(node_ids, max_size=3).map(tuple)),
    msg.POLICYDIGEST: (small,),
    msg.POLICIES: (st.lists(blobs, max_size=3).map(tuple), small),
    msg.DEPQUERY: (small, st.lists(blobs, max_size=3).map(tuple)),
    msg.DEPSTATE: (small, id_number_pairs),
    msg.PROGRESS: (blobs, log_entries),
    msg.GOTPROGRESS: (blobs, small),
    msg.CLAIM: (blobs, ints),
    msg.CRONDIGEST: (small,),
    msg.CRONS: (st.lists(blobs, max_size=3).map(tuple), small),
    msg.CRONFIRED: (id_number_pairs,),
    msg.OUTCOME: (blobs, small, blobs),
    msg.POSTPONE: (blobs, small, ints),
    msg.RATEDEMAND: (ints, demands),
    msg.ACLDIGEST: (small,),
    msg.ACLUSERS: (st.lists(blobs, max_size=3).map(tuple), small),
    msg.VERSION: (versions, versions, names, st.lists(names, max_size=4).map(tuple), small),
    msg.ADDRESS: (
        st.binary(max_size=64),
        st.integers(0, 0xFFFF),
        st.integers(0, 0xFFFF),
        bus_ports,
    ),
}
messages = st.one_of(*(st.tuples(st.just(kind), *fields) for kind, fields in sorted(FIELD.items())))
frames = st.tuples(headers, st.lists(messages, min_size=1, max_size=4).map(tuple))

# Any msgpack document (what a confused or hostile peer could send).
documents = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 64) - 1)
    | st.floats(allow_nan=False)
    | st.binary(max_size=50)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


def decode(payload: bytes) -> tuple[tuple, tuple]:
    """A frame decoded as this release's node decodes it."""
    return decode_frame(payload, codec_for(CURRENT))


def read_all(chunks: list[bytes], limit: int = MAX_FRAME_BYTES) -> list[object]:
    """What a link does with the stream: payloads, each decoded (or FrameError)."""
    reader = FrameReader(limit)
    out: list[object] = []
    for chunk in chunks:
        reader.feed(chunk)
        while (payload := reader.next_payload()) is not None:
            out.append(decode(payload))
    return out


def test_every_message_type_has_a_shape():
    flags = ("NOREPLY", "INCR_NACKS", "INCR_DELIV", "FULL_TABLE")
    types = {v for k, v in vars(msg).items() if k.isupper() and k not in flags
             and isinstance(v, int) and not k.startswith(("MAX_", "_"))}  # fmt: skip
    assert set(SHAPES) == set(FIELD) == types


@FUZZ
@given(st.lists(frames, min_size=1, max_size=3), st.lists(st.integers(0, 10_000), max_size=6))
def test_valid_frames_round_trip_through_any_split(batch, cuts):
    # (Tolerance only ever leaves out unknown types and extra fields: none here.)
    stream = b"".join(encode_frame(h, list(m)) for h, m in batch)
    assert read_all(split(stream, cuts)) == batch


@FUZZ
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=5))
def test_random_bytes_are_frames_or_frame_errors(data, cuts):
    try:
        read_all(split(data, cuts))
    except FrameError:
        pass


@FUZZ
@given(frames, st.data())
def test_corrupted_frames_are_refused_or_still_valid(frame, data):
    encoded = bytearray(encode_frame(*frame))
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        pos = data.draw(st.integers(0, max(len(encoded) - 1, 0)))
        if action == "flip" and encoded:
            encoded[pos] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del encoded[pos:]
        elif action == "insert":
            encoded[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif encoded:
            del encoded[pos]
    try:
        for header, messages in read_all([bytes(encoded)]):
            assert len(header) == 4 and len(header[0]) == 40
            assert messages or header[2] >> VERSION_SHIFT > PROTOCOL  # (all skipped)
    except FrameError:
        pass


@FUZZ
@given(documents)
def test_any_msgpack_document_is_a_frame_or_a_frame_error(document):
    payload = msgpack.packb(document, use_bin_type=True)
    try:
        header, messages = decode(payload)
    except FrameError:
        return
    assert len(header[0]) == 40
    assert all(type(m) is tuple and m[0] in SHAPES for m in messages)


@FUZZ
@given(headers, st.lists(st.tuples(st.integers(-3, 20), documents), min_size=1, max_size=3))
def test_messages_of_any_type_with_any_fields(header, raw_messages):
    payload = msgpack.packb(
        [header.sender, header.port, header.flags, [list(m) for m in raw_messages]],
        use_bin_type=True,
    )
    try:
        decode(payload)
    except FrameError:
        pass


@FUZZ
@given(
    headers,
    st.lists(
        st.one_of(
            messages.map(lambda m: ("known", m)),
            st.tuples(st.just("extra"), messages, st.lists(documents, min_size=1, max_size=2)),
            st.tuples(st.just("unknown"), st.integers(max(SHAPES) + 1, 0xFFFF), documents),
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 0xFF),
)
def test_a_newer_peer_s_frames_keep_what_this_release_knows(header, plan, version):
    """Unknown types and extra fields: left out and counted from a newer version, refused
    from this one or an older one; the known messages come through in order."""
    sent, known, unknown, extra = [], [], 0, 0
    for step in plan:
        if step[0] == "known":
            sent.append(step[1])
            known.append(step[1])
        elif step[0] == "extra":
            sent.append((*step[1], *step[2]))
            known.append(step[1])
            extra += 1
        else:
            sent.append((step[1], step[2]))
            unknown += 1
    header = header._replace(flags=header.flags & 0xFF | version << VERSION_SHIFT)
    payload = encode_frame(header, sent)[4:]
    codec = codec_for(CURRENT)
    if version > PROTOCOL:
        fields, got = decode_frame(payload, codec)
        assert fields == header and list(got) == known
        assert (codec.skipped, codec.trimmed) == (unknown, extra)
    elif unknown or extra:
        with pytest.raises(FrameError):
            decode_frame(payload, codec)
    old = codec_for(CURRENT._replace(version=1, oldest=1))  # 0.1.0's decoder: strict
    if unknown or extra or any(m[0] in msg.ADDED_IN[2] for m in sent):
        with pytest.raises(FrameError):
            decode_frame(payload, old)


def test_oversized_and_malformed_frames():
    reader = FrameReader()
    reader.feed((MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
    with pytest.raises(FrameError, match="exceeds"):
        reader.next_payload()
    small = FrameReader(limit=10)
    small.feed(encode_payload(b"x" * 10) + encode_payload(b"y" * 11))
    assert small.next_payload() == b"x" * 10
    with pytest.raises(FrameError):
        small.next_payload()
    header = Header(b"a" * 40, 7711, 0)
    good = encode_frame(header, [(msg.GOTJOB, (b"id",))])[4:]
    assert decode(good) == (header, ((msg.GOTJOB, (b"id",)),))
    bad = [
        msgpack.packb([b"a" * 40, 7711, 0, []]),  # no messages
        msgpack.packb([b"A" * 40, 7711, 0, [[msg.GOTJOB, [b"id"]]]]),  # uppercase node ID
        msgpack.packb([b"a" * 40, 70000, 0, [[msg.GOTJOB, [b"id"]]]]),  # port
        msgpack.packb([b"a" * 40, 7711, 0, [[99, b"id"]]]),  # unknown type
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.GOTJOB, ["id"]]]]),  # str, not bytes
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.GOTJOB, [b"id"], 1]]]),  # extra field
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.GOTJOB, b"id"]]]),  # one ID, not a list
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.SETACK, [b"id", True]]]]),  # bool, not int
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.SETACK, [b"id", 1, b"id2"]]]]),  # odd length
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.GOTACK, [1, b"id"]]]]),  # pair reversed
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.DELJOB, b"id"]]]),  # one ID, not a list
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.PING, [[b"a" * 40, 0, 0, b"", 1, 0, 9]], 0]]]),
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.PING, []]]]),  # no clock reading
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.PONG, [], 0]]]),  # the responder's missing
        msgpack.packb([b"a" * 40, 7711, 0, [[msg.PONG, [], 0, 1.5]]]),  # float, not int
        msgpack.packb({"sender": b"a" * 40}),
        b"\xc1",  # never used in msgpack
        good + b"\x00",  # trailing bytes
    ]
    for payload in bad:
        with pytest.raises(FrameError):
            decode(payload)
    newer = 3 << VERSION_SHIFT  # from a newer release: a known type keeps its checks
    for message in ([msg.GOTJOB, ["id"]], [msg.GOTJOB, b"id", 1], [msg.PING, []], [1.5]):
        with pytest.raises(FrameError):
            decode(msgpack.packb([b"a" * 40, 7711, newer, 0, [message]]))


# ---------------------------------------------------------------- into the core


class NullBus:
    def send(self, node_id, message):
        pass

    def reply(self, link, message):
        pass

    def connect(self, node_id, ip, port):
        pass

    def disconnect(self, node_id):
        pass


class Link:
    def __init__(self, node_id, local_ip):
        self.node_id = node_id
        self.local_ip = local_ip


KNOWN = [b"%040x" % i for i in range(1, 5)]
some_ids = st.sampled_from(KNOWN) | node_ids
membership_entry = st.tuples(
    some_ids,
    ints,
    ints,
    st.sampled_from([b"", b"127.0.0.1", b"::1", b"10.0.0.9", b"junk", b"\xff\x00"]),
    st.integers(0, 0xFFFF),
    st.sampled_from([0, PFAIL, FAIL, NOADDR, LEAVING, PFAIL | FAIL]) | flag_bits,
)
membership_gossip = st.lists(membership_entry, max_size=5).map(tuple)
feature_names = st.sampled_from([b"policies", b"cron", b"users", b"outcomes", b"next"])
membership_messages = st.one_of(
    st.tuples(st.sampled_from([msg.PING, msg.MEET]), membership_gossip, ints),
    st.tuples(st.just(msg.PONG), membership_gossip, ints, ints),
    st.tuples(st.just(msg.FAIL), some_ids),
    st.tuples(st.just(msg.VERSION), versions, versions, names,
              st.lists(feature_names, max_size=5).map(tuple), st.sampled_from([0, msg.ASK])),
)  # fmt: skip


@settings(FUZZ, max_examples=examples(500))
@given(
    st.lists(
        st.tuples(
            st.builds(Header, some_ids, st.integers(0, 0xFFFF), flag_bits),
            membership_messages,
            st.one_of(st.none(), st.builds(Link, st.none() | some_ids, st.binary(max_size=20))),
            st.sampled_from([b"", b"127.0.0.1", b"10.0.0.1"]),
            st.integers(0, 3000),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_membership_takes_any_valid_message(events):
    clock = [1_700_000_000_000]
    rng = random.Random(1)
    node = Node(
        Settings(cluster_node_timeout=1000),
        KNOWN[0],
        lambda: clock[0],
        rng,
        rng.randbytes,
        bus=NullBus(),
    )
    for other in KNOWN[1:]:
        node.cluster.start_handshake(b"127.0.0.1", 7000 + other[-1])
    node.cluster.start(None, None)
    for header, message, link, peer_ip, advance in events:
        node.receive(header, message, link, peer_ip)
        clock[0] += advance
        node.cluster.cron()
    me = node.cluster.myself
    assert me.id == KNOWN[0] and node.cluster.nodes[KNOWN[0]] is me and me.flags == MYSELF
    assert all(n.id == node_id for node_id, n in node.cluster.nodes.items())
    for line in node.cluster.config_text().splitlines():  # nodes.conf stays loadable
        assert len(line.split()) == 6 or line.startswith(b"vars ")
    for line in node.cluster.nodes_text().splitlines():  # Disque's six, then the version's
        assert len(line.split()) == 8
    # The version handshake: a refused peer is never reachable, and sends are checked
    # exactly while some peer lacks a feature or is refused.
    dialect = node.dialect
    assert not set(dialect.refused) & set(node.cluster.reachable_nodes())
    assert (node.send == dialect.send_checked) == dialect.partial
    for line in node.cluster.clocks_text().splitlines():  # so does CLUSTER CLOCKS, whatever
        assert len(line.split()) == 7  # the clock readings were
    assert all(type(value) is int for _, value in node.cluster.clock_fields())


# ---------------------------------------------------------------- cluster-secret


@FUZZ
@given(st.binary(max_size=120), st.binary(max_size=120))
def test_handshake_helpers_take_any_payload(challenge, response):
    secret = b"s3cret"
    nonce = os.urandom(bus_auth.NONCE_BYTES)
    assert bus_auth.answer(secret, challenge, nonce) is None or challenge.startswith(
        bus_auth.CHALLENGE_TAG
    )
    assert bus_auth.check_answer(secret, nonce, response) is None
    assert not bus_auth.check_server_proof(secret, nonce, nonce, response)


def test_handshake_succeeds_only_with_the_same_secret():
    nonce_a, nonce_c = os.urandom(32), os.urandom(32)
    challenge = bus_auth.challenge(nonce_a)
    answer = bus_auth.answer(b"right", challenge, nonce_c)
    assert answer is not None
    proof = bus_auth.check_answer(b"right", nonce_a, answer)
    assert proof is not None and bus_auth.check_server_proof(b"right", nonce_a, nonce_c, proof)
    assert bus_auth.check_answer(b"wrong", nonce_a, answer) is None
    assert not bus_auth.check_server_proof(b"wrong", nonce_a, nonce_c, proof)
    # A proof is bound to both nonces: replaying it on another link fails.
    assert bus_auth.check_answer(b"right", os.urandom(32), answer) is None
    assert len(bus_auth.challenge(nonce_a)) <= bus_auth.MAX_AUTH_PAYLOAD
