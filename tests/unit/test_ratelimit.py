"""Rate and concurrency limits (core/ratelimit.py) on cores wired by the in-memory bus,
on the virtual clock: the split of a limit, the bounds, blocking, federation."""

from __future__ import annotations

import random

from disquette.core import messages as msg
from disquette.core.job import Job
from disquette.core.node import Node
from disquette.core.ratelimit import EPOCH, HUNGRY, allocate, limit_name
from tests.unit.core_harness import RecordingClient
from tests.unit.test_cluster_jobs import Cluster, addjob

QUEUE = b"q"


def limited(c: Cluster, **options: int) -> None:
    c.nodes[0].policies.set(b"p", QUEUE, dict(options))
    c.pump()


def test_allocate_gives_small_demands_what_they_ask_and_splits_the_rest():
    assert allocate(10, {b"a": 2, b"b": HUNGRY, b"c": HUNGRY}, 0) == {b"a": 2, b"b": 4, b"c": 4}
    shares = allocate(10, {b"a": 1, b"b": 1, b"c": 1}, 0)  # all served: headroom for all
    assert sum(shares.values()) == 10 and min(shares.values()) >= 3
    # Fewer units than nodes: the remainder turns with the epoch.
    winners = {max(allocate(1, dict.fromkeys((b"a", b"b", b"c"), HUNGRY), e).items(),
                   key=lambda kv: kv[1])[0] for e in range(3)}  # fmt: skip
    assert winners == {b"a", b"b", b"c"}
    # A hungry node gets the remainder before nodes that ask for their floor.
    for epoch in range(4):
        assert allocate(1, {b"a": 1, b"b": HUNGRY, b"c": 1}, epoch)[b"b"] == 1


def test_allocate_sums_to_the_limit_for_any_demands():
    rng = random.Random(5)
    for _ in range(500):
        wants = {
            b"%d" % i: rng.choice((HUNGRY, rng.randint(0, 50))) for i in range(rng.randint(1, 6))
        }
        limit = rng.randint(1, 200)
        shares = allocate(limit, wants, rng.randint(0, 9))
        assert sum(shares.values()) == limit and set(shares) == set(wants)
        assert allocate(limit, dict(reversed(wants.items())), 3) == allocate(limit, wants, 3)


def backlog(c: Cluster, jobs: int) -> None:
    for i in range(jobs):
        addjob(c.nodes[i % len(c.nodes)], repl=1, retry=300)


def test_a_single_node_serves_its_rate_and_no_more():
    c = Cluster(1)
    limited(c, rate=20)
    backlog(c, 500)
    node = c.nodes[0]
    times: list[int] = []
    for _ in range(600):  # 6 s of polling every 10 ms
        times += [c.clock()] * len(node.get_jobs([QUEUE], 5))
        c.run(10)
    # Burst: a tenth of the share (2 tokens).
    assert 0 < max(sum(1 for t in times if s <= t < s + 1000) for s in times) <= 20 + 2
    assert len(times) >= 20 * 4  # served once the first announcement took effect
    assert node.rates.throttled > 0


def test_a_limited_queue_looks_empty_to_nohang_and_federation_is_not_asked():
    c = Cluster(3)
    limited(c, concurrency=1)
    backlog(c, 9)
    c.run(2 * EPOCH)
    got = [j for n in c.nodes for j in n.get_jobs([QUEUE], 3)]
    assert len(got) == 1
    before = len(c.sent(msg.NEEDJOBS))
    assert all(n.get_jobs([QUEUE], 3) == [] for n in c.nodes)
    c.run(500)
    assert len(c.sent(msg.NEEDJOBS)) == before  # jobs were there, only the limit said no


def in_flight(c: Cluster) -> int:
    return sum(n.rates.limits[QUEUE].inflight for n in c.nodes if QUEUE in n.rates.limits)


def test_concurrency_holds_cluster_wide_with_acks_on_other_nodes():
    c = Cluster(3)
    limited(c, concurrency=4)
    backlog(c, 120)
    held: list[tuple[Node, Job]] = []
    rng = random.Random(3)
    for _ in range(300):
        for n in c.nodes:
            held += [(n, j) for j in n.get_jobs([QUEUE], 2)]
        assert len(held) <= 4
        assert in_flight(c) <= 4
        rng.shuffle(held)
        for _n, job in held[:1]:
            rng.choice(c.nodes).ack_jobs([job.id])  # maybe another node: SETACK frees it
        held = held[1:]
        c.run(30)
    assert sum(len(c.nodes[i].queues.get(QUEUE).jobs) for i in range(3)) < 120 - 100


def test_a_blocked_getjob_is_served_when_an_ack_frees_a_slot():
    c = Cluster(1)
    limited(c, concurrency=1)
    backlog(c, 3)
    node = c.nodes[0]
    c.run(2 * EPOCH)
    [first] = node.get_jobs([QUEUE], 1)
    client = RecordingClient()
    assert node.get_jobs([QUEUE], 1) == []
    node.block_for_jobs(client, [QUEUE], 0, 0)
    c.run(300)
    assert client.replies == []  # blocked: the slot is taken
    node.ack_jobs([first.id])
    node.serve_blocked_clients()
    assert len(client.replies) == 1 and client.replies[0].startswith(b"*1")


