"""Property tests of the version handshake (core/dialect.py), on two simulated nodes.

Hypothesis draws what each node speaks (a protocol version, the oldest it still
speaks, its features, a rehearsal's probing) and a seed; the two nodes meet in the
simulator, each reading frames with the codec of its own speech, and run for a while.
Whatever the draw: no node is ever sent a frame it cannot read; two nodes whose
protocol ranges meet link, each knowing the other's protocol, release and features
(features it lacks withheld, cluster-wide commands needing them refused); two whose
ranges do not meet refuse each other, neither counting the other reachable.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.core.dialect import CURRENT, FEATURES, PROTOCOL, Speech
from disquette.core.errors import DisqueError
from disquette.sim.runner import Simulation, config_for_seed
from tests.support.fuzz import examples

RUN_MS = 6000  # virtual ms after the MEET: handshakes, pings, a few probes

feature_sets = st.sets(st.sampled_from([*sorted(FEATURES), b"next"])).map(frozenset)


@st.composite
def speeches(draw: st.DrawFn) -> Speech:
    version = draw(st.integers(1, PROTOCOL + 2))
    if version == 1:  # the release before versions: all it ever spoke
        return Speech(1, 1, b"0.1.0", FEATURES)
    oldest = draw(st.integers(1, version))
    release = b"r%d" % draw(st.integers(0, 9))
    return Speech(version, oldest, release, draw(feature_sets), draw(st.booleans()))


def meets(a: Speech, b: Speech) -> bool:
    return a.version >= b.oldest and b.version >= a.oldest


@settings(max_examples=examples(200))
@given(speeches(), speeches(), st.integers(0, 10_000))
def test_two_nodes_of_any_speeches(a: Speech, b: Speech, seed: int):
    sim = Simulation(config_for_seed(seed, "normal", nodes=2))
    first, second = sim.processes
    first.speech, second.speech = a, b
    for p in sim.processes:
        p.start()
    assert sim.admin(first, [b"CLUSTER", b"MEET", second.ip, b"%d" % second.port]) == b"OK"
    sim.loop.run_until(sim.loop.now + RUN_MS)
    assert not sim.network.unreadable, sim.network.unreadable[:3]
    for me, peer, mine, theirs in ((first, second, a, b), (second, first, b, a)):
        node = me.node
        assert node is not None
        entry = node.cluster.nodes.get(peer.node_id)
        if mine.version == 1:
            continue  # (protocol 1 knows nothing of versions)
        assert entry is not None, "the handshake ends whatever each speaks"
        dialect = node.dialect
        if meets(mine, theirs):
            assert peer.node_id not in dialect.refused
            assert peer.node_id in node.reachable_nodes()
            assert entry.bus_version == theirs.version
            if theirs.version >= 2:
                assert (entry.release, entry.features) == (theirs.release, theirs.features)
            lacks = sorted(FEATURES - entry.features)
            assert dialect.partial == bool(lacks)
            for feature in lacks:
                try:
                    dialect.require(feature, "a command")
                except DisqueError as e:
                    assert peer.node_id in e.reply
                else:
                    raise AssertionError(f"{feature!r} not refused")
        else:
            assert peer.node_id in dialect.refused
            assert peer.node_id not in node.reachable_nodes()
            assert dialect.partial


def test_this_release_meets_itself_and_the_previous_one():
    """The two cases every upgrade goes through, by name."""
    assert meets(CURRENT, CURRENT) and meets(CURRENT, Speech(1, 1, b"0.1.0", FEATURES))
