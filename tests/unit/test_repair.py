"""Replica repair (core/repair.py) on cores wired by the in-memory bus of test_cluster_jobs.

Every node of these clusters announces a data generation. A node "crashes" by
being cut off the network and flagged FAIL by the others; it "restarts empty"
as a fresh core with the same ID and a newer generation, which the others learn
from the header of the first frame it sends them. (Every node has seen every
other's generation first: a node cannot tell that a node it never heard from
restarted.)
"""

from __future__ import annotations

import random
from typing import Any

from disquette.core import messages as msg
from disquette.core import repair
from disquette.core.job import ACTIVE, QUEUED
from disquette.core.membership import FAIL, NodesConf, parse_nodes_conf
from disquette.core.messages import Header
from disquette.core.node import Node
from disquette.core.requeue import sender_wins
from disquette.sim.disk import MemorySpillStore
from tests.unit.core_harness import RecordingClient, Settings
from tests.unit.test_cluster_jobs import Aof, Bus, Cluster, job_on, replicated

TIMEOUT = 1000  # cluster-node-timeout of these clusters: the repair delay is 2000 ms


def cluster(size: int = 5, **settings: Any) -> Cluster:
    c = Cluster(size, cluster_node_timeout=TIMEOUT, **settings)
    for node in c.nodes:
        node.cluster.start(None, None)
    for node in c.nodes:  # every node has heard from every other (as pings do)
        for other in c.nodes:
            if other is not node:
                node.receive(other.cluster.header(), (msg.PING, ()))
    return c


def crash(c: Cluster, node: Node) -> None:
    """The node dies: cut off, and flagged FAIL by every other node from now."""
    c.net.cut.add(node.myself)
    for other in c.nodes:
        if other is not node:
            row = other.cluster.nodes[node.myself]
            row.flags |= FAIL
            row.fail_time = c.clock()
            other.cluster.update_reachable()


def restart_empty(c: Cluster, node: Node) -> Node:
    """The node comes back without its jobs: a new core, a new data generation, and a
    first frame (a PING) to every other node."""
    c.clock.advance(100)  # a restart takes time: the new generation is later
    i = c.nodes.index(node)
    rng = random.Random(99 + i)
    fresh = Node(node.settings, node.myself, c.clock, rng, rng.randbytes, port=node.port,
                 bus=Bus(c.net, node.myself), aof=Aof())  # fmt: skip
    c.link(fresh)
    fresh.cluster.start(None, None)
    c.nodes[i] = fresh
    c.by_id[node.myself] = fresh
    c.net.cut.discard(node.myself)
    for other in c.nodes:
        if other is not fresh:
            other.cluster.nodes[fresh.myself].flags &= ~FAIL
            other.cluster.update_reachable()
            other.receive(fresh.cluster.header(), (msg.PING, ()))
    return fresh


def holders(c: Cluster, job_id: bytes) -> list[Node]:
    """The running nodes with a live copy of the job."""
    return [
        n
        for n in c.nodes
        if n.myself not in c.net.cut
        and (j := n.jobs.get(job_id)) is not None
        and j.state in (ACTIVE, QUEUED)
    ]


def repl_sent(c: Cluster, since: int = 0) -> list[tuple[bytes, bytes, Any]]:
    return [m for m in c.net.sent[since:] if m[2][0] == msg.REPLJOB]


def test_a_new_generation_loses_the_copies_and_they_are_repaired():
    c = cluster()
    jid = replicated(c, c.nodes[0], repl=3, retry=300)
    gone = next(n for n in holders(c, jid) if n is not c.nodes[0])
    logs: list[str] = []
    for node in c.nodes:
        node.cluster.on_log = lambda level, text: logs.append(text)
    fresh = restart_empty(c, gone)
    assert any("started a new data generation" in t and gone.myself.decode() in t for t in logs)
    c.run(500)
    now_holding = holders(c, jid)
    assert len(now_holding) == 3
    for node in now_holding:
        assert len(node.repair.live_holders(job_on(node, jid))) == 3
        assert set(job_on(node, jid).nodes_delivered) >= {n.myself for n in now_holding}
    assert sum(n.repair.copies_lost for n in c.nodes) == 1
    assert sum(n.repair.jobs_repaired for n in c.nodes) == 1
    assert all(n.repair.backlog == 0 for n in c.nodes)
    assert fresh.repair.generation_changes == 0  # it saw no peer change


