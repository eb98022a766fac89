"""RESP3's greeting, ``HELLO <protover> [AUTH user pass] [SETNAME name]``, against a
real server: redis-py 8 with its default settings (it opens every connection with
``HELLO 3``), redis-py with ``protocol=2`` as before, redis-cli ``-3``, the exact
bytes a RESP3 connection gets, and HELLO's errors in Redis's words. Bare HELLO
staying Disque's cluster greeting is checked by the compatibility tests."""

from __future__ import annotations

import socket
import subprocess

import pytest
import redis

from tests.support.raw import RawConnection
from tests.support.servers import running_server

PASSWORD = "s3cret"


def default_client(port: int, **kwargs) -> redis.Redis:
    """redis-py exactly as an application gets it: no ``protocol`` argument."""
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=30, **kwargs)


def exchange(port: int, *requests: bytes) -> list[bytes]:
    """Send each request on one connection and read its reply's bytes (one read each:
    the replies here are small)."""
    replies = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        for request in requests:
            s.sendall(request)
            data = b""
            while not data.endswith(b"\r\n"):
                data += s.recv(1 << 16)
            replies.append(data)
    return replies


def test_redis_py_8_defaults_run_the_job_cycle(shared_server):
    assert redis.__version__.split(".")[0] >= "8"
    r = default_client(shared_server.port)
    try:
        job_id = r.execute_command("ADDJOB", "r3q", "payload", 0, "RETRY", 0)
        assert job_id.startswith(b"D-")
        assert r.execute_command("QLEN", "r3q") == 1
        shown = r.execute_command("SHOW", job_id)
        assert isinstance(shown, dict)  # a RESP3 map
        assert shown[b"id"] == job_id and shown[b"queue"] == b"r3q"
        assert shown[b"body"] == b"payload" and shown[b"state"] == b"queued"
        assert shown[b"next-requeue-within"] is None
        [[queue, got_id, body]] = r.execute_command("GETJOB", "FROM", "r3q")
        assert (queue, got_id, body) == (b"r3q", job_id, b"payload")
        assert r.execute_command("ACKJOB", job_id) == 1
        assert r.execute_command("SHOW", job_id) is None
        assert r.execute_command("GETJOB", "NOHANG", "FROM", "r3q") is None
        info = r.info()
        assert info["tcp_port"] == shared_server.port
        hello = r.execute_command("HELLO", 3)
        assert hello[b"proto"] == 3 and hello[b"server"] == b"disquette"
    finally:
        r.close()


def test_redis_py_protocol_2_is_unchanged(shared_server):
    r = shared_server.client()  # protocol=2: no HELLO sent
    try:
        job_id = r.execute_command("ADDJOB", "r2q", "payload", 0)
        shown = r.execute_command("SHOW", job_id)
        assert isinstance(shown, list) and shown[:2] == [b"id", job_id]
        assert r.execute_command("ACKJOB", job_id) == 1
        assert r.execute_command("SHOW", job_id) is None
    finally:
        r.close()


def test_resp3_bytes_on_the_wire(shared_server):
    port = shared_server.port
    job_id = RawConnection(port).command("ADDJOB", "wireq", "x", 0, "RETRY", 0)
    hello, show_gone, nohang, shown, hello2, show2 = exchange(
        port,
        b"HELLO 3\r\n",
        b"SHOW D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1\r\n",
        b"GETJOB NOHANG FROM wire-empty\r\n",
        b"SHOW " + job_id + b"\r\n",
        b"HELLO 2\r\n",
        b"SHOW D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1\r\n",
    )
    assert hello.startswith(b"%7\r\n$6\r\nserver\r\n$9\r\ndisquette\r\n")
    assert b"$5\r\nproto\r\n:3\r\n" in hello and hello.endswith(b"$7\r\nmodules\r\n*0\r\n")
    assert show_gone == b"_\r\n" and nohang == b"_\r\n"
    assert shown.startswith(b"%16\r\n$2\r\nid\r\n") and b"next-requeue-within\r\n_\r\n" in shown
    assert hello2.startswith(b"*14\r\n$6\r\nserver\r\n") and b":2\r\n" in hello2
    assert show2 == b"$-1\r\n"


