"""Fuzzing every command's argument parser through the real request pipeline.

The pipeline is sans-I/O, so hypothesis drives :meth:`ServerState.execute`
in-process with a node on a virtual clock: a thousand argument lists per
command, built from each command's own keywords, numbers at and beyond every
limit, valid and invalid job IDs, and random bytes. Whatever the arguments,
the command must answer exactly one well-formed RESP reply (or none, for a
client it blocks), raise nothing, and leave the node's state consistent.
"""

from __future__ import annotations

import json

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disquette.commands import new_state
from disquette.config import Config
from disquette.core import progress
from disquette.core.client import BLOCK_WAITJOB
from disquette.core.job import QUEUED
from disquette.core.memory import NODE_OVERHEAD
from disquette.state.server import ServerState
from tests.support.fuzz import examples
from tests.unit.core_harness import Harness, RecordingClient

KEYWORDS = {
    "addjob": [
        "REPLICATE",
        "DELAY",
        "RETRY",
        "TTL",
        "MAXLEN",
        "ASYNC",
        "PRIORITY",
        "DEDUP",
        "AFTER",
        "IFGONE",
        "fail",
        "release",
        "BACKOFF",
        "fixed",
        "exponential",
    ],
    "working": ["CLAIM", "TAG"],
    "ackjob": ["CLAIM", "RESULT", "TAG"],
    "nack": ["CLAIM", "DELAY"],
    "waitjob": ["TIMEOUT"],
    "qpolicy": [
        "SET",
        "DEL",
        "LIST",
        "GET",
        "MATCH",
        "q*",
        "replicate",
        "retry",
        "ttl",
        "delay",
        "maxlen",
        "priority",
        "deadletter",
        "max-nacks",
        "max-deliveries",
        "backoff",
        "backoff-base",
        "backoff-cap",
        "fixed",
        "exponential",
        "overflow",
        "drop-oldest",
        "refuse",
    ],
    "cron": [
        "SET",
        "DEL",
        "LIST",
        "GET",
        "EVERY",
        "SCHEDULE",
        "*/5 * * * *",
        "0 9 * * MON-FRI",
        "*/2 * * * * *",
        "61 * * * *",
        "0 0 30 2 *",
        "REPLICATE",
        "RETRY",
        "TTL",
        "DELAY",
        "MAXLEN",
        "PRIORITY",
        "ASYNC",
        "DEDUP",
    ],
    "getjob": ["NOHANG", "TIMEOUT", "COUNT", "WITHCOUNTERS", "WITHCLAIM", "TAG", "FROM"],
    "jscan": [
        "COUNT",
        "BUSYLOOP",
        "QUEUE",
        "STATE",
        "PRIORITY",
        "REPLY",
        "id",
        "all",
        "queued",
        "active",
        "acked",
        "wait-repl",
        "waiting",
    ],
    "qscan": ["COUNT", "BUSYLOOP", "MINLEN", "MAXLEN", "IMPORTRATE"],
    "pause": ["in", "out", "all", "none", "state", "bcast"],
    "cluster": ["MYID", "NODES", "INFO", "LEAVING", "yes", "no", "MEET", "FORGET", "RESET"],
    "client": [
        "LIST",
        "KILL",
        "SETNAME",
        "GETNAME",
        "PAUSE",
        "REPLY",
        "ON",
        "OFF",
        "SKIP",
        "ID",
        "TYPE",
        "ADDR",
        "SKIPME",
        "normal",
        "yes",
        "no",
    ],
    "slowlog": ["GET", "LEN", "RESET"],
    "hello": ["2", "3", "AUTH", "SETNAME", "default", "worker-1"],
    "latency": ["LATEST", "HISTORY", "GRAPH", "DOCTOR", "RESET", "command"],
    "command": ["INFO", "COUNT", "addjob", "nosuch"],
    "info": [
        "server",
        "clients",
        "memory",
        "jobs",
        "queues",
        "persistence",
        "stats",
        "cpu",
        "commandstats",
        "extensions",
        "all",
        "default",
        "nosuch",
    ],
    "config": ["GET", "RESETSTAT", "*", "maxmemory", "hz", "port"],
    "debug": ["ERROR", "STRUCTSIZE", "FLUSHALL"],
    "acl": [
        *("SETUSER", "GETUSER", "DELUSER", "LIST", "USERS", "WHOAMI", "CAT", "LOG", "SAVE"),
        *("LOAD", "HELP", "RESET", "alice", "default", "produce", "on", "off", ">pw", "<pw"),
        *("nopass", "resetpass", "+@all", "-@all", "+addjob", "-getjob", "+@produce", "~q*"),
        *("%R~q0", "%W~q1", "%RW~*", "allqueues", "resetqueues", "reset", "+acl|whoami"),
        *("allcommands", "nocommands", "#" + "ab" * 32, "!" + "ab" * 32, "-client|kill"),
    ],
    "shutdown": ["REWRITE-AOF", "NOSAVE"],
    "observe": [
        "NODE",
        "QUEUES",
        "JOBS",
        "JOB",
        "SORT",
        "name",
        "len",
        "activity",
        "AFTER",
        "COUNT",
        "PREFIX",
        "OFFSET",
        "1000",
        "1001",
    ],
}
NUMBERS = [
    "0",
    "1",
    "-1",
    "2",
    "5",
    "9",
    "10",
    "100",
    "65535",
    "65536",
    "86400",
    "999999999999",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "",
    "+3",
    " 5",
    "5 ",
    "0x10",
    "1e3",
    "1.5",
    "abc",
    "007",
]
SKIPPED = {"monitor", "shutdown"}  # need a real connection / would stop the process


