"""The simulator itself: virtual time, the network's faults, crashes, determinism.

These tests drive the machinery directly (no cluster protocol needed): a few
node processes on one network, with each node's ``receive`` replaced by a
recorder so the tests see exactly which bus messages arrive, when, and in
which order.
"""

from __future__ import annotations

import random

import pytest

from disquette.core import messages as msg
from disquette.core.membership import BUS_PORT_OFFSET
from disquette.sim.batch import run_many
from disquette.sim.faults import FaultPlan, FaultSchedule
from disquette.sim.history import FORGET, NACK, History
from disquette.sim.loop import VirtualLoop
from disquette.sim.network import Network, NetworkFaults
from disquette.sim.process import NodeSettings, SimNode
from disquette.sim.runner import START_MS, config_for_seed, run_seed
from disquette.sim.trace import Trace
from tests.unit.core_harness import RecordingClient


class Observed:
    """What a node's bus delivers to it, recorded in the world instead: messages and
    link changes (anything else the bus asks of the node goes to the node itself)."""

    def __init__(self, world: World, p: SimNode) -> None:
        self.world, self.p, self.node = world, p, p.node
        self.index = {q.ip: q.index for q in world.processes}

    def receive(self, header, message, link=None, peer_ip=b"") -> None:
        arrival = (self.world.loop.now, self.index[peer_ip], self.p.index, message)
        self.world.arrivals.append(arrival)

    def link_up(self, peer: bytes) -> None:
        self.world.links.append(("up", self.p.index, peer))

    def link_down(self, peer: bytes) -> None:
        self.world.links.append(("down", self.p.index, peer))

    def __getattr__(self, name: str):
        return getattr(self.node, name)


class World:
    """Processes on one network, with every bus arrival recorded."""

    def __init__(self, nodes: int = 3, seed: int = 1, **faults: object) -> None:
        self.loop = VirtualLoop(START_MS)
        self.trace = Trace(START_MS)
        rng = random.Random(seed)
        self.network = Network(self.loop, random.Random(rng.getrandbits(64)), self.trace)
        self.network.faults = NetworkFaults(**faults)  # type: ignore[arg-type]
        self.processes = []
        for i in range(nodes):
            p_rng = random.Random(rng.getrandbits(64))
            ip = b"10.0.0.%d" % (i + 1)
            self.processes.append(
                SimNode(i, self.loop, self.network, self.trace, p_rng, NodeSettings(), ip, 7711)
            )
        self.arrivals: list[tuple[int, int, int, tuple]] = []  # (time, from, to, message)
        self.links: list[tuple[str, int, bytes]] = []  # ("up"|"down", node, peer id)
        for p in self.processes:
            self.start(p)

    def start(self, p: SimNode) -> None:
        p.start()
        assert p.node is not None and p.bus is not None
        p.bus.node = Observed(self, p)  # type: ignore[assignment]

    def connect(self, a: int, b: int) -> None:
        pa, pb = self.processes[a], self.processes[b]
        assert pa.bus is not None
        pa.bus.connect(pb.node_id, pb.ip, pb.port + BUS_PORT_OFFSET)  # (its bus port)

    def send(self, a: int, b: int, message: tuple) -> None:
        bus = self.processes[a].bus
        assert bus is not None
        bus.send(self.processes[b].node_id, message)

    def run(self, ms: int) -> None:
        self.loop.run_until(self.loop.now + ms)

    def received(self, a: int, b: int) -> list[tuple]:
        return [m for _, src, dst, m in self.arrivals if src == a and dst == b]

    def burst(self, count: int, wait: int) -> list[tuple]:
        """Link node 0 to node 1, send it ``deljob(0)`` to ``deljob(count - 1)`` at once,
        wait ``wait`` ms: what node 1 received."""
        self.connect(0, 1)
        self.run(20)
        for i in range(count):
            self.send(0, 1, deljob(i))
        self.run(wait)
        return self.received(0, 1)


def deljob(i: int) -> tuple:
    return (msg.DELJOB, (b"D-%08d-%024d-0001" % (i, i),))


# Virtual time ----------------------------------------------------------------------------


