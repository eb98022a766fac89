"""Connections of the client to real nodes: lost replies, reconnection, AUTH, TLS, timeouts."""

from __future__ import annotations

import asyncio
import random
import shutil
import ssl
import subprocess
import threading

import pytest

from disquette import AuthError, Client, ConnectionFailedError, ReplyLostError, aio
from tests.client.proxy import running_proxy
from tests.support.servers import free_port, running_server, wait_for


def test_a_lost_addjob_reply_is_an_error_that_says_so(shared_server, qname):
    with running_proxy(shared_server.port) as proxy, Client(f"127.0.0.1:{proxy.port}") as c:
        c.ping()
        proxy.cut_next_reply()
        with pytest.raises(ReplyLostError, match="may have been added") as info:
            c.add_job(qname, b"x")
        assert info.value.command == "ADDJOB"
        assert c.qlen(qname) == 1  # it was added; the client did not add it twice
        assert c.add_job(qname, b"y")  # calling again is the caller's choice
        assert c.qlen(qname) == 2


def test_a_lost_ack_reply_is_sent_again(shared_server, qname):
    with running_proxy(shared_server.port) as proxy, Client(f"127.0.0.1:{proxy.port}") as c:
        job_id = c.add_job(qname, b"x")
        proxy.cut_next_reply()
        assert c.ack(job_id) in (0, 1)  # the second ACKJOB finds it acked already
        assert c.show(job_id) is None


def test_the_asyncio_client_keeps_the_same_rules(shared_server, qname):
    async def main(port):
        async with aio.Client(f"127.0.0.1:{port}") as c:
            await c.ping()
            proxy.cut_next_reply()
            with pytest.raises(ReplyLostError):
                await c.add_job(qname, b"x")
            proxy.cut_next_reply()
            assert await c.qlen(qname) == 1

    with running_proxy(shared_server.port) as proxy:
        asyncio.run(main(proxy.port))


def test_seeds_that_do_not_answer_are_skipped(shared_server):
    alive = ("127.0.0.1", shared_server.port)
    dead = [("127.0.0.1", free_port()) for _ in range(3)]
    for seed in range(8):
        with Client([*dead, alive], rng=random.Random(seed)) as c:
            assert c.ping() == b"PONG"
            assert c.topology.current == alive


def test_reconnects_after_the_node_restarts(tmp_path, qname):
    port = free_port()
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    with running_server(first, port=port):
        c = Client(f"127.0.0.1:{port}")
        assert c.ping() == b"PONG"
    with pytest.raises(ConnectionFailedError):
        c.ping()
    with running_server(second, port=port):
        assert c.ping() == b"PONG"
        assert c.add_job(qname, b"x")
    c.close()


def test_idle_connections_closed_by_the_server_are_replaced_silently(server, qname):
    r = server.client()
    with Client(f"127.0.0.1:{server.port}") as c:
        c.ping()
        r.config_set("timeout", 1)
        wait_for(lambda: r.info("clients")["connected_clients"] == 1, what="idle client closed")
        assert c.add_job(qname, b"x")  # not a ReplyLostError: the stale connection was noticed
    r.close()


def test_socket_timeout(server):
    with Client(f"127.0.0.1:{server.port}", socket_timeout=0.2) as c:
        with pytest.raises(ReplyLostError, match="timed out"):
            c.execute("DEBUG", "SLEEP", "1")
        assert c.ping() == b"PONG"


def test_auth(tmp_path, qname):
    with running_server(tmp_path, ["--requirepass", "s3cret"]) as srv:
        address = f"127.0.0.1:{srv.port}"
        with Client(address, password="s3cret") as c:
            assert c.add_job(qname, b"x")
        with Client(address, password="wrong") as c, pytest.raises(AuthError):
            c.ping()
        with Client(address) as c, pytest.raises((AuthError, ConnectionFailedError)):
            c.ping()

        async def main():
            async with aio.Client(address, password="s3cret") as c:
                return await c.qlen(qname)

        assert asyncio.run(main()) == 1


@pytest.fixture(scope="module")
def tls_contexts(tmp_path_factory):
    openssl = shutil.which("openssl")
    assert openssl, "the TLS test needs the openssl command"
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(d / "key.pem"),
            "-out",
            str(d / "cert.pem"),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(d / "cert.pem", d / "key.pem")
    client = ssl.create_default_context(cafile=str(d / "cert.pem"))
    return server, client


def test_tls_context_is_passed_through(shared_server, qname, tls_contexts):
    server_ctx, client_ctx = tls_contexts
    with running_proxy(shared_server.port, tls=server_ctx) as proxy:
        address = f"127.0.0.1:{proxy.port}"
        with Client(address, ssl=client_ctx) as c:
            assert c.add_job(qname, b"over tls")

        async def main():
            async with aio.Client(address, ssl=client_ctx) as c:
                return await c.get_jobs(qname)

        (job,) = asyncio.run(main())
        assert job.body == b"over tls"
        with Client(address, connect_timeout=2) as plain, pytest.raises(ConnectionFailedError):
            plain.ping()  # without the context the handshake cannot complete


def test_close_also_closes_the_connections_in_use(server, qname):
    r = server.client()
    c = Client(f"127.0.0.1:{server.port}")
    waiter = threading.Thread(target=c.get_jobs, args=(qname,), kwargs={"timeout": 0.5})
    waiter.start()
    wait_for(lambda: r.info("clients")["blocked_clients"] == 1, what="a blocked GETJOB")
    c.close()
    waiter.join()
    wait_for(
        lambda: r.info("clients")["connected_clients"] == 1, what="the client's connection closed"
    )
    assert c.ping() == b"PONG"  # still usable
    c.close()
    r.close()
