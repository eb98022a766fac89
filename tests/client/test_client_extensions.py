"""disquette's extensions against a real node: priorities, DEDUP keys and the retries they
make safe, queue policies and the dead letters they make."""

from __future__ import annotations

import asyncio

import pytest

from disquette import Client, Policy, aio
from tests.client.proxy import running_proxy


def test_higher_priorities_are_served_first(client, qname):
    low = client.add_job(qname, b"low")
    high = client.add_job(qname, b"high", priority=9)
    assert client.show(high).priority == 9
    assert client.show(low).priority in (0, None)  # the server may leave defaults out
    assert [job.id for job in client.qpeek(qname, 2)] == [high, low]
    assert list(client.jscan(queue=qname, priority=9)) == [high]
    (info,) = client.jscan(queue=qname, priority=0, reply="all")
    assert info.id == low
    jobs = client.get_jobs(qname, count=2, nohang=True)
    assert [job.id for job in jobs] == [high, low]
    client.ack(high, low)


def test_a_dedup_key_adds_one_job(client, qname):
    first = client.add_job(qname, b"order 42", dedup="order-42")
    assert client.add_job(qname, b"order 42", dedup=b"order-42") == first
    info = client.show(first)
    assert info.dedup == "order-42" and info.origin_id is None
    assert client.qlen(qname) == 1
    other = client.add_job(qname, b"order 43", dedup=True)
    assert other != first and len(client.show(other).dedup) == 32
    assert client.add_job(qname + "-other", b"order 42", dedup="order-42") != first  # per queue


def test_add_jobs_with_keys(client, qname):
    ids = client.add_jobs(qname, [b"a", b"b", b"a"], dedup=lambda body: body)
    assert ids[0] == ids[2] != ids[1]
    assert client.add_jobs(qname, [b"x", b"y"], dedup=["a", "b"]) == ids[:2]
    assert client.qlen(qname) == 2


def test_dedup_retries_resend_an_addjob_whose_reply_was_lost(shared_server, qname):
    with (
        running_proxy(shared_server.port) as proxy,
        Client(f"127.0.0.1:{proxy.port}", dedup_retries=True) as c,
    ):
        c.ping()
        proxy.cut_next_reply()
        job_id = c.add_job(qname, b"x")  # no ReplyLostError: it was resent
        assert c.qlen(qname) == 1 and c.show(job_id).body == b"x"
        proxy.cut_next_reply()
        ids = c.add_jobs(qname, [b"%d" % n for n in range(50)], window=50)
        assert len(set(ids)) == 50 and c.qlen(qname) == 51


def test_the_asyncio_client_resends_them_too(shared_server, qname):
    async def main(port: int) -> None:
        async with aio.Client(f"127.0.0.1:{port}") as c:
            await c.ping()
            proxy.cut_next_reply()
            job_id = await c.add_job(qname, b"x", dedup=True)
            assert await c.qlen(qname) == 1
            assert (await c.show(job_id)).body == b"x"

    with running_proxy(shared_server.port) as proxy:
        asyncio.run(main(proxy.port))


def test_queue_policies(client, qname, policy):
    client.qpolicy_set(
        policy, qname + "-*", retry=30, priority=3, max_nacks=2, deadletter=qname + "-dead"
    )
    expected = Policy(
        policy,
        qname + "-*",
        {"retry": 30, "priority": 3, "max_nacks": 2, "deadletter": qname + "-dead"},
    )
    assert client.qpolicy_get(policy) == expected
    assert client.qpolicy_match(qname + "-eu") == expected
    assert client.qpolicy_match(qname) is None
    assert expected in client.qpolicy_list()
    job_id = client.add_job(qname + "-eu", b"b")
    info = client.show(job_id)
    assert (info.retry, info.priority) == (30, 3)
    assert client.show(client.add_job(qname + "-eu", b"c", priority=5)).priority == 5
    assert client.qstat(qname + "-eu").policy == policy
    client.qpolicy_set(policy, qname + "-*", max_deliveries=4)  # replaced, not merged
    assert client.qpolicy_get(policy).options == {"max_deliveries": 4}
    assert client.qpolicy_del(policy) is True
    assert client.qpolicy_del(policy) is False
    assert client.qpolicy_get(policy) is None
    assert client.qstat(qname + "-eu").policy is None


def test_a_policy_turns_a_job_nacked_too_often_into_a_dead_letter(client, qname, policy):
    dead = qname + "-dead"
    client.qpolicy_set(policy, qname, max_nacks=1, deadletter=dead)
    job_id = client.add_job(qname, b"poison", retry=60)
    for _ in range(2):
        (job,) = client.get_jobs(qname, timeout=10)
        client.nack(job.id)
    (letter,) = client.get_jobs(dead, timeout=10)
    assert letter.body == b"poison"
    info = client.show(letter.id)
    assert (info.origin_id, info.origin_queue, info.origin_nacks) == (job_id, qname, 2)
    assert info.origin_additional_deliveries == 0 and info.dedup == job_id
    assert client.get_jobs(qname, nohang=True) == []
    client.ack(letter.id)


def test_options_plain_disque_does_not_know_are_server_errors(client, qname):
    from disquette import ResponseError

    with pytest.raises(ResponseError, match="PRIORITY must be between 0 and 9"):
        client.add_job(qname, b"x", priority=10)
    with pytest.raises(ResponseError, match="DEDUP key must be 1 to 256 bytes"):
        client.add_job(qname, b"x", dedup="k" * 257)
    with pytest.raises(ResponseError, match="Unknown policy option"):
        client.execute("QPOLICY", "SET", qname, qname, "colour", "1")
