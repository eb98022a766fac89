"""Every method of the synchronous client against a real node."""

from __future__ import annotations

import threading

import pytest

from disquette import (
    BadIdError,
    Client,
    Hello,
    Job,
    JobInfo,
    LeavingError,
    MaxLenError,
    NoJobError,
    NoReplicationError,
    OutOfMemoryError,
    PausedError,
    PipelineError,
    QueueStat,
    ResponseError,
)
from tests.support.servers import running_server

FAKE_ID = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"


def test_ping(client):
    assert client.ping() == b"PONG"
    assert client.ping(b"hi") == b"hi"


def test_add_job_returns_an_id_made_by_the_node(client, qname):
    job_id = client.add_job(qname, b"body")
    assert len(job_id) == 40 and job_id.startswith("D-")
    assert job_id[2:10] == client.cluster_myid()[:8]
    assert client.qlen(qname) == 1


def test_add_job_options_reach_the_server(client, qname):
    job_id = client.add_job(qname, "text body", retry=7, ttl=600, delay=300, timeout=2.5)
    info = client.show(job_id)
    assert isinstance(info, JobInfo)
    assert (info.retry, info.delay, info.state, info.body) == (7, 300, "active", b"text body")
    assert 590 <= info.ttl <= 600
    assert client.qlen(qname) == 0  # delayed


def test_add_job_errors_are_typed(client, qname):
    with pytest.raises(NoReplicationError):
        client.add_job(qname, b"x", replicate=2)
    client.add_job(qname, b"x")
    with pytest.raises(MaxLenError):
        client.add_job(qname, b"x", maxlen=1)
    assert client.add_job(qname, b"x", async_=True)
    with pytest.raises(ResponseError, match="DELAY is greater than TTL"):
        client.add_job(qname, b"x", delay=10, ttl=5)


def test_get_jobs(client, qname):
    ids = [client.add_job(qname, b"%d" % n) for n in range(3)]
    jobs = client.get_jobs(qname, count=2)
    assert [j.id for j in jobs] == ids[:2]
    assert jobs[0] == Job(qname, ids[0], b"0")
    (job,) = client.get_jobs(qname, with_counters=True)
    assert (job.nacks, job.additional_deliveries) == (0, 0)
    assert client.get_jobs(qname, nohang=True) == []
    assert client.get_jobs(qname, timeout=0.05) == []


def test_get_jobs_reads_queues_left_to_right(client, qname):
    client.add_job(qname + "-b", b"b")
    client.add_job(qname + "-a", b"a")
    jobs = client.get_jobs(qname + "-a", qname + "-b", count=2)
    assert [j.body for j in jobs] == [b"a", b"b"]


def test_binary_queue_names_round_trip(client):
    name = b"q-\xff\x00binary"
    client.add_job(name, b"x")
    (job,) = client.get_jobs(name)
    assert job.queue.encode("utf-8", "surrogateescape") == name
    assert client.ack(job.id) == 1


def test_ack_fast_ack_and_show(client, qname):
    a, b = client.add_job(qname, b"a"), client.add_job(qname, b"b")
    assert client.ack(a) == 1
    assert client.show(a) is None
    assert client.fast_ack(b, FAKE_ID) == 1
    assert client.show(b) is None
    assert client.ack() == 0


def test_nack_counts_and_requeues(client, qname):
    job_id = client.add_job(qname, b"x")
    client.get_jobs(qname)
    assert client.nack(job_id) == 1
    (job,) = client.get_jobs(qname, with_counters=True)
    assert job.nacks == 1


def test_working_returns_the_retry(client, qname):
    job_id = client.add_job(qname, b"x", retry=9)
    client.get_jobs(qname)
    assert client.working(job_id) == 9
    with pytest.raises(NoJobError):
        client.working(FAKE_ID)


def test_enqueue_dequeue_del_job(client, qname):
    job_id = client.add_job(qname, b"x")
    assert client.dequeue(job_id) == 1
    assert client.qlen(qname) == 0
    assert client.enqueue(job_id) == 1
    assert client.qlen(qname) == 1
    assert client.del_job(job_id) == 1
    assert client.show(job_id) is None


def test_bad_ids_are_refused(client):
    with pytest.raises(BadIdError):
        client.ack("not-an-id")
    with pytest.raises(BadIdError):
        client.show("nope")


def test_out_of_memory_is_typed(tmp_path, qname):
    with running_server(tmp_path, ["--maxmemory", "1"]) as srv:
        c = Client(f"127.0.0.1:{srv.port}")
        with pytest.raises(OutOfMemoryError, match="maxmemory"):
            c.add_job(qname, b"x")
        assert c.qlen(qname) == 0
        c.close()


def test_leaving_is_raised_when_no_other_node_is_left(server, qname):
    with Client(f"127.0.0.1:{server.port}") as c:
        c.cluster_leaving(True)
        with pytest.raises(LeavingError, match="leaving the cluster") as info:
            c.get_jobs(qname, timeout=1)
        assert info.value.node == f"127.0.0.1:{server.port}"