def test_one_holder_repairs_the_one_the_requeue_comparison_picks():
    c = cluster()
    jid = replicated(c, c.nodes[0], repl=3, retry=300)
    gone = holders(c, jid)[-1]
    survivors = [n for n in holders(c, jid) if n is not gone]
    expected = (
        survivors[0]
        if sender_wins(survivors[0].myself, survivors[1].myself, jid)
        else (survivors[1])
    )
    before = len(c.net.sent)
    restart_empty(c, gone)
    c.run(500)
    senders = {src for src, _dst, m in repl_sent(c, before) if m[2] == 0}
    assert senders == {expected.myself}


def test_a_failed_node_counts_as_lost_after_the_delay_and_stays_delivered():
    c = cluster()
    jid = replicated(c, c.nodes[0], repl=3, retry=300)
    gone = holders(c, jid)[-1]
    crash(c, gone)
    c.run(1800)  # the delay is twice the node timeout: 2000 ms
    assert len(holders(c, jid)) == 2
    c.run(800)
    assert len(holders(c, jid)) == 3
    for node in holders(c, jid):
        assert gone.myself in job_on(node, jid).nodes_delivered  # acks must still reach it
        assert len(node.repair.live_holders(job_on(node, jid))) == 3


def test_the_delay_is_settable():
    c = cluster(replica_repair_delay=5000)
    jid = replicated(c, c.nodes[0], repl=3, retry=300)
    crash(c, holders(c, jid)[-1])
    c.run(4500)
    assert len(holders(c, jid)) == 2
    c.run(1000)
    assert len(holders(c, jid)) == 3


def test_repair_off_is_disques_behaviour():
    c = cluster(replica_repair=False)
    jid = replicated(c, c.nodes[0], repl=3, retry=300)
    gone = holders(c, jid)[-1]
    before = len(c.net.sent)
    restart_empty(c, gone)
    c.run(5000)
    assert len(holders(c, jid)) == 2
    assert not repl_sent(c, before)
    assert c.nodes[0].repair.generation_changes == 1  # still seen and logged


def test_a_frame_of_a_dead_incarnation_is_ignored():
    c = cluster()
    a, b = c.nodes[0], c.nodes[1]
    old_header = b.cluster.header()
    restart_empty(c, b)
    jid = replicated(c, a, repl=2, retry=300)
    job = job_on(a, jid)
    stale = Header(old_header.sender, old_header.port, old_header.flags, old_header.generation)
    before = job.qtime
    a.receive(stale, (msg.QUEUED, jid, 0))  # would postpone the requeue
    assert job.qtime == before
    assert a.cluster.nodes[b.myself].generation > stale.generation


def test_an_ack_racing_a_repair_collects_the_new_copies_too():
    c = cluster()
    jid = replicated(c, c.nodes[0], repl=3, retry=300)
    survivors = [n for n in holders(c, jid)]
    gone = survivors.pop()
    restart_empty(c, gone)
    # Run the crons once without delivering messages: the REPLJOBs are in flight.
    for node in c.nodes:
        node.cron()
    assert repl_sent(c)
    acker = next(n for n in survivors if not n.repair.in_flight)
    acker.ack_jobs([jid])
    c.pump()
    c.run(20_000)
    assert not any(n.jobs.get(jid) for n in c.nodes)


def test_a_target_that_fails_before_confirming_is_replaced():
    c = cluster()
    jid = replicated(c, c.nodes[0], repl=3, retry=300)
    gone = holders(c, jid)[-1]
    restart_empty(c, gone)
    for node in c.nodes:
        node.cron()
    target_id = repl_sent(c)[-1][1]
    target = c.by_id[target_id]
    crash(c, target)  # before its GOTJOB
    c.run(5000)
    now_holding = [n for n in holders(c, jid) if n is not target]
    assert len(now_holding) == 3


