"""The plans (failover, retry rules, routing) against an in-memory cluster.

These tests are the contract of the module docstring of
``disquette.client.calls``: a command never written goes to the next node; a
refused (-LEAVING) command goes elsewhere except ADDJOB; after a lost reply only
idempotent commands are sent again, the others raise ReplyLostError.
"""

from __future__ import annotations

import random

import pytest

from disquette.client import commands
from disquette.client.calls import TRYAGAIN_PAUSES
from disquette.client.errors import (
    ConnectionFailedError,
    LeavingError,
    PipelineError,
    ReplyLostError,
    ResponseError,
    TryAgainError,
)
from disquette.client.models import JobOutcome
from disquette.client.topology import Topology
from tests.client.fakes import DROP, FakeCluster, default_reply, job_id, node


def cluster_of_three(**flags):
    a, b, c = node("a", 1), node("b", 2), node("c", 3)
    for name, value in flags.items():
        setattr({"a": a, "b": b, "c": c}[name[0]], name[2:], value)
    return a, b, c, FakeCluster(a, b, c)


def topology_for(*nodes, seed=0):
    return Topology([n.address for n in nodes], rng=random.Random(seed))


def names(sent):
    return [args[0] for _, args in sent]


def test_seeds_are_tried_until_one_answers_and_hello_is_learned():
    a, b, c, fake = cluster_of_three(a_up=False, b_up=False)
    t = Topology([a.address, b.address, c.address], rng=random.Random(3))
    assert fake.run(t, commands.ping()) == b"OK"
    assert fake.sent == [(c.address, (b"PING",))]
    assert t.current == c.address
    assert {n.id for n in t.nodes} == {a.id, b.id, c.id}


def test_no_node_answers():
    a, b, c, fake = cluster_of_three(a_up=False, b_up=False, c_up=False)
    with pytest.raises(ConnectionFailedError, match="no Disque node could be reached") as e:
        fake.run(topology_for(a, b, c), commands.ping())
    assert fake.sent == []
    reasons = str(e.value).split(": ", 1)[1].split("; ")
    assert len(reasons) == len(set(reasons)) == 3  # each node once, though tried twice


def test_a_node_reporting_itself_leaving_is_left_before_sending():
    a, b, _c, fake = cluster_of_three(a_leaving=True, c_up=False)
    t = topology_for(a)
    fake.run(t, commands.add_job("q", b"body"))
    assert fake.sent == [(b.address, fake.sent[0][1])]
    assert t.current == b.address


def test_lost_addjob_reply_is_never_resent():
    a, _b, _c, fake = cluster_of_three(a_drop_once={b"ADDJOB"})
    t = topology_for(a)
    with pytest.raises(ReplyLostError, match="the job may have been added") as info:
        fake.run(t, commands.add_job("q", b"body"))
    assert info.value.command == "ADDJOB" and info.value.node == "10.0.0.1:1"
    assert names(fake.sent) == [b"ADDJOB"]
    # the client moved away from the failed node: calling again goes elsewhere
    fake.run(t, commands.add_job("q", b"body"))
    assert fake.sent[-1][0] != a.address


@pytest.mark.parametrize("name", [b"GETJOB", b"NACK"])
def test_other_non_idempotent_commands_are_not_resent_either(name):
    a, _b, _c, fake = cluster_of_three(a_drop_once={name})
    call = commands.get_jobs("q") if name == b"GETJOB" else commands.nack(job_id(a))
    with pytest.raises(ReplyLostError):
        fake.run(topology_for(a), call)
    assert names(fake.sent) == [name]


def test_lost_ack_reply_is_resent_on_another_node():
    a, _b, _c, fake = cluster_of_three(a_drop_once={b"ACKJOB"})
    t = topology_for(a)
    fake.run(t, commands.ping())
    assert fake.run(t, commands.ack(job_id(a))) == 1
    assert [(addr, args[0]) for addr, args in fake.sent[1:]] == [
        (a.address, b"ACKJOB"),
        (fake.sent[2][0], b"ACKJOB"),
    ]
    assert fake.sent[2][0] != a.address


def test_a_single_node_gets_one_more_try_for_idempotent_commands():
    a = node("a", 1, drop_once={b"QLEN"}, handler=lambda args: 7)
    fake = FakeCluster(a)
    assert fake.run(topology_for(a), commands.qlen("q")) == 7
    assert names(fake.sent) == [b"QLEN", b"QLEN"]


