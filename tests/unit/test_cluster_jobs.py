"""The job-level cluster protocols on several cores wired by an in-memory bus.

Each test builds a small cluster of :class:`Node` cores sharing one virtual
clock. Their membership tables are filled directly (every node knows every
other, with a link up), and a :class:`Net` carries the messages: ``send``
queues them, :meth:`Cluster.pump` delivers them in order (and serves blocked
clients after each, as the shells do), and a node can be cut off so that what
it sends and what is sent to it is lost. :meth:`Cluster.run` advances time in
small steps running every node's job timer and cron, as the server would.

Covered: synchronous replication (success, added replicas, timeout, expiry,
disconnection, DELJOB), external replication (leaving, memory), ASYNC, the
REPLJOB ignore rules and duplicates, requeue coordination (WILLQUEUE/QUEUED,
the tie break, a dead queueing node, WORKING, NACK and delivery counters,
ENQUEUE), ack garbage collection (three nodes, dummy acks, unreachable
holders, SETACK on ``wait-repl``, FASTACK, DELJOB), federation (NEEDJOBS and
YOURJOBS, backoffs, import rate and sources, RETRY 0), leaving nodes, PAUSE
BCAST and malformed messages.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from typing import Any

import pytest

from disquette.commands import new_state
from disquette.config import Config
from disquette.core import acks, replies, serialize
from disquette.core import messages as msg
from disquette.core.dialect import PROTOCOL
from disquette.core.errors import DisqueError
from disquette.core.federation import MAX_REQUEST, MIN_REQUEST
from disquette.core.job import (
    ACKED,
    ACTIVE,
    BCAST_QUEUED,
    BCAST_WILLQUEUE,
    DELIVERED,
    QUEUED,
    WAIT_REPL,
    WILLQUEUE_ADVANCE,
    Job,
)
from disquette.core.membership import PFAIL, ClusterNode
from disquette.core.memory import NODE_OVERHEAD, delivered_cost, queue_cost
from disquette.core.node import NOREPL_LEAVING, NOREPL_OOM, NOREPL_REACHABLE, Node
from disquette.core.queue import PAUSE_IN, PAUSE_OUT
from disquette.core.requeue import sender_wins
from disquette.protocol import reply
from tests.unit.core_harness import Clock, RecordingClient, Settings

NODE_IDS = [(b"%x" % (10 + i)) * 40 for i in range(5)]  # aaaa..., bbbb..., ...


class Net:
    """The virtual network: a FIFO of messages and the nodes cut off from it."""

    def __init__(self) -> None:
        self.queue: deque[tuple[bytes, bytes, Any]] = deque()
        self.sent: list[tuple[bytes, bytes, Any]] = []
        self.cut: set[bytes] = set()


class Bus:
    """One node's end of the :class:`Net` (the core's Bus contract)."""

    def __init__(self, net: Net, node_id: bytes) -> None:
        self.net = net
        self.node_id = node_id

    def send(self, node_id: bytes, message: Any) -> None:
        self.net.sent.append((self.node_id, node_id, message))
        self.net.queue.append((self.node_id, node_id, message))

    def reply(self, link: Any, message: Any) -> None:
        """Membership replies are not exercised here."""

    def connect(self, node_id: bytes, ip: bytes, port: int) -> None:
        """Links are up from the start."""

    def disconnect(self, node_id: bytes) -> None:
        """Links stay up."""


class Aof:
    """Records the AOF records a node asks for."""

    generation = 0
    last_size = 0
    reader = None
    retire = None

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes]] = []

    def loadjob(self, job: Job) -> int:
        self.records.append(("loadjob", job.id))
        return -1  # not readable back

    def moved(self, job: Job) -> None:
        self.records.append(("moved", job.id))

    def deljob(self, job_id: bytes) -> None:
        self.records.append(("deljob", job_id))


class Cluster:
    def __init__(self, size: int = 3, seed: int = 1, **settings: Any) -> None:
        self.clock = Clock()
        self.net = Net()
        self.nodes: list[Node] = []
        for i in range(size):
            rng = random.Random(seed * 1000 + i)
            node = Node(
                Settings(**settings), NODE_IDS[i], self.clock, rng, rng.randbytes,
                port=7711 + i, bus=Bus(self.net, NODE_IDS[i]), aof=Aof(),
            )  # fmt: skip
            self.nodes.append(node)
        self.by_id = {node.myself: node for node in self.nodes}
        for node in self.nodes:
            self.link(node)
            node.cluster.update_reachable()
        self._last_cron = self.clock()

    def link(self, node: Node) -> None:
        """Give ``node`` a linked row for every other node of the cluster (by ID: ``node``
        may be a restarted node's new core, its old one still in :attr:`nodes`)."""
        for other in self.nodes:
            if other.myself != node.myself:
                row = ClusterNode(other.myself, b"127.0.0.1", other.port, 0, self.clock())
                row.link = True
                # As after the VERSION exchange (core/dialect.py): nothing more to say.
                row.bus_version, row.dialect_sure, row.announced = PROTOCOL, True, True
                node.cluster.nodes[other.myself] = row

    def pump(self) -> int:
        """Deliver every queued message (and those they cause), the ack batches
        included as if their delay were over; return how many."""
        delivered = 0
        net = self.net
        while self.flush_acks() or net.queue:
            src, dst, message = net.queue.popleft()
            if src in net.cut or dst in net.cut:
                continue
            node = self.by_id[dst]
            node.receive(self.by_id[src].cluster.header(), message)
            if node.ready_queues:
                node.serve_blocked_clients()
            delivered += 1
        return delivered

    def run(self, ms: int, step: int = 10) -> None:
        """Advance virtual time: job timers every ``step`` ms, crons every 100 ms."""
        end = self.clock() + ms
        while self.clock() < end:
            self.clock.advance(step)
            cron = self.clock() - self._last_cron >= 100
            if cron:
                self._last_cron = self.clock()
            for node in self.nodes:
                if node.myself in self.net.cut:
                    continue
                node.process_jobs()
                if cron:
                    node.cron()
                node.serve_blocked_clients()
            self.pump()

    def flush_acks(self) -> bool:
        """Send every node's waiting ack batches; whether there were any."""
        waiting = False
        for node in self.nodes:
            if node.ack_outbox:
                waiting = True
                acks.flush_all(node)
        return waiting

    def sent(self, kind: int, src: Node | None = None) -> list[tuple[bytes, bytes, Any]]:
        """The messages of ``kind`` sent so far (by ``src``); batched ack messages
        are listed job by job, as ``(kind, job_id[, number])``."""
        return [
            (s, d, one)
            for s, d, m in self.net.sent
            if m[0] == kind and (src is None or s == src.myself)
            for one in per_job(m)
        ]

    def holders(self, job_id: bytes) -> list[Node]:
        return [node for node in self.nodes if node.jobs.get(job_id) is not None]

    def queued_on(self, job_id: bytes) -> list[Node]:
        return [
            node
            for node in self.nodes
            if (job := node.jobs.get(job_id)) is not None and job.state == QUEUED
        ]


def per_job(message: Any) -> list[Any]:
    """A batched SETACK, GOTACK or DELJOB as one message per job; others as they are."""
    kind = message[0]
    if kind == msg.DELJOB:
        return [(kind, job_id) for job_id in message[1]]
    if kind in (msg.SETACK, msg.GOTACK):
        pairs = message[1]
        return [(kind, pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)]
    return [message]


def addjob(node: Node, client: RecordingClient | None = None, queue: bytes = b"q",
           timeout: int = 0, **kw: Any) -> Job | None:  # fmt: skip
    """ADDJOB on ``node``; the reply, if it blocks, goes to ``client``."""
    return node.add_job(client or RecordingClient(), queue, b"body", timeout, **kw)


def replicated(c: Cluster, node: Node, **kw: Any) -> bytes:
    """A job added synchronously on ``node`` and fully replicated; its ID."""
    client = RecordingClient()
    assert addjob(node, client, **kw) is None
    c.pump()
    assert len(client.replies) == 1 and client.replies[0].startswith(b"+D-")
    return client.replies[0][1:-2]


def job_on(node: Node, job_id: bytes) -> Job:
    job = node.jobs.get(job_id)
    assert job is not None
    return job


def one_replica_short(size: int, **kw: Any) -> tuple[Cluster, RecordingClient]:
    """A cluster of ``size`` nodes, its last one cut off, and the client of an ADDJOB on
    the first node asking for ``size`` copies: it blocks, waiting for the lost one."""
    c = Cluster(size)
    c.net.cut.add(c.nodes[-1].myself)
    client = RecordingClient()
    addjob(c.nodes[0], client, repl=size, **kw)
    return c, client


# ----------------------------------------------------------------------------
# Synchronous replication.


def test_sync_replication_reaches_every_node_and_answers_the_id():
    c = Cluster(3)
    a, b, cc = c.nodes
    client = RecordingClient()
    assert addjob(a, client, repl=3, retry=30, ttl=600) is None
    job = client.block_job
    assert job.state == WAIT_REPL and job.nodes_confirmed == (a.myself,)
    assert len(c.sent(msg.REPLJOB, a)) == 2
    assert all(m[2] == 0 for _, _, m in c.sent(msg.REPLJOB, a))  # replies wanted
    c.pump()
    assert client.replies == [replies.job_id(job)]
    assert not a.blocked_clients
    assert job.state == QUEUED and job.nodes_confirmed is None
    assert set(job.nodes_delivered) == {a.myself, b.myself, cc.myself}
    assert a.aof.records == [("loadjob", job.id)]
    now = c.clock()
    for replica in (b, cc):
        copy = job_on(replica, job.id)
        assert copy.state == ACTIVE
        assert copy.flags & BCAST_QUEUED and copy.flags & BCAST_WILLQUEUE
        assert copy.etime == job.etime + 1
        assert now + 30_000 - 250 <= copy.qtime < now + 30_000 + 250
        assert copy.ctime == job.ctime and copy.body == b"body"
        assert set(copy.nodes_delivered) == set(job.nodes_delivered)
        assert replica.aof.records == [("loadjob", job.id)]
    assert len(c.sent(msg.GOTJOB)) == 2


def test_replica_of_a_delayed_job_waits_delay_plus_retry():
    c = Cluster(2)
    a, b = c.nodes
    jid = replicated(c, a, repl=2, delay=5, retry=10, ttl=100)
    assert job_on(a, jid).state == ACTIVE  # waits for its delay here
    copy = job_on(b, jid)
    assert abs(copy.qtime - (c.clock() + 15_000)) <= 250


def test_replica_of_an_at_most_once_job_never_queues():
    c = Cluster(2)
    a, b = c.nodes
    jid = replicated(c, a, repl=2, retry=0, ttl=100)
    copy = job_on(b, jid)
    assert copy.qtime == 0 and not copy.flags & BCAST_WILLQUEUE
    c.run(20_000)
    assert copy.state == ACTIVE


def test_replication_waits_for_the_last_confirmation():
    c, client = one_replica_short(3)
    a, b, _cc = c.nodes
    c.pump()
    assert client.replies == []
    job = next(iter(a.blocked_clients)).block_job
    assert job.state == WAIT_REPL and set(job.nodes_confirmed) == {a.myself, b.myself}


def test_cron_adds_a_node_when_a_replica_does_not_answer():
    c = Cluster(4)
    a = c.nodes[0]
    client = RecordingClient()
    addjob(a, client, repl=2)
    job = next(iter(a.blocked_clients)).block_job
    (first,) = [n for n in job.nodes_delivered if n != a.myself]
    c.net.cut.add(first)
    c.net.queue.clear()
    c.run(100)
    assert client.replies == [replies.job_id(job)]
    assert len(job.nodes_delivered) == 3 and first in job.nodes_delivered
    assert job.state == QUEUED


def test_cron_resends_repljob_to_unconfirmed_nodes_until_they_answer():
    c, client = one_replica_short(3)
    a, b, cc = c.nodes
    c.run(500)
    assert client.replies == []
    to_c = [m for _, d, m in c.sent(msg.REPLJOB, a) if d == cc.myself]
    assert len(to_c) >= 4  # every client-cron tick
    to_b = [m for _, d, m in c.sent(msg.REPLJOB, a) if d == b.myself]
    assert len(to_b) == 1  # confirmed, and no new node was added since
    c.net.cut.clear()
    c.run(200)
    assert client.replies and client.replies[0].startswith(b"+D-")


def test_timeout_fails_addjob_and_deletes_the_copies():
    c, client = one_replica_short(3, timeout=1000)
    a, b, cc = c.nodes
    job = next(iter(a.blocked_clients)).block_job
    c.pump()
    assert b.jobs.get(job.id) is not None
    c.run(1200)
    assert client.replies == [replies.NOREPL_TIMEOUT]
    assert a.jobs.get(job.id) is None and b.jobs.get(job.id) is None
    assert {d for _, d, _ in c.sent(msg.DELJOB, a)} == {b.myself, cc.myself}
    assert a.aof.records == []  # never active here
    assert b.aof.records == [("loadjob", job.id), ("deljob", job.id)]


def test_expiry_before_replication_is_norepl_removed():
    c, client = one_replica_short(2, ttl=2, retry=1)
    a = c.nodes[0]
    c.run(4000)
    assert client.replies == [replies.NOREPL_REMOVED]
    assert len(a.jobs) == 0


def test_disconnected_client_abandons_replication():
    c, client = one_replica_short(2)
    a, b = c.nodes
    job = client.block_job
    c.net.cut.clear()
    a.client_gone(client)
    c.pump()
    assert client.replies == []
    assert a.jobs.get(job.id) is None and b.jobs.get(job.id) is None
    assert not a.replication_time


def test_deljob_command_on_a_pending_job_fails_the_addjob():
    c, client = one_replica_short(2)
    a = c.nodes[0]
    job = client.block_job
    assert a.delete_jobs([job.id]) == 1
    assert client.replies == [replies.NOREPL_REMOVED]
    c.flush_acks()
    assert [m for _, _, m in c.sent(msg.DELJOB, a)] == [(msg.DELJOB, job.id)]


def test_leaving_while_waiting_for_replicas_fails_the_addjob():
    c, client = one_replica_short(2)
    a = c.nodes[0]
    job = client.block_job
    c.pump()  # the REPLJOB is lost
    c.net.cut.clear()
    a.cluster.set_leaving(True)
    c.run(100)
    assert client.replies == [reply.LEAVING]
    assert a.jobs.get(job.id) is None and not a.replication_time
    assert c.sent(msg.DELJOB, a)[-1][2] == (msg.DELJOB, job.id)


def test_not_enough_reachable_nodes():
    c = Cluster(3)
    a = c.nodes[0]
    a.cluster.nodes[c.nodes[2].myself].flags |= PFAIL
    a.cluster.update_reachable()
    with pytest.raises(DisqueError) as e:
        addjob(a, repl=3)
    assert e.value.reply == NOREPL_REACHABLE
    assert addjob(a, RecordingClient(), repl=2) is None  # cluster size still counts 3


def test_default_replication_is_three_in_a_cluster():
    c = Cluster(4)
    client = RecordingClient()
    assert addjob(c.nodes[0], client) is None
    c.pump()
    job = job_on(c.nodes[0], client.replies[0][1:-2])
    assert job.repl == 3 and len(job.nodes_delivered) == 3


def test_repljob_goes_to_reachable_nodes_and_is_retried_until_their_link_is_back():
    """Disque's rule: every node not flagged PFAIL or FAIL is a replica target, its link
    up or not; REPLJOB goes again to it until it confirms or the ADDJOB times out."""
    c = Cluster(3)
    a, b, cc = c.nodes
    c.net.cut.add(cc.myself)  # killed a moment ago: not flagged yet
    a.cluster.link_down(cc.myself)
    client = RecordingClient()
    addjob(a, client, timeout=5000, repl=3)
    c.run(500)
    assert client.replies == []  # waiting for the third copy
    assert len(c.sent(msg.REPLJOB, a)) > 2  # sent again while it waits
    c.net.cut.discard(cc.myself)  # back, same address
    a.cluster.link_up(cc.myself)
    c.run(200)
    job = job_on(a, client.replies[0][1:-2])
    assert set(job.nodes_delivered) == {a.myself, b.myself, cc.myself}
    assert cc.jobs.get(job.id) is not None
    a.cluster.nodes[cc.myself].flags |= PFAIL  # flagged failing: no longer a target
    a.cluster.update_reachable()
    for _ in range(5):
        client = RecordingClient()
        addjob(a, client, repl=2)
        c.pump()
        assert set(job_on(a, client.replies[0][1:-2]).nodes_delivered) == {a.myself, b.myself}


# ----------------------------------------------------------------------------
# External replication, ASYNC.


def test_leaving_node_replicates_externally_and_hands_the_job_over():
    c = Cluster(3)
    a, _b, _cc = c.nodes
    a.cluster.set_leaving(True)
    client = RecordingClient()
    addjob(a, client, repl=2)
    job = client.block_job
    assert job.nodes_confirmed == () and a.myself not in job.nodes_delivered
    assert len(c.sent(msg.REPLJOB, a)) == 2
    c.pump()
    assert client.replies == [replies.job_id(job)]
    assert a.jobs.get(job.id) is None
    (enqueue,) = c.sent(msg.ENQUEUE, a)
    assert enqueue[2] == (msg.ENQUEUE, job.id, 0)
    target = c.by_id[enqueue[1]]
    assert job_on(target, job.id).state == QUEUED
    assert not c.sent(msg.QUEUED)  # the first queueing after ENQUEUE is silent
    assert a.aof.records == []
    assert a.used_memory == NODE_OVERHEAD


@pytest.mark.parametrize("delay", [0, 2])
def test_at_most_once_job_handed_over_by_a_leaving_node_is_queued_once(delay: int):
    c = Cluster(2)
    a, b = c.nodes
    a.cluster.set_leaving(True)
    client = RecordingClient()
    addjob(a, client, repl=1, retry=0, delay=delay, ttl=100)
    c.pump()
    jid = client.replies[0][1:-2]
    copy = job_on(b, jid)
    c.run(delay * 1000 + 100)
    assert copy.state == QUEUED and copy.qtime == 0
    assert [j.id for j in b.get_jobs([b"q"], 1)] == [jid]
    b.receive(_header(a), (msg.ENQUEUE, jid, 0))  # a duplicate ENQUEUE
    c.run(5000)
    assert copy.state == ACTIVE and len(b.queues.get(b"q").jobs) == 0


def test_external_replication_needs_repl_other_nodes():
    c = Cluster(3)
    a = c.nodes[0]
    a.cluster.set_leaving(True)
    with pytest.raises(DisqueError) as e:
        addjob(a, repl=3)
    assert e.value.reply == NOREPL_LEAVING
    c.nodes[1].settings.maxmemory = 1
    with pytest.raises(DisqueError) as e:
        addjob(c.nodes[1], repl=3)
    assert e.value.reply == NOREPL_OOM


def test_memory_pressure_replicates_externally_with_a_delay():
    c = Cluster(3)
    a = c.nodes[0]
    a.settings.maxmemory = 1
    client = RecordingClient()
    addjob(a, client, repl=1, delay=3, retry=5)
    c.pump()
    jid = client.replies[0][1:-2]
    assert a.jobs.get(jid) is None
    (enqueue,) = c.sent(msg.ENQUEUE, a)
    assert enqueue[2] == (msg.ENQUEUE, jid, 3)
    copy = job_on(c.by_id[enqueue[1]], jid)
    assert copy.state == ACTIVE and abs(copy.qtime - (c.clock() + 3000)) <= 1
    c.run(3100)
    assert copy.state == QUEUED


def test_async_replies_at_once_and_asks_for_no_confirmation():
    c = Cluster(3)
    a, b, cc = c.nodes
    job = addjob(a, repl=3, async_=True)
    assert job is not None and job.state == QUEUED
    assert a.aof.records == [("loadjob", job.id)]
    repljobs = c.sent(msg.REPLJOB, a)
    assert len(repljobs) == 2 and all(m[2] == msg.NOREPLY for _, _, m in repljobs)
    c.pump()
    assert not c.sent(msg.GOTJOB)
    assert job_on(b, job.id).state == ACTIVE and job_on(cc, job.id).state == ACTIVE


def test_async_with_external_replication_never_registers_the_job():
    c = Cluster(3)
    a = c.nodes[0]
    a.cluster.set_leaving(True)
    job = addjob(a, repl=2, async_=True)
    assert job is not None and a.jobs.get(job.id) is None
    (enqueue,) = c.sent(msg.ENQUEUE, a)
    assert enqueue[1] in job.nodes_delivered
    c.pump()
    assert [n.myself for n in c.queued_on(job.id)] == [enqueue[1]]
    assert a.used_memory == NODE_OVERHEAD


# ----------------------------------------------------------------------------
# Receiving REPLJOB.


def _repljob(source: Node, job: Job, flags: int = 0) -> tuple:
    return (msg.REPLJOB, serialize.encode(job, bus=True, now_s=source.clock() // 1000), flags)


def _header(node: Node):
    return node.cluster.header()


def test_duplicate_repljob_merges_holders_and_confirms_again():
    c = Cluster(3)
    a, b, cc = c.nodes
    jid = replicated(c, a, repl=2)
    job = job_on(a, jid)
    (holder,) = [c.by_id[n] for n in job.nodes_delivered if n != a.myself]
    other = cc if holder is b else b
    before = holder.used_memory
    widened = Job(job.id, job.queue, job.body, WAIT_REPL, 2, job.ctime, job.etime, 0, 5)
    widened.nodes_delivered = (a.myself, holder.myself, other.myself)
    holder.receive(_header(a), _repljob(a, widened))
    copy = job_on(holder, jid)
    assert set(copy.nodes_delivered) == {a.myself, holder.myself, other.myself}
    # The job's own tuple is replaced by a larger one: 2 then 3 slots, one 64-byte block.
    assert holder.used_memory == before + delivered_cost(3) - delivered_cost(2)
    assert holder.aof.records == [("loadjob", jid)]  # once
    assert c.sent(msg.GOTJOB, holder)[-1][2] == (msg.GOTJOB, (jid,))


def test_repljob_keeps_only_known_nodes():
    c = Cluster(2)
    a, b = c.nodes
    job = Job(b"D-aaaaaaaa-" + b"x" * 24 + b"-0001", b"q", b"x", WAIT_REPL, 3, 1, 0, 0, 5)
    job.etime = c.clock() // 1000 + 100
    job.nodes_delivered = (a.myself, b.myself, b"f" * 40)
    b.receive(_header(a), _repljob(a, job, msg.NOREPLY))
    assert job_on(b, job.id).nodes_delivered == (a.myself, b.myself)
    assert not c.sent(msg.GOTJOB)  # NOREPLY


def _jobs_for(c: Cluster, a: Node, b: Node, count: int, queue: bytes = b"q") -> list[Job]:
    jobs = []
    for i in range(count):
        job = Job(b"D-aaaaaaaa-%024d-0001" % i, queue, b"x" * 50, WAIT_REPL, 2, 1, 0, 0, 5)
        job.etime = c.clock() // 1000 + 100
        job.nodes_delivered = (a.myself, b.myself)
        jobs.append(job)
    return jobs


def test_the_repljobs_of_a_frame_are_confirmed_with_one_gotjob():
    c = Cluster(2)
    a, b = c.nodes
    b.pause(b"paused", PAUSE_IN, False)
    good, noreply, ignored, late = _jobs_for(c, a, b, 4)
    ignored.queue = b"paused"
    frame = (
        _repljob(a, good),
        _repljob(a, noreply, msg.NOREPLY),
        (msg.REPLJOB, b"not a job", 0),
        _repljob(a, ignored),
        (msg.WORKING, good.id),  # another type ends the run: a second run follows
        _repljob(a, late),
    )
    b.receive_frame(_header(a), frame)
    assert [m for _, _, m in c.sent(msg.GOTJOB, b)] == [
        (msg.GOTJOB, (good.id,)),
        (msg.GOTJOB, (late.id,)),
    ]
    assert [j.id for j in (good, noreply, late) if b.jobs.get(j.id)] == [
        good.id,
        noreply.id,
        late.id,
    ]
    assert b.jobs.get(ignored.id) is None
    assert b.cluster.messages_received == len(frame)


def test_a_run_of_repljobs_stops_storing_above_75_percent_of_memory():
    c = Cluster(2)
    a, b = c.nodes
    jobs = _jobs_for(c, a, b, 10)
    b.settings.maxmemory = (b.used_memory + 1) * 100 // 75 + 200  # room for one job or two
    b.receive_frame(_header(a), tuple(_repljob(a, job) for job in jobs))
    stored = [job.id for job in jobs if b.jobs.get(job.id) is not None]
    assert 0 < len(stored) < len(jobs)
    assert stored == [job.id for job in jobs[: len(stored)]]  # the first ones, in order
    assert c.sent(msg.GOTJOB, b)[-1][2] == (msg.GOTJOB, tuple(stored))
    assert b.memory_high()


def test_a_replica_that_cannot_fit_is_not_stored_nor_confirmed():
    """Beyond Disque: a replica that would take usage past 95 % of maxmemory (from
    under 75 %) is ignored, as a replica is above 75 %; the ones after it that fit are
    stored."""
    c = Cluster(2)
    a, b = c.nodes
    small, big = _jobs_for(c, a, b, 2)
    b.settings.maxmemory = b.used_memory * 2 + 100_000
    big.body = b"x" * b.settings.maxmemory
    b.receive_frame(_header(a), (_repljob(a, big), _repljob(a, small)))
    assert b.jobs.get(big.id) is None
    assert b.jobs.get(small.id) is not None
    assert c.sent(msg.GOTJOB, b)[-1][2] == (msg.GOTJOB, (small.id,))


@pytest.mark.parametrize("condition", ["leaving", "memory", "paused", "unknown", "two", "bad"])
def test_repljob_ignore_rules(condition: str):
    c = Cluster(2)
    a, b = c.nodes
    job = Job(b"D-aaaaaaaa-" + b"y" * 24 + b"-0001", b"q", b"x", WAIT_REPL, 2, 1, 0, 0, 5)
    job.etime = c.clock() // 1000 + 100
    job.nodes_delivered = (a.myself, b.myself)
    message = _repljob(a, job)
    header = _header(a)
    if condition == "leaving":
        b.cluster.set_leaving(True)
    elif condition == "memory":
        b.settings.maxmemory = 1
    elif condition == "paused":
        b.pause(b"q", PAUSE_IN, False)
    elif condition == "unknown":
        header = header._replace(sender=b"f" * 40)
    elif condition == "two":
        message = (msg.REPLJOB, message[1] * 2, 0)
    else:
        message = (msg.REPLJOB, message[1][:-3], 0)
    b.receive(header, message)
    assert b.jobs.get(job.id) is None
    assert not c.net.sent


# ----------------------------------------------------------------------------
# Requeue coordination.


def test_willqueue_and_queued_keep_a_single_copy_queued():
    c = Cluster(3)
    a, b, cc = c.nodes
    jid = replicated(c, a, repl=3, retry=2, ttl=100)
    for _ in range(1000):  # 20 s, more than nine retry periods
        c.run(20)
        assert [n.myself for n in c.queued_on(jid)] == [a.myself]
    assert len(c.sent(msg.WILLQUEUE, b)) >= 8 and len(c.sent(msg.WILLQUEUE, cc)) >= 8
    assert not c.sent(msg.WILLQUEUE, a)  # a queued job announces nothing
    assert job_on(b, jid).additional_deliveries == 0


def test_willqueue_records_the_sender_as_a_holder():
    c = Cluster(3)
    a, b, cc = c.nodes
    jid = replicated(c, a, repl=2, retry=2)
    job = job_on(a, jid)
    (holder,) = [c.by_id[n] for n in job.nodes_delivered if n != a.myself]
    other = cc if holder is b else b
    a.receive(_header(other), (msg.WILLQUEUE, jid))
    assert other.myself in job.nodes_delivered
    assert {d for _, d, m in c.sent(msg.QUEUED, a)} == {holder.myself, other.myself}


def queued_apart(c: Cluster) -> tuple[Node, Node, Node, bytes]:
    """Nodes a, b, cc of ``c`` and a job queued on both a and b, neither knowing the
    other holds it; cc holds it active and knows only a (what a federation move to b
    whose exporter then crashed leaves behind, after a repair copy went to a)."""
    a, b, cc = c.nodes
    jid = replicated(c, cc, repl=3, retry=1, ttl=100)
    for node, holders in ((a, (a, cc)), (b, (b, cc)), (cc, (a, cc))):
        job = job_on(node, jid)
        node.set_delivered(job, tuple(n.myself for n in holders))
        if node is not cc:
            job.flags &= ~BCAST_QUEUED  # queued silently, as by YOURJOBS
            node.enqueue(job)
    cc.dequeue(job_on(cc, jid))
    assert not c.net.queue
    assert sorted(n.myself for n in c.queued_on(jid)) == sorted([a.myself, b.myself])
    return a, b, cc, jid


def test_copies_queued_apart_meet_and_one_stays_queued():
    c = Cluster(3)
    a, b, cc, jid = queued_apart(c)
    c.run(1600)  # a retry period: the queued copies speak up (QUEUED)
    # cc learned of b and told every holder (HOLDERS); a, queued, told b; the tie-break
    # left one copy queued, and the holders know each other.
    assert b.myself in job_on(cc, jid).nodes_delivered
    assert [d for _, d, m in c.sent(msg.HOLDERS, cc) if m[1] == jid]
    assert len(c.queued_on(jid)) == 1
    for node in (a, b, cc):
        assert set(job_on(node, jid).nodes_delivered) == {a.myself, b.myself, cc.myself}
    c.run(5000)
    assert len(c.queued_on(jid)) == 1


def test_a_queued_winner_answers_so_the_loser_dequeues():
    c = Cluster(3)
    a, b, _cc, jid = queued_apart(c)
    winner, loser = (b, a) if sender_wins(b.myself, a.myself, jid) else (a, b)
    winner.receive(_header(loser), (msg.QUEUED, jid, 0))  # the loser speaks first
    assert job_on(winner, jid).state == QUEUED
    assert c.sent(msg.QUEUED, winner)[-1][1:] == (loser.myself, (msg.QUEUED, jid, 0))
    c.pump()
    assert job_on(loser, jid).state == ACTIVE and c.queued_on(jid) == [winner]


def test_queued_copies_speak_up_only_after_failures():
    c = Cluster(3)
    _a, b, cc, jid = queued_apart(c)
    for node in c.nodes:
        node.cluster.disturbed_at = c.clock() - 6_000  # five retry periods of quiet
    c.run(3000)
    # Disque's silence: b, unknown to the others, is never asked and says nothing.
    assert not c.sent(msg.QUEUED, b) and len(c.queued_on(jid)) == 2
    cc.cluster.disturbed_at = c.clock()  # cc saw a node fail
    b.cluster.disturbed_at = c.clock()
    c.run(1600)
    assert len(c.queued_on(jid)) == 1


def test_a_holder_about_to_queue_asks_where_federation_moved_the_job():
    c = Cluster(3)
    a, b, cc = c.nodes
    jid = replicated(c, a, repl=3, retry=5, ttl=100)
    cc.delete_job(job_on(cc, jid))  # a (queued) and b (active) hold it, knowing each other
    for node in (a, b):
        node.set_delivered(job_on(node, jid), (a.myself, b.myself))
    a.receive(_header(cc), (msg.NEEDJOBS, b"q", 1))  # cc's consumers: the job moves there
    c.pump()
    assert c.queued_on(jid) == [cc] and cc.myself not in job_on(b, jid).nodes_delivered
    job = job_on(b, jid)  # b's requeue time comes long before a's (five seconds away)
    job.qtime = c.clock() + 600
    b.reschedule(job)
    c.run(1000)
    # b asked a (WILLQUEUE); a, which handed the job out, told b its holders (HOLDERS);
    # b asked cc too, and cc, queued, answered: one copy stays queued.
    assert [d for _, d, m in c.sent(msg.HOLDERS, a) if m[1] == jid] == [b.myself]
    assert (b.myself, cc.myself, (msg.WILLQUEUE, jid)) in c.sent(msg.WILLQUEUE, b)
    assert c.queued_on(jid) == [cc] and job_on(b, jid).additional_deliveries == 0


def test_a_late_willqueue_still_leaves_the_holders_time_to_answer():
    c = Cluster(3)
    a, b, _cc = c.nodes
    jid = replicated(c, a, repl=3, retry=2, ttl=100)
    job = job_on(b, jid)
    c.clock.advance(5000)  # b's timer runs late: its WILLQUEUE and requeue time have passed
    b.process_jobs()
    assert [m for _, _, m in c.sent(msg.WILLQUEUE, b)] == [(msg.WILLQUEUE, jid)] * 2
    assert job.state == ACTIVE and job.qtime == c.clock() + WILLQUEUE_ADVANCE
    c.pump()  # a, queued, answers QUEUED: b postpones instead of queueing a second copy
    c.run(1000)
    assert c.queued_on(jid) == [a]


def test_requeue_after_the_queueing_node_dies():
    c = Cluster(3)
    a, b, cc = c.nodes
    jid = replicated(c, a, repl=3, retry=2, ttl=100)
    c.net.cut.add(a.myself)
    c.run(3000)
    queued = [n for n in c.queued_on(jid) if n is not a]
    assert len(queued) == 1
    (winner,) = queued
    loser = cc if winner is b else b
    assert job_on(winner, jid).additional_deliveries == 1
    assert job_on(loser, jid).additional_deliveries == 1  # QUEUED with INCR_DELIV
    assert job_on(loser, jid).state == ACTIVE
    c.run(6000)
    assert [n for n in c.queued_on(jid) if n is not a] == [winner]


def test_simultaneous_requeue_tie_break_leaves_one_copy():
    for seed in range(6):
        c = Cluster(2, seed=seed)
        a, b = c.nodes
        jid = replicated(c, a, repl=2, retry=30)
        assert a.get_jobs([b"q"], 1)[0].id == jid
        assert a.requeue_jobs([jid], nack=False) == 1  # QUEUED to b
        assert b.requeue_jobs([jid], nack=False) == 1  # QUEUED to a
        c.pump()
        expected = b if sender_wins(b.myself, a.myself, jid) else a
        assert c.queued_on(jid) == [expected]
        for node in (a, b):
            assert job_on(node, jid).additional_deliveries == 2


def test_sender_wins_is_a_strict_order_that_depends_on_the_job():
    rng = random.Random(3)
    ids = [b"D-aaaaaaaa-%s-0001" % rng.randbytes(12).hex().encode() for _ in range(50)]
    x, y = NODE_IDS[0], NODE_IDS[1]
    outcomes = {sender_wins(x, y, jid) for jid in ids}
    assert outcomes == {True, False}
    for jid in ids:
        assert sender_wins(x, y, jid) != sender_wins(y, x, jid)
        assert not sender_wins(x, x, jid)


def test_working_postpones_everywhere_and_dequeues():
    c = Cluster(3)
    a, _b, cc = c.nodes
    jid = replicated(c, a, repl=3, retry=10, ttl=1000)
    c.run(1000)
    now = c.clock()
    assert cc.working(jid) == 10
    c.pump()
    assert c.queued_on(jid) == []
    for node in c.nodes:
        job = job_on(node, jid)
        assert job.flags & BCAST_WILLQUEUE
        assert abs(job.qtime - (now + 10_000)) <= 250
        assert job.nacks == 0 and job.additional_deliveries == 0


def test_nack_counts_everywhere():
    c = Cluster(3)
    a, _b, _cc = c.nodes
    jid = replicated(c, a, repl=3, retry=10)
    a.get_jobs([b"q"], 1)
    assert a.requeue_jobs([jid], nack=True) == 1
    c.pump()
    assert [job_on(n, jid).nacks for n in c.nodes] == [1, 1, 1]
    assert c.queued_on(jid) == [a]
    (flags,) = {m[2] for _, _, m in c.sent(msg.QUEUED, a)}
    assert flags == msg.INCR_NACKS


def test_timer_requeue_counts_additional_deliveries_everywhere():
    c = Cluster(3)
    a, b, cc = c.nodes
    jid = replicated(c, a, repl=3, retry=2, ttl=100)
    a.get_jobs([b"q"], 1)
    for other in (b, cc):  # the copies' timers (jitter aside) fire after a's
        copy = job_on(other, jid)
        copy.qtime += 600
        other.reschedule(copy)
    c.run(2500)  # a requeues its delivered job: QUEUED(INCR_DELIV)
    assert c.queued_on(jid) == [a]
    assert [job_on(n, jid).additional_deliveries for n in c.nodes] == [1, 1, 1]


def test_enqueue_message_rules():
    c = Cluster(2)
    a, b = c.nodes
    jid = replicated(c, a, repl=2, retry=10)
    copy = job_on(b, jid)
    b.receive(_header(a), (msg.ENQUEUE, jid, 4))
    assert copy.state == ACTIVE and copy.qtime == c.clock() + 4000
    b.pause(b"q", PAUSE_IN, False)
    b.receive(_header(a), (msg.ENQUEUE, jid, 0))
    assert copy.state == ACTIVE
    b.pause(b"q", 0, False)
    b.receive(_header(a), (msg.ENQUEUE, jid, 0))
    assert copy.state == QUEUED and copy.flags & BCAST_QUEUED
    assert not c.sent(msg.QUEUED, b)  # the first queueing is silent
    b.receive(_header(a), (msg.ENQUEUE, jid, 0))  # queued already: ignored
    assert b.queues.get(b"q").jobs_in == 1


def acked_while_cut_off(c: Cluster) -> tuple[Node, Node, bytes]:
    """Nodes a and b of ``c`` and a job they both hold, acknowledged on b while a is
    cut off (still cut off)."""
    a, b = c.nodes[:2]
    jid = replicated(c, a, repl=2)
    c.net.cut.add(a.myself)
    b.ack_jobs([jid])
    return a, b, jid


def test_queued_or_willqueue_for_an_acked_job_answers_setack():
    c = Cluster(2)
    a, b, jid = acked_while_cut_off(c)
    c.pump()  # the SETACK is lost
    c.net.cut.clear()
    b.receive(_header(a), (msg.WILLQUEUE, jid))
    b.receive(_header(a), (msg.QUEUED, jid, 0))
    c.flush_acks()
    setacks = [m for _, d, m in c.sent(msg.SETACK, b) if d == a.myself]
    assert setacks[-2:] == [(msg.SETACK, jid, 2)] * 2
    c.pump()
    assert c.holders(jid) == []


# ----------------------------------------------------------------------------
# Acknowledgements and garbage collection.


@pytest.mark.parametrize("acker", [0, 1])
def test_ack_is_collected_on_every_node(acker: int):
    c = Cluster(3)
    jid = replicated(c, c.nodes[0], repl=3)
    node = c.nodes[acker]
    assert node.ack_jobs([jid]) == 1
    job = job_on(node, jid)
    assert job.state == ACKED and job.nodes_confirmed == (node.myself,)
    c.flush_acks()
    assert len(c.sent(msg.SETACK, node)) == 2
    c.pump()
    assert c.holders(jid) == []
    assert len(c.sent(msg.GOTACK)) == 2 and len(c.sent(msg.DELJOB, node)) == 2
    for n in c.nodes:
        queues = sum(queue_cost(q.name) for q in n.queues.values())
        assert n.used_memory == NODE_OVERHEAD + queues


def test_dummy_ack_on_a_node_that_never_had_the_job():
    c = Cluster(3)
    a, _b, cc = c.nodes
    a.cluster.link_down(cc.myself)  # the job goes to a and b only
    jid = replicated(c, a, repl=2)
    assert cc.jobs.get(jid) is None
    assert cc.ack_jobs([jid]) == 0
    dummy = job_on(cc, jid)
    assert dummy.state == ACKED and dummy.body is None and dummy.nodes_delivered == ()
    c.flush_acks()
    assert {m for _, _, m in c.sent(msg.SETACK, cc)} == {(msg.SETACK, jid, 0)}
    c.pump()
    assert c.holders(jid) == []


def test_dummy_ack_for_a_job_nobody_knows_goes_away():
    c = Cluster(3)
    jid = b"D-aaaaaaaa-" + b"z" * 24 + b"-0005"
    assert c.nodes[1].ack_jobs([jid]) == 0
    c.pump()
    assert {m[2] for _, _, m in c.sent(msg.GOTACK)} == {0}
    assert c.holders(jid) == []


def test_dummy_ack_expiry_follows_the_ttl_in_the_id():
    c = Cluster(2)
    c.net.cut.add(c.nodes[0].myself)
    jid = b"D-aaaaaaaa-" + b"z" * 24 + b"-0003"  # 3 minutes
    c.nodes[1].ack_jobs([jid])
    assert job_on(c.nodes[1], jid).etime == c.clock() // 1000 + 180
    c.run(185_000, step=500)
    assert c.holders(jid) == []


@pytest.mark.parametrize("case", ["at-most-once", "leaving", "alone"])
def test_no_dummy_ack(case: str):
    c = Cluster(1 if case == "alone" else 2)
    node = c.nodes[-1]
    jid = b"D-aaaaaaaa-" + b"z" * 24 + (b"-0004" if case == "at-most-once" else b"-0005")
    if case == "leaving":
        node.cluster.set_leaving(True)
    assert node.ack_jobs([jid]) == 0
    assert node.jobs.get(jid) is None and not c.net.sent


def test_gc_retries_with_backoff_until_an_unreachable_holder_is_back():
    c = Cluster(3)
    a, b, cc = c.nodes
    jid = replicated(c, a, repl=3)
    c.net.cut.add(cc.myself)
    a.ack_jobs([jid])
    c.pump()
    job = job_on(a, jid)
    assert set(job.nodes_confirmed) == {a.myself, b.myself}
    assert job_on(b, jid).state == ACKED
    times = []
    for _ in range(400):
        c.run(100)
        count = len([1 for _, d, _ in c.sent(msg.SETACK, a) if d == cc.myself])
        if len(times) < count - 1:
            times.append(c.clock())
    gaps = [t2 - t1 for t1, t2 in itertools.pairwise(times)]
    assert len(gaps) >= 3
    for gap, expected in zip(gaps, (4000, 8000, 16000), strict=False):
        assert expected - 600 <= gap <= expected + 600  # jitter at both ends, 100 ms steps
    c.net.cut.clear()
    c.run(40_000, step=100)
    assert c.holders(jid) == []


def test_setack_on_a_pending_job_achieves_replication():
    c, client = one_replica_short(2)
    a, b = c.nodes
    job = client.block_job
    c.net.cut.clear()
    c.net.queue.clear()
    a.receive(_header(b), (msg.SETACK, (job.id, 2)))
    assert client.replies == [replies.job_id(job)]
    assert job.state == ACKED
    assert a.aof.records == [("loadjob", job.id), ("deljob", job.id)]
    assert c.sent(msg.GOTACK, a)[-1][2] == (msg.GOTACK, job.id, 1)


def test_setack_from_a_narrower_view_starts_gc_here():
    c = Cluster(3)
    a, b, cc = c.nodes
    jid = replicated(c, a, repl=3)
    c.net.queue.clear()
    b.receive(_header(a), (msg.SETACK, (jid, 1)))
    c.flush_acks()
    assert not c.sent(msg.GOTACK, b)  # may_have 1 < 3 holders: no GOTACK
    assert {d for _, d, _ in c.sent(msg.SETACK, b)} == {a.myself, cc.myself}
    c.pump()
    assert c.holders(jid) == []


def test_gotack_is_ignored_unless_acked():
    c = Cluster(2)
    a, b = c.nodes
    jid = replicated(c, a, repl=2)
    a.receive(_header(b), (msg.GOTACK, (jid, 1)))
    assert job_on(a, jid).state == QUEUED and not c.sent(msg.DELJOB)


def test_acks_travel_in_one_batch_per_node_and_kind():
    c = Cluster(3)
    a, b, cc = c.nodes
    jids = [replicated(c, a, repl=3) for _ in range(30)]
    woken: list[int] = []
    b.wake_by = woken.append
    sent = len(c.net.sent)
    assert b.ack_jobs(jids) == 30
    assert len(c.net.sent) == sent  # waiting for more, at most ACK_BATCH_DELAY
    assert woken == [c.clock() + acks.ACK_BATCH_DELAY] == [b.next_wakeup()]
    c.run(acks.ACK_BATCH_DELAY, step=acks.ACK_BATCH_DELAY)  # the job timer sends them
    assert c.holders(jids[0]) == [] and all(not n.jobs for n in c.nodes)
    kinds = [(s, d, m[0], len(per_job(m))) for s, d, m in c.net.sent[sent:]]
    expected = [
        *[(b.myself, n.myself, kind, 30) for n in (a, cc) for kind in (msg.SETACK, msg.DELJOB)],
        *[(n.myself, b.myself, msg.GOTACK, 30) for n in (a, cc)],
    ]
    assert sorted(kinds) == sorted(expected)
    assert not b.ack_outbox and b.ack_deadline == 0


def test_a_full_ack_batch_goes_at_once():
    c = Cluster(2)
    a, b = c.nodes
    jids = [b"D-aaaaaaaa-%024d-0005" % i for i in range(acks.ACK_BATCH_MAX + 5)]
    b.ack_jobs(jids)  # dummy acks: a SETACK each to a
    setacks = [m for _, _, m in c.net.sent if m[0] == msg.SETACK]
    assert [len(m[1]) // 2 for m in setacks] == [acks.ACK_BATCH_MAX]
    assert b.ack_outbox[a.myself].size == 5
    c.pump()
    assert all(not n.jobs for n in c.nodes)  # a knows none of them: the dummies go


def test_an_unanswered_ack_batch_is_retried_by_the_gc():
    c = Cluster(2)
    a, b, jid = acked_while_cut_off(c)
    c.run(500)  # the batch went out and was lost
    assert job_on(a, jid).state != ACKED and not b.ack_outbox
    c.net.cut.clear()
    c.run(2000)  # the next GC attempt (after about 1 s) sends it again
    assert c.holders(jid) == []


def test_fastack_deletes_everywhere_best_effort():
    c = Cluster(3)
    a, b, cc = c.nodes
    jid = replicated(c, a, repl=3)
    assert b.fast_ack([jid]) == 1
    c.pump()
    assert c.holders(jid) == []
    unknown = b"D-aaaaaaaa-" + b"q" * 24 + b"-0005"
    assert a.fast_ack([unknown]) == 0
    c.flush_acks()
    assert {d for _, d, m in c.sent(msg.DELJOB, a) if m[1] == unknown} == {b.myself, cc.myself}


def test_deljob_message_deletes_and_fails_a_pending_addjob():
    c = Cluster(2)
    a, b = c.nodes
    jid = replicated(c, a, repl=2)
    b.receive(_header(a), (msg.DELJOB, (jid,)))
    assert b.jobs.get(jid) is None and b.aof.records[-1] == ("deljob", jid)
    c.net.cut.add(b.myself)
    client = RecordingClient()
    addjob(a, client, repl=2)
    a.receive(_header(b), (msg.DELJOB, (client.block_job.id,)))
    assert client.replies == [replies.NOREPL_REMOVED]


def test_a_frame_is_handled_message_by_message_its_sender_checked_once():
    c = Cluster(3)
    a, b, cc = c.nodes
    jids = [replicated(c, a, repl=3) for _ in range(2)]
    received = b.cluster.messages_received
    deljobs = [(msg.DELJOB, (jid,)) for jid in jids]
    b.receive_frame(_header(a), [deljobs[0], (msg.PING, ()), deljobs[1]])
    assert [b.jobs.get(jid) for jid in jids] == [None, None]
    assert b.cluster.messages_received == received + 3
    stranger = _header(a)._replace(sender=b"f" * 40)
    cc.receive_frame(stranger, deljobs)
    assert all(cc.jobs.get(jid) is not None for jid in jids)  # an unknown sender is ignored


def test_known_only_keeps_known_nodes_as_the_tables_own_ids():
    c = Cluster(3)
    a, b, _cc = c.nodes
    holders = (bytes(bytearray(b.myself)), bytes(bytearray(a.myself)))  # as decoded
    known = a.known_only(holders)
    assert known == holders
    # A replica keeps its holders for its life: not the copies a message carried.
    assert [n is a.cluster.nodes[n].id for n in known] == [True, True]
    assert a.known_only((b"f" * 40, b.myself)) == (b.myself,)


# ----------------------------------------------------------------------------
# Federation.


def test_consumer_on_another_node_gets_the_jobs():
    c = Cluster(3)
    a, b, _cc = c.nodes
    consumer = RecordingClient()
    assert b.get_jobs([b"q"], 1) == []
    b.block_for_jobs(consumer, [b"q"], 0, False)
    c.pump()  # the first NEEDJOBS broadcast finds nothing
    job = addjob(a, repl=1)
    c.run(4200)
    assert consumer.replies == [replies.job_entries([job], False)]
    copy = job_on(b, job.id)
    assert copy.state == ACTIVE and copy.flags & DELIVERED
    assert set(copy.nodes_delivered) == {a.myself, b.myself}
    assert set(job.nodes_delivered) == {a.myself, b.myself}  # the source knows
    assert job.state == ACTIVE and a.queues.get(b"q").jobs_out == 1
    queue = b.queues.get(b"q")
    assert list(queue.sources) == [a.myself] and queue.import_rate(c.clock()) > 0
    qstat = new_state(Config(), b).execute(consumer, [b"QSTAT", b"q"])
    assert b"$11\r\nimport-from\r\n*1\r\n$40\r\n" + a.myself in qstat
    assert b"$11\r\nimport-rate\r\n:%d\r\n" % queue.import_rate(c.clock()) in qstat
    assert b.aof.records == []  # YOURJOBS writes no AOF record
    # The ack on the consumer's node reaches the source: nothing is redelivered.
    b.ack_jobs([job.id])
    c.run(1000)
    assert c.holders(job.id) == []


def test_import_keeps_flowing_to_a_consumer():
    c = Cluster(2)
    a, b = c.nodes
    produced = {addjob(a, repl=1).id for _ in range(40)}
    consumer = RecordingClient()
    consumed: list[bytes] = []
    start = c.clock()
    while len(consumed) < 40 and c.clock() - start < 5000:
        if not b.blocked_clients:
            jobs = b.get_jobs([b"q"], 1)
            if not jobs:
                b.block_for_jobs(consumer, [b"q"], 0, False)
                continue
            consumed.append(jobs[0].id)
            b.ack_jobs([jobs[0].id])
        c.run(10)
        if consumer.replies:
            jid = _served_id(consumer.replies.pop())
            consumed.append(jid)
            b.ack_jobs([jid])
    assert sorted(consumed) == sorted(produced)
    assert c.clock() - start < 1000  # not at the pace of the broadcast backoff
    adhoc = [m[2] for _, d, m in c.sent(msg.NEEDJOBS, b) if d == a.myself and m[2] > 1]
    assert adhoc and all(MIN_REQUEST <= n <= MAX_REQUEST for n in adhoc)
    c.run(3000)
    assert sum(len(n.jobs) for n in c.nodes) == 0


def _served_id(entries: bytes) -> bytes:
    """The job ID in a one-job GETJOB reply."""
    start = entries.index(b"$40\r\n") + 5
    return entries[start : start + 40]


def test_retry_zero_jobs_move_through_needjobs():
    c = Cluster(2)
    a, b = c.nodes
    job = addjob(a, repl=1, retry=0)
    consumer = RecordingClient()
    b.get_jobs([b"q"], 1)
    b.block_for_jobs(consumer, [b"q"], 0, False)
    c.run(4200)
    assert consumer.replies == [replies.job_entries([job], False)]
    assert a.jobs.get(job.id) is None  # moved, not copied
    assert a.aof.records[-1] == ("deljob", job.id)
    copy = job_on(b, job.id)
    assert copy.retry == 0 and copy.qtime == 0 and copy.flags & DELIVERED


def test_needjobs_reply_size_rules():
    c = Cluster(2)
    a, b = c.nodes
    for _ in range(10):
        addjob(a, repl=1)
    a.receive(_header(b), (msg.NEEDJOBS, b"q", 3))
    a.receive(_header(b), (msg.NEEDJOBS, b"q", 8))
    a.receive(_header(b), (msg.NEEDJOBS, b"q", 100))
    a.receive(_header(b), (msg.NEEDJOBS, b"q", 100))
    sizes = [len(m[1]) for _, _, m in c.sent(msg.YOURJOBS, a)]
    assert sizes == [3, 3, 2, 1]  # 10 >= 6; 7 < 16 -> 3; 4 -> 2; 2 -> 1
    assert len(a.queues.get(b"q").jobs) == 1
    a.receive(_header(b), (msg.NEEDJOBS, b"q", 5))
    a.receive(_header(b), (msg.NEEDJOBS, b"q", 5))
    assert [len(m[1]) for _, _, m in c.sent(msg.YOURJOBS, a)][4:] == [1]


def test_given_jobs_restart_their_requeue_timer_at_the_source():
    c = Cluster(2)
    a, b = c.nodes
    job = addjob(a, repl=1, retry=5)
    c.run(3000)
    a.receive(_header(b), (msg.NEEDJOBS, b"q", 1))
    assert job.state == ACTIVE and job.flags & DELIVERED and job.flags & BCAST_WILLQUEUE
    assert abs(job.qtime - (c.clock() + 5000)) <= 250
    c.pump()
    c.run(7000)  # b's consumer never acks: the source's WILLQUEUE finds it queued at b
    assert c.queued_on(job.id) == [b] and not c.sent(msg.QUEUED, a)


@pytest.mark.parametrize("case", ["missing", "paused", "importing", "no link"])
def test_needjobs_is_ignored(case: str):
    c = Cluster(3)
    a, b, _cc = c.nodes
    if case != "missing":
        addjob(a, repl=1)
    if case == "no link":
        a.cluster.nodes[b.myself].link = False
    if case == "paused":
        a.pause(b"q", PAUSE_OUT, False)
    if case == "importing":
        a.queues.get(b"q").count_import(c.clock())
    a.receive(_header(b), (msg.NEEDJOBS, b"q", 5))
    assert not c.sent(msg.YOURJOBS)
    if case == "no link":
        assert len(a.queues.get(b"q").jobs) == 1  # nothing left the queue


def test_job_messages_are_ignored_while_loading():
    c = Cluster(2)
    a, b = c.nodes
    b.loading = True
    addjob(a, repl=2, async_=True)
    c.pump()
    assert len(b.jobs) == 0


def test_needjobs_broadcast_backoff():
    c = Cluster(2)
    _a, b = c.nodes
    b.get_jobs([b"q"], 1)
    b.block_for_jobs(RecordingClient(), [b"q"], 0, False)
    times = [c.clock()]
    sent = 1
    for _ in range(900):
        c.run(100)
        now_sent = len(c.sent(msg.NEEDJOBS, b))
        if now_sent > sent:
            times.append(c.clock())
            sent = now_sent
    gaps = [t2 - t1 for t1, t2 in itertools.pairwise(times)]
    assert len(gaps) == 5
    for gap, expected in zip(gaps, (4000, 8000, 16000, 30000, 30000), strict=True):
        assert expected < gap <= expected + 100
    assert all(m == (msg.NEEDJOBS, b"q", 1) for _, _, m in c.sent(msg.NEEDJOBS, b))


def test_an_importing_queue_asks_again_at_half_the_last_batch():
    c = Cluster(2)
    a, b = c.nodes
    for _ in range(300):
        addjob(a, repl=1)
    consumers = [RecordingClient() for _ in range(30)]
    for consumer in consumers:
        b.block_for_jobs(consumer, [b"q"], 0, False)
    b.need_jobs(b.create_queue(b"q"))  # the broadcast finds a, then ad hoc requests
    c.pump()
    queue = b.queues.get(b"q")
    sizes = [len(m[1]) for _, _, m in c.sent(msg.YOURJOBS, a)]
    # One job found a; then as many as consumers wait (29), more than the rate says (20/s).
    assert sizes[:2] == [1, 29]
    assert all(consumer.replies for consumer in consumers)
    assert queue.refill_at == sizes[-1] // 2 > 0 and len(queue.jobs) > queue.refill_at
    asked = len(c.sent(msg.NEEDJOBS, b))
    while len(queue.jobs) > queue.refill_at + 1:
        b.get_jobs([b"q"], 1)
    assert len(c.sent(msg.NEEDJOBS, b)) == asked  # not yet
    b.get_jobs([b"q"], 1)  # down to half the last batch: ask now, before it runs dry
    assert [d for _, d, _ in c.sent(msg.NEEDJOBS, b)[asked:]] == [a.myself]


def test_reaching_zero_while_importing_asks_the_sources_at_once():
    c = Cluster(3)
    a, b, cc = c.nodes
    for _ in range(3):
        addjob(b, repl=1)
    queue = b.queues.get(b"q")
    now = c.clock()
    for _ in range(30):
        queue.count_import(now)
    queue.sources[a.myself] = now
    queue.needjobs_bcast_time = now  # a broadcast just went out
    b.get_jobs([b"q"], 2)
    assert not c.sent(msg.NEEDJOBS)  # not empty yet
    b.get_jobs([b"q"], 1)  # reached zero: ad hoc to the source at once
    b.get_jobs([b"q"], 1)  # empty, clients waiting: within the 50 ms ad hoc backoff
    requests = [(d, m) for _, d, m in c.sent(msg.NEEDJOBS, b)]
    assert requests == [(a.myself, (msg.NEEDJOBS, b"q", MAX_REQUEST))]  # 30 in 50 ms: 600/s
    addjob(b, repl=1)
    b.get_jobs([b"q"], 1)  # reaches zero again: no backoff on this path
    assert len(c.sent(msg.NEEDJOBS, b)) == 2
    c.run(6000)
    b.get_jobs([b"q"], 1)  # sources older than 5 s are dropped: only a broadcast
    assert not queue.sources
    requests = [(d, m) for _, d, m in c.sent(msg.NEEDJOBS, b)][2:]
    assert sorted(requests) == [(a.myself, (msg.NEEDJOBS, b"q", 1)),
                                (cc.myself, (msg.NEEDJOBS, b"q", 1))]  # fmt: skip


def test_yourjobs_reuses_a_local_copy_and_leaves_acked_ones():
    c = Cluster(2)
    a, b = c.nodes
    first = replicated(c, a, repl=2, retry=10)
    second = replicated(c, a, repl=2, retry=10)
    b.ack_jobs([second])
    c.net.queue.clear()
    jobs = [job_on(a, first), job_on(a, second)]
    now_s = c.clock() // 1000
    payloads = [serialize.encode(j, bus=True, now_s=now_s) for j in jobs]
    b.receive(_header(a), (msg.YOURJOBS, payloads))
    assert job_on(b, first).state == QUEUED
    assert job_on(b, second).state == ACKED
    assert b.queues.get(b"q").jobs_in == 1


def test_yourjobs_stops_at_a_malformed_job():
    c = Cluster(2)
    a, b = c.nodes
    good = [addjob(a, repl=1) for _ in range(2)]
    now_s = c.clock() // 1000
    payloads = [serialize.encode(good[0], bus=True, now_s=now_s), b"junk",
                serialize.encode(good[1], bus=True, now_s=now_s)]  # fmt: skip
    b.receive(_header(a), (msg.YOURJOBS, payloads))
    assert b.jobs.get(good[0].id) is not None and b.jobs.get(good[1].id) is None


# ----------------------------------------------------------------------------
# Leaving, PAUSE, malformed messages.


def test_leaving_node_stops_asking_for_jobs_and_releases_clients():
    c = Cluster(2)
    _a, b = c.nodes
    consumer = RecordingClient()
    b.cluster.set_leaving(True)
    b.get_jobs([b"q"], 1)
    b.block_for_jobs(consumer, [b"q"], 0, False)
    c.run(200)
    assert consumer.replies == [reply.LEAVING]
    assert not c.sent(msg.NEEDJOBS)


def test_pause_bcast_sets_the_same_flags_everywhere():
    c = Cluster(3)
    a, b, cc = c.nodes
    consumer = RecordingClient()
    b.pause(b"q", PAUSE_OUT, False)
    addjob(b, repl=1)
    b.block_for_jobs(consumer, [b"q"], 0, False)
    assert a.pause(b"q", PAUSE_IN, True) == PAUSE_IN
    assert {d for _, d, m in c.sent(msg.PAUSE, a)} == {b.myself, cc.myself}
    c.pump()
    assert b.queues.get(b"q").paused == PAUSE_IN and cc.queues.get(b"q").paused == PAUSE_IN
    assert len(consumer.replies) == 1  # pause-out cleared: the client is served
    a.pause(b"other", 0, True)
    c.pump()
    assert cc.queues.get(b"other") is None  # flags 0 create nothing
    assert a.pause(b"q", None, True) == PAUSE_IN  # PAUSE q state bcast
    assert c.sent(msg.PAUSE, a)[-1][2] == (msg.PAUSE, b"q", PAUSE_IN)


@pytest.mark.parametrize(
    "message",
    [
        (msg.GOTJOB, (b"x",)),
        (msg.SETACK, (b"D-" + b"0" * 38, 7)),
        (msg.GOTACK, (b"", 1)),
        (msg.QUEUED, b"nope", msg.INCR_NACKS),
        (msg.WILLQUEUE, b"D-" + b"0" * 38),
        (msg.WORKING, b"D-" + b"0" * 38),
        (msg.DELJOB, (b"D-" + b"0" * 38,)),
        (msg.YOURJOBS, (b"x", b"")),
        (msg.NEEDJOBS, b"no such queue", 5),
        (msg.NEEDJOBS, b"q", -3),
        (msg.REPLJOB, b"", 0),
        (msg.ENQUEUE, b"D-" + b"0" * 38, 0),
    ],
)
def test_meaningless_messages_change_nothing(message: tuple):
    c = Cluster(2)
    a, b = c.nodes
    jid = replicated(c, a, repl=2)
    before = c.net.sent[:]
    b.receive(_header(a), message)
    if message[0] == msg.SETACK:  # an unknown job: GOTACK(known=0)
        assert c.net.sent[len(before) :] == [(b.myself, a.myself, (msg.GOTACK, (message[1][0], 0)))]
    else:
        assert c.net.sent == before
    assert job_on(b, jid).state == ACTIVE and len(b.jobs) == 1