def _harness_state() -> tuple[Harness, ServerState]:
    h = Harness()
    config = Config()
    state = new_state(config, h.node)
    return h, state


H, STATE = _harness_state()
CLIENT = RecordingClient(1)
STATE.add_client(CLIENT)
SEED_IDS: list[bytes] = []


def _seed() -> None:
    for i in range(20):
        reply = STATE.execute(CLIENT, [b"ADDJOB", b"q%d" % (i % 3), b"body%d" % i, b"0"])
        SEED_IDS.append(reply[1:-2])


_seed()


def _job_ids() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.sampled_from(SEED_IDS),
        st.just(b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"),
        st.binary(min_size=38, max_size=42),
        st.builds(
            lambda s: b"D-" + s[:8] + b"-" + s[8:32] + b"-" + s[32:36],
            st.binary(min_size=36, max_size=36),
        ),
    )


def _tokens(name: str) -> st.SearchStrategy[bytes]:
    words = KEYWORDS.get(name, [])
    keyword = st.sampled_from(words + [w.lower() for w in words] or ["x"]).map(str.encode)
    return st.one_of(
        keyword,
        keyword,
        st.sampled_from(NUMBERS).map(str.encode),
        st.sampled_from(QUEUE_NAMES),
        _job_ids(),
        st.binary(max_size=12),
    )


def _well_formed(reply: bytes) -> bool:
    reader = hiredis.Reader()
    reader.feed(reply)
    first = reader.gets()
    return first is not False and reader.gets() is False


QUEUE_NAMES = [b"q0", b"q1", b"q2", b"other", b""]


def _check_invariants() -> None:
    """Queues and registry agree, for the queues the fuzzer uses."""
    node = H.node
    assert node.used_memory >= NODE_OVERHEAD
    for name in QUEUE_NAMES:
        queue = node.queues.get(name)
        if queue is None:
            continue
        for job in queue.jobs:
            assert job.state == QUEUED
            assert node.jobs.get(job.id) is job
            assert job.queue == queue.name
    for jid in SEED_IDS:
        job = node.jobs.get(jid)
        if job is not None and job.state == QUEUED:
            assert job in list(node.queues.get(job.queue).jobs)
    for (queue_name, key), job in node.dedup_index.items():
        assert node.jobs.get(job.id) is job and (job.queue, job.dedup) == (queue_name, key)
    for job in node.jobs.values():
        if job.waiting:
            assert job.state != QUEUED and job.qtime == 0
            assert all(job in node.deps.waits[dep].jobs for dep in job.extra.after)
        if job.extra is not None and job.extra.log is not None:
            assert 0 < len(job.extra.log) <= progress.MAX_ENTRIES
    for tag in node.tags.tags.values():  # a delivery is recorded once per tag
        assert len(set(tag.ids)) == len(tag.ids)
    for wait in node.deps.waits.values():  # a WAITJOB client answered or gone leaves
        assert all(client.blocked == BLOCK_WAITJOB for client in wait.clients)