def test_leaving_getjob_goes_to_another_node():
    a, _b, _c, fake = cluster_of_three()
    t = topology_for(a)
    fake.run(t, commands.ping())
    a.leaving = True  # becomes leaving after the client's HELLO
    assert fake.run(t, commands.get_jobs("q")) == []
    assert next(addr for addr, args in fake.sent if args[0] == b"GETJOB") == a.address
    assert [addr for addr, args in fake.sent if args[0] == b"GETJOB"][1] != a.address
    assert not t.healthy(a.address)


def test_leaving_addjob_is_the_callers_choice():
    a, _b, _c, fake = cluster_of_three()
    t = topology_for(a)
    fake.run(t, commands.ping())
    a.leaving = True
    with pytest.raises(LeavingError, match="ADDJOB was not sent to another node") as info:
        fake.run(t, commands.add_job("q", b"body"))
    assert info.value.node == "10.0.0.1:1" and info.value.code == "LEAVING"
    assert names(fake.sent).count(b"ADDJOB") == 1
    assert t.current is None and t.choose({}) != a.address


def test_when_every_node_is_leaving_the_leaving_error_is_raised():
    a = node("a", 1, leaving=True)
    fake = FakeCluster(a)
    with pytest.raises(LeavingError):
        fake.run(topology_for(a), commands.get_jobs("q"))


def test_server_errors_are_raised_with_the_node():
    a = node("a", 1, handler=lambda args: ResponseError("ERR syntax error"))
    fake = FakeCluster(a)
    with pytest.raises(ResponseError, match="syntax error") as info:
        fake.run(topology_for(a), commands.qlen("q"))
    assert info.value.node == "10.0.0.1:1"
    assert len(fake.sent) == 1


def test_job_commands_go_to_the_creating_node():
    a, b, c, fake = cluster_of_three()
    t = topology_for(a)
    fake.run(t, commands.ping())
    fake.run(t, commands.show(job_id(b)))
    fake.run(t, commands.working(job_id(c)))
    assert fake.sent[1:] == [
        (b.address, (b"SHOW", job_id(b).encode())),
        (c.address, (b"WORKING", job_id(c).encode())),
    ]
    assert t.current == a.address  # routing does not move the client


def test_multi_id_commands_are_split_by_creator_and_summed():
    a, b, c, fake = cluster_of_three()
    t = topology_for(a)
    fake.run(t, commands.ping())
    ids = [job_id(b, 1), job_id(c, 2), job_id(b, 3), "D-99999999-" + "x" * 24 + "-05a1"]
    assert fake.run(t, commands.ack(*ids)) == 4
    acks = sorted((addr[1], args[1:]) for addr, args in fake.sent if args[0] == b"ACKJOB")
    assert acks == [
        (1, (ids[3].encode(),)),
        (2, (ids[0].encode(), ids[2].encode())),
        (3, (ids[1].encode(),)),
    ]


def test_routing_falls_back_when_the_creator_is_down():
    a, b, _c, fake = cluster_of_three()
    t = topology_for(a)
    fake.run(t, commands.ping())
    b.up = False
    assert fake.run(t, commands.ack(job_id(b))) == 1
    ack = [addr for addr, args in fake.sent if args[0] == b"ACKJOB"]
    assert ack == [a.address]  # B refused the connection: nothing was sent there


def test_pinned_calls_never_leave_their_node():
    a, b, c, fake = cluster_of_three()
    t = topology_for(a)
    fake.run(t, commands.show(job_id(b)), pinned=c.address)
    assert fake.sent[-1][0] == c.address
    c.up = False
    with pytest.raises(ConnectionFailedError):
        fake.run(t, commands.ping(), pinned=c.address)


def test_consumer_affinity_moves_getjob():
    from disquette.client.topology import Affinity

    a, b, _c, fake = cluster_of_three()
    b_jobs = [[b"q", job_id(b, n).encode(), b"x"] for n in range(3)]
    a.handler = lambda args: b_jobs if args[0] == b"GETJOB" else b"OK"
    t = Topology([a.address], rng=random.Random(0), affinity=Affinity(10, 0.5, 3))
    fake.run(t, commands.get_jobs("q", count=3))
    fake.run(t, commands.get_jobs("q", count=3))
    getjobs = [addr for addr, args in fake.sent if args[0] == b"GETJOB"]
    assert getjobs == [a.address, b.address]
    fake.run(t, commands.add_job("q", b"x"))
    assert fake.sent[-1][0] == a.address  # producers are not moved


