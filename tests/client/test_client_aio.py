"""The asyncio client against a real node: its methods, and concurrent use.

The command layer is shared with the sync client (tested method by method in
test_client_sync.py); these tests cover what asyncio changes: coroutines and
async iterators, many tasks on one client, pools per event loop, cancellation.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from disquette import Job, JobInfo, MaxLenError, PipelineError, ResponseError
from disquette.aio import Client


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def address(shared_server) -> str:
    return f"127.0.0.1:{shared_server.port}"


def test_methods_are_coroutines(address, qname):
    async def main():
        async with Client(address) as c:
            assert await c.ping() == b"PONG"
            job_id = await c.add_job(qname, b"x", retry=5)
            assert await c.qlen(qname) == 1
            assert isinstance(await c.show(job_id), JobInfo)
            (job,) = await c.get_jobs(qname, with_counters=True)
            assert job == Job(qname, job_id, b"x", 0, 0)
            assert await c.working(job_id) == 5
            assert await c.nack(job_id) == 1
            assert await c.get_jobs(qname, nohang=True, count=5)
            assert await c.ack(job_id) == 1
            assert await c.get_jobs(qname, timeout=0.05) == []
            assert (await c.info())["disque_version"] == "1.0-rc1"
            assert (await c.hello()).version == 1
            with pytest.raises(ResponseError):
                await c.execute("NOPE")

    run(main())


def test_async_iterators_and_batches(address, qname):
    async def main():
        async with Client(address) as c:
            ids = await c.add_jobs(qname, (b"%d" % n for n in range(500)), window=32)
            assert len(set(ids)) == 500
            assert {i async for i in c.jscan(queue=qname, count=10)} == set(ids)
            assert qname in [q async for q in c.qscan(count=5)]
            async with c.pipeline() as p:
                p.qlen(qname).ping()
            assert p.results == [500, b"PONG"]
            with pytest.raises(PipelineError) as info:
                await c.add_jobs(qname, [b"a", b"b"], maxlen=1)
            assert isinstance(info.value.results[0], MaxLenError)

    run(main())


def test_many_tasks_on_one_client(address, qname):
    async def producer(c, n):
        for i in range(20):
            await c.add_job(qname, b"%d-%d" % (n, i))

    async def consumer(c, got):
        while len(got) < 400:
            jobs = await c.get_jobs(qname, count=10, timeout=0.2)
            if jobs:
                got.extend(jobs)
                await c.ack(*(j.id for j in jobs))

    async def main():
        got: list[Job] = []
        async with Client(address) as c:
            await asyncio.gather(
                *(producer(c, n) for n in range(20)), *(consumer(c, got) for _ in range(4))
            )
            assert len({j.id for j in got}) == 400
            assert await c.qlen(qname) == 0

    run(main())


def test_a_blocked_getjob_does_not_block_other_tasks(address, qname):
    async def main():
        async with Client(address) as c:
            waiting = asyncio.create_task(c.get_jobs(qname))
            await asyncio.sleep(0)
            job_id = await c.add_job(qname, b"x")  # on another connection
            (job,) = await waiting
            assert job.id == job_id

    run(main())


def test_one_client_under_several_event_loops(address, qname):
    c = Client(address)

    async def once():
        await c.add_job(qname, b"x")
        return await c.qlen(qname)

    assert run(once()) == 1
    assert run(once()) == 2  # a new loop gets its own connections


def test_event_loops_in_two_threads_use_one_client_at_once(address, qname):
    c = Client(address)
    both_connected = threading.Barrier(2)

    async def work(n: int) -> int:
        await c.ping()  # this loop's own connection
        await asyncio.to_thread(both_connected.wait, 60)
        for i in range(50):
            await c.add_job(f"{qname}-{n}", b"%d" % i)
        length = await c.qlen(f"{qname}-{n}")
        await c.close()  # this loop's connections
        return length

    results: dict[int, int | BaseException] = {}

    def thread(n: int) -> None:
        try:
            results[n] = asyncio.run(work(n))
        except BaseException as exc:  # reported below
            results[n] = exc

    threads = [threading.Thread(target=thread, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {0: 50, 1: 50}


def test_cancellation_drops_the_connection_and_the_client_goes_on(address, qname):
    async def main():
        async with Client(address) as c:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await c.get_jobs(qname)
            job_id = await c.add_job(qname, b"x")
            (job,) = await c.get_jobs(qname)
            assert job.id == job_id

    run(main())
