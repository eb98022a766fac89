"""Which node the client talks to: seeds, HELLO priorities, failures, routing, affinity."""

from __future__ import annotations

import random

import pytest

from disquette.client.models import Hello, NodeInfo
from disquette.client.topology import (
    Affinity,
    Topology,
    format_address,
    parse_address,
    parse_seeds,
)

A, B, C = ("10.0.0.1", 7711), ("10.0.0.2", 7711), ("10.0.0.3", 7711)
IDS = {A: "a" * 40, B: "b" * 40, C: "c" * 40}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def hello(answering: tuple[str, int], priorities: dict) -> Hello:
    nodes = tuple(NodeInfo(IDS[a], a[0], a[1], p) for a, p in priorities.items())
    return Hello(1, IDS[answering], nodes)


def topology(*seeds, **kwargs) -> Topology:
    return Topology(
        list(seeds) or [A], rng=random.Random(1), clock=kwargs.pop("clock", Clock()), **kwargs
    )


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("h:1", ("h", 1)),
        ("h", ("h", 7711)),
        ("[::1]:7712", ("::1", 7712)),
        ("::1", ("::1", 7711)),
        (("h", "9"), ("h", 9)),
    ],
)
def test_parse_address(text, address):
    assert parse_address(text) == address


def test_format_address_brackets_ipv6():
    assert format_address(("::1", 1)) == "[::1]:1"
    assert format_address(("h", 1)) == "h:1"


def test_parse_seeds_forms():
    assert parse_seeds("a:1, b:2") == (("a", 1), ("b", 2))
    assert parse_seeds(("a", 1)) == (("a", 1),)
    assert parse_seeds(["a:1", ("b", 2), "a:1"]) == (("a", 1), ("b", 2))
    with pytest.raises(ValueError):
        parse_seeds("")


def test_seeds_are_tried_in_random_order_each_once_then_twice():
    orders = set()
    for seed in range(20):
        t = Topology([A, B, C], rng=random.Random(seed))
        tried: dict = {}
        order = []
        while (address := t.choose(tried)) is not None:
            order.append(address)
            tried[address] = tried.get(address, 0) + 1
        assert sorted(order) == sorted([A, A, B, B, C, C])
        assert set(order[:3]) == {A, B, C}
        orders.add(tuple(order[:3]))
    assert len(orders) > 1


def test_hello_teaches_nodes_and_the_best_priority_wins():
    t = topology(A)
    t.learn(A, hello(A, {A: 100, B: 1, C: 5}))  # A says it is leaving
    assert t.choose({}) == B
    assert t.should_leave(A, {A: 1})
    assert t.choose({B: 2}) == C


def test_the_answering_node_keeps_the_address_we_reached_it_at():
    t = topology(("localhost", 7711))
    h = Hello(1, IDS[A], (NodeInfo(IDS[A], "", 7711, 1), NodeInfo(IDS[B], "", 0, 1)))
    t.learn(("localhost", 7711), h)
    assert [n.address for n in t.nodes] == [("localhost", 7711)]  # B has no address yet


def test_current_node_is_kept_until_it_fails_then_avoided_for_the_backoff():
    clock = Clock()
    t = topology(A, clock=clock, failure_backoff=5)
    t.learn(A, hello(A, {A: 1, B: 1, C: 1}))
    t.use(C)
    assert t.choose({}) == C
    t.mark_failed(C)
    assert t.current is None
    assert t.choose({}) != C
    assert not t.healthy(C)
    clock.now += 6
    assert t.healthy(C)


def test_failed_nodes_are_a_last_resort():
    t = topology(A, B)
    t.mark_failed(A)
    t.mark_failed(B)
    assert t.choose({}) in (A, B)


def test_leaving_answer_marks_the_node():
    t = topology(A)
    t.learn(A, hello(A, {A: 1, B: 1}))
    t.use(A)
    t.mark_leaving(A)
    assert not t.healthy(A)
    assert t.choose({}) == B
    assert t.node_for_job("D-aaaaaaaa-" + "x" * 24 + "-05a1") is None


def test_job_ids_route_to_their_creator_when_known_and_up():
    t = topology(A)
    t.learn(A, hello(A, {A: 1, B: 1, C: 10}))
    b_job = "D-bbbbbbbb-" + "x" * 24 + "-05a1"
    c_job = "D-cccccccc-" + "x" * 24 + "-05a1"
    unknown = "D-dddddddd-" + "x" * 24 + "-05a1"
    assert t.node_for_job(b_job) == B
    assert t.node_for_job(c_job) is None  # PFAIL: not up
    assert t.node_for_job(unknown) is None
    assert t.group_by_node([b_job, c_job, unknown, b_job]) == {
        B: [b_job, b_job],
        None: [c_job, unknown],
    }
    t.mark_failed(B)
    assert t.node_for_job(b_job) is None


def test_affinity_moves_the_consumer_to_the_dominant_producer():
    t = topology(A, affinity=Affinity(window=10, threshold=0.6, min_jobs=5))
    t.learn(A, hello(A, {A: 1, B: 1, C: 1}))
    b_job = "D-bbbbbbbb-" + "x" * 24 + "-05a1"
    a_job = "D-aaaaaaaa-" + "x" * 24 + "-05a1"
    t.observe_jobs(A, [b_job, a_job, b_job, a_job])
    assert t.consumer_target() is None  # too few jobs yet
    t.observe_jobs(A, [a_job, a_job])
    assert t.consumer_target() is None  # B is not dominant
    t.observe_jobs(A, [b_job] * 6)
    assert t.consumer_target() == B
    t.mark_failed(B)
    assert t.consumer_target() is None


def test_affinity_ignores_jobs_from_the_local_node():
    a = Affinity(window=4, threshold=0.5, min_jobs=2)
    a.observe(["aaaaaaaa"] * 4)
    assert a.dominant("aaaaaaaa") is None
    assert a.dominant("bbbbbbbb") == "aaaaaaaa"


def test_no_affinity_unless_enabled():
    t = topology(A)
    t.learn(A, hello(A, {A: 1, B: 1}))
    t.observe_jobs(A, ["D-bbbbbbbb-" + "x" * 24 + "-05a1"] * 100)
    assert t.consumer_target() is None