def test_scan_pages_stay_on_the_node_of_the_first_page():
    a, b, c, fake = cluster_of_three()
    pages = iter([[b"5", [b"q1"]], [b"0", [b"q2"]]])
    for n in (a, b, c):
        n.handler = lambda args: next(pages)
    t = topology_for(a, b, c, seed=5)
    scan = commands.qscan(count=1)
    items = []
    while not scan.done:
        items += fake.run(t, scan)
    assert items == ["q1", "q2"]
    assert fake.sent[0][0] == fake.sent[1][0]
    assert fake.sent[1][1] == (b"QSCAN", b"5", b"COUNT", b"1")


def test_add_jobs_stops_at_the_first_error_and_reports_each_body():
    replies = iter([b"D-1", ResponseError("MAXLEN Queue is already longer"), b"D-3"])
    a = node("a", 1, handler=lambda args: next(replies))
    fake = FakeCluster(a)
    with pytest.raises(PipelineError) as info:
        fake.run(topology_for(a), commands.add_jobs("q", [b"1", b"2", b"3", b"4"], window=1))
    results = info.value.results
    assert results[0] == "D-1" and isinstance(results[1], ResponseError) and len(results) == 2


def test_add_jobs_with_a_lost_connection_reports_the_uncertain_ones():
    a = node("a", 1, drop_once={b"ADDJOB"})
    fake = FakeCluster(a)
    with pytest.raises(PipelineError) as info:
        fake.run(topology_for(a), commands.add_jobs("q", [b"1", b"2"], window=2))
    assert [type(r) for r in info.value.results] == [ReplyLostError, ReplyLostError]


# ---------------------------------------------------------------------- DEDUP keys
# An ADDJOB with a DEDUP key cannot add a job twice on a node holding a copy: it is
# resent after a lost reply (same node first) and after -TRYAGAIN (after a pause).

TRYAGAIN = TryAgainError("TRYAGAIN A job with this DEDUP key is still being replicated")


def test_a_lost_dedup_addjob_is_resent_to_the_same_node_first():
    a, _b, _c, fake = cluster_of_three(a_drop_once={b"ADDJOB"})
    t = topology_for(a)
    fake.run(t, commands.ping())
    job = fake.run(t, commands.add_job("q", b"body", dedup="k1"))
    assert [(addr, args[0]) for addr, args in fake.sent[1:]] == [
        (a.address, b"ADDJOB"),
        (a.address, b"ADDJOB"),
    ]
    assert job == a.dedup[(b"q", b"k1")].decode()  # the job the first one added
    assert len(a.dedup) == 1


def test_a_lost_dedup_addjob_goes_elsewhere_when_its_node_is_down():
    a, b, c, fake = cluster_of_three()
    t = topology_for(a)
    fake.run(t, commands.ping())

    def crash(args):
        a.up = False
        return b"D-lost"

    a.handler = crash
    job = fake.run(t, commands.add_job("q", b"body", dedup=True))
    addjobs = [addr for addr, args in fake.sent if args[0] == b"ADDJOB"]
    assert addjobs[0] == a.address and addjobs[1] in (b.address, c.address)
    assert job.startswith("D-" + {b.address: b.id, c.address: c.id}[addjobs[1]][:8])


def test_a_dedup_addjob_whose_node_keeps_dropping_moves_on():
    a = node("a", 1)
    a.handler = lambda args: DROP if args[0] == b"ADDJOB" else default_reply(a, args)
    b = node("b", 2)
    fake = FakeCluster(a, b)
    t = topology_for(a)
    fake.run(t, commands.ping())
    fake.run(t, commands.add_job("q", b"body", dedup="k"))
    assert [addr for addr, args in fake.sent if args[0] == b"ADDJOB"] == [
        a.address,
        a.address,
        b.address,
    ]


def test_tryagain_is_waited_out_on_the_same_node():
    replies = iter([TRYAGAIN, TRYAGAIN])
    a, _b, _c, fake = cluster_of_three()

    def handler(args):
        refusal = next(replies, None) if args[0] == b"ADDJOB" else None
        return refusal or default_reply(a, args)

    a.handler = handler
    t = topology_for(a)
    fake.run(t, commands.ping())
    assert fake.run(t, commands.add_job("q", b"body", dedup="k")).startswith("D-aaaaaaaa")
    assert {addr for addr, _ in fake.sent} == {a.address}
    assert fake.slept == [0.01, 0.02]


