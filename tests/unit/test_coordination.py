"""Dependencies, progress logs and claim numbers across cores on the in-memory bus,
on a virtual clock (the cluster harness of test_cluster_jobs): what each message
does, and what partitions and lost messages do to it."""

from __future__ import annotations

import pytest

from disquette.core import dependency, progress, serialize
from disquette.core import messages as msg
from disquette.core.errors import DisqueError
from disquette.core.job import ACKED, ACTIVE, AFTER_FAILED, AFTER_RELEASE, QUEUED, Extra, Job
from disquette.core.memory import job_cost
from tests.unit.core_harness import RecordingClient
from tests.unit.test_cluster_jobs import Cluster, addjob, job_on, replicated


def add(c: Cluster, node, **kw) -> bytes:
    """A job added on ``node`` (synchronously replicated when REPLICATE > 1); its ID."""
    if kw.get("repl", 1) > 1:
        return replicated(c, node, **kw)
    job = addjob(node, **kw)
    c.pump()
    return job.id


def queued_anywhere(c: Cluster, job_id: bytes) -> list[int]:
    return [i for i, n in enumerate(c.nodes) if (j := n.jobs.get(job_id)) and j.state == QUEUED]


def ack(c: Cluster, i: int, job_id: bytes) -> None:
    c.nodes[i].ack_jobs([job_id])
    c.pump()


# ---------------------------------------------------------------- dependencies


def test_a_job_after_a_live_one_waits_then_is_queued_once_on_its_creator():
    c = Cluster(3)
    parent = add(c, c.nodes[0], repl=2, retry=30)
    child = add(c, c.nodes[1], repl=3, retry=30, after=[parent])
    c.run(3000)
    assert all(job_on(n, child).waiting and job_on(n, child).qtime == 0 for n in c.nodes)
    assert queued_anywhere(c, child) == []
    ack(c, 2, parent)  # on a node that never held the parent: a dummy ack reaches all
    c.run(500)
    assert queued_anywhere(c, child) == [1]  # its creator, at once
    others = [job_on(n, child) for n in (c.nodes[0], c.nodes[2])]
    assert all(j.state == ACTIVE and not j.waiting and j.qtime for j in others)


def test_the_ack_is_pushed_to_watchers_without_waiting_for_a_query():
    c = Cluster(2)
    parent = add(c, c.nodes[0], repl=1, retry=30)
    child = add(c, c.nodes[1], repl=1, retry=30, after=[parent])
    c.run(200)  # the first query registers node 1 as a watcher on node 0
    assert c.nodes[1].myself in c.nodes[0].deps.watchers[parent]
    c.nodes[0].ack_jobs([parent])
    c.pump()  # no time passes: the push alone
    assert queued_anywhere(c, child) == [1]


def test_a_lost_push_is_made_up_by_the_next_query():
    c = Cluster(2)
    parent = add(c, c.nodes[0], repl=1, retry=30)
    child = add(c, c.nodes[1], repl=1, retry=30, after=[parent])
    c.run(200)
    c.net.cut.add(c.nodes[1].myself)
    c.nodes[0].ack_jobs([parent])
    c.pump()
    c.run(3000)  # the parent's ack is collected and forgotten meanwhile
    assert c.nodes[0].jobs.get(parent) is None
    c.net.cut.clear()
    c.run(20_000)
    assert queued_anywhere(c, child) == [1]  # nobody knows it any more: acknowledged


def test_an_unreachable_node_keeps_the_job_waiting():
    c = Cluster(3)
    child = add(c, c.nodes[0], repl=1, retry=30, after=[b"D-dddddddd-" + b"x" * 24 + b"-0001"])
    c.net.cut.add(c.nodes[2].myself)  # it may hold the dependency
    c.run(40_000)
    assert job_on(c.nodes[0], child).waiting
    c.net.cut.clear()
    c.run(20_000)
    assert queued_anywhere(c, child) == [0]


