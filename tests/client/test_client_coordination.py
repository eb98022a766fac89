"""Issue 16 through the client and the worker, against real server processes: chains
and fan-ins (ADDJOB AFTER), progress logs (WORKING text, JOBLOG), claims (GETJOB
WITHCLAIM, CLAIM n) on one node and on a three-node cluster.

Nothing here waits on time: a job "not delivered yet" is a NOHANG GETJOB that
returns nothing while SHOW says the job waits, and everything that crosses the
cluster bus is waited for as a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from disquette import (
    Client,
    FanIn,
    Job,
    LogFullError,
    NoJobError,
    PipelineError,
    ProgressEntry,
    ResponseError,
    StaleClaimError,
    Worker,
    aio,
)
from disquette.client.topology import format_address
from disquette.worker import AsyncRunningJob, RunningJob
from tests.client.running import working
from tests.support.cluster import running_cluster
from tests.support.servers import wait_for

DEADLINE = 60.0


def only(client: Client, *queues: str) -> list[bytes]:
    """The bodies a NOHANG GETJOB hands out now (the jobs stay unacknowledged)."""
    return [job.body for job in client.get_jobs(*queues, count=100, nohang=True)]


def gone_or_acked(client: Client, job_id: str) -> bool:
    info = client.show(job_id)
    return info is None or info.state == "acked"


# ---------------------------------------------------------------------- dependencies


def test_a_chain_runs_in_order(client, qname):
    first, second, third = client.add_chain(qname, [b"extract", b"transform", b"load"])
    info = client.show(second)
    assert info.state == "waiting" and info.waiting_for == (first,)
    assert client.show(third).waiting_for == (second,)
    assert client.show(first).waiting_for is None
    (job,) = client.get_jobs(qname, count=3, nohang=True)  # only the first is queued
    assert job.id == first
    assert only(client, qname) == []
    client.ack(job)
    (job,) = client.get_jobs(qname, timeout=DEADLINE)
    assert job.id == second  # released by the first one's ACK
    assert only(client, qname) == []  # the third waits for the second
    client.ack(job)
    (job,) = client.get_jobs(qname, timeout=DEADLINE)
    assert (job.id, job.body) == (third, b"load")
    client.ack(job)


def test_a_chain_across_queues_and_after_an_existing_job(client, qname):
    parent = client.add_job(qname, b"parent")
    ids = client.add_chain(qname, [(qname + "-b", b"b")], after=parent)
    assert client.show(ids[0]).waiting_for == (parent,)
    client.ack(parent)
    (job,) = client.get_jobs(qname + "-b", timeout=DEADLINE)
    assert job.id == ids[0]
    client.ack(job)


def test_a_chain_failing_midway_raises_a_pipeline_error(client, qname):
    client.pause(qname + "-paused", "in")
    try:
        with pytest.raises(PipelineError) as info:
            client.add_chain(qname, [b"1", (qname + "-paused", b"2"), b"3"])
        added, error = info.value.results
        assert client.show(added) is not None and "PAUSED" in str(error)
        client.del_job(added)
    finally:
        client.pause(qname + "-paused", "none")


def test_a_fan_in_waits_for_every_parent(client, qname):
    fan = client.add_fan_in(qname, [b"a", b"b", b"c"], then=(qname + "-sum", b"total"))
    assert isinstance(fan, FanIn) and len(fan.parents) == 3
    info = client.show(fan.then)
    assert info.state == "waiting" and set(info.waiting_for) == set(fan.parents)
    jobs = client.get_jobs(qname, count=3, nohang=True)
    assert sorted(job.body for job in jobs) == [b"a", b"b", b"c"]
    by_id = {job.id: job for job in jobs}
    client.ack(by_id[fan.parents[0]], by_id[fan.parents[1]])
    wait_for(
        lambda: client.show(fan.then).waiting_for == (fan.parents[2],),
        DEADLINE,
        what="the last job waiting for the third parent only",
    )
    assert only(client, qname + "-sum") == []
    client.ack(by_id[fan.parents[2]])
    (job,) = client.get_jobs(qname + "-sum", timeout=DEADLINE)
    assert (job.id, job.body) == (fan.then, b"total")
    client.ack(job)


def test_jscan_finds_the_waiting_jobs(client, qname):
    parent = client.add_job(qname, b"parent")
    child = client.add_job(qname, b"child", after=[parent])
    assert list(client.jscan(queue=qname, states=["waiting"])) == [child]
    assert child not in list(client.jscan(queue=qname, states=["active", "queued"]))
    (info,) = client.jscan(queue=qname, states=["waiting"], reply="all")
    assert info.id == child and info.waiting_for == (parent,)
    client.del_job(parent, child)


@pytest.mark.parametrize("if_gone", ["release", "fail"])
def test_a_dependency_deleted_without_an_ack(client, qname, if_gone):
    parent = client.add_job(qname, b"parent", retry=60)
    child = client.add_job(qname + "-child", b"child", after=parent, if_gone=if_gone)
    assert client.show(child).if_gone == if_gone
    client.del_job(parent)
    if if_gone == "release":
        (job,) = client.get_jobs(qname + "-child", timeout=DEADLINE)
        assert job.id == child
        client.ack(job)
    else:
        wait_for(lambda: gone_or_acked(client, child), DEADLINE, what="the child failed")
        assert only(client, qname + "-child") == []


def test_enqueue_releases_a_waiting_job(client, qname):
    parent = client.add_job(qname, b"parent")
    child = client.add_job(qname + "-child", b"child", after=parent)
    assert client.enqueue(child) == 1
    (job,) = client.get_jobs(qname + "-child", timeout=DEADLINE)
    assert job.id == child
    client.ack(job)
    client.del_job(parent)


def test_dependency_errors(client, qname):
    with pytest.raises(ResponseError, match="IFGONE needs AFTER"):
        client.execute("ADDJOB", qname, "x", 0, "IFGONE", "fail")
    with pytest.raises(ResponseError, match="at most 256"):
        client.execute(
            "ADDJOB", qname, "x", 0,
            *(a for n in range(257) for a in ("AFTER", f"D-00000000-{n:024d}-05a1")),
        )  # fmt: skip
    from disquette import BadIdError

    with pytest.raises(BadIdError):
        client.add_job(qname, b"x", after="not-an-id")


# ---------------------------------------------------------------------- progress


def test_progress_goes_to_the_job_log(client, qname):
    job_id = client.add_job(qname, b"video", retry=60)
    (job,) = client.get_jobs(qname, timeout=DEADLINE)
    assert client.joblog(job_id) == []
    assert client.show(job_id).progress is None
    before = time.time()
    assert client.working(job, "transcoding: 10%") == 60
    assert client.working(job_id, b"transcoding: 90%") > 0
    log = client.joblog(job_id)
    assert [entry.text for entry in log] == ["transcoding: 10%", "transcoding: 90%"]
    me = client.cluster_myid()
    assert all(isinstance(e, ProgressEntry) and e.node == me for e in log)
    assert before - 5 <= log[0].time <= log[1].time <= time.time() + 5  # the node's clock
    assert client.show(job_id).progress == tuple(log)
    client.ack(job)


def test_progress_bounds(client, qname):
    job_id = client.add_job(qname, b"chatty", retry=60)
    with pytest.raises(ResponseError, match="longer than 1024 bytes"):
        client.working(job_id, "x" * 1025)
    with pytest.raises(ResponseError, match="empty progress text"):
        client.working(job_id, "")
    client.working(job_id, "y" * 1024)
    for n in range(63):
        client.working(job_id, f"step {n}")
    with pytest.raises(LogFullError, match="64 entries"):
        client.working(job_id, "one too many")
    assert client.working(job_id) > 0  # without a text it still postpones the requeue
    assert len(client.joblog(job_id)) == 64
    with pytest.raises(NoJobError):
        client.joblog("D-00000000-" + "A" * 24 + "-05a1")
    client.del_job(job_id)


# ---------------------------------------------------------------------- claims


def test_claims_grow_and_a_stale_claim_is_refused(client, qname):
    job_id = client.add_job(qname, b"lease", retry=60)
    (first,) = client.get_jobs(qname, timeout=DEADLINE, with_claim=True, with_counters=True)
    assert first.claim >= 1 and first.nacks == 0
    assert client.show(job_id).claim == first.claim
    client.enqueue(job_id)  # as if its retry time had passed: delivered again
    (second,) = client.get_jobs(qname, timeout=DEADLINE, with_claim=True)
    assert second.id == job_id and second.claim > first.claim
    with pytest.raises(StaleClaimError) as info:
        client.ack(first)
    error = info.value
    assert (error.job_id, error.claim, error.current) == (job_id, first.claim, second.claim)
    assert client.show(job_id).state == "active"  # nothing done
    with pytest.raises(StaleClaimError):
        client.working(first, "still mine?")
    with pytest.raises(StaleClaimError):
        client.nack(first)
    assert client.joblog(job_id) == []
    assert client.working(second, "mine") > 0
    assert client.ack(second) == 1
    assert gone_or_acked(client, job_id)
    never_delivered = client.add_job(qname, b"y", retry=60)
    assert client.working(never_delivered, claim=7) > 0  # a claim the node does not know yet
    client.del_job(never_delivered)


def test_the_asyncio_client(shared_server, qname):
    async def main() -> None:
        async with aio.Client(f"127.0.0.1:{shared_server.port}") as c:
            first, second = await c.add_chain(qname, [b"1", b"2"])
            assert (await c.show(second)).waiting_for == (first,)
            (job,) = await c.get_jobs(qname, timeout=DEADLINE, with_claim=True)
            assert job.id == first and job.claim >= 1
            await c.working(job, "async progress")
            assert [e.text for e in await c.joblog(first)] == ["async progress"]
            await c.ack(job)
            (job,) = await c.get_jobs(qname, timeout=DEADLINE)
            assert job.id == second
            await c.ack(job)
            fan = await c.add_fan_in(qname, [b"p"], then=(qname, b"t"))
            assert (await c.show(fan.then)).waiting_for == tuple(fan.parents)
            await c.del_job(*fan.parents, fan.then)

    asyncio.run(main())


# ---------------------------------------------------------------------- the worker


@pytest.fixture(params=["threads", "asyncio"])
def kind(request) -> str:
    return request.param


def seeds(shared_server) -> str:
    return f"127.0.0.1:{shared_server.port}"


@pytest.mark.parametrize("claims", [False, True])
def test_worker_progress_and_claims(client, qname, kind, shared_server, claims):
    seen: list[Job] = []
    if kind == "threads":

        def handler(job: RunningJob) -> None:
            job.progress(f"started {job.body.decode()}")
            job.progress("done")
            seen.append(job)

    else:

        async def handler(job: AsyncRunningJob) -> None:  # type: ignore[misc]
            await job.progress(f"started {job.body.decode()}")
            await job.progress("done")
            seen.append(job)

    ids = client.add_jobs(qname, [b"a", b"b"], retry=60)
    worker = Worker(handler, qname, seeds=seeds(shared_server), claims=claims, poll_timeout=0.1)
    with working(worker):
        wait_for(lambda: worker.stats and worker.stats.acked == 2, DEADLINE, what="both acked")
    assert all(gone_or_acked(client, job_id) for job_id in ids)
    assert sorted(job.body for job in seen) == [b"a", b"b"]
    assert all((job.claim is not None) == claims for job in seen)
    assert worker.stats.stale == 0


def test_a_worker_whose_claim_went_stale_leaves_the_job(client, qname, kind, shared_server, caplog):
    """The job is handed to someone else while the handler runs: its progress report
    raises StaleClaimError, and the worker neither ACKs nor NACKs the job."""
    started, release = threading.Event(), threading.Event()
    raised: list[BaseException] = []

    def report(error: BaseException | None) -> None:
        if error is not None:
            raised.append(error)

    if kind == "threads":

        def handler(job: RunningJob) -> None:
            started.set()
            release.wait(DEADLINE)
            try:
                job.progress("still working")
            except StaleClaimError as exc:
                report(exc)
                raise

    else:

        async def handler(job: AsyncRunningJob) -> None:  # type: ignore[misc]
            started.set()
            await asyncio.to_thread(release.wait, DEADLINE)
            try:
                await job.progress("still working")
            except StaleClaimError as exc:
                report(exc)
                raise

    job_id = client.add_job(qname, b"contested", retry=60)
    worker = Worker(handler, qname, seeds=seeds(shared_server), claims=True, poll_timeout=0.1)
    with caplog.at_level(logging.WARNING, logger="disquette.worker"), working(worker):
        assert started.wait(DEADLINE)
        client.enqueue(job_id)  # its lease passes to another consumer
        (other,) = client.get_jobs(qname, timeout=DEADLINE, with_claim=True)
        release.set()
        wait_for(lambda: worker.stats.stale == 1, DEADLINE, what="the stale claim noticed")
        wait_for(lambda: worker.engine.tracker.idle, DEADLINE, what="the job let go")
    (error,) = raised
    assert isinstance(error, StaleClaimError) and error.current == other.claim
    warnings = [r.getMessage() for r in caplog.records if job_id in r.getMessage()]
    assert len(warnings) == 1 and "stale" in warnings[0]
    assert worker.stats.acked == worker.stats.nacked == worker.stats.failed == 0
    assert client.show(job_id).state == "active" and client.joblog(job_id) == []
    assert client.ack(other) == 1  # the new holder settles it


def test_a_stale_ack_is_logged_once_and_skipped(client, qname, kind, shared_server, caplog):
    started, release = threading.Event(), threading.Event()
    if kind == "threads":

        def handler(job: RunningJob) -> None:
            started.set()
            release.wait(DEADLINE)

    else:

        async def handler(job: AsyncRunningJob) -> None:  # type: ignore[misc]
            started.set()
            await asyncio.to_thread(release.wait, DEADLINE)

    job_id = client.add_job(qname, b"contested", retry=60)
    worker = Worker(handler, qname, seeds=seeds(shared_server), claims=True, poll_timeout=0.1)
    with caplog.at_level(logging.WARNING, logger="disquette.worker"), working(worker):
        assert started.wait(DEADLINE)
        client.enqueue(job_id)
        (other,) = client.get_jobs(qname, timeout=DEADLINE, with_claim=True)
        release.set()
        wait_for(lambda: worker.stats.stale == 1, DEADLINE, what="the stale ACK")
    (warning,) = [r.getMessage() for r in caplog.records if job_id in r.getMessage()]
    assert "ACK refused" in warning and f"latest is {other.claim}" in warning
    assert worker.stats.acked == 0 and client.show(job_id).state == "active"
    assert client.ack(other) == 1


# ---------------------------------------------------------------------- a cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("cluster"), 3) as c:
        yield c


def test_progress_reaches_every_holder_of_a_replicated_job(cluster, qname):
    with Client(cluster.addresses[0]) as c:
        job_id = c.add_job(qname, b"replicated", replicate=3, retry=60)
        creator = c.topology.current
        (job,) = c.on_node(creator).get_jobs(qname, timeout=DEADLINE, with_claim=True)
        c.working(job, "step 1")
        c.working(job, "step 2")
        expected = c.joblog(job_id)
        assert [e.text for e in expected] == ["step 1", "step 2"]
        nodes = [c.on_node(address) for address in cluster.addresses]

        def converged() -> bool:
            return all(node.joblog(job_id) == expected for node in nodes)

        wait_for(converged, DEADLINE, what="the same progress log on the three holders")
        assert all(node.show(job_id).progress == tuple(expected) for node in nodes)
        c.ack(job)


def test_a_dependency_on_a_job_of_another_node(cluster, qname):
    with Client(cluster.addresses[0]) as c0, Client(cluster.addresses[1]) as c1:
        parent = c0.add_job(qname, b"parent", replicate=1)
        child = c1.add_job(qname + "-child", b"child", replicate=1, after=parent)
        assert c1.show(child).state == "waiting"
        (job,) = c0.get_jobs(qname, timeout=DEADLINE)
        c0.ack(job)
        (released,) = c1.get_jobs(qname + "-child", timeout=DEADLINE)
        assert released.id == child
        c1.ack(released)


def test_a_fan_in_over_the_cluster(cluster, qname):
    with Client(cluster.addresses) as c:
        parents, then = c.add_fan_in(qname, [b"1", b"2"], then=(qname + "-t", b"t"))
        for parent in parents:
            c.ack(parent)
        (job,) = c.get_jobs(qname + "-t", timeout=DEADLINE)
        assert job.id == then
        c.ack(job)


def test_a_delivery_on_another_node_makes_the_claim_stale(cluster, qname):
    """Holders learn of each other's deliveries over the bus: a claim handed out by one
    node is refused by the other once the job was delivered again there."""
    with Client(cluster.addresses[0]) as c:
        job_id = c.add_job(qname, b"x", replicate=3, retry=60)
        first_node = c.topology.current
        (first,) = c.on_node(first_node).get_jobs(qname, timeout=DEADLINE, with_claim=True)
        other = next(a for a in cluster.addresses if a != format_address(first_node))
        wait_for(lambda: c.on_node(other).show(job_id) is not None, DEADLINE, what="a replica")
        assert c.on_node(other).enqueue(job_id) == 1
        (second,) = c.on_node(other).get_jobs(qname, timeout=DEADLINE, with_claim=True)
        assert second.id == job_id and second.claim > first.claim

        def refused() -> bool:
            try:
                c.on_node(first_node).working(first)
            except StaleClaimError:
                return True
            return False

        wait_for(refused, DEADLINE, what="the first node refusing the older claim")
        with pytest.raises(StaleClaimError):
            c.on_node(first_node).ack(first)
        assert c.ack(second) >= 1
