"""The sans-I/O connection: handshake, replies owed, errors, closing."""

from __future__ import annotations

import pytest

from disquette.client.connection import Connection, State
from disquette.client.errors import AuthError, LoadingError, ProtocolError, ResponseError
from disquette.client.resp import TypedParser

HELLO = (
    b"*3\r\n:1\r\n$40\r\n" + b"a" * 40 + b"\r\n"
    b"*4\r\n$40\r\n" + b"a" * 40 + b"\r\n$9\r\n127.0.0.1\r\n$4\r\n7711\r\n$1\r\n1\r\n"
)


def test_handshake_pipelines_auth_name_and_hello():
    conn = Connection(password="pw", client_name="me")
    assert conn.start() == (
        b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"
        b"*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$2\r\nme\r\n"
        b"*1\r\n$5\r\nHELLO\r\n"
    )
    assert conn.state is State.HANDSHAKE
    assert conn.receive(b"+OK\r\n+OK\r\n") == []
    assert not conn.ready
    assert conn.receive(HELLO) == []
    assert conn.ready
    assert conn.hello.node_id == "a" * 40
    assert conn.hello.nodes[0].address == "127.0.0.1:7711"


def test_no_handshake_means_ready_at_once():
    conn = Connection(hello=False)
    assert conn.start() == b""
    assert conn.ready


def test_replies_come_back_in_order_whatever_the_cuts():
    conn = Connection(hello=False)
    conn.start()
    assert conn.send([(b"QLEN", b"q"), (b"PING",)]) == (
        b"*2\r\n$4\r\nQLEN\r\n$1\r\nq\r\n*1\r\n$4\r\nPING\r\n"
    )
    assert conn.owed == 2
    assert conn.receive(b":3\r\n+PO") == [3]
    assert conn.receive(b"NG\r\n") == [b"PONG"]
    assert conn.owed == 0


def test_error_replies_are_values_not_raised():
    conn = Connection(hello=False)
    conn.start()
    conn.send([(b"X",), (b"PING",)])
    error, pong = conn.receive(b"-ERR unknown command 'X'\r\n+PONG\r\n")
    assert isinstance(error, ResponseError) and error.code == "ERR"
    assert pong == b"PONG"


def test_an_unrequested_reply_is_a_protocol_error():
    conn = Connection(hello=False)
    conn.start()
    with pytest.raises(ProtocolError):
        conn.receive(b"+OK\r\n")
    assert conn.state is State.CLOSED


def test_streaming_accepts_unrequested_replies():
    conn = Connection(hello=False, parser=TypedParser())
    conn.start()
    conn.streaming = True
    assert conn.receive(b"+1 line\r\n+2 line\r\n") == [b"1 line", b"2 line"]


def test_refused_password_raises_auth_error():
    conn = Connection(password="bad", hello=False)
    conn.start()
    with pytest.raises(AuthError, match="invalid password"):
        conn.receive(b"-ERR invalid password\r\n")
    assert conn.state is State.CLOSED


def test_failed_hello_raises_the_server_error():
    conn = Connection()
    conn.start()
    with pytest.raises(LoadingError):
        conn.receive(b"-LOADING Disque is loading the dataset in memory\r\n")


def test_close_reports_the_replies_lost():
    conn = Connection(hello=False)
    conn.start()
    conn.send([(b"PING",), (b"PING",)])
    conn.receive(b"+PONG\r\n")
    assert conn.close() == 1
    with pytest.raises(RuntimeError):
        conn.send([(b"PING",)])


def test_send_before_the_handshake_is_a_bug():
    conn = Connection()
    with pytest.raises(RuntimeError):
        conn.send([(b"PING",)])
    conn.start()
    with pytest.raises(RuntimeError):
        conn.send([(b"PING",)])