def test_a_dependency_that_expires_fails_the_job_by_default_and_releases_it_if_asked():
    c = Cluster(2)
    parent = add(c, c.nodes[0], repl=2, retry=30, ttl=5)
    fail = add(c, c.nodes[1], repl=2, retry=30, after=[parent])
    keep = add(c, c.nodes[1], repl=2, retry=30, after=[parent], release=True)
    c.run(1000)
    c.run(6000)
    assert all(n.jobs.get(fail) is None for n in c.nodes)  # failed: deleted everywhere
    assert queued_anywhere(c, keep) == [1]
    assert c.nodes[1].deps.failed == 1
    # Those that ask later learn it went: from the tombstones.
    assert fail in c.nodes[1].deps.gone and parent in c.nodes[0].deps.gone


def test_a_failed_job_fails_its_own_dependents_and_is_dead_lettered_by_policy():
    c = Cluster(2)
    c.nodes[0].policies.set(b"p", b"q", {"deadletter": b"dead"})
    c.pump()
    parent = add(c, c.nodes[0], repl=1, retry=30, ttl=5)
    middle = add(c, c.nodes[0], repl=2, retry=30, after=[parent])
    last = add(c, c.nodes[1], repl=2, retry=30, after=[middle])
    c.run(8000)
    assert all(n.jobs.get(middle) is None and n.jobs.get(last) is None for n in c.nodes)
    letters = {j.extra.origin_id for n in c.nodes for j in n.jobs.values() if j.queue == b"dead"}
    assert letters == {middle, last}


def test_addjob_after_known_jobs_settles_them_at_once():
    c = Cluster(2)
    node = c.nodes[0]
    done = add(c, node, repl=2, retry=30)
    node.ack_jobs([done])
    assert node.jobs.get(done).state == ACKED  # until every holder confirms
    plain = addjob(node, repl=1, retry=30, after=[done])
    assert plain.extra is None and plain.state == QUEUED
    live = addjob(node, repl=1, retry=30)
    waiting = addjob(node, repl=1, retry=30, after=[done, live.id])
    assert waiting.extra.after == (live.id,) and waiting.state == ACTIVE
    assert node.deps.watchers[live.id] == {node.myself}


def test_enqueue_releases_a_waiting_job_and_nack_does_not():
    c = Cluster(1)
    node = c.nodes[0]
    live = addjob(node, retry=30)
    waiting = addjob(node, retry=30, after=[live.id])
    assert node.requeue_jobs([waiting.id], nack=True) == 0
    assert node.requeue_jobs([waiting.id], nack=False) == 1
    assert waiting.state == QUEUED and not waiting.waiting


def test_a_queued_message_from_another_holder_ends_the_wait_here():
    c = Cluster(2)
    child = add(c, c.nodes[0], repl=2, retry=30, after=[b"D-dddddddd-" + b"x" * 24 + b"-0001"])
    copy = job_on(c.nodes[1], child)
    assert copy.waiting
    c.nodes[1].receive(c.nodes[0].cluster.header(), (msg.QUEUED, child, 0))
    assert not copy.waiting and copy.qtime  # its requeue timer runs, as a replica's


def test_enqueue_messages_do_not_queue_a_waiting_job():
    c = Cluster(2)
    child = add(c, c.nodes[0], repl=2, retry=30, after=[b"D-dddddddd-" + b"x" * 24 + b"-0001"])
    c.nodes[1].receive(c.nodes[0].cluster.header(), (msg.ENQUEUE, child, 0))
    assert job_on(c.nodes[1], child).state == ACTIVE


def test_the_designated_holder_is_the_creator_else_the_smallest_reachable_holder():
    c = Cluster(3)
    deps = [n.deps for n in c.nodes]
    job = Job(b"D-" + c.nodes[2].myself[:8] + b"-" + b"x" * 24 + b"-0001", b"q", b"b")
    job.nodes_delivered = (c.nodes[0].myself, c.nodes[1].myself, c.nodes[2].myself)
    assert [d.designated(job) for d in deps] == [False, False, True]
    for n in c.nodes:
        n.cluster.nodes[c.nodes[2].myself].flags |= 4  # PFAIL: the creator is out of reach
        n.cluster.update_reachable()
    assert [d.designated(job) for d in deps[:2]] == [True, False]


