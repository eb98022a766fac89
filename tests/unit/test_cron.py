"""Recurring jobs on cores wired by the in-memory bus, on the virtual clock: one job
per tick cluster-wide, the next rank firing when the usual firer is cut off, both
sides of a partition firing, missed ticks, failed attempts, the table itself."""

from __future__ import annotations

from collections import defaultdict

import pytest

from disquette.core import messages as msg
from disquette.core.cron import CATCHUP, GRACE, STEP_MAX, Cron, CronTable, decode
from disquette.core.job import PRIORITY_SHIFT
from disquette.core.membership import NodesConfError, parse_nodes_conf
from disquette.core.node import Node
from disquette.core.queue import PAUSE_IN
from tests.support.records import garbage_never_crashes, refused
from tests.unit.test_cluster_jobs import Cluster

START_S = 1_700_000_000  # the harness clock's start, in seconds
NODE_A = b"a" * 40


def jobs_by_tick(c: Cluster, name: bytes = b"t") -> dict[int, set[bytes]]:
    """The IDs of the jobs every node holds for each tick of schedule ``name``."""
    out: dict[int, set[bytes]] = defaultdict(set)
    prefix = b"cron:%s:" % name
    for node in c.nodes:
        for (_queue, key), job in node.dedup_index.items():
            if key.startswith(prefix):
                out[int(key[len(prefix) :])].add(job.id)
    return dict(out)


def counts(c: Cluster, first: int, last: int, name: bytes = b"t") -> list[int]:
    """Jobs per tick of an EVERY 1 schedule from ``first`` to ``last`` (seconds)."""
    found = jobs_by_tick(c, name)
    return [len(found.get(t, ())) for t in range(first, last + 1)]


def cluster(size: int = 3) -> Cluster:
    """Nodes up for a while: past the hold-back of a node that just started."""
    c = Cluster(size)
    for node in c.nodes:
        node.crons.started -= CATCHUP
    return c


def first_tick(every: int) -> int:
    """The first tick of an EVERY schedule after the clock's start (multiples of it)."""
    return START_S - START_S % every + every


def table(node: Node) -> CronTable:
    return node.crons


def test_one_job_per_tick_cluster_wide():
    c = cluster(3)
    table(c.nodes[0]).set(b"t", b"q", b"hello", 1, b"", {})
    c.pump()
    assert all(len(n.crons) == 1 for n in c.nodes)
    c.run(20_000)
    assert counts(c, START_S, START_S + 19) == [1] * 20
    assert sum(n.crons.fired for n in c.nodes) == 21  # (the tick at 20 s too)
    assert min(n.crons.fired for n in c.nodes) > 0  # ranks differ from tick to tick
    job = next(iter(c.nodes[0].jobs.values()))
    assert job.body == b"hello" and job.repl == 3  # ADDJOB's default: 3 copies


