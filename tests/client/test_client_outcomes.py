"""Issue 24 through the client, against real server processes: results and waiting
(ACKJOB RESULT, WAITJOB), cancellation (CANCEL, down to a worker's handler),
postponed requeues (NACK DELAY, ADDJOB BACKOFF, a policy's backoff), on one node
and on a three-node cluster.

Nothing here waits on time: a waiter is known to be blocked when the node counts
it in INFO's ``blocked_clients``, a postponed job is one a NOHANG GETJOB does not
hand out while SHOW says it is active, and what crosses the cluster bus is waited
for as a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import Callable

import pytest

from disquette import Backoff, Client, JobCancelledError, JobOutcome, ResponseError, Worker, aio
from disquette.worker import RunningJob
from tests.support.cluster import running_cluster
from tests.support.servers import wait_for

DEADLINE = 60.0


def blocked(client: Client) -> int:
    return client.info("clients")["blocked_clients"]


def waiting(wait: Callable[[], JobOutcome | None]) -> tuple[threading.Thread, list]:
    """``wait()`` in a thread; its outcome lands in the list."""
    outcomes: list = []
    thread = threading.Thread(target=lambda: outcomes.append(wait()), daemon=True)
    thread.start()
    return thread, outcomes


def test_wait_returns_the_result_another_client_acked_with(client, shared_server, qname):
    job_id = client.add_job(qname, b"resize cat.png", retry=60)
    thread, outcomes = waiting(lambda: client.wait(job_id, timeout=DEADLINE))
    wait_for(lambda: blocked(client) == 1, DEADLINE, what="the waiter blocked")
    with Client(f"127.0.0.1:{shared_server.port}") as worker:
        (job,) = worker.get_jobs(qname, timeout=DEADLINE)
        assert worker.ack(job, result="cat-small.png") == 1
    thread.join(DEADLINE)
    assert outcomes == [JobOutcome("acked", b"cat-small.png")]
    assert outcomes[0].acked and not outcomes[0].cancelled
    # asked again later (within the server's result-ttl), the outcome is kept
    assert client.wait(job_id) == JobOutcome("acked", b"cat-small.png")


def test_a_fetched_job_waits_through_its_client_and_a_plain_ack_has_no_result(client, qname):
    client.add_job(qname, b"x", retry=60)
    (job,) = client.get_jobs(qname, timeout=DEADLINE)
    assert job.result(timeout=0.05) is None  # not acknowledged yet: the timeout passes
    thread, outcomes = waiting(lambda: job.result(timeout=DEADLINE))
    wait_for(lambda: blocked(client) == 1, DEADLINE, what="the waiter blocked")
    client.ack(job)
    thread.join(DEADLINE)
    assert outcomes == [JobOutcome("acked", None)]
    assert job.result() == JobOutcome("acked", None)  # kept: somebody waited for it
    # an acknowledgement without a result nobody waited for is not kept: once the
    # job is collected (on one node, by the ACK itself) no node knows it
    unwatched = client.add_job(qname, b"y", retry=60)
    client.ack(unwatched)
    assert client.wait(unwatched) == JobOutcome("unknown", None)


def test_a_fetched_job_pickles_without_its_client(client, qname):
    client.add_job(qname, b"x", retry=60)
    (job,) = client.get_jobs(qname, timeout=DEADLINE)
    copy = pickle.loads(pickle.dumps(job))
    assert copy == job and copy._client is None and job._client is client
    client.ack(job)


def test_qpeek_jobs_know_their_client_too(client, qname):
    job_id = client.add_job(qname, b"x", retry=60)
    (peeked,) = client.qpeek(qname, 1)
    assert peeked.result(timeout=0.05) is None
    client.cancel(job_id)
    assert peeked.result() == JobOutcome("cancelled", None)


def test_the_outcome_of_a_job_no_node_knows_is_unknown(client):
    assert client.wait("D-00000000-" + "0" * 24 + "-05a1") == JobOutcome("unknown", None)


def test_a_job_deleted_without_an_ack_is_gone(client, qname):
    job_id = client.add_job(qname, b"x", retry=60)
    thread, outcomes = waiting(lambda: client.wait(job_id, timeout=DEADLINE))
    wait_for(lambda: blocked(client) == 1, DEADLINE, what="the waiter blocked")
    assert client.del_job(job_id) == 1
    thread.join(DEADLINE)
    assert outcomes == [JobOutcome("gone", None)]
    assert not outcomes[0].acked and not outcomes[0].cancelled


def test_cancel_a_queued_job(client, qname):
    job_id = client.add_job(qname, b"never", retry=60)
    assert client.cancel(job_id) == 1
    assert client.get_jobs(qname, nohang=True) == []
    assert client.wait(job_id) == JobOutcome("cancelled", None)
    assert client.cancel(job_id) == 0  # already settled


def test_cancel_a_job_being_worked_on_refuses_its_working(client, qname):
    job_id = client.add_job(qname, b"long", retry=60)
    (job,) = client.get_jobs(qname, timeout=DEADLINE)
    assert client.working(job) == 60
    thread, outcomes = waiting(lambda: client.wait(job, timeout=DEADLINE))
    wait_for(lambda: blocked(client) == 1, DEADLINE, what="the waiter blocked")
    assert client.cancel(job) == 1
    thread.join(DEADLINE)
    assert outcomes == [JobOutcome("cancelled", None)]
    with pytest.raises(JobCancelledError, match="CANCELLED Job was cancelled"):
        client.working(job_id)


def test_a_nack_delay_postpones_the_requeue(client, qname):
    far = client.add_job(qname, b"far", retry=60)
    near = client.add_job(qname, b"near", retry=60)
    jobs = client.get_jobs(qname, count=2, timeout=DEADLINE)
    assert {j.id for j in jobs} == {far, near}
    assert client.nack(far, delay=3600) == 1
    assert client.nack(near, delay=1) == 1
    info = client.show(far)
    assert info.state == "active" and info.nacks == 1
    (job,) = client.get_jobs(qname, timeout=DEADLINE)  # near comes back; far does not
    assert job.id == near and client.get_jobs(qname, nohang=True) == []
    assert client.enqueue(far) == 1  # ENQUEUE queues a postponed job at once
    assert [j.id for j in client.get_jobs(qname, timeout=DEADLINE)] == [far]
    client.ack(far, near)


def test_a_backoff_postpones_every_requeue(client, qname):
    job_id = client.add_job(qname, b"flaky", retry=60, backoff=("exponential", 600, 3600))
    (job,) = client.get_jobs(qname, timeout=DEADLINE)
    client.nack(job)
    assert client.get_jobs(qname, nohang=True) == []
    info = client.show(job_id)
    assert info.state == "active" and info.backoff == Backoff.exponential(600, 3600)
    assert client.enqueue(job_id) == 1
    (job,) = client.get_jobs(qname, timeout=DEADLINE)
    client.nack(job, delay=1)  # a NACK's own delay wins over the backoff
    assert [j.id for j in client.get_jobs(qname, timeout=DEADLINE)] == [job_id]
    client.ack(job_id)
    with pytest.raises(ResponseError, match="cap not below the base"):
        client.execute("ADDJOB", qname, b"x", 0, "BACKOFF", "exponential", 9, 3)


def test_a_policy_backoff_applies_to_its_queues(client, qname):
    client.qpolicy_set(
        qname, qname + "*", backoff="fixed", backoff_base=600, overflow="drop-oldest"
    )
    try:
        policy = client.qpolicy_get(qname)
        assert policy.options == {
            "backoff": "fixed",
            "backoff_base": 600,
            "overflow": "drop-oldest",
        }
        job_id = client.add_job(qname, b"x", retry=60)
        (job,) = client.get_jobs(qname, timeout=DEADLINE)
        client.nack(job)
        assert client.get_jobs(qname, nohang=True) == []
        assert client.show(job_id).state == "active"
        client.ack(job)
    finally:
        client.qpolicy_del(qname)


def test_the_asyncio_client_waits_acks_with_a_result_and_cancels(shared_server, qname):
    async def main() -> None:
        async with aio.Client(f"127.0.0.1:{shared_server.port}") as c:
            job_id = await c.add_job(qname, b"a", retry=60, backoff="fixed:600")
            (job,) = await c.get_jobs(qname, timeout=DEADLINE)
            waiter = asyncio.ensure_future(job.result(timeout=DEADLINE))
            while (await c.info("clients"))["blocked_clients"] == 0:
                await asyncio.sleep(0.01)
            assert await c.ack(job, result=b"\x00binary") == 1
            assert await waiter == JobOutcome("acked", b"\x00binary")
            other = await c.add_job(qname, b"b")
            assert await c.cancel(other) == 1
            assert await c.wait(other, timeout=DEADLINE) == JobOutcome("cancelled", None)
            assert await c.wait(job_id) == JobOutcome("acked", b"\x00binary")

    asyncio.run(main())


# ---------------------------------------------------------------------- a cluster


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path, 3) as c:
        yield c


def test_wait_on_a_node_that_does_not_hold_the_job(cluster, qname):
    a, b = cluster.addresses[0], cluster.addresses[1]
    with Client(a) as c:
        job_id = c.on_node(a).add_job(qname, b"only on a", replicate=1, retry=60)
        elsewhere = c.on_node(b)
        assert elsewhere.show(job_id) is None
        thread, outcomes = waiting(lambda: elsewhere.wait(job_id, timeout=DEADLINE))
        wait_for(lambda: cluster.blocked(1) == 1, DEADLINE, what="the waiter blocked on b")
        (job,) = c.on_node(a).get_jobs(qname, timeout=DEADLINE)
        c.on_node(a).ack(job, result="from a")
        thread.join(DEADLINE)
    assert outcomes == [JobOutcome("acked", b"from a")]


def test_a_wait_whose_node_dies_goes_on_elsewhere(cluster, qname):
    with Client(cluster.addresses) as c:
        job_id = c.add_job(qname, b"replicated", replicate=3, retry=60)
        creator = next(i for i in range(3) if cluster.ids[i].decode().startswith(job_id[2:10]))
        thread, outcomes = waiting(lambda: c.wait(job_id, timeout=DEADLINE))
        wait_for(lambda: cluster.blocked(creator) == 1, DEADLINE, what="the waiter on its creator")
        cluster.kill(creator)
        others = [i for i in range(3) if i != creator]
        wait_for(
            lambda: sum(cluster.blocked(i) for i in others) == 1,
            DEADLINE,
            what="the waiter sent again to a surviving node",
        )
        with Client(cluster.addresses[others[0]]) as worker:  # (it holds a copy)
            worker.ack(job_id, result="survived")
        thread.join(DEADLINE)
    assert outcomes == [JobOutcome("acked", b"survived")]


def test_wait_many_answers_in_order_and_goes_elsewhere_for_a_dead_creator(cluster, qname):
    """Jobs of the three nodes, acknowledged with results; one still queued, one no node
    knows; then the creator of the first killed: its outcome comes from a survivor."""
    unknown = "D-00000000-" + "0" * 24 + "-05a1"
    with Client(cluster.addresses) as c:
        acked = [
            c.on_node(address).add_job(qname, b"r%d" % i, replicate=3, retry=60)
            for i, address in enumerate(cluster.addresses)
        ]
        for address in cluster.addresses:
            (job,) = c.on_node(address).get_jobs(qname, timeout=DEADLINE)
            assert c.on_node(address).ack(job, result=f"done {job.body.decode()}") == 1
        queued = c.add_job(qname + "-later", b"not yet", retry=60)
        want = [JobOutcome("acked", b"done r%d" % i) for i in range(3)]
        got = c.wait_many([*acked, queued, unknown], timeout=0.5)
        assert got == [*want, None, JobOutcome("unknown", None)]
        creator = next(i for i in range(3) if cluster.ids[i].decode().startswith(acked[0][2:10]))
        cluster.kill(creator)
        assert c.wait_many(acked, timeout=DEADLINE) == want
        assert c.wait_many([]) == []


def test_a_cancel_sent_elsewhere_reaches_the_worker(cluster, qname):
    started, saw = threading.Event(), []

    def handle(job: RunningJob) -> None:
        started.set()
        saw.append(job.cancelled.wait(DEADLINE))

    a, b = cluster.addresses[0], cluster.addresses[1]
    with Client(a) as c:
        job_id = c.on_node(a).add_job(qname, b"long", replicate=2, retry=60)
        worker = Worker(handle, qname, client=c.on_node(a), poll_timeout=0.1, heartbeat=0.1)
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        try:
            assert started.wait(DEADLINE)
            c.on_node(b).cancel(job_id)  # (b may or may not hold a copy)
            wait_for(lambda: worker.stats.cancelled == 1, DEADLINE, what="the handler told")
        finally:
            worker.stop()
            thread.join(DEADLINE)
        assert saw == [True] and worker.stats.acked == worker.stats.nacked == 0
        assert c.wait(job_id, timeout=DEADLINE) == JobOutcome("cancelled", None)