def test_a_waiting_job_survives_the_aof_and_its_record_follows_the_wait():
    c = Cluster(1)
    node = c.nodes[0]
    live = addjob(node, retry=30)
    waiting = addjob(node, retry=30, after=[live.id])
    data = serialize.encode(waiting, bus=False)
    copy, _ = serialize.decode(data, False)
    assert copy.extra.after == (live.id,) and copy.extra.after_flags == 0
    node.aof.records.clear()
    node.ack_jobs([live.id])
    records = node.aof.records
    rewritten = records.index(("deljob", waiting.id))
    assert records[rewritten + 1] == ("loadjob", waiting.id)


def test_memory_follows_a_waiting_job_as_its_wait_shrinks():
    c = Cluster(1)
    node = c.nodes[0]
    a, b = addjob(node, retry=30), addjob(node, retry=30)
    waiting = addjob(node, retry=30, after=[a.id, b.id])
    node.ack_jobs([a.id])
    node.ack_jobs([b.id])
    used = node.used_memory
    node.ack_jobs([waiting.id])
    c.run(2000)
    assert node.used_memory < used
    assert not node.jobs.get(waiting.id)
    assert waiting.extra is not None  # the Extra stayed with the job, its cost given back


# ---------------------------------------------------------------- progress


def test_progress_reaches_every_holder_and_is_confirmed():
    c = Cluster(3)
    jid = add(c, c.nodes[0], repl=3, retry=30)
    c.nodes[0].working(jid, b"half way")
    c.pump()
    logs = [job_on(n, jid).extra.log for n in c.nodes]
    assert logs[0] == logs[1] == logs[2] and logs[0][0][1:] == (c.nodes[0].myself, b"half way")
    assert not any(n.progress_pending for n in c.nodes)


def logged_while_node_2_is_cut_off(text: bytes) -> tuple[Cluster, bytes]:
    """A job on the three nodes of a cluster, then node 2 cut off and ``text`` logged on
    node 0 (only node 1 hears of it); the cluster and the job's ID."""
    c = Cluster(3)
    jid = add(c, c.nodes[0], repl=3, retry=30)
    c.net.cut.add(c.nodes[2].myself)
    c.nodes[0].working(jid, text)
    c.pump()
    return c, jid


def test_logs_written_on_both_sides_of_a_partition_converge():
    c, jid = logged_while_node_2_is_cut_off(b"from a")
    c.net.cut = {c.nodes[0].myself}
    c.clock.advance(5)
    c.nodes[2].working(jid, b"from c")
    c.pump()
    c.net.cut.clear()
    c.run(3000)
    logs = [job_on(n, jid).extra.log for n in c.nodes]
    assert logs[0] == logs[1] == logs[2] and [e[2] for e in logs[0]] == [b"from a", b"from c"]


def test_an_entry_only_one_survivor_had_reaches_the_other():
    c, jid = logged_while_node_2_is_cut_off(b"only b hears")
    c.nodes.pop(0)  # node 0 is gone for good; b must pass it on to c
    c.net.cut.clear()
    c.run(3000)
    assert job_on(c.nodes[1], jid).extra.log == job_on(c.nodes[0], jid).extra.log


def test_a_log_is_bounded_and_texts_are_checked():
    c = Cluster(1)
    node = c.nodes[0]
    job = addjob(node, retry=30)
    for i in range(progress.MAX_ENTRIES):
        c.clock.advance(1)
        node.working(job.id, b"%d" % i)
    with pytest.raises(DisqueError, match="LOGFULL"):
        node.working(job.id, b"one more")
    with pytest.raises(DisqueError, match="longer than 1024"):
        node.working(job.id, b"x" * 1025)
    with pytest.raises(DisqueError, match="empty"):
        node.working(job.id, b"")


def test_merging_is_a_sorted_union_cut_to_the_bound():
    a = [(1, b"n" * 40, b"a"), (3, b"n" * 40, b"c")]
    b = [(2, b"m" * 40, b"b"), (1, b"n" * 40, b"a")]
    assert progress.merge(a, b) == sorted(set(a) | set(b))
    many = [(i, b"n" * 40, b"x") for i in range(100)]
    assert progress.merge(None, many) == many[: progress.MAX_ENTRIES]