def test_a_nack_and_a_requeue_elsewhere_free_the_slot():
    c = Cluster(2)
    limited(c, concurrency=1)
    c.run(EPOCH)
    addjob(c.nodes[0], repl=2, retry=300, timeout=0, async_=True)
    c.pump()
    c.run(2 * EPOCH)
    holder = next(n for n in c.nodes if QUEUE in n.rates.limits and n.rates.limits[QUEUE].slots)
    [job] = holder.get_jobs([QUEUE], 1)
    assert in_flight(c) == 1
    holder.requeue_jobs([job.id], nack=True)
    assert in_flight(c) == 0
    [job] = holder.get_jobs([QUEUE], 1)
    assert in_flight(c) == 1
    other = next(n for n in c.nodes if n is not holder)
    other_copy = other.jobs.get(job.id)
    assert other_copy is not None
    other.enqueue(other_copy)  # its requeue timer elsewhere: QUEUED reaches the holder
    c.pump()
    assert in_flight(c) == 0


def test_shares_follow_demand_and_sum_to_the_limit():
    c = Cluster(3)
    limited(c, rate=30, concurrency=6)
    backlog(c, 600)
    for _ in range(500):  # only node 0 has consumers, who acknowledge at once
        c.nodes[0].ack_jobs([job.id for job in c.nodes[0].get_jobs([QUEUE], 5)])
        c.run(20)
    limits = [n.rates.limits[QUEUE] for n in c.nodes]
    for node, limit in zip(c.nodes, limits, strict=True):
        node.rates._refresh(limit, c.clock())
    assert sum(limit.rate_share for limit in limits) == 30
    assert sum(limit.slots for limit in limits) == 6
    assert limits[0].rate_share == 30  # no consumer elsewhere: no floor there either


def grouped_backlog(c: Cluster, groups: dict[bytes, int]) -> None:
    """Jobs of each group, on every node in turn; then every node has asked for each of
    its groups (a group's limit is made then: it has a share once announced)."""
    for group, jobs in groups.items():
        for i in range(jobs):
            addjob(c.nodes[i % len(c.nodes)], repl=1, retry=300, group=group)
    for node in c.nodes:
        assert node.get_jobs([QUEUE], 1) == []  # no share yet: turned away, hungry
    c.run(2 * EPOCH)


def group_in_flight(c: Cluster, group: bytes) -> int:
    name = limit_name(QUEUE, group)
    return sum(n.rates.limits[name].inflight for n in c.nodes if name in n.rates.limits)


def test_a_group_at_its_concurrency_is_skipped_and_the_others_served():
    c = Cluster(1)
    limited(c, **{"group-concurrency": 2})
    grouped_backlog(c, {b"big": 50, b"small": 3})
    node = c.nodes[0]
    got = node.get_jobs([QUEUE], 10)
    assert sorted(j.group for j in got) == [b"big", b"big", b"small", b"small"]
    assert node.get_jobs([QUEUE], 10) == [] and node.rates.throttled > 0
    small = next(j for j in got if j.group == b"small")
    node.ack_jobs([small.id])
    [again] = node.get_jobs([QUEUE], 10)
    assert again.group == b"small"  # the freed slot is the small group's, big waits


def test_group_concurrency_holds_cluster_wide_with_acks_on_other_nodes():
    c = Cluster(3)
    limited(c, **{"group-concurrency": 3, "concurrency": 5})
    grouped_backlog(c, {b"a": 60, b"b": 60, b"c": 6})
    held: list[Job] = []
    rng = random.Random(7)
    for _ in range(300):
        for n in c.nodes:
            held += n.get_jobs([QUEUE], 2)
        for group in (b"a", b"b", b"c"):
            assert sum(1 for j in held if j.group == group) <= 3
            assert group_in_flight(c, group) <= 3
        assert len(held) <= 5  # the queue's own limit on top
        rng.shuffle(held)
        for job in held[:1]:
            rng.choice(c.nodes).ack_jobs([job.id])
        held = held[1:]
        c.run(30)
    assert sum(len(n.queues.get(QUEUE)) for n in c.nodes) < 126 - 100


def test_a_blocked_getjob_is_served_when_an_ack_frees_its_group_s_slot():
    c = Cluster(1)
    limited(c, **{"group-concurrency": 1})
    grouped_backlog(c, {b"a": 3})
    node = c.nodes[0]
    [first] = node.get_jobs([QUEUE], 1)
    client = RecordingClient()
    assert node.get_jobs([QUEUE], 1) == []
    node.block_for_jobs(client, [QUEUE], 0, 0)
    c.run(300)
    assert client.replies == []
    node.ack_jobs([first.id])
    node.serve_blocked_clients()
    assert len(client.replies) == 1 and client.replies[0].startswith(b"*1")


def test_group_limits_go_with_the_policy():
    c = Cluster(1)
    limited(c, **{"group-rate": 5})
    grouped_backlog(c, {b"a": 3})
    node = c.nodes[0]
    assert node.get_jobs([QUEUE], 1) and limit_name(QUEUE, b"a") in node.rates.limits
    node.policies.delete(b"p")
    assert node.queues.get(QUEUE).group_limits is None and not node.rates.limits
    assert len(node.get_jobs([QUEUE], 5)) == 2
