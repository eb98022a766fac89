"""Queue commands: QLEN, QSTAT, QPEEK, QSCAN and PAUSE (reference section 4).

QPEEK shows jobs in the order GETJOB would serve them: by priority, then ctime.
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING, Final

from disquette.commands.args import int_arg
from disquette.commands.jobs import ScanArgs, scan_reply
from disquette.commands.table import command
from disquette.core import acl, replies
from disquette.core.errors import DisqueError
from disquette.core.federation import SOURCE_VALIDITY
from disquette.core.queue import PAUSE_ALL, PAUSE_IN, PAUSE_NAMES, PAUSE_OUT, Queue
from disquette.protocol import reply

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.state.server import ServerState

_PAUSE_FLAGS: Final = {b"in": PAUSE_IN, b"out": PAUSE_OUT, b"all": PAUSE_ALL}
_PAUSE_REPLIES: Final = [reply.simple(name) for name in PAUSE_NAMES]


@command("qlen", 2, "rF")
def qlen(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    queue = state.node.queues.get(argv[1])
    return reply.integer(0 if queue is None else len(queue))


@command("qstat", 2, "rF")
def qstat(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    node = state.node
    queue = node.queues.get(argv[1])
    if queue is None:
        return reply.NULL_ARRAY
    now = node.clock()
    sources = [nid for nid, t in queue.sources.items() if now - t <= SOURCE_VALIDITY]
    policy = node.policies.for_queue(queue.name)
    spilled = queue.spilled
    limits = [] if queue.limit is None else node.rates.status(queue.limit)
    fields = 10 + (policy is not None) + (spilled is not None) + len(limits)
    fields += queue.dropped_oldest > 0
    return b"".join(
        [
            b"*%d\r\n" % (fields * 2),
            reply.bulk(b"name"), reply.bulk(queue.name),
            reply.bulk(b"len"), reply.integer(len(queue)),
            reply.bulk(b"age"), reply.integer(max(0, (now - queue.ctime) // 1000)),
            reply.bulk(b"idle"), reply.integer(max(0, (now - queue.atime) // 1000)),
            reply.bulk(b"blocked"), reply.integer(len(queue.blocked)),
            reply.bulk(b"import-from"), reply.bulk_array(sources),
            reply.bulk(b"import-rate"), reply.integer(queue.import_rate(now)),
            reply.bulk(b"jobs-in"), reply.integer(queue.jobs_in),
            reply.bulk(b"jobs-out"), reply.integer(queue.jobs_out),
            reply.bulk(b"pause"), reply.bulk(queue.pause_name),
            # Beyond Disque, appended when there is one: the policy that applies.
            b"" if policy is None else reply.bulk(b"policy") + reply.bulk(policy.name),
            # And while some of its jobs are on disk (flow to disk): how many.
            b"" if spilled is None else reply.bulk(b"jobs-on-disk") + reply.integer(spilled.count),
            # And for a queue with rate or concurrency limits: this node's part of them.
            *(reply.bulk(name) + reply.integer(value) for name, value in limits),
            # And once its policy's overflow drop-oldest dropped jobs: how many.
            b"" if not queue.dropped_oldest
            else reply.bulk(b"dropped-oldest") + reply.integer(queue.dropped_oldest),
        ]
    )  # fmt: skip


@command("qpeek", 3, "r")
def qpeek(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    count = int_arg(argv[2])
    queue = state.node.queues.get(argv[1])
    if queue is None or count == 0:
        return reply.EMPTY_ARRAY
    if queue.spilled is not None:  # some on disk: read in order, left there
        jobs = list(islice(state.node.spill.queue_order(queue, count < 0), abs(count)))
    elif count > 0:
        jobs = list(islice(queue.jobs, count))
    else:
        jobs = list(islice(queue.jobs.reversed(), -count))
    return replies.job_entries(jobs, False)


@command("qscan", -1, "r")
def qscan(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    scan = ScanArgs()
    minlen = maxlen = importrate = 0
    i, n = 1, len(argv)
    while i < n:
        opt = argv[i].lower()
        has_value = i + 1 < n
        if opt == b"count" and has_value:
            scan.count = int_arg(argv[i + 1])
        elif opt == b"busyloop":
            scan.busyloop = True
            i += 1
            continue
        elif opt == b"minlen" and has_value:
            minlen = int_arg(argv[i + 1])
        elif opt == b"maxlen" and has_value:
            maxlen = int_arg(argv[i + 1])
        elif opt == b"importrate" and has_value:
            importrate = int_arg(argv[i + 1])
        else:
            scan.take_cursor(argv[i])
            i += 1
            continue
        i += 2
    now = state.node.clock()
    restricted = client.acl is not None

    def match(queue: Queue) -> bool:
        if restricted and not acl.visible(client.acl, queue.name):
            return False
        length = len(queue)
        if minlen and length < minlen:
            return False
        if maxlen and length > maxlen:
            return False
        return not (importrate and queue.import_rate(now) < importrate)

    cursor, queues = state.node.queues.scan(
        scan.cursor or 0, max(scan.count, 1), scan.busyloop, match
    )
    return scan_reply(cursor, [reply.bulk(q.name) for q in queues])


@command("pause", -3, "rF")
def pause(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    flags: int | None = None
    bcast = False
    for arg in argv[2:]:
        opt = arg.lower()
        if opt in _PAUSE_FLAGS:
            flags = (flags or 0) | _PAUSE_FLAGS[opt]
        elif opt == b"none":
            flags = 0
        elif opt == b"bcast":
            bcast = True
        elif opt != b"state":
            raise DisqueError(reply.SYNTAX_ERROR)
    return _PAUSE_REPLIES[state.node.pause(argv[1], flags, bcast)]
