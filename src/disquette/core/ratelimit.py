"""Cluster-wide delivery limits: a queue policy's ``rate`` and ``concurrency`` (beyond Disque).

``rate`` caps the jobs of a queue handed to consumers per second, ``concurrency``
the jobs handed out and not yet acknowledged, NACKed, requeued or deleted, both
counted over the whole cluster. Nodes are masters that never wait for each other,
so an exact global count would need agreement on every delivery; instead the
limit is cut into *shares*, one per node, and a node serves GETJOB within its own
share. A queue at its limit here looks empty to GETJOB: NOHANG returns nothing, a
blocking GETJOB waits and is served when a token or a slot frees up (the cron at
``hz``, an acknowledgement), and federation does not fetch jobs for it meanwhile.

**Shares.** Time is cut into epochs of one second (``clock() // 1000``). Half way
through epoch e-1 each node with a limited queue announces (RATEDEMAND, to every
linked node) what it wants for epoch e: for each queue, its rate demand (the jobs
it delivered over the last period plus a quarter, plus a floor of one while it
has had consumers in the last ten seconds; or *hungry* when a consumer was turned
away for the limit), its concurrency demand (its peak in flight plus a quarter
and the floor, or hungry) and ``held``: the most it may have in flight until
epoch e starts (its jobs out now, or its current limit if more). Its own
announcement is kept like the others. For epoch e every node splits each
limit over the nodes that announced for e with the same deterministic
water-filling (:func:`allocate`: integers, the nodes that want less than an equal
part get what they want, the rest split what is left, the remainder rotating with
the epoch for rates, every ``SLOT_ROTATION`` epochs for concurrency, whose slots
are slow to move), so nodes holding the same announcements compute the same
shares, and the shares sum to the limit exactly. A node that did not announce for
e (it just started to serve the queue) has no share in e. A peer's announcement
for e that is missing (lost, late, a partition) is replaced by its latest one of
the two epochs before; older ones expire, and the node is no longer counted.

**Rate.** A token bucket per queue and node, refilled at the node's rate share per
second and holding at most a tenth of it (at least one token): its burst.

**Concurrency.** A node counts the jobs of the queue it handed to a client and
that are still out (released on ACKJOB here or SETACK from the holder that got
the ack, on NACK or a requeue here or QUEUED from another holder, on deletion or
expiry; a job moved by federation counts where a client finally gets it). Its
limit in epoch e is its share minus, for every other node j, what j holds beyond
its own share (``held_j - share_j`` when positive: slots a node gave up are taken
by others only once it says the jobs are back), and until epoch e starts it stays
within the ``held`` it announced for e.

**What is guaranteed.** Let L be the rate, C the concurrency, n the nodes
serving the queue. While every node holds every announcement of the current
epoch in time (the bus delivers within the half epoch, clocks agree):

* the deliveries of any sliding second are at most ``L + sum of bursts`` <=
  ``L + ceil(L/10) + n`` (tokens in the buckets at its start, plus the shares'
  integral over it, which is L at every instant);
* jobs in flight are at most C. In epoch e node i holds at most
  ``M_i = max(held_i, limit_i)`` (it starts the epoch within ``held_i`` and
  delivers only under ``limit_i``). With ``X_i = max(0, held_i - share_i)`` and
  ``limit_i = share_i - sum of the other X``, the sum of the M_i is at most C
  whenever the sum of the held_i is (nodes with an excess count ``held_i``, the
  others at most ``share_i`` less the excess of the first, or ``held_i`` below
  it), and ``held_i`` for e+1 is at most ``M_i`` of e: by induction from a
  node's start (nothing held), the in flight of every epoch is at most C.

**Groups.** A policy's ``group-rate`` and ``group-concurrency`` limit each fair-share
group of a queue (ADDJOB GROUP, core/joblist.py; the jobs without a group are the
default group's) the same way: a group is one more limited entity, its limit here a
:class:`QueueLimit` named ``queue NUL group`` in the announcements, made when GETJOB
first asks for the group and forgotten like a queue's when idle. GETJOB on such a
queue skips the groups at their limit here (it takes the next group in turn), and
looks empty when every group with jobs is. Each group gets the bounds above, with
``n`` the nodes serving that group; a queue's own limits apply on top.

A clock ``d`` ms off the others (``d`` under the half epoch, less the bus delay)
moves that node's epoch edges by ``d``: for ``d`` ms two sets of shares are in use,
so the rate may pass by ``L * d / 1000`` more; the concurrency bound holds (a node
keeps within the ``held`` it announced until its own edge). A clock further off
takes its node out of the agreement, as a partition would.

When announcements are lost or late, or a partition cuts the cluster, nodes
disagree for up to ``STALE_EPOCHS`` epochs, and then each side splits the whole
limit over its own nodes: k sides deliver up to k times the limit. No share ever
exceeds the limit, so the bound for any fault is n times the bound above. A node
that crashes forgets the jobs it had handed out: until they are acknowledged,
they are over the concurrency bound (by at most that node's share). The
simulator measures these and checks them over every seed (``--rate``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.core import messages as msg
from disquette.core.joblist import DEFAULT_GROUP
from disquette.core.messages import Message

if TYPE_CHECKING:
    from disquette.core.job import Job
    from disquette.core.node import Node
    from disquette.core.queue import Queue

EPOCH: Final = 1000  # ms
ANNOUNCE_AT: Final = 500  # ms into an epoch: demands for the next one go out
STALE_EPOCHS: Final = 2  # a peer's announcement stands in for this many missing ones
IDLE_DROP: Final = 60_000  # ms without a GETJOB after which an idle limit is forgotten
FLOOR_WINDOW: Final = 10_000  # ms after a GETJOB during which a node keeps a floor share
BURST_DIVISOR: Final = 10  # a bucket holds a tenth of a second of its share
HUNGRY: Final = -1  # a demand: a consumer was turned away for the limit
SLOT_ROTATION: Final = 10  # epochs between turns of concurrency's remainder (see _compute)
MAX_ENTRIES: Final = 4096  # queues in one RATEDEMAND (more go in more messages)
GROUP_SEPARATOR: Final = b"\x00"  # a group's limit is named queue NUL group


def limit_name(queue: bytes, group: bytes | None) -> bytes:
    """The name of a queue's limit (``group`` None) or of one of its groups' in the
    node's table and the announcements."""
    return queue if group is None else queue + GROUP_SEPARATOR + group


