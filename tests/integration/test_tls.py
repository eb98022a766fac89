"""TLS on the client port, for real: redis-py, redis-cli, the project's clients and tools.

Every certificate comes from a throwaway CA made by the test run (tests/support/tls.py).
Servers listen on their plain port (the tests' control channel, as ``port`` beside
``tls-port`` in production) and on a TLS port, except where ``port 0`` is the point.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import redis
from cryptography import x509

from disquette import Client, tls_context
from disquette.aio import Client as AsyncClient
from tests.support.ports import free_port
from tests.support.servers import SRC, ServerProcess, running_server, wait_for
from tests.support.tls import Identity, Pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("other"), "other")


@pytest.fixture(scope="module")
def server_id(pki: Pki) -> Identity:
    return pki.issue("server")


@pytest.fixture(scope="module")
def client_id(pki: Pki) -> Identity:
    return pki.issue("client")


def tls_server(workdir: Path, pki: Pki, identity: Identity, *more: str, **kwargs):
    """A server (to start with ``with``) with a plain port and a TLS port, and that port."""
    tls_port = free_port()
    args = pki.server_args(identity, "--tls-port", str(tls_port), *more)
    return running_server(workdir, args, **kwargs), tls_port


def tls_redis(port: int, pki: Pki, identity: Identity | None = None, **kwargs) -> redis.Redis:
    """redis-py over TLS (``ssl=True``), trusting the test CA."""
    extra = {}
    if identity is not None:
        extra = {"ssl_certfile": str(identity.cert), "ssl_keyfile": str(identity.key)}
    return redis.Redis(
        host="127.0.0.1", port=port, protocol=2, ssl=True, ssl_ca_certs=str(pki.ca_file),
        socket_timeout=30, **extra, **kwargs,
    )  # fmt: skip


def peer_serial(port: int, pki: Pki, identity: Identity | None = None) -> int:
    """The serial number of the certificate a new TLS connection to ``port`` is shown."""
    context = pki.client_context(identity)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """A tool of the project (``python -m disquette.cli.<module>``) with this checkout."""
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, timeout=60, env=env
    )


def test_redis_py_and_redis_cli_over_tls(tmp_path, pki, server_id):
    server, tls_port = tls_server(tmp_path, pki, server_id, "--tls-auth-clients", "no")
    with server as srv:
        r = tls_redis(tls_port, pki)
        job = r.execute_command("ADDJOB", "q", "over tls", 0)
        assert job.startswith(b"D-")
        assert srv.client().execute_command("QLEN", "q") == 1  # one node, two ports
        got = subprocess.run(
            ["redis-cli", "-p", str(tls_port), "--tls", "--cacert", str(pki.ca_file),
             "GETJOB", "NOHANG", "FROM", "q"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        assert "over tls" in got and job.decode() in got
        # Plaintext on the TLS port is not a client: the handshake fails, the link closes.
        with pytest.raises(redis.ConnectionError):
            redis.Redis(port=tls_port, protocol=2, socket_timeout=30).ping()
        assert r.ping()
        assert srv.client().config_get("tls-*")["tls-port"] == str(tls_port)


def test_auth_clients_yes_wants_a_certificate_of_the_ca(tmp_path, pki, other_ca, server_id,
                                                          client_id):  # fmt: skip
    stranger = other_ca.issue("stranger")
    server, tls_port = tls_server(tmp_path, pki, server_id)  # tls-auth-clients yes: default
    with server as srv:
        assert tls_redis(tls_port, pki, client_id).ping()
        for who in (None, stranger):
            with pytest.raises(redis.ConnectionError):
                tls_redis(tls_port, pki, who).ping()
        denied = subprocess.run(
            ["redis-cli", "-p", str(tls_port), "--tls", "--cacert", str(pki.ca_file), "PING"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert "PONG" not in denied.stdout
        # optional: no certificate is fine, a certificate of another CA is not.
        assert srv.client().config_set("tls-auth-clients", "optional")
        assert tls_redis(tls_port, pki).ping()
        with pytest.raises(redis.ConnectionError):
            tls_redis(tls_port, pki, stranger).ping()


def test_silent_and_slow_handshakes_do_not_stall_others(tmp_path, pki, server_id):
    server, tls_port = tls_server(tmp_path, pki, server_id, "--tls-auth-clients", "no")
    with server:
        silent = [socket.create_connection(("127.0.0.1", tls_port)) for _ in range(20)]
        slow = socket.create_connection(("127.0.0.1", tls_port))
        slow.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, and no more
        try:
            r = tls_redis(tls_port, pki)
            for i in range(200):  # served while 21 handshakes are pending
                assert r.execute_command("ADDJOB", "busy", f"job {i}", 0).startswith(b"D-")
            assert r.execute_command("QLEN", "busy") == 200
            assert peer_serial(tls_port, pki) == server_id.serial()
        finally:
            for sock in [*silent, slow]:
                sock.close()


def test_config_set_reloads_the_certificate_for_new_connections(tmp_path, pki, server_id):
    # The server's files, rotated in place as certificate tools do.
    cert, key = tmp_path / "node.crt", tmp_path / "node.key"
    first = pki.issue("first", cert, key)
    old_serial = first.serial()
    config = tmp_path / "disque.conf"
    config.write_text("")
    server, tls_port = tls_server(tmp_path, pki, first, "--tls-auth-clients", "no",
                                  config_file=config)  # fmt: skip
    with server as srv:
        before = tls_redis(tls_port, pki)
        assert before.ping()
        assert peer_serial(tls_port, pki) == old_serial
        second = pki.issue("second", cert, key)
        assert second.serial() != old_serial
        control = srv.client()
        assert control.config_set("tls-cert-file", str(cert))
        assert peer_serial(tls_port, pki) == second.serial()  # a new connection: the new one
        assert before.ping()  # the open one goes on with its own
        # A file that cannot be read is refused, naming it; the current context stays.
        with pytest.raises(redis.ResponseError, match=r"Failed to load certificate: /nope\.crt"):
            control.config_set("tls-cert-file", "/nope.crt")
        assert control.config_get("tls-cert-file")["tls-cert-file"] == str(cert)
        assert peer_serial(tls_port, pki) == second.serial()
        with pytest.raises(redis.ResponseError, match="Invalid argument"):
            control.config_set("tls-protocols", "SSLv3")
        assert control.config_set("tls-protocols", "TLSv1.3")
        control.execute_command("CONFIG", "REWRITE")
        written = config.read_text()
        assert f"tls-port {tls_port}" in written and 'tls-protocols "TLSv1.3"' in written


def test_bad_tls_settings_stop_the_server_with_a_reason(tmp_path, pki, server_id):
    cases = {
        "missing": (["--tls-cert-file", str(tmp_path / "none.crt")],
                    f"Failed to load certificate: {tmp_path / 'none.crt'}"),
        "wrong key": (["--tls-key-file", str(pki.issue("other").key)],
                      "the key does not match the certificate"),
        "no ca": (["--tls-ca-cert-file", ""], "Either tls-ca-cert-file or tls-ca-cert-dir"),
    }  # fmt: skip
    for name, (override, reason) in cases.items():
        workdir = tmp_path / name.replace(" ", "-")
        workdir.mkdir()
        args = pki.server_args(server_id, "--tls-port", str(free_port()), *override)
        server = ServerProcess(workdir, args)
        assert server.proc.wait(60) == 1, name
        log = server.log()
        server.stop()
        assert reason in log and "Failed to configure TLS" in log, log
    banner = ServerProcess(tmp_path, ["--tls-protocols", "TLSv1.2 SSLv3"])
    assert banner.proc.wait(60) == 1
    assert "Invalid tls-protocols specified" in banner.log()
    banner.stop()


def test_tls_only_node_with_the_project_clients_cli_and_worker(tmp_path, pki, server_id,
                                                                 client_id):  # fmt: skip
    tls_port = free_port()
    args = pki.server_args(server_id, "--port", "0", "--tls-port", str(tls_port))
    server = ServerProcess(tmp_path, args)
    try:
        context = tls_context(str(pki.ca_file), str(client_id.cert), str(client_id.key))

        def ready() -> bool:
            try:
                return peer_serial(tls_port, pki, client_id) > 0
            except OSError:
                assert server.proc.poll() is None, server.log()
                return False

        wait_for(ready, what="the TLS port")
        seeds = f"127.0.0.1:{tls_port}"
        with Client(seeds, tls=True, tls_ca_cert=str(pki.ca_file), tls_cert=str(client_id.cert),
                    tls_key=str(client_id.key)) as client:  # fmt: skip
            job = client.add_job("work", b"from the sync client")
            assert client.show(job).queue == "work"

        async def aio() -> int:
            async with AsyncClient(seeds, ssl=context) as client:
                await client.add_job("work", b"from the asyncio client")
                return await client.qlen("work")

        assert asyncio.run(aio()) == 2
        tls_args = ["--tls", "--cacert", str(pki.ca_file), "--cert", str(client_id.cert),
                    "--key", str(client_id.key)]  # fmt: skip
        added = cli("-m", "disquette.cli.cli_tool", "-p", str(tls_port), *tls_args,
                    "addjob", "work", "from the cli", "0")  # fmt: skip
        assert added.returncode == 0 and added.stdout.startswith("D-"), added.stderr
        refused = cli("-m", "disquette.cli.cli_tool", "-p", str(tls_port), "ping")
        assert "PONG" not in refused.stdout
        # The worker takes the three jobs over TLS and writes each body to a file.
        handler = tmp_path / "tls_handler.py"
        handler.write_text(
            "from pathlib import Path\n"
            "def handle(job):\n"
            f"    with open({str(tmp_path / 'done.txt')!r}, 'ab') as f:\n"
            "        f.write(job.body + b'\\n')\n"
        )
        worker = subprocess.Popen(
            [sys.executable, "-m", "disquette.cli.main", "worker", "tls_handler:handle", "work",
             "-s", seeds, *tls_args],
            cwd=tmp_path, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        done = tmp_path / "done.txt"
        try:
            wait_for(lambda: done.exists() and len(done.read_bytes().splitlines()) == 3,
                     what="the worker's three jobs")  # fmt: skip
        finally:
            worker.terminate()
            worker.wait(60)
        assert sorted(done.read_bytes().splitlines()) == [
            b"from the asyncio client",
            b"from the cli",
            b"from the sync client",
        ]
    finally:
        server.stop()


def test_https_dashboard_port(tmp_path, pki, server_id):
    server, _ = tls_server(tmp_path, pki, server_id, "--tls-auth-clients", "optional",
                           "--tls-http", "yes", http=True)  # fmt: skip
    with server as srv:
        http_port = srv.http_port
        context = pki.client_context()
        url = f"https://127.0.0.1:{http_port}/api/cluster"
        with urllib.request.urlopen(url, context=context, timeout=30) as reply:
            assert reply.status == 200
            json.load(reply)
        with pytest.raises(OSError):  # plain HTTP is not spoken there any more
            urllib.request.urlopen(f"http://127.0.0.1:{http_port}/api/cluster", timeout=30)
        # CONFIG SET tls-http no serves plain HTTP again.
        assert srv.client().config_set("tls-http", "no")
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/api/cluster", timeout=30) as r:
            assert r.status == 200