def test_tryagain_for_too_long_is_raised():
    a = node("a", 1, handler=lambda args: TRYAGAIN)
    fake = FakeCluster(a)
    with pytest.raises(TryAgainError):
        fake.run(topology_for(a), commands.add_job("q", b"body", dedup="k", timeout=2))
    assert sum(fake.slept) == pytest.approx(2)
    assert max(fake.slept) == TRYAGAIN_PAUSES[1]


def test_tryagain_without_a_dedup_key_is_an_error_at_once():
    a = node("a", 1, handler=lambda args: TRYAGAIN)
    fake = FakeCluster(a)
    with pytest.raises(TryAgainError):
        fake.run(topology_for(a), commands.execute("ADDJOB", "q", "b", 0))
    assert fake.slept == [] and len(fake.sent) == 1


def test_a_refused_dedup_addjob_goes_to_another_node():
    a, _b, _c, fake = cluster_of_three()
    t = topology_for(a)
    fake.run(t, commands.ping())
    a.leaving = True
    fake.run(t, commands.add_job("q", b"body", dedup="k"))
    addjobs = [addr for addr, args in fake.sent if args[0] == b"ADDJOB"]
    assert addjobs[0] == a.address and addjobs[1] != a.address


def test_add_jobs_with_keys_resends_the_lost_ones_in_place():
    a = node("a", 1)
    executed = 0

    def handler(args):
        nonlocal executed
        executed += 1
        return DROP if executed == 3 else default_reply(a, args)

    a.handler = handler
    fake = FakeCluster(a)
    bodies = [b"%d" % n for n in range(6)]
    ids = fake.run(topology_for(a), commands.add_jobs("q", bodies, window=2, dedup=bodies))
    assert len(ids) == 6 and len(set(ids)) == 6
    assert ids == [a.dedup[(b"q", body)].decode() for body in bodies]
    sent = [args[2] for _, args in fake.sent]
    # 2 was executed and its reply lost, 3 was in flight: both are resent first
    assert sent == [b"0", b"1", b"2", b"2", b"3", b"4", b"5"]


def test_add_jobs_with_keys_waits_out_tryagain_in_place():
    a = node("a", 1)
    refused = {b"1"}

    def handler(args):
        if args[2] in refused:
            refused.discard(args[2])
            return TRYAGAIN
        return default_reply(a, args)

    a.handler = handler
    fake = FakeCluster(a)
    ids = fake.run(topology_for(a), commands.add_jobs("q", [b"0", b"1", b"2"], dedup=True))
    assert [args[2] for _, args in fake.sent] == [b"0", b"1", b"2", b"1"]
    assert len(set(ids)) == 3 and all(isinstance(i, str) for i in ids)
    assert fake.slept == [0.01]


def test_add_jobs_with_keys_on_an_unreachable_cluster_reports_the_lost_ones():
    a = node("a", 1)

    def crash(args):
        a.up = False
        return DROP

    a.handler = crash
    fake = FakeCluster(a)
    with pytest.raises(PipelineError) as info:
        fake.run(topology_for(a), commands.add_jobs("q", [b"1", b"2"], dedup=True))
    assert [type(r) for r in info.value.results] == [ReplyLostError, ReplyLostError]


def test_add_jobs_with_keys_stops_at_other_errors():
    replies = iter([b"D-1", ResponseError("MAXLEN Queue is already longer"), b"D-3"])
    a = node("a", 1, handler=lambda args: next(replies))
    fake = FakeCluster(a)
    with pytest.raises(PipelineError) as info:
        fake.run(topology_for(a), commands.add_jobs("q", [b"1", b"2", b"3"], window=1, dedup=True))
    assert len(info.value.results) == 2 and len(fake.sent) == 2


# ---------------------------------------------------------------------- coordination (issue 16)


def after_of(args: tuple[bytes, ...]) -> list[bytes]:
    return [args[i + 1] for i, a in enumerate(args) if a == b"AFTER"]


def test_ids_with_claims_split_by_creator_keep_their_claims():
    from disquette.client.models import Job

    a, b, c, fake = cluster_of_three()
    t = topology_for(a)
    fake.run(t, commands.ping())
    jobs = [Job("q", job_id(b, 1), b"", claim=3), job_id(c, 2), Job("q", job_id(b, 3), b"")]
    assert fake.run(t, commands.ack(*jobs)) == 3
    acks = sorted((addr[1], args[1:]) for addr, args in fake.sent if args[0] == b"ACKJOB")
    assert acks == [
        (2, (job_id(b, 1).encode(), b"CLAIM", b"3", job_id(b, 3).encode())),
        (3, (job_id(c, 2).encode(),)),
    ]


