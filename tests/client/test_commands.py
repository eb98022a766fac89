"""Command builders (arguments, validation, retry class) and reply decoders."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disquette.client import commands
from disquette.client.calls import TRYAGAIN_PATIENCE, Retry
from disquette.client.errors import (
    JobCancelledError,
    LogFullError,
    StaleClaimError,
    TryAgainError,
    error_from_reply,
)
from disquette.client.models import (
    Backoff,
    ClusterNode,
    CronSchedule,
    Hello,
    Job,
    JobInfo,
    JobOutcome,
    Policy,
    ProgressEntry,
    QueueStat,
    parse_info,
)

JOB = "D-aaaaaaaa-" + "x" * 24 + "-05a1"


def test_add_job_arguments():
    c = commands.add_job(
        "q", b"body", timeout=0.0015, replicate=2, delay=1, retry=3, ttl=60, maxlen=9, async_=True
    )
    assert c.args == (
        b"ADDJOB", b"q", b"body", b"2", b"REPLICATE", b"2", b"DELAY", b"1",
        b"RETRY", b"3", b"TTL", b"60", b"MAXLEN", b"9", b"ASYNC",
    )  # fmt: skip
    assert c.retry is Retry.NEVER and c.block is None
    assert commands.add_job("q", "é").args == (b"ADDJOB", b"q", "é".encode(), b"5000")
    assert commands.add_job("q", b"", timeout=None).args[3] == b"0"
    assert commands.add_job("q", b"", timeout=None).block == math.inf
    assert commands.add_job("q", b"", replicate=1).block is None
    # 0 is no limit, as ADDJOB's 0 on the command line (it raised ValueError).
    assert commands.add_job("q", b"", timeout=0).args[3] == b"0"
    assert commands.add_job("q", b"", timeout=0).block == math.inf
    for bad in (-1, math.inf):
        with pytest.raises(ValueError):
            commands.add_job("q", b"", timeout=bad)


def test_get_jobs_arguments():
    c = commands.get_jobs("a", "b", count=5, timeout=0.25, nohang=True, with_counters=True)
    assert c.args == (
        b"GETJOB", b"NOHANG", b"TIMEOUT", b"250", b"COUNT", b"5", b"WITHCOUNTERS",
        b"FROM", b"a", b"b",
    )  # fmt: skip
    assert c.fetch and c.retry is Retry.ON_REFUSAL and c.block is None
    assert commands.get_jobs("q").args == (b"GETJOB", b"FROM", b"q")
    assert commands.get_jobs("q").block == math.inf
    assert commands.get_jobs("q", timeout=2).block == 2
    with pytest.raises(ValueError):
        commands.get_jobs()


@pytest.mark.parametrize(
    ("builder", "name", "retry", "routed"),
    [
        (commands.ack, b"ACKJOB", Retry.ALWAYS, True),
        (commands.fast_ack, b"FASTACK", Retry.ALWAYS, True),
        (commands.nack, b"NACK", Retry.ON_REFUSAL, True),
        (commands.enqueue, b"ENQUEUE", Retry.ON_REFUSAL, False),
        (commands.dequeue, b"DEQUEUE", Retry.ON_REFUSAL, False),
        (commands.del_job, b"DELJOB", Retry.ALWAYS, False),
    ],
)
def test_job_id_commands(builder, name, retry, routed):
    c = builder(JOB, JOB)
    assert c.args == (name, JOB.encode(), JOB.encode())
    assert c.retry is retry
    assert c.route == ((JOB, JOB) if routed else ())
    assert c.decode(2) == 2


def test_scans_build_pages_with_filters():
    scan = commands.qscan(count=10, busyloop=True, minlen=1, maxlen=5, import_rate=2)
    assert scan._page(7).args == (
        b"QSCAN", b"7", b"COUNT", b"10", b"BUSYLOOP",
        b"MINLEN", b"1", b"MAXLEN", b"5", b"IMPORTRATE", b"2",
    )  # fmt: skip
    jscan = commands.jscan(queue="q", states=["queued", "ACKED"])
    assert jscan._page(0).args == (
        b"JSCAN", b"0", b"QUEUE", b"q", b"STATE", b"queued", b"STATE", b"ACKED", b"REPLY", b"id",
    )  # fmt: skip
    with pytest.raises(ValueError):
        commands.jscan(states=["lost"])
    with pytest.raises(ValueError):
        commands.jscan(reply="some")


def test_pause_validates_options():
    assert commands.pause("q", "in", "bcast").args == (b"PAUSE", b"q", b"in", b"bcast")
    with pytest.raises(ValueError):
        commands.pause("q")
    with pytest.raises(ValueError):
        commands.pause("q", "sideways")


def test_execute_retry_class_by_command_name():
    assert commands.execute("qlen", "q").retry is Retry.ALWAYS
    assert commands.execute("ADDJOB", "q", "b", 0).retry is Retry.NEVER
    assert commands.execute("nack", JOB).retry is Retry.ON_REFUSAL
    assert commands.execute("getjob", "from", "q").block == math.inf
    with pytest.raises(ValueError):
        commands.execute()


def test_cluster_leaving_reply():
    assert commands.cluster_leaving().decode(b"yes") is True
    assert commands.cluster_leaving().decode(b"no") is False
    assert commands.cluster_leaving(True).args == (b"CLUSTER", b"LEAVING", b"yes")


def test_job_from_getjob_reply_with_and_without_counters():
    assert Job.from_reply([b"q", JOB.encode(), b"b"]) == Job("q", JOB, b"b")
    item = [b"q", JOB.encode(), b"b", b"nacks", 2, b"additional-deliveries", 3]
    job = Job.from_reply(item)
    assert (job.nacks, job.additional_deliveries, job.node_prefix) == (2, 3, "aaaaaaaa")


SHOW_REPLY = [
    b"id", JOB.encode(), b"queue", b"q", b"state", b"queued", b"repl", 1, b"ttl", 10,
    b"ctime", 5, b"delay", 0, b"retry", 3, b"nacks", 1, b"additional-deliveries", 0,
    b"nodes-delivered", [b"a" * 40], b"nodes-confirmed", [], b"next-requeue-within", 99,
    b"next-awake-within", None, b"body", b"x",
]  # fmt: skip


def test_show_reply():
    info = JobInfo.from_reply(SHOW_REPLY)
    assert info.queue == "q" and info.retry == 3 and info.nodes_delivered == ("a" * 40,)
    assert info.next_requeue_within == 99 and info.next_awake_within is None and info.body == b"x"
    assert commands.show(JOB).decode(None) is None


def test_qstat_reply():
    reply = [
        b"name", b"q", b"len", 1, b"age", 2, b"idle", 3, b"blocked", 0, b"import-from", [b"n"],
        b"import-rate", 4, b"jobs-in", 5, b"jobs-out", 6, b"pause", b"none",
    ]  # fmt: skip
    assert QueueStat.from_reply(reply) == QueueStat("q", 1, 2, 3, 0, ("n",), 4, 5, 6, "none")


def test_hello_reply():
    h = Hello.from_reply([1, b"a" * 40, [b"a" * 40, b"", b"7711", b"1"]])
    assert h.myself.port == 7711 and h.myself.priority == 1 and h.myself.host == ""


def test_cluster_nodes_reply():
    text = b"aaa 127.0.0.1:7711 myself 0 0 connected\nbbb :7712 fail?,leaving 12 13 disconnected\n"
    a, b = ClusterNode.parse_nodes(text)
    assert a.flags == ("myself",) and a.address == "127.0.0.1:7711"
    assert b.host == "" and b.flags == ("fail?", "leaving") and b.ping_sent == 12
    assert a.release is None and a.bus_protocol is None  # Disque's (or 0.1.0's) lines


def test_cluster_nodes_reply_with_versions():
    text = (
        b"aaa 127.0.0.1:7711 myself 0 0 connected release=0.2.0 bus=2\n"
        b"bbb :7712 noflags 0 0 connected release=0.1.0 bus=1\n"
        b"ccc :7713 noflags 0 0 connected release=- bus=-\n"
        b"ddd :7714 noflags 0 0 connected release=0.9.0 bus=9:refused\n"
    )
    a, b, c, d = ClusterNode.parse_nodes(text)
    assert (a.release, a.bus_protocol, a.link_state) == ("0.2.0", 2, "connected")
    assert (b.release, b.bus_protocol) == ("0.1.0", 1)
    assert (c.release, c.bus_protocol) == (None, None)
    assert (d.release, d.bus_protocol) == ("0.9.0", 9)


def test_info_parsing():
    info = parse_info(
        b"# Server\r\ndisque_version:1.0-rc1\r\nuptime_in_seconds:5\r\n\r\n"
        b"# Memory\r\nmem_fragmentation_ratio:1.5\r\n"
        b"# Commandstats\r\ncmdstat_ping:calls=2,usec=10,usec_per_call=5.00\r\n"
    )
    assert info["disque_version"] == "1.0-rc1"
    assert info["uptime_in_seconds"] == 5
    assert info["mem_fragmentation_ratio"] == 1.5
    assert info["cmdstat_ping"] == {"calls": 2, "usec": 10, "usec_per_call": 5.0}


# ---------------------------------------------------------------------- disquette's extensions


def test_add_job_priority_and_dedup():
    c = commands.add_job("q", b"b", priority=7, dedup="key", async_=True)
    assert c.args == (
        b"ADDJOB", b"q", b"b", b"5000", b"PRIORITY", b"7", b"ASYNC", b"DEDUP", b"key",
    )  # fmt: skip
    assert c.retry is Retry.ALWAYS and c.sticky
    plain = commands.add_job("q", b"b", priority=0)
    assert plain.args[-2:] == (b"PRIORITY", b"0")
    assert plain.retry is Retry.NEVER and not plain.sticky
    random_key = commands.add_job("q", b"b", dedup=True).args[-1]
    assert len(random_key) == 32 and int(random_key, 16) >= 0
    assert random_key != commands.add_job("q", b"b", dedup=True).args[-1]
    assert b"DEDUP" not in commands.add_job("q", b"b", dedup=False).args


def test_tryagain_patience_follows_the_addjob_timeout():
    assert commands.add_job("q", b"", dedup="k", timeout=2).patience == 2
    assert commands.add_job("q", b"", dedup="k", timeout=None).patience == TRYAGAIN_PATIENCE
    assert commands.add_job("q", b"", dedup="k", async_=True).patience == TRYAGAIN_PATIENCE
    assert commands.add_job("q", b"").patience == 0


def dedup_keys(call) -> list[bytes | None]:
    return [c.args[-1] if c.sticky else None for c in call.commands]


def test_add_jobs_dedup_keys_per_body():
    bodies = [b"a", b"b", b"a"]
    assert dedup_keys(commands.add_jobs("q", bodies)) == [None, None, None]
    keys = dedup_keys(commands.add_jobs("q", bodies, dedup=True))
    assert len(set(keys)) == 3
    assert dedup_keys(commands.add_jobs("q", bodies, dedup=lambda b: b.upper())) == [
        b"A", b"B", b"A",
    ]  # fmt: skip
    assert dedup_keys(commands.add_jobs("q", bodies, dedup=["1", "2", 3])) == [b"1", b"2", b"3"]
    with pytest.raises(ValueError, match="fewer DEDUP keys"):
        dedup_keys(commands.add_jobs("q", bodies, dedup=["1"]))
    with pytest.raises(TypeError):
        commands.add_jobs("q", bodies, dedup="one key for all")
    c = next(iter(commands.add_jobs("q", [b"x"], priority=9, dedup=True).commands))
    assert c.args[4:6] == (b"PRIORITY", b"9") and c.retry is Retry.ALWAYS


def test_execute_addjob_with_a_dedup_key_is_resent():
    c = commands.execute("addjob", "q", "body", 0, "dedup", "k")
    assert c.retry is Retry.ALWAYS and c.sticky
    assert not commands.execute("ADDJOB", "q", "DEDUP", 0).sticky  # the body, not an option
    assert commands.execute("QPOLICY", "LIST").retry is Retry.ALWAYS


def test_jscan_priority_filter():
    page = commands.jscan(queue="q", priority=3)._page(0)
    assert page.args == (b"JSCAN", b"0", b"QUEUE", b"q", b"PRIORITY", b"3", b"REPLY", b"id")


def test_qpolicy_arguments():
    c = commands.qpolicy_set(
        "slow", "emails-*", retry=60, priority=2, deadletter="dead", max_nacks=5, max_deliveries=9
    )
    assert c.args == (
        b"QPOLICY", b"SET", b"slow", b"emails-*", b"retry", b"60", b"priority", b"2",
        b"deadletter", b"dead", b"max-nacks", b"5", b"max-deliveries", b"9",
    )  # fmt: skip
    assert commands.qpolicy_del("slow").args == (b"QPOLICY", b"DEL", b"slow")
    assert commands.qpolicy_del("slow").decode(1) is True
    assert commands.qpolicy_del("slow").decode(0) is False
    assert commands.qpolicy_get("slow").args == (b"QPOLICY", b"GET", b"slow")
    assert commands.qpolicy_match("emails-x").args == (b"QPOLICY", b"MATCH", b"emails-x")
    assert commands.qpolicy_list().args == (b"QPOLICY", b"LIST")


POLICY_ENTRY = [b"slow", b"emails-*", [b"retry", 60, b"deadletter", b"dead", b"max-nacks", 5]]


def test_policy_reply():
    policy = Policy.from_reply(POLICY_ENTRY)
    assert policy == Policy("slow", "emails-*", {"retry": 60, "deadletter": "dead", "max_nacks": 5})
    assert commands.qpolicy_get("slow").decode(None) is None
    assert commands.qpolicy_match("q").decode(POLICY_ENTRY) == policy
    assert commands.qpolicy_list().decode([POLICY_ENTRY, POLICY_ENTRY]) == [policy, policy]
    again = commands.qpolicy_set(policy.name, policy.pattern, **policy.options)  # round trip
    assert again.args[4:] == (b"retry", b"60", b"deadletter", b"dead", b"max-nacks", b"5")


def test_show_reply_with_disquette_fields():
    origin = "D-bbbbbbbb-" + "y" * 24 + "-05a1"
    reply = [
        *SHOW_REPLY, b"live-copies", 1, b"priority", 4, b"dedup", origin.encode(),
        b"origin-id", origin.encode(), b"origin-queue", b"emails", b"origin-nacks", 6,
        b"origin-additional-deliveries", 2,
    ]  # fmt: skip
    info = JobInfo.from_reply(reply)
    assert (info.priority, info.dedup, info.origin_id, info.origin_queue) == (
        4, origin, origin, "emails",
    )  # fmt: skip
    assert (info.origin_nacks, info.origin_additional_deliveries) == (6, 2)
    plain = [*SHOW_REPLY, b"live-copies", 1, b"priority", 0, b"dedup", None]
    plain += [b"origin-id", None, b"origin-queue", None, b"origin-nacks", None]
    plain += [b"origin-additional-deliveries", None]
    info = JobInfo.from_reply(plain)
    assert info.priority == 0 and info.dedup is None and info.origin_id is None
    disque = JobInfo.from_reply(SHOW_REPLY)  # plain Disque: none of them
    assert disque.priority is None and disque.origin_queue is None


def test_qstat_reply_with_a_policy():
    reply = [
        b"name", b"q", b"len", 1, b"age", 2, b"idle", 3, b"blocked", 0, b"import-from", [],
        b"import-rate", 4, b"jobs-in", 5, b"jobs-out", 6, b"pause", b"none",
    ]  # fmt: skip
    assert QueueStat.from_reply([*reply, b"policy", b"slow"]).policy == "slow"
    assert QueueStat.from_reply([*reply, b"policy", None]).policy is None
    assert QueueStat.from_reply(reply).policy is None


def test_tryagain_error_class():
    assert isinstance(error_from_reply("TRYAGAIN later"), TryAgainError)


def test_dedup_retries_client_option_sets_a_key_by_default():
    from disquette.client import Client

    client = Client("127.0.0.1:1", dedup_retries=True)
    assert client.config.dedup_retries
    p = client.pipeline().add_job("q", b"x").add_job("q", b"y", dedup=None).add_job("q", b"z")
    keys = [c.args[-1] if c.sticky else None for c in p._queued]
    assert len(keys[0]) == 32 and keys[1] is None and len(keys[2]) == 32
    assert client.on_node("127.0.0.1:2").pipeline().add_job("q", b"x")._queued[0].sticky
    assert not Client("127.0.0.1:1").pipeline().add_job("q", b"x")._queued[0].sticky


# ---------------------------------------------------------------------- coordination (issue 16)

OTHER = "D-bbbbbbbb-" + "y" * 24 + "-05a1"


def test_add_job_after_and_if_gone():
    c = commands.add_job("q", b"b", after=[JOB, OTHER], if_gone="release", dedup="k")
    assert c.args == (
        b"ADDJOB", b"q", b"b", b"5000", b"AFTER", JOB.encode(), b"AFTER", OTHER.encode(),
        b"IFGONE", b"release", b"DEDUP", b"k",
    )  # fmt: skip
    assert c.retry is Retry.ALWAYS and c.sticky  # the key still makes it resendable
    one = commands.add_job("q", b"b", after=JOB)  # one ID, not its characters
    assert one.args[4:] == (b"AFTER", JOB.encode()) and one.retry is Retry.NEVER
    job = Job("q", OTHER, b"parent", claim=3)
    assert commands.add_job("q", b"b", after=job).args[4:] == (b"AFTER", OTHER.encode())
    assert commands.add_job("q", b"b", after=[]).args == (b"ADDJOB", b"q", b"b", b"5000")
    with pytest.raises(ValueError, match="if_gone needs after"):
        commands.add_job("q", b"b", if_gone="fail")
    with pytest.raises(ValueError, match="'fail' or 'release'"):
        commands.add_job("q", b"b", after=JOB, if_gone="drop")
    many = [f"D-aaaaaaaa-{n:024d}-05a1" for n in range(257)]
    with pytest.raises(ValueError, match="at most 256"):
        commands.add_job("q", b"b", after=many)
    assert len(commands.add_job("q", b"b", after=many[:256] * 2).args) == 4 + 2 * 512


def test_add_jobs_after_applies_to_every_job():
    call = commands.add_jobs("q", [b"1", b"2"], after=JOB, if_gone="fail")
    for c in call.commands:
        assert c.args[4:] == (b"AFTER", JOB.encode(), b"IFGONE", b"fail")
    with pytest.raises(ValueError):
        commands.add_jobs("q", [b"1"], if_gone="fail")


def test_compound_calls_check_their_arguments_before_sending():
    with pytest.raises(ValueError, match="1 to 256 parents"):
        commands.add_fan_in("q", [], then=("r", b"x"))
    with pytest.raises(ValueError, match="1 to 256 parents"):
        commands.add_fan_in("q", [b"%d" % n for n in range(257)], then=("r", b"x"))
    with pytest.raises(ValueError, match="fewer DEDUP keys"):  # parents' keys, then then's
        commands.add_fan_in("q", [b"a", b"b"], then=("r", b"x"), dedup=["1", "2"])
    with pytest.raises(ValueError):
        commands.add_chain("q", [b"a"], if_gone="never")
    with pytest.raises(ValueError, match="fewer DEDUP keys"):  # before anything is sent
        commands.add_chain("q", [b"a", b"b"], dedup=["1"])


def test_getjob_with_claim_and_the_claim_in_each_job():
    c = commands.get_jobs("q", with_counters=True, with_claim=True, nohang=True)
    assert c.args == (b"GETJOB", b"NOHANG", b"WITHCOUNTERS", b"WITHCLAIM", b"FROM", b"q")
    both = [b"q", JOB.encode(), b"body", b"nacks", 1, b"additional-deliveries", 2, b"claim", 7]
    claim_only = [b"q", JOB.encode(), b"body", b"claim", 3]
    assert c.decode([both, claim_only]) == [
        Job("q", JOB, b"body", 1, 2, 7),
        Job("q", JOB, b"body", claim=3),
    ]
    assert Job.from_reply([b"q", JOB.encode(), b"body"]).claim is None


def test_ack_and_nack_send_each_jobs_claim_after_its_id():
    claimed = Job("q", JOB, b"", claim=4)
    c = commands.ack(claimed, OTHER)
    assert c.args == (b"ACKJOB", JOB.encode(), b"CLAIM", b"4", OTHER.encode())
    assert c.route == (JOB, OTHER) and c.retry is Retry.ALWAYS
    assert c.part([OTHER]).args == (b"ACKJOB", OTHER.encode())
    assert c.part([JOB]).args == (b"ACKJOB", JOB.encode(), b"CLAIM", b"4")
    assert commands.ack(JOB, claim=2).args == (b"ACKJOB", JOB.encode(), b"CLAIM", b"2")
    assert commands.ack(claimed, claim=9).args[-1] == b"9"  # the argument wins
    plain = commands.ack(Job("q", JOB, b""), OTHER)  # no claim: the IDs alone
    assert plain.args == (b"ACKJOB", JOB.encode(), OTHER.encode()) and plain.route_args == ()
    n = commands.nack(claimed, Job("q", OTHER, b"", claim=1))
    assert n.args == (b"NACK", JOB.encode(), b"CLAIM", b"4", OTHER.encode(), b"CLAIM", b"1")
    assert n.retry is Retry.ON_REFUSAL
    with pytest.raises(ValueError, match="claim= goes with one job"):
        commands.ack(JOB, OTHER, claim=1)


def test_a_split_keeps_each_claim_with_its_id_even_for_a_repeated_id():
    c = commands.ack(Job("q", JOB, b"", claim=1), Job("q", JOB, b"", claim=2), OTHER)
    assert c.part([JOB, JOB]).args == (
        b"ACKJOB", JOB.encode(), b"CLAIM", b"1", JOB.encode(), b"CLAIM", b"2",
    )  # fmt: skip


def test_working_with_a_text_and_a_claim():
    assert commands.working(JOB).retry is Retry.ALWAYS
    c = commands.working(JOB, "50% done")
    assert c.args == (b"WORKING", JOB.encode(), b"50% done") and c.route == (JOB,)
    assert c.retry is Retry.ON_REFUSAL  # a lost reply is not resent: the text could log twice
    claimed = commands.working(Job("q", JOB, b"", claim=5), b"x")
    assert claimed.args == (b"WORKING", JOB.encode(), b"CLAIM", b"5", b"x")
    keepalive = commands.working(JOB, claim=6)
    assert keepalive.args == (b"WORKING", JOB.encode(), b"CLAIM", b"6")
    assert keepalive.retry is Retry.ALWAYS


def test_joblog_command_and_entries():
    c = commands.joblog(Job("q", JOB, b""))
    assert c.args == (b"JOBLOG", JOB.encode()) and c.route == (JOB,)
    assert c.retry is Retry.ALWAYS
    entries = c.decode([[1700000000123, b"a" * 40, b"step 1"], [1700000001000, b"b" * 40, b"\xff"]])
    assert entries == [
        ProgressEntry(1700000000.123, "a" * 40, "step 1"),
        ProgressEntry(1700000001.0, "b" * 40, "\udcff"),  # binary text survives
    ]
    assert round(entries[0].time * 1000) == 1700000000123
    assert c.decode([]) == []


def test_raw_working_with_a_text_is_not_resent_joblog_is():
    assert commands.execute("WORKING", JOB).retry is Retry.ALWAYS
    assert commands.execute("working", JOB, "claim", 3).retry is Retry.ALWAYS
    assert commands.execute("WORKING", JOB, "CLAIM", 3, "text").retry is Retry.ON_REFUSAL
    assert commands.execute("WORKING", JOB, "text").retry is Retry.ON_REFUSAL
    assert commands.execute("JOBLOG", JOB).retry is Retry.ALWAYS


def test_jscan_finds_waiting_jobs():
    page = commands.jscan(states=["waiting"])._page(0)
    assert page.args == (b"JSCAN", b"0", b"STATE", b"waiting", b"REPLY", b"id")


def test_show_reply_with_dependencies_progress_and_claim():
    entry = [1700000000123, b"c" * 40, b"half way"]
    reply = [*SHOW_REPLY]
    reply[5] = b"waiting"
    reply += [b"claim", 3, b"progress", [entry], b"waiting-for", [OTHER.encode()]]
    reply += [b"if-gone", b"fail"]
    info = JobInfo.from_reply(reply)
    assert info.state == "waiting" and info.waiting_for == (OTHER,) and info.if_gone == "fail"
    assert info.progress == (ProgressEntry(1700000000.123, "c" * 40, "half way"),)
    assert info.claim == 3
    disque = JobInfo.from_reply(SHOW_REPLY)
    assert (disque.waiting_for, disque.if_gone, disque.progress, disque.claim) == (None,) * 4


def test_stale_claim_and_log_full_errors():
    error = error_from_reply(f"STALECLAIM Job {JOB} was delivered again since claim 2 (now 5)")
    assert isinstance(error, StaleClaimError) and error.code == "STALECLAIM"
    assert (error.job_id, error.claim, error.current) == (JOB, 2, 5)
    odd = error_from_reply("STALECLAIM something else")
    assert isinstance(odd, StaleClaimError) and odd.claim is None and odd.current is None
    full = error_from_reply("LOGFULL The job's progress log is full (64 entries)")
    assert isinstance(full, LogFullError)


def test_the_methods_exist_where_they_can():
    from disquette.client import Client

    client = Client("127.0.0.1:1", dedup_retries=True)
    p = client.pipeline().working(JOB, "x").joblog(JOB).ack(Job("q", JOB, b"", claim=1))
    assert [c.args[0] for c in p._queued] == [b"WORKING", b"JOBLOG", b"ACKJOB"]
    with pytest.raises(AttributeError):
        p.add_chain  # noqa: B018 - several calls cannot be pipelined
    assert client._defaults["add_chain"] == client._defaults["add_fan_in"] == {"dedup": True}


# ---------------------------------------------------------------------- issue 24


def test_backoff_values_and_their_addjob_arguments():
    assert Backoff.of(("fixed", 30)) == Backoff.fixed(30) == Backoff.of("fixed:30")
    assert Backoff.of(" Exponential:1:60") == Backoff.exponential(1, 60)
    assert Backoff.of(Backoff.fixed(5)).args == (b"BACKOFF", b"fixed", b"5")
    c = commands.add_job("q", b"b", retry=9, backoff=("exponential", 2, 600))
    assert c.args[-5:] == (b"9", b"BACKOFF", b"exponential", b"2", b"600")
    for bad in (
        ("fixed",), ("fixed", 0), ("fixed", 1, 2), ("exponential", 5), ("exponential", 9, 3),
        ("linear", 1), ("fixed", "x"), "fixed", "fixed:1.5", ("fixed", 1 << 33),
    ):  # fmt: skip
        with pytest.raises(ValueError):
            commands.add_job("q", b"b", backoff=bad)
    ids = commands.add_jobs("q", [b"a"], backoff="fixed:3")
    assert [c.args[-3:] for c in ids.commands] == [(b"BACKOFF", b"fixed", b"3")]


def test_nack_delay_goes_after_the_ids_and_stays_on_every_part():
    c = commands.nack(JOB, Job("q", OTHER, b"", claim=2), delay=1.2)
    assert c.args == (
        b"NACK", JOB.encode(), OTHER.encode(), b"CLAIM", b"2", b"DELAY", b"2",
    )  # fmt: skip
    assert c.part([OTHER]).args == (b"NACK", OTHER.encode(), b"CLAIM", b"2", b"DELAY", b"2")
    assert commands.nack(JOB, delay=0).part([JOB]).args == (b"NACK", JOB.encode(), b"DELAY", b"0")
    assert commands.nack(JOB).args == (b"NACK", JOB.encode())
    for bad in (-1, math.inf, math.nan):
        with pytest.raises(ValueError):
            commands.nack(JOB, delay=bad)


def test_ack_with_a_result():
    c = commands.ack(Job("q", JOB, b"", claim=4), result="fini")
    assert c.args == (b"ACKJOB", JOB.encode(), b"CLAIM", b"4", b"RESULT", b"fini")
    assert c.retry is Retry.ALWAYS and c.route == (JOB,)
    assert commands.ack(JOB, result=b"").args == (b"ACKJOB", JOB.encode(), b"RESULT", b"")
    assert commands.ack(JOB, result=b"x" * commands.MAX_RESULT).args[-1] == b"x" * 65536
    with pytest.raises(ValueError, match="at most 65536 bytes"):
        commands.ack(JOB, result=b"x" * 65537)
    with pytest.raises(ValueError, match="one job"):
        commands.ack(JOB, OTHER, result=b"r")
    with pytest.raises(TypeError, match="bytes or str, not int"):
        commands.ack(JOB, result=3)  # type: ignore[arg-type]


def test_cancel_and_wait_commands():
    c = commands.cancel(JOB, Job("q", OTHER, b""))
    assert c.args == (b"CANCEL", JOB.encode(), OTHER.encode())
    assert c.retry is Retry.ALWAYS and c.route == (JOB, OTHER)
    with pytest.raises(ValueError):
        commands.wait(JOB, timeout=0)
    assert JobOutcome.from_reply([b"acked", b"r"]) == JobOutcome("acked", b"r")
    assert JobOutcome.from_reply([b"cancelled", None]).cancelled
    assert JobOutcome.from_reply(None) is None
    assert commands.execute("waitjob", JOB).block == math.inf
    assert commands.execute("WAITJOB", JOB).retry is commands.execute("CANCEL", JOB).retry
    assert commands.execute("CANCEL", JOB).retry is Retry.ALWAYS
    assert isinstance(error_from_reply("CANCELLED Job was cancelled"), JobCancelledError)


def test_policy_backoff_and_overflow_options():
    c = commands.qpolicy_set(
        "p", "q*", backoff="exponential", backoff_base=1, backoff_cap=60, overflow="drop-oldest"
    )
    assert c.args[4:] == (
        b"backoff", b"exponential", b"backoff-base", b"1", b"backoff-cap", b"60",
        b"overflow", b"drop-oldest",
    )  # fmt: skip
    entry = [b"p", b"q*", [b"backoff", b"fixed", b"backoff-base", b"5", b"overflow", b"refuse"]]
    policy = Policy.from_reply(entry)
    assert policy.options == {"backoff": "fixed", "backoff_base": 5, "overflow": "refuse"}
    assert commands.qpolicy_set("p", "q*", **policy.options).args[4:] == tuple(entry[2])
    with pytest.raises(ValueError):
        commands.qpolicy_set("p", "q*", backoff="linear")
    with pytest.raises(ValueError):
        commands.qpolicy_set("p", "q*", overflow="drop")


def test_a_job_waits_through_the_client_that_fetched_it():
    with pytest.raises(RuntimeError, match="fetched through a client"):
        Job("q", JOB, b"").result()


@given(st.one_of(st.text(max_size=30), st.tuples(st.text(max_size=12), st.integers())))
def test_any_backoff_spec_is_a_backoff_or_a_value_error(spec):
    try:
        backoff = Backoff.of(spec)
    except ValueError:
        return
    assert backoff.kind in ("fixed", "exponential") and 0 < backoff.base <= (1 << 32)
    text = ":".join([backoff.kind, *(a.decode() for a in backoff.args[2:])])
    assert Backoff.of(text) == backoff  # its text form says the same


def test_show_reads_a_jobs_backoff():
    reply = [*SHOW_REPLY, b"backoff", b"exponential 2 600"]
    assert JobInfo.from_reply(reply).backoff == Backoff.exponential(2, 600)
    reply[-1] = b"fixed 30"
    assert JobInfo.from_reply(reply).backoff == Backoff.fixed(30)
    assert JobInfo.from_reply(SHOW_REPLY).backoff is None


def test_a_pipeline_cannot_wait():
    from disquette.client import Client

    with pytest.raises(AttributeError):
        Client("127.0.0.1:1").pipeline().wait  # noqa: B018 - WAITJOB resends: a client call


def test_cron_set_arguments():
    c = commands.cron_set("beat", "beats", b"ping", every=60, replicate=2, retry=30, async_=True)
    assert c.args == (
        b"CRON", b"SET", b"beat", b"beats", b"ping", b"EVERY", b"60",
        b"REPLICATE", b"2", b"RETRY", b"30", b"ASYNC",
    )  # fmt: skip
    assert c.retry is Retry.ALWAYS and c.decode(b"OK") is None
    c = commands.cron_set("weekly", "reports", "monday", schedule="0 9 * * MON", priority=0)
    assert c.args[5:] == (b"SCHEDULE", b"0 9 * * MON", b"PRIORITY", b"0")
    for bad in ({}, {"every": 1, "schedule": "* * * * *"}, {"every": 0}, {"every": 1.5}):
        with pytest.raises(ValueError):
            commands.cron_set("s", "q", b"", **bad)
    assert commands.cron_del("beat").args == (b"CRON", b"DEL", b"beat")
    assert commands.cron_del("beat").decode(1) is True
    assert commands.cron_del("beat").decode(0) is False
    assert commands.cron_get("beat").args == (b"CRON", b"GET", b"beat")
    assert commands.cron_list().args == (b"CRON", b"LIST")
    assert commands.execute("CRON", "LIST").retry is Retry.ALWAYS


CRON_ENTRY = [b"beat", b"beats", b"ping", b"every", 60, [b"retry", 30, b"async", 1], 120, 0]


def test_cron_reply():
    beat = CronSchedule.from_reply(CRON_ENTRY)
    assert beat == CronSchedule(
        "beat", "beats", b"ping", 60, None, {"retry": 30, "async_": True}, 120, None
    )
    weekly = [b"weekly", b"r", b"", b"schedule", b"0 9 * * MON", [], 0, 1795000000]
    assert commands.cron_get("weekly").decode(weekly) == CronSchedule(
        "weekly", "r", b"", None, "0 9 * * MON", {}, None, 1795000000
    )
    assert commands.cron_get("nosuch").decode(None) is None
    assert commands.cron_list().decode([CRON_ENTRY, weekly])[0] == beat
    again = commands.cron_set(beat.name, beat.queue, beat.body, every=beat.every, **beat.options)
    assert again.args == (*commands.cron_set("beat", "beats", b"ping", every=60).args,
                          b"RETRY", b"30", b"ASYNC")  # fmt: skip


def test_policy_rate_and_concurrency():
    c = commands.qpolicy_set("slow", "slow:*", retry=60, rate=50, concurrency=10)
    assert c.args[4:] == (b"retry", b"60", b"rate", b"50", b"concurrency", b"10")
    policy = Policy.from_reply([b"slow", b"slow:*", [b"rate", 50, b"concurrency", 10]])
    assert policy.options == {"rate": 50, "concurrency": 10}
    assert commands.qpolicy_set("slow", "slow:*", **policy.options).args[4:] == (
        b"rate", b"50", b"concurrency", b"10",
    )  # fmt: skip


def test_qstat_reply_of_a_limited_queue():
    reply = [
        b"name", b"q", b"len", 1, b"age", 2, b"idle", 3, b"blocked", 0, b"import-from", [],
        b"import-rate", 4, b"jobs-in", 5, b"jobs-out", 6, b"pause", b"none", b"policy", b"slow",
    ]  # fmt: skip
    limited = [*reply, b"rate-share", 17, b"rate-tokens", 1, b"concurrency-share", 3]
    limited += [b"in-flight", 2, b"dropped-oldest", 9]
    stat = QueueStat.from_reply(limited)
    assert (stat.rate_share, stat.rate_tokens, stat.concurrency_share, stat.in_flight) == (
        17, 1, 3, 2,
    )  # fmt: skip
    assert stat.dropped_oldest == 9 and stat.jobs_on_disk is None
    assert QueueStat.from_reply([*reply, b"jobs-on-disk", 4]).jobs_on_disk == 4
    plain = QueueStat.from_reply(reply)
    assert plain.rate_share is plain.in_flight is plain.dropped_oldest is None