def test_blocked_getjob_timeout_is_a_resp3_null(shared_server):
    [hello, timeout] = exchange(
        shared_server.port, b"HELLO 3\r\n", b"GETJOB TIMEOUT 50 FROM wire-never\r\n"
    )
    assert hello.startswith(b"%7\r\n") and timeout == b"_\r\n"


def test_setname(shared_server):
    r = default_client(shared_server.port)
    try:
        r.execute_command("HELLO", 3, "SETNAME", "worker-7")
        assert r.execute_command("CLIENT", "GETNAME") == b"worker-7"
    finally:
        r.close()


@pytest.mark.parametrize(
    "args, error",
    [
        (["4"], "NOPROTO unsupported protocol version"),
        (["1"], "NOPROTO unsupported protocol version"),
        (["three"], "ERR Protocol version is not an integer or out of range"),
        (["03"], "ERR Protocol version is not an integer or out of range"),
        (["3", "SETNAME"], "ERR Syntax error in HELLO option 'SETNAME'"),
        (["3", "AUTH", "default"], "ERR Syntax error in HELLO option 'AUTH'"),
        (["3", "BOGUS"], "ERR Syntax error in HELLO option 'BOGUS'"),
        (["3", "SETNAME", "a b"], "ERR Client names cannot contain spaces"),
    ],
)
def test_hello_errors(shared_server, args, error):
    with RawConnection(shared_server.port) as c:
        assert c.command("HELLO", *args).startswith(error.encode())
        c.send(b"SHOW D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1\r\n")
        assert c.read_raw() == b"$-1\r\n"  # still RESP2


@pytest.fixture(scope="module")
def protected(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("node"), ["--requirepass", PASSWORD]) as srv:
        yield srv


def test_redis_py_8_defaults_with_a_password(protected):
    r = default_client(protected.port, password=PASSWORD)  # HELLO 3 AUTH default s3cret
    try:
        job_id = r.execute_command("ADDJOB", "authq", "x", 0)
        assert r.execute_command("QLEN", "authq") == 1
        assert r.execute_command("ACKJOB", job_id) == 1
    finally:
        r.close()
    with pytest.raises(redis.AuthenticationError):
        default_client(protected.port, password="wrong").execute_command("QLEN", "authq")


def test_hello_auth_errors(protected):
    with RawConnection(protected.port) as c:
        assert c.command("HELLO", "3").startswith(b"NOAUTH HELLO must be called")
        wrongpass = b"WRONGPASS invalid username-password pair or user is disabled."
        assert c.command("HELLO", "3", "AUTH", "default", "nope") == wrongpass
        assert c.command("HELLO", "3", "AUTH", "admin", PASSWORD) == wrongpass
        assert c.command("QLEN", "x").startswith(b"NOAUTH")
        assert c.command("HELLO").startswith(b"NOAUTH")  # Disque's greeting: AUTH first
        assert c.command("HELLO", "2", "AUTH", "default", PASSWORD)[:2] == [b"server", b"disquette"]
        assert c.command("QLEN", "x") == 0


def test_redis_cli_speaks_resp3(shared_server):
    def cli(*args: str) -> str:
        out = subprocess.run(
            ["redis-cli", "-3", "-p", str(shared_server.port), *args],
            capture_output=True,
            timeout=60,
            check=True,
        )
        return out.stdout.decode()

    job_id = cli("ADDJOB", "cli3q", "hi", "0", "RETRY", "0").strip()
    assert job_id.startswith("D-")
    shown = cli("--no-raw", "SHOW", job_id)
    assert '1# "id" => "' + job_id + '"' in shown
    assert '"next-requeue-within" => (nil)' in shown
    assert cli("--no-raw", "GETJOB", "NOHANG", "FROM", "cli3-empty").strip() == "(nil)"
    assert cli("--no-raw", "QLEN", "cli3q").strip() == "(integer) 1"