def test_a_lost_working_with_a_text_is_not_resent():
    a, _b, _c, fake = cluster_of_three(a_drop_once={b"WORKING"})
    t = topology_for(a)
    with pytest.raises(ReplyLostError, match="progress text may have been logged"):
        fake.run(t, commands.working(job_id(a), "step 2"))
    assert names(fake.sent) == [b"WORKING"]
    a, _b, _c, fake = cluster_of_three(a_drop_once={b"WORKING"})
    assert fake.run(topology_for(a), commands.working(job_id(a))) == 5  # no text: resent
    assert names(fake.sent) == [b"WORKING", b"WORKING"]


def test_a_chain_adds_each_job_after_the_previous_one():
    a, _b, _c, fake = cluster_of_three()
    t = topology_for(a)
    first = "D-99999999-" + "p" * 24 + "-05a1"
    ids = fake.run(
        t,
        commands.add_chain(
            "q", [b"1", ("other", b"2"), b"3"], after=first, if_gone="release", retry=9
        ),
    )
    adds = [args for _, args in fake.sent]
    assert [args[1:3] for args in adds] == [(b"q", b"1"), (b"other", b"2"), (b"q", b"3")]
    assert [after_of(args) for args in adds] == [[first.encode()]] + [[i.encode()] for i in ids[:2]]
    assert all(args[-2:] == (b"IFGONE", b"release") for args in adds)
    assert all(args[4:6] == (b"RETRY", b"9") for args in adds)
    assert len(set(ids)) == 3
    fake.sent.clear()
    fake.run(t, commands.add_chain("q", [b"1", b"2"], if_gone="fail"))
    assert after_of(fake.sent[0][1]) == []  # the first waits for nothing
    assert b"IFGONE" not in fake.sent[0][1] and b"IFGONE" in fake.sent[1][1]


def test_a_chain_failing_midway_reports_what_it_added():
    replies = iter([b"D-1", ResponseError("MAXLEN Queue is already longer")])
    a = node("a", 1, handler=lambda args: next(replies))
    fake = FakeCluster(a)
    with pytest.raises(PipelineError) as info:
        fake.run(topology_for(a), commands.add_chain("q", [b"1", b"2", b"3"]))
    first, error = info.value.results
    assert first == "D-1" and isinstance(error, ResponseError)
    assert isinstance(info.value.__cause__, ResponseError)
    assert len(fake.sent) == 2
    down = node("d", 4, up=False)
    with pytest.raises(ConnectionFailedError):  # nothing added: the error as it is
        FakeCluster(down).run(topology_for(down), commands.add_chain("q", [b"1"]))


def test_a_lost_addjob_in_a_chain_is_reported_not_resent_and_with_keys_resent():
    a = node("a", 1, drop_once={b"ADDJOB"})
    fake = FakeCluster(a)
    with pytest.raises(PipelineError) as info:
        fake.run(topology_for(a), commands.add_chain("q", [b"1", b"2"]))
    assert [type(r) for r in info.value.results] == [ReplyLostError]
    a.drop_once = {b"ADDJOB"}
    ids = fake.run(topology_for(a), commands.add_chain("q", [b"1", b"2"], dedup=True))
    assert len(ids) == 2 and after_of(fake.sent[-1][1]) == [ids[0].encode()]


def test_a_fan_in_pipelines_the_parents_then_adds_one_job_after_them_all():
    a, _b, _c, fake = cluster_of_three()
    t = topology_for(a)
    result = fake.run(
        t,
        commands.add_fan_in(
            "parts", [b"1", b"2", ("other", b"3")], then=("sum", b"total"), if_gone="fail"
        ),
    )
    parents, then = result
    assert result.parents == parents and len(set(parents)) == 3
    adds = [args for _, args in fake.sent]
    assert [args[1:3] for args in adds] == [
        (b"parts", b"1"), (b"parts", b"2"), (b"other", b"3"), (b"sum", b"total"),
    ]  # fmt: skip
    assert all(after_of(args) == [] for args in adds[:3])
    assert after_of(adds[3]) == [p.encode() for p in parents]
    assert adds[3][-2:] == (b"IFGONE", b"fail") and then == "D-" + a.id[:8] + then[10:]


