"""The policy table: last writer wins in any order, tombstones, the digest exchange,
and records from peers or files that are never trusted."""

from __future__ import annotations

import itertools

from disquette.core import messages as msg
from disquette.core import policy
from disquette.core.policy import Policy, decode
from tests.support.records import garbage_never_crashes, refused
from tests.unit.core_harness import Harness

NODE_A = b"a" * 40
NODE_B = b"b" * 40


def table(seed: int = 1) -> policy.PolicyTable:
    return Harness(seed).node.policies


def versions(t: policy.PolicyTable) -> dict[bytes, tuple[tuple[int, bytes], bool]]:
    return {name: (p.version, p.deleted) for name, p in t.records.items()}


WRITES = [
    Policy(b"p", b"q*", {"retry": 1}, 1, NODE_A),
    Policy(b"p", b"q*", {"retry": 2}, 2, NODE_A),
    Policy(b"p", b"q*", {"retry": 3}, 2, NODE_B),  # same counter: the greater node ID wins
    Policy(b"p", b"", {}, 3, NODE_A, deleted=True),
    Policy(b"r", b"r", {"maxlen": 5}, 1, NODE_B),
]


def test_every_order_of_the_same_writes_gives_the_same_table():
    results = set()
    for order in itertools.permutations(WRITES):
        t = table()
        for write in order:
            t.merge([write])
        results.add((tuple(sorted(versions(t).items())), t.digest))
    assert len(results) == 1
    t = table()
    t.merge(WRITES)
    assert t.get(b"p") is None and t.records[b"p"].deleted  # the tombstone stays
    assert [p.name for p in t.active] == [b"r"] and t.counter == 3


def test_a_write_here_outranks_everything_seen():
    t = table()
    t.merge(WRITES)
    t.set(b"p", b"x", {"priority": 2})
    assert t.get(b"p").counter == 4 and t.for_queue(b"x").options == {"priority": 2}


def test_match_cache_follows_changes():
    t = table()
    t.set(b"all", b"*", {"retry": 1})
    assert t.for_queue(b"jobs").name == b"all"
    t.set(b"jobs", b"jobs", {"retry": 2})
    assert t.for_queue(b"jobs").name == b"jobs"
    assert t.delete(b"jobs") and not t.delete(b"jobs")
    assert t.for_queue(b"jobs").name == b"all"


def test_the_digest_exchange_sends_the_table_where_it_differs():
    h = Harness()
    node = h.node
    sent: list[tuple[bytes, tuple]] = []
    node.send = lambda node_id, message: sent.append((node_id, message))
    node.policies.set(b"p", b"q*", {"retry": 5})
    policy.on_digest(node, NODE_A, (msg.POLICYDIGEST, node.policies.digest))
    assert sent == []  # same table: nothing to say
    policy.on_digest(node, NODE_A, (msg.POLICYDIGEST, 0))
    [(to, message)] = sent
    assert to == NODE_A and message[2] == msg.FULL_TABLE
    other = table(2)
    other.merge(decode(r) for r in message[1])
    assert other.digest == node.policies.digest


def test_a_full_table_that_lacks_ours_is_answered_with_ours():
    node = Harness().node
    sent: list[tuple[bytes, tuple]] = []
    node.send = lambda node_id, message: sent.append((node_id, message))
    node.policies.set(b"mine", b"m", {"retry": 5})
    theirs = Policy(b"theirs", b"t", {"ttl": 9}, 1, NODE_A).encode()
    policy.on_policies(node, NODE_A, (msg.POLICIES, (theirs,), msg.FULL_TABLE))
    assert node.policies.get(b"theirs") is not None
    [(_, answer)] = sent
    assert {decode(r).name for r in answer[1]} == {b"mine", b"theirs"}
    sent.clear()
    policy.on_policies(node, NODE_A, (msg.POLICIES, (theirs,), 0))  # a single write
    assert sent == []


def test_records_round_trip_and_bad_ones_are_refused():
    record = Policy(b"p", b"q[a-z]*", {"deadletter": b"dead", "max-nacks": 3}, 7, NODE_B)
    copy = decode(record.encode())
    assert copy is not None and copy.options == record.options and copy.version == (7, NODE_B)
    bad_options = Policy(b"p", b"q", {"priority": 12}, 1, NODE_A)
    assert decode(bad_options.encode()) is None
    for fields in [
        (b"p", b"q", ("colour", 1), 1, NODE_A, False),  # an unknown option
        (b"p", b"q", ("retry",), 1, NODE_A, False),  # an option without its value
        (b"p", b"q", (), 0, NODE_A, False),  # counters start at 1
        (b"p", b"q", (), 1 << 63, NODE_A, False),  # and stay far from 64 bits
        (b"p", b"q", (), 1, b"short", False),  # not a node ID
        (b"", b"q", (), 1, NODE_A, False),  # no name
    ]:
        assert refused(decode, fields), fields


test_garbage_records_never_crash = garbage_never_crashes(decode)


def test_nodes_conf_lines_load_back():
    t = table()
    t.merge(WRITES)
    lines = t.config_lines()
    records = [bytes.fromhex(line.split()[2].decode()) for line in lines.splitlines()]
    other = table(2)
    other.load(records)
    assert versions(other) == versions(t) and other.digest == t.digest