def test_loop_runs_events_in_time_then_schedule_order_and_skips_cancelled():
    loop = VirtualLoop(1000)
    seen: list[str] = []
    loop.call_at(1010, seen.append, "b")
    loop.call_at(1005, seen.append, "a")
    loop.call_at(1010, seen.append, "c")
    loop.call_at(1007, seen.append, "x").cancel()
    loop.call_at(500, seen.append, "past")  # never in the past: runs now
    loop.run_until(1009)
    assert seen == ["past", "a"] and loop.now == 1009
    loop.run_until(2000)
    assert seen == ["past", "a", "b", "c"] and loop.now == 2000


# Links and messages ----------------------------------------------------------------------


def test_connect_reports_link_up_and_messages_arrive_in_order_with_latency():
    w = World(latency_min=2, latency_max=9)
    w.connect(0, 1)
    w.run(50)
    assert ("up", 0, w.processes[1].node_id) in w.links
    sent_at = w.loop.now
    for i in range(200):
        w.send(0, 1, deljob(i))
    w.run(50)
    got = [(t, m) for t, src, dst, m in w.arrivals if (src, dst) == (0, 1)]
    assert [m for _, m in got] == [deljob(i) for i in range(200)]  # FIFO, like TCP
    assert all(2 <= t - sent_at <= 9 for t, _ in got)


def test_send_without_a_link_is_dropped():
    w = World()
    w.send(0, 1, deljob(1))
    w.run(100)
    assert w.received(0, 1) == []


def test_a_drop_resets_the_connection_losing_what_follows_on_it():
    w = World(drop=0.2)
    got = w.burst(50, 50)
    assert got == [deljob(i) for i in range(len(got))] and len(got) < 50  # a prefix
    assert w.links[-1] == ("down", 0, w.processes[1].node_id)


def test_drop_rate_loses_about_that_share_of_messages():
    w = World(drop=0.3)
    lost = 0
    for i in range(400):
        w.connect(0, 1)
        w.run(20)
        w.send(0, 1, deljob(i))
        w.run(20)
        if deljob(i) not in w.received(0, 1):
            lost += 1
            assert w.links[-1][0] == "down"
    assert 90 < lost < 150


def test_duplicates_arrive_twice():
    got = World(duplicate=0.2).burst(1000, 200)
    assert set(got) == {deljob(i) for i in range(1000)}
    assert 130 < len(got) - 1000 < 270


def test_reorder_lets_messages_overtake_and_without_it_order_holds():
    for rate, reordered in ((0.0, False), (0.3, True)):
        got = World(reorder=rate).burst(300, 200)
        assert sorted(got) == [deljob(i) for i in range(300)]
        assert (got != sorted(got)) is reordered


def test_reply_answers_on_the_connection_a_message_came_from():
    w = World()
    w.connect(0, 1)
    w.run(20)
    conn = next(iter(w.processes[0].bus.links.values()))
    assert conn.inbound.node_id is None and conn.outbound.node_id == w.processes[1].node_id
    w.processes[1].bus.reply(conn.inbound, deljob(7))
    w.run(20)
    assert w.received(1, 0) == [deljob(7)]


def test_partition_holds_messages_both_ways_until_healed_then_delivers_in_order():
    w = World()
    for a, b in ((0, 1), (1, 0), (0, 2)):
        w.connect(a, b)
    w.run(20)
    w.network.partition([[0], [1, 2]])
    for i in range(5):
        w.send(0, 1, deljob(i))
        w.send(1, 0, deljob(10 + i))
    w.run(500)
    assert w.received(0, 1) == [] and w.received(1, 0) == []
    w.network.heal()
    w.send(0, 1, deljob(5))
    w.run(50)
    assert w.received(0, 1) == [deljob(i) for i in range(6)]
    assert w.received(1, 0) == [deljob(10 + i) for i in range(5)]


def test_one_way_cut_holds_only_one_direction():
    w = World()
    w.connect(0, 1)
    w.connect(1, 0)
    w.run(20)
    w.network.cut(0, 1)
    w.send(0, 1, deljob(1))
    w.send(1, 0, deljob(2))
    w.run(50)
    assert w.received(0, 1) == [] and w.received(1, 0) == [deljob(2)]