def test_qstat_qpeek(client, qname):
    assert client.qstat(qname) is None
    ids = [client.add_job(qname, b"%d" % n) for n in range(3)]
    stat = client.qstat(qname)
    assert isinstance(stat, QueueStat)
    assert (stat.name, stat.len, stat.pause, stat.jobs_in) == (qname, 3, "none", 3)
    assert [j.id for j in client.qpeek(qname, 2)] == ids[:2]
    assert [j.id for j in client.qpeek(qname, -1)] == ids[2:]
    assert client.qpeek(qname + "-none", 5) == []


def test_qscan_iterates_over_every_page(client, qname):
    names = {f"{qname}-{n}" for n in range(150)}
    with client.pipeline() as p:
        for name in names:
            p.add_job(name, b"x")
    seen = list(client.qscan(count=10, minlen=1))
    assert names <= set(seen)
    assert len(list(client.qscan(count=10))) >= len(names)


def test_jscan_ids_and_full_jobs(client, qname):
    ids = set(client.add_jobs(qname, [b"%d" % n for n in range(120)]))
    assert set(client.jscan(queue=qname, count=7)) == ids
    infos = list(client.jscan(queue=qname, states=["queued"], reply="all", busyloop=True))
    assert {i.id for i in infos} == ids and all(isinstance(i, JobInfo) for i in infos)
    assert list(client.jscan(queue=qname, states=["acked"])) == []


def test_pause(client, qname):
    assert client.pause(qname, "in") == "in"
    with pytest.raises(PausedError):
        client.add_job(qname, b"x")
    assert client.pause(qname, "state") == "in"
    assert client.pause(qname, "none") == "none"


def test_info_hello_and_cluster_commands(client):
    info = client.info()
    assert info["disque_version"] == "1.0-rc1" and isinstance(info["tcp_port"], int)
    assert set(client.info("jobs")) == {"registered_jobs"}
    hello = client.hello()
    assert isinstance(hello, Hello) and hello.version == 1
    assert hello.node_id == client.cluster_myid() == hello.myself.id
    (me,) = client.cluster_nodes()
    assert me.id == hello.node_id and "myself" in me.flags
    assert client.cluster_info()["cluster_known_nodes"] == 1
    assert client.cluster_leaving() is False
    with pytest.raises(ResponseError, match="Unknown node"):
        client.cluster_forget("f" * 40)


def test_execute_raw(client, qname):
    assert client.execute("QLEN", qname) == 0
    assert client.execute("ADDJOB", qname, b"x", 0).startswith(b"D-")
    with pytest.raises(ResponseError, match="unknown command"):
        client.execute("NOPE")


def test_add_jobs_pipelines_in_order(client, qname):
    bodies = [b"%d" % n for n in range(2000)]
    ids = client.add_jobs(qname, iter(bodies), window=64, retry=30)
    assert len(set(ids)) == 2000
    assert [j.body for j in client.qpeek(qname, 3)] == bodies[:3]
    assert client.show(ids[-1]).retry == 30


def test_add_jobs_reports_where_it_stopped(client, qname):
    with pytest.raises(PipelineError) as info:
        client.add_jobs(qname, [b"1", b"2", b"3", b"4"], maxlen=2, window=1)
    results = info.value.results
    assert [type(r) for r in results] == [str, str, MaxLenError]
    assert client.qlen(qname) == 2


def test_pipeline(client, qname):
    with client.pipeline() as p:
        p.add_job(qname, b"a").qlen(qname)
        p.ping()
        assert len(p) == 3
    job_id, length, pong = p.results
    assert length == 1 and pong == b"PONG" and job_id.startswith("D-")
    p = client.pipeline()
    results = p.qlen(qname).ack("bad").qlen(qname).execute(raise_on_error=False)
    assert results[0] == 1 and isinstance(results[1], BadIdError) and results[2] == 1
    with pytest.raises(PipelineError):
        p.ack("bad").execute()
    assert not hasattr(p, "add_jobs") and not hasattr(p, "qscan")


def test_on_node_pins_a_view(client, shared_server):
    view = client.on_node(f"127.0.0.1:{shared_server.port}")
    assert view.pinned == f"127.0.0.1:{shared_server.port}"
    assert client.pinned is None
    assert view.ping() == b"PONG"


def test_threads_share_one_client(client, qname):
    errors = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                job_id = client.add_job(f"{qname}-{n}", b"%d" % i)
                (job,) = client.get_jobs(f"{qname}-{n}")
                assert job.id == job_id
                assert client.ack(job.id) == 1
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_max_connections_bounds_the_pool(shared_server, qname):
    def connections() -> int:
        return shared_server.client().info("stats")["total_connections_received"]

    before = connections()
    with Client(f"127.0.0.1:{shared_server.port}", max_connections=2) as c:

        def work() -> None:
            for _ in range(20):
                c.add_job(qname, b"x")
                c.qlen(qname)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert c.qlen(qname) == 160
    assert connections() - before <= 3  # two for the client, one for this check