def test_a_log_and_a_claim_round_trip_through_the_serialized_job():
    job = Job(b"D-aaaaaaaa-" + b"x" * 24 + b"-0001", b"q", b"body")
    job.extra = Extra()
    job.extra.log = [(123, b"a" * 40, b"text"), (124, b"b" * 40, b"")]
    job.extra.claim = 7
    job.extra.after = (b"D-bbbbbbbb-" + b"y" * 24 + b"-0001",)
    job.extra.after_flags = AFTER_RELEASE | AFTER_FAILED
    copy, _ = serialize.decode(serialize.encode(job, bus=False), False)
    assert copy.extra == job.extra
    assert job_cost(copy) == job_cost(job)


@pytest.mark.parametrize(
    "damage",
    [
        b"\x03\x00\x00\x00\x00",  # an empty dependency list
        b"\x03\x02\x00\x00\x00\x00xx",  # not a whole ID
        b"\x04\x05\x00\x00\x00\x00\x00\x00\x00\x00",  # a truncated log entry
        b"\x05\x04\x00\x00\x00\x00\x00\x00\x00",  # a claim of 4 bytes
    ],
)
def test_malformed_extensions_are_refused(damage):
    job = Job(b"D-aaaaaaaa-" + b"x" * 24 + b"-0001", b"q", b"body")
    data = bytearray(serialize.encode(job, bus=False))
    data += damage
    data[0:4] = (len(data) - 4).to_bytes(4, "little")
    with pytest.raises(serialize.BadJob):
        serialize.decode(bytes(data), False)


# ---------------------------------------------------------------- claims


def test_claims_grow_with_every_delivery_on_any_holder():
    c = Cluster(3)
    jid = add(c, c.nodes[0], repl=3, retry=1)
    [job] = c.nodes[0].get_jobs([b"q"], 1, withclaim=True)
    assert job.extra.claim == 1
    c.pump()
    assert all(job_on(n, jid).extra.claim == 1 for n in c.nodes)
    # Not acknowledged: a holder requeues it after RETRY, and delivers it again.
    for _ in range(100):
        c.run(100)
        if queued_anywhere(c, jid):
            break
    [i] = queued_anywhere(c, jid)
    [again] = c.nodes[i].get_jobs([b"q"], 1)  # even without WITHCLAIM, once it has one
    assert again.extra.claim == 2
    c.pump()
    from disquette.core import claim

    for n in c.nodes:
        with pytest.raises(DisqueError, match="STALECLAIM"):
            claim.check(n, jid, 1)
        claim.check(n, jid, 2)


def test_a_claim_heard_late_never_lowers_the_number():
    c = Cluster(2)
    jid = add(c, c.nodes[0], repl=2, retry=30)
    copy = job_on(c.nodes[1], jid)
    header = c.nodes[0].cluster.header()
    c.nodes[1].receive(header, (msg.CLAIM, jid, 5))
    c.nodes[1].receive(header, (msg.CLAIM, jid, 3))
    assert copy.extra.claim == 5


def test_blocked_getjob_withclaim_gets_its_claim(state_free=None):
    c = Cluster(1)
    node = c.nodes[0]
    client = RecordingClient()
    from disquette.core import replies

    node.block_for_jobs(client, [b"q"], 0, replies.WITH_CLAIM)
    job = addjob(node, retry=30)
    node.serve_blocked_clients()
    assert client.replies[-1].endswith(b"$5\r\nclaim\r\n:1\r\n")
    assert job.extra.claim == 1


def test_an_unknown_dependency_on_a_lone_node_counts_as_acknowledged_at_once():
    c = Cluster(1)
    node = c.nodes[0]
    done = addjob(node, retry=30)
    node.ack_jobs([done.id])  # alone: collected at once
    assert node.jobs.get(done.id) is None
    job = addjob(node, retry=30, after=[done.id])
    assert job.state == QUEUED and job.extra is None


def test_a_lone_node_settles_a_dependency_it_forgot_at_the_next_tick():
    c = Cluster(1)
    node = c.nodes[0]
    live = addjob(node, retry=30)
    job = addjob(node, retry=30, after=[live.id])
    node.deps.watchers.clear()  # as if the push were lost
    node.delete_job(live)
    c.run(dependency.QUERY_FIRST + 200)
    assert job.state == QUEUED and node.deps.released == 1