def allocate(limit: int, wants: dict[bytes, int], epoch: int) -> dict[bytes, int]:
    """Split ``limit`` over the nodes of ``wants`` (node ID -> demand, HUNGRY: no
    bound): water-filling in integers, the same on every node for the same input.
    The nodes whose demand is under an equal part of what is left get it; the others
    share the rest equally, the remainder going one unit each to the first of them:
    the hungry ones first, each group in an order rotated by ``epoch``. When every
    demand is met, what is left goes to the nodes that asked for something (all of
    them if none did). The result sums to ``limit``."""
    order = sorted(wants.items(), key=lambda item: (item[1] < 0, item[1], item[0]))
    shares: dict[bytes, int] = {}
    left = limit
    rest = len(order)
    i = 0
    while i < len(order):
        node_id, want = order[i]
        if want < 0 or want * rest > left:
            break
        shares[node_id] = want
        left -= want
        rest -= 1
        i += 1
    if i == len(order):  # everyone is served: the rest is headroom for those who asked
        if not order:
            return shares
        asking = [item for item in order if item[1] > 0]
        order, i = asking or order, 0
        rest = len(order)
    hungry = _rotated([node_id for node_id, want in order[i:] if want < 0], epoch)
    others = _rotated([node_id for node_id, want in order[i:] if want >= 0], epoch)
    base, extra = divmod(left, rest)
    for k, node_id in enumerate(hungry + others):
        shares[node_id] = shares.get(node_id, 0) + base + (k < extra)
    return shares