def test_a_fan_in_whose_parents_fail_adds_no_last_job():
    replies = iter([b"D-1", ResponseError("MAXLEN Queue is already longer")])
    a = node("a", 1, handler=lambda args: next(replies))
    fake = FakeCluster(a)
    with pytest.raises(PipelineError) as info:
        fake.run(topology_for(a), commands.add_fan_in("q", [b"1", b"2"], then=("r", b"x")))
    assert info.value.results[0] == "D-1" and len(info.value.results) == 2
    assert names(fake.sent) == [b"ADDJOB", b"ADDJOB"]


def test_a_fan_in_whose_last_job_fails_reports_the_parents():
    replies = iter([b"D-1", b"D-2", ResponseError("PAUSED Queue paused in input")])
    a = node("a", 1, handler=lambda args: next(replies))
    fake = FakeCluster(a)
    with pytest.raises(PipelineError) as info:
        fake.run(topology_for(a), commands.add_fan_in("q", [b"1", b"2"], then=("r", b"x")))
    one, two, error = info.value.results
    assert (one, two) == ("D-1", "D-2") and isinstance(error, ResponseError)


def test_compound_calls_through_the_client_methods():
    """add_chain and add_fan_in are client methods (sync and asyncio), run as one call."""
    import asyncio

    from disquette.client import aio
    from disquette.client.sync import Client

    a = node("a", 1)
    fake = FakeCluster(a)
    client = Client("10.0.0.1:1")
    client.call = lambda call: fake.run(client.topology, call)  # the sockets, faked
    assert len(client.add_chain("q", [b"1", b"2"])) == 2
    assert len(client.add_fan_in("q", [b"1"], then=("r", b"x")).parents) == 1
    async_client = aio.Client("10.0.0.1:1")

    async def call(c):
        return fake.run(async_client.topology, c)

    async_client.call = call
    assert len(asyncio.run(async_client.add_chain("q", [b"1", b"2", b"3"]))) == 3


def test_a_nack_with_a_delay_split_by_creator_keeps_the_delay_on_each_part():
    a, b, c, fake = cluster_of_three()
    t = topology_for(a)
    fake.run(t, commands.ping())
    assert fake.run(t, commands.nack(job_id(b, 1), job_id(c, 2), delay=30)) == 2
    nacks = sorted((addr[1], args[1:]) for addr, args in fake.sent if args[0] == b"NACK")
    assert nacks == [
        (2, (job_id(b, 1).encode(), b"DELAY", b"30")),
        (3, (job_id(c, 2).encode(), b"DELAY", b"30")),
    ]


def waiting_cluster(lost_after: float):
    """a loses WAITJOB's reply after ``lost_after`` seconds of a fake clock; b answers."""
    now = [0.0]

    def lose(args):
        if args[0] != b"WAITJOB":
            return default_reply(a, args)
        now[0] += lost_after
        return DROP

    a, b, c, fake = cluster_of_three()
    a.handler = lose
    b.handler = c.handler = lambda args: [b"acked", b"the result"]
    t = Topology([a.address], rng=random.Random(0), clock=lambda: now[0])
    fake.run(t, commands.ping())
    return a, fake, t


def test_a_lost_waitjob_is_sent_again_elsewhere_with_the_time_left():
    a, fake, t = waiting_cluster(lost_after=3.0)
    outcome = fake.run(t, commands.wait(job_id(a), timeout=5))
    assert outcome == JobOutcome("acked", b"the result")
    waits = [(addr, args) for addr, args in fake.sent if args[0] == b"WAITJOB"]
    assert [args[2:] for _, args in waits] == [(b"TIMEOUT", b"5000"), (b"TIMEOUT", b"2000")]
    assert waits[0][0] == a.address != waits[1][0] and len(fake.slept) == 1
    a, fake, t = waiting_cluster(lost_after=3.0)
    assert fake.run(t, commands.wait(job_id(a))) == JobOutcome("acked", b"the result")
    assert [args[2:] for _, args in fake.sent if args[0] == b"WAITJOB"] == [(), ()]


def test_a_waitjob_lost_after_its_timeout_is_not_sent_again():
    a, fake, t = waiting_cluster(lost_after=6.0)
    assert fake.run(t, commands.wait(job_id(a), timeout=5)) is None
    assert [args for _, args in fake.sent if args[0] == b"WAITJOB"] == [
        (b"WAITJOB", job_id(a).encode(), b"TIMEOUT", b"5000")
    ]