def _settle(client: RecordingClient, reply: bytes | None) -> None:
    """Check one command's reply, release its client if it blocked, then the node."""
    if reply is None:
        # Blocked (GETJOB/ADDJOB) or a suppressed reply: release the client.
        H.node.client_gone(client)
    else:
        assert _well_formed(reply), reply
    client.reply_mode = 0
    H.node.serve_blocked_clients()
    _check_invariants()


def _forget_users() -> None:
    for name in list(H.node.acl.records):
        H.node.acl.delete(name)


COMMANDS = sorted({cmd.name for cmd in STATE.commands.values()} - SKIPPED)


@pytest.mark.parametrize("name", COMMANDS)
def test_command_arguments_never_break_the_node(name):
    @settings(
        max_examples=examples(1000),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        database=None,
    )
    @given(st.lists(_tokens(name), max_size=8), st.booleans())
    def run(args: list[bytes], upper: bool) -> None:
        client = RecordingClient(2)
        if (
            name == "debug"
            and args
            and args[0].lower() not in (b"error", b"structsize", b"flushall", b"nosuch")
        ):
            return  # DEBUG SLEEP/SEGFAULT/RESTART act on the process, not the parser
        argv = [name.upper().encode() if upper else name.encode(), *args]
        reply = STATE.execute(client, argv)
        if name == "acl":
            _forget_users()  # (the next examples run as the unrestricted default user)
        _settle(client, reply)
        if len(H.node.jobs) < 5:
            SEED_IDS.clear()
            _seed()

    run()