def test_a_cron_expression_with_seconds_and_addjob_options():
    c = cluster(3)
    table(c.nodes[1]).set(b"t", b"q", b"b", 0, b"*/5 * * * * *", {"replicate": 1, "ttl": 60,
                                                                   "priority": 2})  # fmt: skip
    c.pump()
    c.run(30_000)
    found = jobs_by_tick(c)
    assert all(t % 5 == 0 for t in found) and len(found) == 7  # 0 to 30 s
    assert all(len(ids) == 1 for ids in found.values())
    jobs = [job for n in c.nodes for job in n.jobs.values()]
    assert len(jobs) == 7  # REPLICATE 1: one copy each
    assert all(j.repl == 1 and j.flags >> PRIORITY_SHIFT == 2 for j in jobs)
    assert all(j.etime - j.ctime // 1_000_000_000 == 60 for j in jobs)


def test_ticks_before_the_write_never_fire():
    c = cluster(3)
    tick = first_tick(60)
    c.clock.advance((tick - START_S) * 1000 - 500)  # just before a tick
    table(c.nodes[0]).set(b"t", b"q", b"b", 60, b"", {})
    c.pump()
    c.run(400)
    assert jobs_by_tick(c) == {}  # the tick before the write did not fire
    c.run(2000)
    assert list(jobs_by_tick(c)) == [tick]


def test_the_usual_firer_cut_off_costs_one_step_not_a_tick():
    c = cluster(3)
    table(c.nodes[0]).set(b"t", b"q", b"b", 10, b"", {"replicate": 2})
    c.pump()
    c.run(1000)
    firers = {}
    for tick in range(START_S + 10, START_S + 200, 10):
        ranks = {n.myself: n.crons._rank(b"t", tick)[0] for n in c.nodes}
        firers[tick] = min(ranks, key=ranks.__getitem__)
    victim = c.nodes[0].myself
    c.net.cut.add(victim)  # down: it fires nothing, hears nothing
    c.run(200_000)
    found = jobs_by_tick(c)
    assert [len(found.get(t, ())) for t in firers] == [1] * len(firers)
    late = [t for t, firer in firers.items() if firer == victim]
    assert late  # its ticks went to the next rank, one step later
    for t in late:
        [job_id] = found[t]
        holder = next(n for n in c.nodes if job_id in n.jobs)
        assert holder.myself != victim
        ctime_ms = holder.jobs.get(job_id).ctime // 1_000_000
        assert STEP_MAX <= ctime_ms - t * 1000 < STEP_MAX + 200


def test_both_sides_of_a_partition_fire():
    c = cluster(3)
    table(c.nodes[0]).set(b"t", b"q", b"b", 1, b"", {"replicate": 1})
    c.pump()
    lone = c.nodes[2]
    c.net.cut.add(lone.myself)  # its messages and those to it are lost: but it runs
    for _ in range(100):
        c.run(100)
        lone.process_jobs()
        lone.cron()
    assert counts(c, START_S + 1, START_S + 9) == [2] * 9  # one on each side
    c.net.cut.clear()
    c.run(5000)
    assert counts(c, START_S + 12, START_S + 14) == [1, 1, 1]  # healed: one again


def test_a_node_that_starts_holds_back_older_ticks_and_hears_they_fired():
    c = cluster(3)
    table(c.nodes[0]).set(b"t", b"q", b"b", 60, b"", {"replicate": 1})
    c.pump()
    tick = first_tick(60)
    c.run((tick - START_S) * 1000 + 2000)
    assert counts(c, tick, tick) == [1]
    # A node that starts now with the table (nodes.conf) sees tick 60 due, unfired.
    fresh = CronTable(c.nodes[1])
    fresh.load(r.encode() for r in c.nodes[1].crons.records.values())
    c.nodes[1].crons = fresh
    c.nodes[1].message_handlers[msg.CRONFIRED] = fresh.on_fired
    state = fresh.states[b"t"]
    c.run(CATCHUP + 2000)
    assert state.fired == tick  # a peer's summary told it
    assert counts(c, tick, tick) == [1] and fresh.fired == 0


def test_a_node_restarted_among_peers_does_not_fire_what_they_fired_before_its_links():
    """Seed 238 of the cron mode: a node back from a crash saw a tick due, ranked first
    for it, and fired it, while its peers had fired it as it came up (their news never
    reached it: no link yet). Its first CATCHUP ms of ticks are held back now."""
    c = Cluster(3)
    c.run(CATCHUP + 2000)
    back = c.nodes[1]
    tick = c.clock() // 1000 + 1
    name = next(n for n in (b"t%d" % i for i in range(100)) if back.crons._rank(n, tick)[0] == 0)
    table(c.nodes[0]).set(name, b"q", b"b", 1, b"", {"replicate": 1})
    c.pump()
    fresh = CronTable(back)  # it restarts: nodes.conf's table, a new tick state
    fresh.load(r.encode() for r in back.crons.records.values())
    back.crons = fresh
    back.message_handlers[msg.CRONFIRED] = fresh.on_fired
    c.net.cut.add(back.myself)
    while c.clock() < tick * 1000 + 1000:  # its links are not up yet: it runs, alone
        c.run(100)
        back.process_jobs()
        back.cron()
    c.net.cut.clear()
    c.run(CATCHUP + 2000)
    assert counts(c, tick, tick + 3, name) == [1, 1, 1, 1]


def test_after_the_whole_cluster_was_down_only_the_latest_tick_within_grace_fires():
    c = cluster(3)
    table(c.nodes[0]).set(b"t", b"q", b"b", 60, b"", {"replicate": 1})
    c.pump()
    c.net.cut.update(n.myself for n in c.nodes)  # every node down
    c.run(200_000)  # three ticks missed
    c.net.cut.clear()
    for node in c.nodes:  # they start again: new tick states (nodes.conf's table)
        fresh = CronTable(node)
        fresh.load(r.encode() for r in node.crons.records.values())
        node.crons = fresh
        node.message_handlers[msg.CRONFIRED] = fresh.on_fired
    c.run(CATCHUP + 2000)
    assert sorted(jobs_by_tick(c)) == [first_tick(60) + 120]
    assert sum(len(ids) for ids in jobs_by_tick(c).values()) == 1
    assert GRACE < 600_000  # down longer than the grace: nothing would fire


def test_failed_attempts_are_tried_again_and_a_tick_no_one_can_add_is_skipped():
    c = cluster(3)
    table(c.nodes[0]).set(b"t", b"q", b"b", 10, b"", {"replicate": 1})
    c.pump()
    for node in c.nodes:
        node.create_queue(b"q").paused = PAUSE_IN
    c.run(12_000)
    assert jobs_by_tick(c) == {}
    assert sum(n.crons.errors for n in c.nodes) > 3
    assert sum(n.crons.skipped for n in c.nodes) >= 1
    for node in c.nodes:
        node.queues.get(b"q").paused = 0
    c.run(10_000)
    assert counts(c, START_S + 20, START_S + 20) == [1]  # (multiples of 10: aligned)


def test_a_synchronous_addjob_that_cannot_replicate_is_not_counted():
    c = cluster(3)
    table(c.nodes[0]).set(b"t", b"q", b"b", 5, b"", {"replicate": 3})
    c.pump()
    c.net.cut.add(c.nodes[2].myself)
    c.run(12_000)  # three copies with one node away: every attempt times out
    assert all(len(ids) <= 1 for ids in jobs_by_tick(c).values())
    assert sum(n.crons.fired for n in c.nodes[:2]) == 0
    assert sum(n.crons.errors for n in c.nodes[:2]) > 0


def test_del_stops_it_everywhere():
    c = cluster(3)
    table(c.nodes[0]).set(b"t", b"q", b"b", 1, b"", {})
    c.pump()
    c.run(3000)
    assert table(c.nodes[2]).delete(b"t") and not table(c.nodes[2]).delete(b"t")
    c.pump()
    before = jobs_by_tick(c)
    c.run(5000)
    assert jobs_by_tick(c) == before
    assert all(len(n.crons) == 0 and n.crons.records[b"t"].deleted for n in c.nodes)


def test_a_late_node_learns_the_table_from_the_digest_exchange():
    c = cluster(3)
    c.net.cut.add(c.nodes[2].myself)
    table(c.nodes[0]).set(b"t", b"q", b"b", 3600, b"", {})
    c.pump()
    assert len(c.nodes[2].crons) == 0
    c.net.cut.clear()
    c.run(5000)
    assert c.nodes[2].crons.digest == c.nodes[0].crons.digest != 0


def test_records_round_trip_and_bad_ones_are_refused():
    record = Cron(b"t", b"q", b"body", 0, b"0 9 * * 1-5", {"retry": 0, "replicate": 1,
                                                           "async": 1}, 5, 7, NODE_A)  # fmt: skip
    copy = decode(record.encode())
    assert copy is not None and copy.options == record.options and copy.expr == record.expr
    assert copy.latest(START_S) is not None and copy.following(START_S) > START_S
    for fields in [
        (b"t", b"q", b"b", 0, b"", (), 1, 1, NODE_A, False),  # neither EVERY nor SCHEDULE
        (b"t", b"q", b"b", 5, b"* * * * *", (), 1, 1, NODE_A, False),  # both
        (b"t", b"q", b"b", 0, b"61 * * * *", (), 1, 1, NODE_A, False),  # a bad expression
        (b"t", b"q", b"b", 5, b"", ("colour", 1), 1, 1, NODE_A, False),  # an unknown option
        (b"t", b"q", b"b", 5, b"", ("priority", 10), 1, 1, NODE_A, False),  # out of range
        (b"t", b"", b"b", 5, b"", (), 1, 1, NODE_A, False),  # no queue
        (b"", b"q", b"b", 5, b"", (), 1, 1, NODE_A, False),  # no name
        (b"t", b"q", b"b", 5, b"", (), 1, 0, NODE_A, False),  # counters start at 1
        (b"t", b"q", b"b", -5, b"", (), 1, 1, NODE_A, False),
    ]:
        assert refused(decode, fields), fields


test_garbage_records_never_crash = garbage_never_crashes(decode)


def test_nodes_conf_lines_load_back():
    c = cluster(1)
    t = table(c.nodes[0])
    t.set(b"a", b"q", b"b", 60, b"", {"ttl": 100})
    t.set(b"b", b"q", b"b", 0, b"0 0 * * *", {})
    t.delete(b"a")
    lines = t.config_lines()
    assert lines.count(b"vars cron ") == 2
    other = cluster(1).nodes[0].crons
    other.load(bytes.fromhex(line.split()[2].decode()) for line in lines.splitlines())
    assert other.digest == t.digest and list(other.states) == [b"b"]


def test_nodes_conf_cron_lines_are_parsed_and_bad_ones_refused():
    row = b"%s 127.0.0.1:7711 myself 0 0 connected\n" % NODE_A
    record = Cron(b"t", b"q", b"b", 60, b"", {}, 0, 1, NODE_A).encode()
    conf = parse_nodes_conf(row + b"vars cron %s\nvars policy 00\n" % record.hex().encode(), 0)
    assert conf is not None and conf.records == ((b"cron", record), (b"policy", b"\x00"))
    with pytest.raises(NodesConfError, match="a cron is not in hexadecimal"):
        parse_nodes_conf(row + b"vars cron zz\n", 0)