def test_messages_in_flight_when_a_partition_starts_arrive_after_the_heal():
    w = World(latency_min=10, latency_max=10)
    w.connect(0, 1)
    w.run(50)
    w.send(0, 1, deljob(1))
    w.run(5)
    w.network.partition([[0], [1]])
    w.run(50)
    assert w.received(0, 1) == []
    w.network.heal()
    w.run(50)
    assert w.received(0, 1) == [deljob(1)]


def test_a_message_held_at_a_cut_is_not_overtaken_after_the_heal():
    w = World(latency_min=10, latency_max=10)
    w.connect(0, 1)
    w.run(50)
    w.send(0, 1, deljob(1))  # due in 10 ms
    w.run(5)
    w.network.partition([[0], [1]])
    w.run(7)  # deljob(1) reached the cut and waits
    w.send(0, 1, deljob(2))  # due in 10 ms, while the first one is still held
    w.run(3)
    w.network.heal()
    w.run(50)
    assert w.received(0, 1) == [deljob(1), deljob(2)]


def test_held_messages_are_lost_when_their_connection_closes_before_the_heal():
    w = World()
    w.connect(0, 1)
    w.run(20)
    w.network.partition([[0], [1]])
    w.send(0, 1, deljob(1))
    w.run(50)
    w.processes[0].bus.disconnect(w.processes[1].node_id)
    w.network.heal()
    w.run(50)
    assert w.received(0, 1) == []


def test_connect_across_a_cut_times_out_and_to_a_dead_node_is_refused():
    w = World(connect_timeout=1000)
    w.network.partition([[0], [1, 2]])
    w.processes[2].crash()
    start = w.loop.now
    w.connect(1, 2)  # nobody listens there: refused after a round trip
    w.connect(0, 1)  # across the cut: times out
    w.run(100)
    assert ("down", 1, w.processes[2].node_id) in w.links
    assert not any(e[1] == 0 for e in w.links)
    w.run(1000)
    assert ("down", 0, w.processes[1].node_id) in w.links
    assert w.loop.now - start >= 1000
    assert not any(e[0] == "up" for e in w.links)


def test_crash_tells_reachable_peers_at_once_and_cut_off_ones_at_the_heal():
    w = World()
    w.connect(0, 2)
    w.connect(1, 2)
    w.run(20)
    w.network.partition([[1], [0, 2]])
    w.processes[2].crash()
    w.run(50)
    node2 = w.processes[2].node_id
    assert ("down", 0, node2) in w.links and ("down", 1, node2) not in w.links
    w.send(1, 2, deljob(1))  # on a dead connection: lost, even after the heal
    w.network.heal()
    w.run(50)
    assert ("down", 1, node2) in w.links
    assert w.received(1, 2) == []


def test_broken_link_goes_down_and_can_reconnect():
    w = World()
    w.connect(0, 1)
    w.run(20)
    conn = next(iter(w.network.connections.values()))
    w.network.break_link(conn)
    w.run(20)
    assert w.links[-1] == ("down", 0, w.processes[1].node_id)
    w.connect(0, 1)
    w.run(20)
    assert w.links[-1] == ("up", 0, w.processes[1].node_id)
    w.send(0, 1, deljob(1))
    w.run(20)
    assert w.received(0, 1) == [deljob(1)]


def test_disconnect_closes_the_link_without_reporting_it():
    w = World()
    w.connect(0, 1)
    w.run(20)
    w.processes[0].bus.disconnect(w.processes[1].node_id)
    w.send(0, 1, deljob(1))
    w.run(20)
    assert w.received(0, 1) == [] and not w.network.connections
    assert [e[0] for e in w.links] == ["up"]


# Processes -------------------------------------------------------------------------------


def test_crash_loses_memory_and_restart_keeps_the_identity_on_disk():
    w = World(nodes=1)
    p = w.processes[0]
    client_state = p.state
    node = p.node
    assert node is not None and client_state is not None
    job = node.add_job(RecordingClient(), b"q", b"body", 0, repl=1)
    assert job is not None and len(node.jobs) == 1
    assert [j.id for j in p.crash()] == [job.id]
    assert not p.alive
    p.start()
    assert p.node is not None and p.node is not node and len(p.node.jobs) == 0
    assert p.node.myself == node.myself and p.incarnation == 2


def test_timers_of_a_crashed_incarnation_stop():
    w = World(nodes=1)
    p = w.processes[0]
    w.run(1000)
    before = w.loop.events_run
    p.crash()
    w.run(1000)
    assert w.loop.events_run - before <= 3  # only the timers already due, which return at once