@settings(max_examples=examples(1000), database=None)
@given(st.lists(_tokens("hello"), max_size=6), st.sampled_from([b"", b"pw"]))
def test_hello_then_any_reply_is_well_formed(args: list[bytes], password: bytes) -> None:
    """HELLO's arguments (with and without a requirepass), then replies that hold
    nulls and maps: whatever protocol the connection ended in, each is one whole
    reply, RESP3 exactly when a HELLO 3 succeeded."""
    STATE.config.requirepass = password.decode()
    try:
        client = RecordingClient(3)
        reply = STATE.execute(client, [b"HELLO", *args])
        assert reply is not None and _well_formed(reply), reply
        succeeded = not reply.startswith(b"-")
        assert client.resp3 == (succeeded and args[:1] == [b"3"])
        if password:  # (without one, HELLO AUTH default <anything> authenticates too)
            assert client.authenticated == succeeded
        if password and not succeeded:
            return
        for argv in (
            [b"SHOW", SEED_IDS[0]],
            [b"SHOW", b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"],
            [b"GETJOB", b"NOHANG", b"FROM", b"nothing-here"],
        ):
            reply = STATE.execute(client, argv)
            assert reply is not None and _well_formed(reply), reply
            resp2_only, resp3_only = (b"$-1", b"*-1"), (b"%", b"_")
            assert not reply.startswith(resp2_only if client.resp3 else resp3_only), reply
    finally:
        STATE.config.requirepass = ""


@settings(max_examples=examples(1500), database=None)
@given(st.lists(_tokens("observe"), max_size=8))
def test_observe_answers_json_or_an_error(args):
    """OBSERVE's reply is an error, a null (no such job) or one bulk string of JSON."""
    reply = STATE.execute(RecordingClient(2), [b"OBSERVE", *args])
    reader = hiredis.Reader()
    reader.feed(reply)
    value = reader.gets()
    if isinstance(value, bytes):
        json.loads(value.decode())
    else:
        assert value is None or isinstance(value, hiredis.ReplyError), value


RULE_WORDS = KEYWORDS["acl"][10:]


@settings(max_examples=examples(1500), database=None)
@given(
    st.lists(
        st.one_of(st.sampled_from(RULE_WORDS).map(str.encode), st.binary(max_size=10)),
        max_size=8,
    )
)
def test_setuser_rules_never_break_and_round_trip_through_acl_list(rules: list[bytes]) -> None:
    """Any rules: ACL SETUSER answers OK or an error; what it wrote, as ACL LIST prints
    it, applied to a fresh user, prints the same (the parser round-trips)."""
    try:
        reply = STATE.execute(CLIENT, [b"ACL", b"SETUSER", b"fuzz", *rules])
        assert reply is not None and _well_formed(reply), reply
        if reply != b"+OK\r\n":
            assert reply.startswith(b"-ERR"), reply
            return
        line = _acl_list_line(b"fuzz")
        words = line.split(b" ")[2:]
        assert STATE.execute(CLIENT, [b"ACL", b"SETUSER", b"copy", *words]) == b"+OK\r\n"
        assert _acl_list_line(b"copy").split(b" ")[2:] == words
        got = STATE.execute(CLIENT, [b"ACL", b"GETUSER", b"fuzz"])
        assert got is not None and _well_formed(got)
    finally:
        _forget_users()


def _acl_list_line(user: bytes) -> bytes:
    reader = hiredis.Reader()
    reader.feed(STATE.execute(CLIENT, [b"ACL", b"LIST"]))
    [line] = [entry for entry in reader.gets() if entry.split(b" ")[1] == user]
    return line


@settings(max_examples=examples(1500), database=None)
@given(
    st.sampled_from(["+@all", "+@consume", "+@produce", "+@read", "+show", "+jscan"]),
    st.sampled_from(["%R~q0", "%W~q1", "~q*", "%RW~other"]),
    st.sampled_from(COMMANDS),
    st.data(),
)
def test_a_restricted_user_gets_one_well_formed_reply(commands, queues, name, data) -> None:
    """A connection of a restricted user, any command and arguments: one reply, an
    answer or an error (-NOPERM among them), never an exception."""
    if name in ("debug", "acl", "config", "client", "cluster"):
        return  # (they act on the process, or change the users under the test)
    assert STATE.execute(CLIENT, [b"ACL", b"SETUSER", b"r", b"on", b"nopass",
                                  commands.encode(), queues.encode()]) == b"+OK\r\n"  # fmt: skip
    try:
        client = RecordingClient(4)
        STATE.add_client(client)
        assert STATE.execute(client, [b"AUTH", b"r", b"x"]) == b"+OK\r\n"
        argv = [name.encode(), *data.draw(st.lists(_tokens(name), max_size=6))]
        _settle(client, STATE.execute(client, argv))
        STATE.remove_client(client)
    finally:
        _forget_users()


TAG_NAMES = [b"t0", b"t1", b"x" * 256, b"x" * 257, b""]
_TAG_OPS = st.one_of(
    st.tuples(
        st.just(b"GETJOB"), st.sampled_from([b"NOHANG", b"WITHCOUNTERS"]),
        st.sampled_from([b"COUNT", b"NOHANG"]), st.sampled_from([b"1", b"3", b"50", b"0", b"x"]),
        st.just(b"TAG"), st.sampled_from(TAG_NAMES), st.just(b"FROM"), st.sampled_from(QUEUE_NAMES),
    ),
    st.tuples(
        st.sampled_from([b"ACKJOB", b"WORKING"]), st.just(b"TAG"), st.sampled_from(TAG_NAMES)
    ),
    st.tuples(st.just(b"NACK"), st.sampled_from(SEED_IDS or [b"x"])),
    st.tuples(st.just(b"ADDJOB"), st.sampled_from(QUEUE_NAMES[:3]), st.just(b"b"), st.just(b"0")),
)  # fmt: skip


@settings(max_examples=examples(1000), database=None)
@given(st.lists(_TAG_OPS, max_size=12), st.integers(0, 400_000))
def test_tagged_deliveries_keep_the_node_consistent(ops, advance_ms):
    """GETJOB TAG, ACKJOB TAG and WORKING TAG interleaved with requeues and time
    passing: one well-formed reply each, no delivery recorded twice in a tag."""
    client = RecordingClient(3)
    for argv in ops:
        reply = STATE.execute(client, list(argv))
        assert reply is not None and _well_formed(reply), (argv, reply)
        H.clock.advance(advance_ms // max(1, len(ops)))
        H.node.process_jobs()
        H.node.cron()
        _check_invariants()