def _rotated(node_ids: list[bytes], epoch: int) -> list[bytes]:
    """The IDs in order, starting at a place that turns with ``epoch``."""
    if not node_ids:
        return node_ids
    node_ids.sort()
    start = epoch % len(node_ids)
    return node_ids[start:] + node_ids[:start]


class QueueLimit:
    """One limited queue (or group of a queue) on this node: its shares, tokens, jobs in
    flight, demand."""

    __slots__ = (
        "active",
        "cap_until",
        "concurrency",
        "delivered",
        "epoch",
        "group",
        "held_cap",
        "inflight",
        "name",
        "peak",
        "queue",
        "rate",
        "rate_share",
        "refilled",
        "refused_concurrency",
        "refused_rate",
        "slots",
        "stale",
        "tokens",
    )

    def __init__(
        self, queue: bytes, rate: int, concurrency: int, now: int, group: bytes | None = None
    ) -> None:
        self.queue = queue
        self.group = group  # None: the queue's own limit
        self.name = limit_name(queue, group)
        self.rate = rate  # the policy's limits (0: none)
        self.concurrency = concurrency
        self.epoch = -1  # the epoch the shares below are for
        self.stale = False  # news for that epoch came since: computed again
        self.rate_share = 0
        self.slots = 0  # the concurrency limit here this epoch
        # After announcing, until epoch ``cap_until`` starts: in flight stays under it.
        self.held_cap = 0
        self.cap_until = -1
        self.tokens = 0.0
        self.refilled = now
        self.inflight = 0
        # Demand since the last announcement.
        self.delivered = 0
        self.refused_rate = 0
        self.refused_concurrency = 0
        self.peak = 0
        self.active = now - FLOOR_WINDOW  # the last GETJOB that asked for it (ms)

    @property
    def burst(self) -> int:
        return -(-self.rate_share // BURST_DIVISOR)

    def demands(self, now: int) -> tuple[int, int]:
        """(rate, concurrency) wanted for the next epoch, from the last period: what was
        used and a quarter more, a floor of one while consumers come, HUNGRY when one
        was turned away."""
        floor = 1 if now - self.active < FLOOR_WINDOW else 0
        rate = HUNGRY if self.refused_rate else self.delivered + self.delivered // 4 + floor
        conc = HUNGRY if self.refused_concurrency else self.peak + self.peak // 4 + floor
        return rate, conc


class GroupLimits:
    """The per-group limits of one queue here: the policy's values, and the limit of
    each group GETJOB asked for."""

    __slots__ = ("concurrency", "limits", "rate")

    def __init__(self, rate: int, concurrency: int) -> None:
        self.rate = rate
        self.concurrency = concurrency
        self.limits: dict[bytes, QueueLimit] = {}  # group key -> its limit here


class RateLimits:
    """The limited queues of a node, the announcements it knows, the jobs out."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.limits: dict[bytes, QueueLimit] = {}  # by name: the queues' and the groups'
        # Jobs delivered here from a limited queue (or limited group) and still out:
        # job ID -> its limit (the queue's when both are limited; the group's then in
        # ``group_held``: a job held by a limit is always in ``held``, the one test
        # the hot paths make).
        self.held: dict[bytes, QueueLimit] = {}
        self.group_held: dict[bytes, QueueLimit] = {}
        # Announcements: queue -> node ID -> [(epoch, rate want, conc want, held)], the
        # latest last (this node's own included).
        self.demands: dict[bytes, dict[bytes, list[tuple[int, int, int, int]]]] = {}
        self.announced = -1  # the epoch the last announcement was for
        self.throttled = 0  # GETJOBs (and cron ticks of blocked ones) turned away

    # Which queues are limited -------------------------------------------------

    def attach(self, queue: Queue) -> None:
        """Give ``queue`` its limits when its policy sets some (a new queue, a policy
        change), or take them away."""
        rate, conc = self._options(queue.name, False)
        if not rate and not conc:
            queue.limit = None
        else:
            limit = self.limits.get(queue.name)
            if limit is None:
                limit = QueueLimit(queue.name, rate, conc, self.node.clock())
                self.limits[queue.name] = limit
            else:
                _set_limits(limit, rate, conc)
            queue.limit = limit
        rate, conc = self._options(queue.name, True)
        groups = queue.group_limits
        if not rate and not conc:
            queue.group_limits = None
        elif groups is None:
            queue.group_limits = GroupLimits(rate, conc)
        elif (groups.rate, groups.concurrency) != (rate, conc):
            groups.rate, groups.concurrency = rate, conc
            for limit in groups.limits.values():
                _set_limits(limit, rate, conc)

    def _options(self, name: bytes, groups: bool) -> tuple[int, int]:
        """(rate, concurrency) of the queue's policy (0: not set), or with ``groups``
        (group-rate, group-concurrency)."""
        policy = self.node.policies.for_queue(name)
        if policy is None:
            return (0, 0)
        if groups:
            return (policy.get("group-rate"), policy.get("group-concurrency"))
        return (policy.get("rate"), policy.get("concurrency"))

    def policies_changed(self) -> None:
        for queue in self.node.queues.values():
            self.attach(queue)
        for limit in list(self.limits.values()):
            if self._options(limit.queue, limit.group is not None) == (0, 0):
                self._drop(limit)

    def _drop(self, limit: QueueLimit) -> None:
        self.limits.pop(limit.name, None)
        queue = self.node.queues.get(limit.queue)
        if limit.group is not None:
            groups = None if queue is None else queue.group_limits
            if groups is not None and groups.limits.get(limit.group) is limit:
                del groups.limits[limit.group]
        elif queue is not None and queue.limit is limit:
            queue.limit = None
        held, group_held = self.held, self.group_held
        for job_id in [j for j, by in held.items() if by is limit]:
            group = group_held.pop(job_id, None)
            if group is None:
                del held[job_id]
            else:
                held[job_id] = group  # its group's hold stays
        for job_id in [j for j, by in group_held.items() if by is limit]:
            del group_held[job_id]

    def group_limit(self, groups: GroupLimits, queue: bytes, key: bytes) -> QueueLimit:
        """The limit of the group ``key`` of ``queue`` here, made when first asked (or
        found again, for a queue made anew while its jobs were out)."""
        limit = groups.limits.get(key)
        if limit is None:
            limit = self.limits.get(limit_name(queue, key))
            if limit is None:
                limit = QueueLimit(queue, groups.rate, groups.concurrency, self.node.clock(), key)
                self.limits[limit.name] = limit
            else:
                _set_limits(limit, groups.rate, groups.concurrency)
            groups.limits[key] = limit
        return limit

    # GETJOB ------------------------------------------------------------------

    def allow(self, limit: QueueLimit, now: int, asked: int = 1) -> bool:
        """Whether one more job of the queue may be handed out here now (its queue
        has one). False counts the demand turned away, and ``asked`` GETJOBs (0: the
        cron looking for its blocked consumers) in ``throttled``."""
        limit.active = now
        self._refresh(limit, now)
        if limit.rate and limit.tokens < 1.0:
            limit.refused_rate += 1
        elif limit.concurrency and not limit.inflight < self._slots(limit):
            limit.refused_concurrency += 1
        else:
            return True
        self.throttled += asked
        return False

    def delivered(self, limit: QueueLimit, job: Job) -> None:
        """A job of a limited queue was handed to a client here."""
        _count(limit, job, self.held)

    def take(self, queue: Queue, groups: GroupLimits, now: int) -> Job | None:
        """Fetch the next job of a queue whose groups are limited: the next group in
        turn within its limit here; None (counted in ``throttled``) when every group
        with jobs is at its limit."""
        name = queue.name

        def allow(key: bytes) -> bool:
            return self.allow(self.group_limit(groups, name, key), now, 0)

        job = self.node.fetch(queue, now, allow)
        if job is None:
            self.throttled += 1
            return None
        group = groups.limits[DEFAULT_GROUP if job.group is None else job.group]
        # (with a queue limit too, the caller counts the job in ``held`` next)
        _count(group, job, self.held if queue.limit is None else self.group_held)
        return job

    def release(self, job: Job) -> None:
        """A job handed out here is back or done (acknowledged, requeued, deleted);
        a consumer blocked on its queue may now be served."""
        limit = self.held.pop(job.id, None)
        if limit is None:
            return
        limit.inflight -= 1
        if self.group_held:
            group = self.group_held.pop(job.id, None)
            if group is not None:
                group.inflight -= 1
        queue = self.node.queues.get(limit.queue)
        if queue is not None and queue.blocked and len(queue):
            self.node.ready_queues[queue] = None

    def _slots(self, limit: QueueLimit) -> int:
        slots = limit.slots
        if limit.epoch < limit.cap_until and limit.held_cap < slots:
            return limit.held_cap
        return slots

    def _refresh(self, limit: QueueLimit, now: int) -> None:
        """Refill the bucket up to ``now``, switching shares at an epoch's edge."""
        epoch = now // EPOCH
        if epoch != limit.epoch:
            if limit.refilled < epoch * EPOCH:
                self._refill(limit, epoch * EPOCH)
            self._compute(limit, epoch)
        elif limit.stale:
            self._refill(limit, now)
            self._compute(limit, epoch)
        self._refill(limit, now)

    def _refill(self, limit: QueueLimit, now: int) -> None:
        elapsed = now - limit.refilled
        if elapsed > 0:
            limit.refilled = now
            tokens = limit.tokens + elapsed * limit.rate_share / EPOCH
            burst = limit.burst
            limit.tokens = tokens if tokens < burst else float(burst)

    def _compute(self, limit: QueueLimit, epoch: int) -> None:
        """This node's shares of the queue's limits for ``epoch``."""
        limit.epoch = epoch
        limit.stale = False
        entries = self._entries(limit.name, epoch)
        me = self.node.myself
        mine = entries.get(me)
        if mine is None or mine[0] != epoch:
            limit.rate_share = limit.slots = 0  # not announced for this epoch: no share
            limit.tokens = min(limit.tokens, 0.0)
            return
        if limit.rate:
            shares = allocate(limit.rate, {n: e[1] for n, e in entries.items()}, epoch)
            limit.rate_share = shares[me]
            limit.tokens = min(limit.tokens, float(limit.burst))
        if limit.concurrency:
            wants = {n: e[2] for n, e in entries.items()}
            shares = allocate(limit.concurrency, wants, epoch // SLOT_ROTATION)
            excess = sum(max(0, e[3] - shares[n]) for n, e in entries.items() if n != me)
            limit.slots = max(0, shares[me] - excess)

    def _entries(self, name: bytes, epoch: int) -> dict[bytes, tuple[int, int, int, int]]:
        """Each node's announcement for ``epoch``, or its latest of the epochs before
        that has not expired."""
        found: dict[bytes, tuple[int, int, int, int]] = {}
        for node_id, entries in self.demands.get(name, {}).items():
            for entry in reversed(entries):
                if entry[0] <= epoch:
                    if entry[0] >= epoch - STALE_EPOCHS:
                        found[node_id] = entry
                    break
        return found

    # Announcements -------------------------------------------------------------

    def record(self, name: bytes, node_id: bytes, entry: tuple[int, int, int, int]) -> None:
        """An announcement (a peer's or this node's own)."""
        by_node = self.demands.setdefault(name, {})
        entries = [e for e in by_node.get(node_id, ()) if e[0] < entry[0]]
        entries.append(entry)
        by_node[node_id] = entries[-STALE_EPOCHS - 1 :]
        limit = self.limits.get(name)
        if limit is not None and limit.epoch == entry[0]:
            limit.stale = True  # news for the current epoch: shares computed again

    def cron(self, now: int) -> None:
        """At ``hz``: serve blocked consumers a token or a slot became free for (or
        count them turned away), announce demands half way through an epoch, forget
        idle limits and expired announcements."""
        if not self.limits and not self.demands:
            return
        node = self.node
        for limit in list(self.limits.values()):
            queue = node.queues.get(limit.queue)
            if queue is not None and queue.blocked and len(queue):
                # (a group's limit is asked by the next try, for a group with jobs)
                if limit.group is not None or self.allow(limit, now, asked=0):
                    node.ready_queues[queue] = None
            elif (
                now - limit.active > IDLE_DROP
                and not limit.inflight
                and (queue is None or not queue.blocked)
            ):
                self._drop(limit)
        epoch = now // EPOCH
        if now % EPOCH >= ANNOUNCE_AT and self.announced < epoch + 1:
            self.announced = epoch + 1
            self._announce(epoch + 1, now)
            self._expire(epoch)

    def _announce(self, epoch: int, now: int) -> None:
        """This node's demands for ``epoch``, kept and sent to every linked node (in
        messages of ``MAX_ENTRIES`` queues at most)."""
        flat: list[object] = []
        me = self.node.myself
        for limit in list(self.limits.values()):
            self._refresh(limit, now)
            rate, conc = limit.demands(now)
            # What it may hold until the next epoch starts: its jobs out, or up to its
            # limit now (it keeps serving within it meanwhile, never past it).
            held = max(limit.inflight, self._slots(limit))
            limit.held_cap = held
            limit.cap_until = epoch
            limit.delivered = limit.refused_rate = limit.refused_concurrency = 0
            limit.peak = limit.inflight
            self.record(limit.name, me, (epoch, rate, conc, held))
            flat += [limit.name, rate, conc, held]
        linked = self.node.linked_nodes()
        for start in range(0, len(flat), 4 * MAX_ENTRIES):
            message = (msg.RATEDEMAND, epoch, tuple(flat[start : start + 4 * MAX_ENTRIES]))
            for node_id in linked:
                self.node.send(node_id, message)

    def _expire(self, epoch: int) -> None:
        oldest = epoch - STALE_EPOCHS
        for name in list(self.demands):
            by_node = self.demands[name]
            for node_id in [n for n, e in by_node.items() if e[-1][0] < oldest]:
                del by_node[node_id]
            if not by_node:
                del self.demands[name]

    # Introspection ---------------------------------------------------------------

    def status(self, limit: QueueLimit) -> list[tuple[bytes, int]]:
        """QSTAT's fields for a limited queue."""
        self._refresh(limit, self.node.clock())
        fields: list[tuple[bytes, int]] = []
        if limit.rate:
            fields += [(b"rate-share", limit.rate_share), (b"rate-tokens", int(limit.tokens))]
        if limit.concurrency:
            fields += [(b"concurrency-share", self._slots(limit)), (b"in-flight", limit.inflight)]
        return fields


def _set_limits(limit: QueueLimit, rate: int, concurrency: int) -> None:
    """A policy change: the limit's values, its shares computed again."""
    if (limit.rate, limit.concurrency) != (rate, concurrency):
        limit.rate, limit.concurrency = rate, concurrency
        limit.stale = True


def _count(limit: QueueLimit, job: Job, held: dict[bytes, QueueLimit]) -> None:
    """A job counted against ``limit``: a token, a delivery, and a slot in flight until
    it is released (``held``)."""
    if limit.rate:
        limit.tokens -= 1.0
    limit.delivered += 1
    if held.get(job.id) is None:
        held[job.id] = limit
        limit.inflight += 1
        if limit.inflight > limit.peak:
            limit.peak = limit.inflight


def install(node: Node) -> None:
    node.message_handlers[msg.RATEDEMAND] = on_demand


def on_demand(node: Node, sender: bytes, message: Message) -> None:
    """A peer's demands for an epoch: kept, ignoring malformed entries."""
    epoch = message[1]
    flat = message[2]
    rates = node.rates
    for i in range(0, len(flat) - 3, 4):
        name, rate, conc, held = flat[i : i + 4]
        if type(name) is bytes and type(rate) is int and type(conc) is int and type(held) is int:
            rates.record(name, sender, (epoch, rate, conc, max(0, held)))