def test_crash_with_the_aof_restarts_with_the_jobs():
    w = World(nodes=1)
    p = w.processes[0]
    p.crash()
    p.settings = NodeSettings(appendonly=True)
    p.start()
    assert p.node is not None
    kept = p.node.add_job(RecordingClient(), b"q", b"kept", 0, repl=1)
    gone = p.node.add_job(RecordingClient(), b"q", b"gone", 0, repl=1)
    assert kept is not None and gone is not None
    p.node.ack_jobs([gone.id])
    p.settle()
    p.crash()
    p.start()
    assert p.node is not None and [j.id for j in p.node.jobs.values()] == [kept.id]


# The duplicate rule ----------------------------------------------------------------------


def test_redelivery_needs_a_permit_or_the_retry_timer():
    h = History()
    h.add_issued(b"b", 1000, retry=2, delay=0)  # the timer may requeue from 1000 + 1750 on
    first = h.delivered(b"J", b"b", 0, 1100)
    assert h.delivered(b"J", b"b", 1, 1200).duplicate  # nothing explains it
    h.decided(first, FORGET)
    assert not h.delivered(b"J", b"b", 0, 1300).duplicate  # forgotten: may come back
    assert h.delivered(b"J", b"b", 0, 1400).duplicate
    h.decided(first, NACK)
    assert not h.delivered(b"J", b"b", 0, 1500).duplicate
    assert not h.delivered(b"J", b"b", 2, 2750).duplicate  # the first timer requeue
    assert h.delivered(b"J", b"b", 2, 2800).duplicate  # the next is 1750 ms later at least
    assert not h.delivered(b"J", b"b", 2, 4500).duplicate
    assert h.duplicates == 3


# Fault schedules -------------------------------------------------------------------------


@pytest.mark.parametrize("max_down", [1, 2])
def test_schedules_never_take_more_than_max_down_nodes_down(max_down):
    for seed in range(200):
        plan = FaultPlan(crashes=6, max_down=max_down, partitions=2, link_breaks=2)
        schedule = FaultSchedule.generate(random.Random(seed), plan, 4, 5000)
        down: set[int] = set()
        for fault in schedule.faults:
            if fault.kind == "crash":
                assert fault.args[0] not in down
                down.add(fault.args[0])
                assert len(down) <= max_down
            elif fault.kind == "restart":
                down.discard(fault.args[0])
        partitions = [f.kind for f in schedule.faults if f.kind in ("partition", "heal")]
        assert "partition,partition" not in ",".join(partitions)  # heal in between


def test_rolling_schedules_take_the_nodes_down_one_at_a_time_in_turn():
    plan = FaultPlan(crashes=8, rolling=True, outage=(500, 1000))
    schedule = FaultSchedule.generate(random.Random(3), plan, 4, 60_000)
    kinds = [(f.kind, f.args[0]) for f in schedule.faults]
    assert len(kinds) == 16
    for i in range(0, 16, 2):
        assert kinds[i][0] == "crash" and kinds[i + 1] == ("restart", kinds[i][1])
    victims = [v for k, v in kinds if k == "crash"]
    assert victims[:4] == victims[4:] and sorted(victims[:4]) == [0, 1, 2, 3]


# Determinism -----------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [1, None])
def test_a_seed_replays_the_same_history(nodes):
    for seed in (5, 8, 13, 24, 37):  # one of each fault kind
        first, second = run_seed(seed, nodes=nodes), run_seed(seed, nodes=nodes)
        assert first.digest == second.digest
        assert first.stats == second.stats
        assert first.trace == second.trace


def test_a_seed_replays_the_same_history_in_other_processes():
    """What the command line replays: worker processes pin PYTHONHASHSEED."""
    first, second = run_many([44, 44], workers=2)
    assert first.digest == second.digest and first.trace == second.trace


@pytest.mark.parametrize("nodes", [1, None])
def test_different_seeds_make_different_histories(nodes):
    assert len({run_seed(seed, nodes=nodes).digest for seed in range(6)}) == 6


def test_config_of_a_seed_is_stable_and_overridable():
    assert config_for_seed(42) == config_for_seed(42)
    assert config_for_seed(42, nodes=5).nodes == 5