def test_repairs_are_paced():
    c = cluster(4)
    a = c.nodes[0]
    ids = [replicated(c, a, repl=2, retry=300) for _ in range(900)]
    lost = [jid for jid in ids if c.nodes[1] in holders(c, jid)]
    assert len(lost) > repair.STARTS_PER_TICK
    before = len(c.net.sent)
    fresh = restart_empty(c, c.nodes[1])
    for node in c.nodes:
        node.cron()
    assert 0 < len(repl_sent(c, before)) <= repair.STARTS_PER_TICK
    assert a.repair.backlog > 0
    c.run(3000)
    assert all(len(holders(c, jid)) >= 2 for jid in ids)
    assert a.repair.backlog == 0
    assert fresh.repair.backlog == 0


def test_the_generation_is_kept_in_nodes_conf_and_kept_only_with_the_aof():
    c = cluster(1)
    a = c.nodes[0]
    content = a.cluster.config_text()
    assert content.endswith(b"vars data-generation %d\n" % a.cluster.generation)
    loaded = parse_nodes_conf(content, 0)
    assert isinstance(loaded, NodesConf) and loaded.generation == a.cluster.generation
    c.clock.advance(10)
    kept = Node(Settings(), a.myself, c.clock, random.Random(1), random.Random(1).randbytes)
    kept.cluster.start(None, loaded, keep_generation=True)
    assert kept.cluster.generation == a.cluster.generation
    new = Node(Settings(), a.myself, c.clock, random.Random(1), random.Random(1).randbytes)
    new.cluster.start(None, loaded)
    assert new.cluster.generation > a.cluster.generation
    assert new.cluster.header().generation == new.cluster.generation


def test_flushing_every_job_starts_a_new_generation():
    c = cluster(1)
    a = c.nodes[0]
    before = a.cluster.generation
    a.flush_all()
    assert a.cluster.generation > before


def test_live_copies_of_a_local_job():
    c = cluster(1)
    job = c.nodes[0].add_job(RecordingClient(), b"q", b"x", 0, repl=1)
    assert job is not None
    assert c.nodes[0].repair.live_holders(job) == [c.nodes[0].myself]


def test_a_node_restarted_with_its_aof_notices_a_peer_that_restarted_empty_meanwhile():
    c = cluster(3)
    a, b = c.nodes[0], c.nodes[1]
    saved = parse_nodes_conf(a.cluster.config_text(), 0)
    assert saved is not None
    assert {n.id: n.generation for n in saved.nodes}[b.myself] == b.cluster.generation
    crash(c, a)
    fresh_b = restart_empty(c, b)  # while a is down
    c.clock.advance(100)
    back = Node(a.settings, a.myself, c.clock, random.Random(5), random.Random(5).randbytes)
    back.cluster.start(None, saved, keep_generation=True)  # its jobs come back from the AOF
    back.receive(fresh_b.cluster.header(), (msg.PING, ()))
    assert back.repair.generation_changes == 1
    assert back.repair.lost_epoch == {b.myself: 1}


def test_a_pass_loads_back_only_the_spilled_jobs_this_node_repairs():
    """Seed 959 of the flow runs: after a peer restarted empty, every spilled job's record
    carried an older epoch, and the pass loaded each one back to examine it, the healthy
    ones too (which then stayed in memory until the spill sweep's next round). Only the
    jobs short of copies come back now."""
    c = cluster(3)
    a, x, y = c.nodes
    lost = [replicated(c, a, repl=3, retry=300) for _ in range(8)]  # a copy on y too
    kept = []  # copies on a and x: healthy
    while len(kept) < 8:
        job_id = replicated(c, a, repl=2, retry=300)
        if y not in holders(c, job_id):
            kept.append(job_id)
    x.spill.attach(MemorySpillStore())
    x.spill.configure(True, 1, 0, 1)  # every job past the level
    x.spill.make_room()  # replicas whose timers are far: all of them go
    assert len(x.jobs) == 0 and x.spill.count == len(lost) + len(kept)
    restart_empty(c, y)
    c.run(1000)
    assert 0 < x.repair.jobs_repaired < len(lost)  # (a repairs the others)
    # Those it repaired, and those a repaired (its HOLDERS changes them): none of the others.
    assert x.spill.loaded == len(lost)
    for job_id in lost:  # (get loads a spilled job back: looked at last)
        assert len(holders(c, job_id)) == 3
