"""The Kombu transport in process, against a real node: what Kombu programs (and
Celery under them) see of a message's life, and what the node holds meanwhile."""

from __future__ import annotations

import pytest
from kombu import Connection

from disquette import Client


@pytest.fixture
def url(shared_server) -> str:
    return f"disque://127.0.0.1:{shared_server.port}"


@pytest.fixture
def client(shared_server):
    with Client(f"127.0.0.1:{shared_server.port}") as c:
        yield c


def test_a_message_is_a_job_until_acknowledged(url, client, queue):
    name = queue.decode()
    with Connection(url) as conn, conn.SimpleQueue(name) as q:
        q.put({"n": 1})
        assert client.qlen(name) == 1
        message = q.get(timeout=5)
        assert message.payload == {"n": 1} and not message.delivery_info.get("redelivered")
        (info,) = client.jscan(queue=name, reply="all")
        assert info.id == message.delivery_tag and info.state == "active"
        message.requeue()  # NACK: back at once, counted
        again = q.get(timeout=5)
        assert again.delivery_tag == message.delivery_tag
        assert again.delivery_info["redelivered"]  # what Celery's Reject(requeue=True) reads
        assert client.show(again.delivery_tag).nacks == 1
        again.ack()
        assert client.show(again.delivery_tag) is None  # acknowledged and collected


def test_unacknowledged_messages_go_back_when_the_channel_closes(url, client, queue):
    name = queue.decode()
    with Connection(url) as conn, conn.SimpleQueue(name) as q:
        for i in range(3):
            q.put(i)
        first = q.get(timeout=5)
        # no prefetch limit: one GETJOB took all three, delivered to the consumer
        assert client.qlen(name) == 0
        ids = list(client.jscan(queue=name))
        assert first.delivery_tag in ids and len(ids) == 3
    # the channel closed with them unacknowledged: NACKed back at once, not left for
    # their retry
    assert client.qlen(name) == 3
    assert [client.show(i).nacks for i in ids] == [1, 1, 1]


def test_expiration_priority_and_retry_become_job_options(shared_server, client, queue):
    name = queue.decode()
    options = {"retry": 7, "ttl": 600}
    url = f"disque://127.0.0.1:{shared_server.port}"
    with Connection(url, transport_options=options) as conn, conn.SimpleQueue(name) as q:
        q.put("short", expiration=30, priority=3)
        q.put("plain")
        short, plain = (client.show(j.id) for j in client.qpeek(name, 2))
    assert (short.ttl, short.retry, short.priority) == (30, 7, 3)
    assert (plain.ttl, plain.retry) == (600, 7)


def test_seeds_fail_over_and_the_password_is_masked(shared_server, queue):
    url = f"disque://:secret@127.0.0.1:1,127.0.0.1:{shared_server.port}"
    with Connection(url) as conn:
        assert conn.as_uri() == f"disque://:**@127.0.0.1:1,127.0.0.1:{shared_server.port}"
        with pytest.raises(Exception, match="Client sent AUTH, but no password is set"):
            conn.connect()  # the node has no password: AUTH is refused, in Redis's words
    seeds = f"disque://127.0.0.1:1,127.0.0.1:{shared_server.port}"
    with Connection(seeds) as conn, conn.SimpleQueue(queue.decode()) as q:
        q.put("through the live seed")
        assert q.get(timeout=5).payload == "through the live seed"
