"""Recurring jobs (CRON) and rate and concurrency limits (QPOLICY rate, concurrency)
through the client, against real server processes: one node, and a three-node
cluster for a schedule set on one node and read, fired and deleted elsewhere.

Nothing here waits on time: a tick's job is waited for with a blocking GETJOB
(deadline: DEADLINE), what crosses the cluster bus as a condition with a
deadline, and a limit is observed as a NOHANG GETJOB that gets nothing while
QSTAT says the node's share is taken.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disquette import Client, CronSchedule, Policy, ResponseError, aio
from tests.support.cluster import running_cluster
from tests.support.fuzz import examples
from tests.support.servers import wait_for

DEADLINE = 60.0


def without_ticks(schedule: CronSchedule | None) -> CronSchedule | None:
    """The schedule as it was set: its next and last ticks move with the clock."""
    if schedule is None:
        return None
    return dataclasses.replace(schedule, next_tick=None, last_fired=None)


def test_cron_set_get_list_and_del(client, qname):
    weekly, beat = qname + "-weekly", qname + "-beat"
    client.cron_set(weekly, qname, "monday", schedule="0 9 * * MON", retry=600, priority=3)
    client.cron_set(beat, qname, b"\x00ping", every=3600, replicate=1, async_=True)
    got = client.cron_get(weekly)
    assert without_ticks(got) == CronSchedule(
        weekly, qname, b"monday", None, "0 9 * * MON", {"retry": 600, "priority": 3}, None, None
    )
    assert got.next_tick is not None and got.next_tick % 60 == 0 and got.last_fired is None
    assert without_ticks(client.cron_get(beat)) == CronSchedule(
        beat, qname, b"\x00ping", 3600, None, {"replicate": 1, "async_": True}, None, None
    )
    mine = [s for s in client.cron_list() if s.queue == qname]
    assert [s.name for s in mine] == [beat, weekly]  # sorted by name
    # set again from what GET read: the same schedule
    client.cron_set(weekly, got.queue, got.body, schedule=got.schedule, **got.options)
    assert without_ticks(client.cron_get(weekly)) == without_ticks(got)
    assert client.cron_del(weekly) is True and client.cron_del(weekly) is False
    assert client.cron_get(weekly) is None
    assert client.cron_del(beat) is True


def test_cron_errors_are_the_servers(client, qname):
    with pytest.raises(ResponseError, match="bad cron expression"):
        client.cron_set(qname, qname, b"x", schedule="every monday")
    with pytest.raises(ResponseError, match="EVERY must be a number of seconds"):
        client.cron_set(qname, qname, b"x", every=1 << 40)
    with pytest.raises(ResponseError, match="REPLICATE must be between"):
        client.cron_set(qname, qname, b"x", every=60, replicate=0)
    with pytest.raises(ValueError, match="one of every="):
        client.cron_set(qname, qname, b"x")
    assert client.cron_get(qname) is None


def test_a_schedule_adds_a_job_per_tick(client, qname):
    client.cron_set(qname, qname, b"tick", every=1, retry=60)
    try:
        (job,) = client.get_jobs(qname, timeout=DEADLINE)
        assert job.body == b"tick"
        key = client.show(job.id).dedup  # cron:<name>:<tick>
        prefix, name, tick = key.split(":")
        assert (prefix, name) == ("cron", qname)
        wait_for(
            lambda: (client.cron_get(qname).last_fired or 0) >= int(tick),
            DEADLINE,
            what="the tick known fired",
        )
        client.ack(job)
        (later,) = client.get_jobs(qname, timeout=DEADLINE)  # the next tick's
        assert later.id != job.id and client.show(later.id).dedup > key
        client.ack(later)
    finally:
        client.cron_del(qname)


#: cron_set's ADDJOB options, within the server's ranges, a DELAY below the TTL (a day by
#: default); async_ comes back only when set. Ticks far apart: none fires in between.
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "replicate": st.integers(1, 3),
        "retry": st.integers(0, 3600),
        "ttl": st.integers(3601, 1 << 32),
        "delay": st.integers(0, 3600),
        "maxlen": st.integers(1, 1 << 62),
        "priority": st.integers(0, 9),
        "async_": st.just(True),
    },
)
TICKS = st.one_of(
    st.builds(dict, every=st.integers(60, 1 << 32)),
    st.builds(dict, schedule=st.sampled_from(["0 9 * * MON", "0 0 12 * * *", "0 0 1 1 *"])),
)


@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=64), tick=TICKS, options=OPTIONS)
def test_what_cron_set_sets_cron_get_reads(client, qname, body, tick, options):
    try:
        client.cron_set(qname, qname, body, **tick, **options)
    except ResponseError as exc:  # ADDJOB's rules (RETRY 0 wants REPLICATE 1): nothing set
        assert str(exc).startswith("ERR ") and client.cron_get(qname) is None
        return
    try:
        got = client.cron_get(qname)
    finally:
        client.cron_del(qname)
    assert (got.body, got.every, got.schedule, got.options) == (
        body, tick.get("every"), tick.get("schedule"), options,
    )  # fmt: skip


def test_the_asyncio_client_sets_reads_and_deletes_schedules(shared_server, qname):
    async def main() -> None:
        async with aio.Client(f"127.0.0.1:{shared_server.port}") as c:
            await c.cron_set(qname, qname, b"x", schedule="*/10 * * * * *", ttl=60)
            schedule = await c.cron_get(qname)
            assert schedule.schedule == "*/10 * * * * *" and schedule.options == {"ttl": 60}
            assert schedule.next_tick % 10 == 0
            assert qname in [s.name for s in await c.cron_list()]
            assert await c.cron_del(qname) is True

    asyncio.run(main())


# ---------------------------------------------------------------------- limits


def test_a_concurrency_limit_holds_jobs_back_until_an_ack(client, qname, policy):
    client.qpolicy_set(policy, qname + "*", concurrency=1, retry=60)
    assert client.qpolicy_get(policy) == Policy(
        policy, qname + "*", {"retry": 60, "concurrency": 1}
    )
    first, second = client.add_job(qname, b"a"), client.add_job(qname, b"b")
    (job,) = client.get_jobs(qname, count=2, timeout=DEADLINE)  # one slot: one job
    assert job.id == first
    throttled = client.info("extensions")["jobs_throttled"]
    assert client.get_jobs(qname, nohang=True) == []  # the queue looks empty
    stat = client.qstat(qname)
    assert (stat.len, stat.concurrency_share, stat.in_flight) == (1, 1, 1)
    assert stat.rate_share is None and stat.policy == policy
    extensions = client.info("extensions")
    assert extensions["jobs_throttled"] > throttled
    assert extensions["rate_limited_queues"] >= 1 and extensions["jobs_in_flight_limited"] >= 1
    client.ack(job)
    assert [j.id for j in client.get_jobs(qname, timeout=DEADLINE)] == [second]
    client.ack(second)


def test_a_rate_limit_serves_within_its_share(client, qname, policy):
    client.qpolicy_set(policy, qname + "*", rate=1, retry=60)
    assert client.qpolicy_match(qname).options == {"retry": 60, "rate": 1}
    ids = {client.add_job(qname, body) for body in (b"a", b"b")}
    got = set()
    while got != ids:  # one token at a time: each blocking GETJOB waits for the next
        got.update(j.id for j in client.get_jobs(qname, count=2, timeout=DEADLINE))
    stat = client.qstat(qname)
    assert stat.rate_share == 1 and stat.rate_tokens is not None
    assert stat.concurrency_share is None and stat.in_flight is None
    client.ack(*ids)


# ---------------------------------------------------------------------- a cluster


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path, 3) as c:
        yield c


def test_a_schedule_set_on_one_node_is_seen_fired_and_deleted_everywhere(cluster, qname):
    a, b, c = cluster.addresses
    with Client(cluster.addresses) as client:
        client.on_node(a).cron_set(qname, qname, b"tick", every=1, retry=60)
        expected = CronSchedule(qname, qname, b"tick", 1, None, {"retry": 60}, None, None)
        for node in (b, c):
            wait_for(
                lambda node=node: without_ticks(client.on_node(node).cron_get(qname)) == expected,
                DEADLINE,
                what=f"the schedule on {node}",
            )
            assert [s.name for s in client.on_node(node).cron_list()] == [qname]
        (job,) = client.get_jobs(qname, timeout=DEADLINE)  # fired by any node
        assert job.body == b"tick" and client.show(job.id).dedup.startswith(f"cron:{qname}:")
        client.ack(job)
        assert client.on_node(c).cron_del(qname) is True
        for node in (a, b):
            wait_for(
                lambda node=node: client.on_node(node).cron_get(qname) is None,
                DEADLINE,
                what=f"the schedule deleted on {node}",
            )
