"""The HTTP port against real servers: the directives (command line, CONFIG GET/SET/
REWRITE), the listener's lifecycle (restarted by CONFIG SET, a port in use is a
CONFIG SET error and never a crash, and stops the server at start) and the rules every
request goes through (password, protected mode, CSRF), with real HTTP requests (urllib)."""

from __future__ import annotations

import base64
import socket
import urllib.error
import urllib.request

import pytest
import redis

from disquette.http.server import credentials_of, http_protected, is_loopback, same_origin
from tests.support.servers import ServerProcess, free_port, running_server, wait_for


def request(url: str, method: str = "GET", headers: dict[str, str] | None = None,
            body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    """(status, headers, body) of one HTTP request; errors are replies, not exceptions."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_directives_on_the_command_line_and_config_get(tmp_path):
    with running_server(tmp_path, http=True) as server:
        c = server.client()
        assert c.config_get("http-*") == {"http-port": str(server.http_port), "http-bind": ""}
        status, headers, _ = request(server.http_url + "/nothing-here")
        assert status == 404 and headers["Content-Type"].startswith("application/json")


def test_off_by_default(tmp_path):
    with running_server(tmp_path) as server:
        assert server.client().config_get("http-port") == {"http-port": "0"}
        assert "HTTP port" not in server.log()


def test_config_set_restarts_the_listener_and_rewrite_keeps_it(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text("")
    with running_server(tmp_path, config_file=conf) as server:
        c = server.client()
        port, other = free_port(), free_port()
        c.config_set("http-port", port)
        wait_for(lambda: listening(port), what="the HTTP port open")
        c.config_set("http-port", other)
        wait_for(lambda: listening(other) and not listening(port), what="the port moved")
        c.config_set("http-bind", "127.0.0.1")
        assert request(f"http://127.0.0.1:{other}/x")[0] == 404
        c.execute_command("CONFIG", "REWRITE")
        text = conf.read_text()
        assert f"http-port {other}\n" in text and "http-bind 127.0.0.1\n" in text
        c.config_set("http-port", 0)
        wait_for(lambda: not listening(other), what="the HTTP port closed")


def test_a_port_in_use_is_an_error_never_a_crash(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        busy = taken.getsockname()[1]
        with running_server(tmp_path / "a", http=True) as server:
            c = server.client()
            with pytest.raises(redis.ResponseError, match="Creating HTTP listening socket"):
                c.config_set("http-port", busy)
            # The old listener still serves, CONFIG GET still says it.
            assert c.config_get("http-port") == {"http-port": str(server.http_port)}
            assert request(server.http_url + "/x")[0] == 404
            with pytest.raises(redis.ResponseError, match="Creating HTTP listening socket"):
                c.config_set("http-bind", "192.0.2.254")  # an address this host does not have
            assert request(server.http_url + "/x")[0] == 404  # the old one opened again
        # At start, a port in use is fatal, as the client port's: the node would run
        # without its dashboard and API, one line in its log saying so.
        server = ServerProcess(tmp_path / "b", ["--http-port", str(busy)])
        assert server.proc.wait(60) == 1
        server.stop()
        assert f"Creating HTTP listening socket 127.0.0.1:{busy}: Address already in use" in (
            server.log()
        )


def test_requirepass_basic_and_bearer(tmp_path):
    with running_server(tmp_path, ["--requirepass", "s3cret"], http=True) as server:
        url = server.http_url + "/x"
        status, headers, body = request(url)
        assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="disquette"'
        assert b"NOAUTH" in body
        wrong = base64.b64encode(b"admin:nope").decode()
        assert request(url, headers={"Authorization": f"Basic {wrong}"})[0] == 401
        assert request(url, headers={"Authorization": "Bearer nope"})[0] == 401
        right = base64.b64encode(b"default:s3cret").decode()  # (an ACL user)
        assert request(url, headers={"Authorization": f"Basic {right}"})[0] == 404
        assert request(url, headers={"Authorization": "Bearer s3cret"})[0] == 404


def test_csrf_rule_on_posts(tmp_path):
    with running_server(tmp_path, http=True) as server:
        url = server.http_url + "/x"
        assert request(url, "POST")[0] == 403
        action = {"X-Disquette-Action": "1"}
        foreign = {**action, "Origin": "http://evil.example"}
        assert request(url, "POST", foreign)[0] == 403
        assert request(url, "POST", {**action, "Origin": "null"})[0] == 403
        own = {**action, "Origin": server.http_url}
        assert request(url, "POST", own)[0] == 404  # past the rule: no such route
        assert request(url, "POST", action)[0] == 404


def this_hosts_address() -> str | None:
    """A non-loopback address of this machine (the one its default route uses)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # UDP: nothing is sent, a route is picked
            address = probe.getsockname()[0]
    except OSError:
        return None
    return None if is_loopback(address) else address


def test_protected_mode_refuses_other_peers(tmp_path):
    address = this_hosts_address()
    if address is None:
        pytest.skip("no non-loopback address here (the rule is unit-checked below)")
    with running_server(tmp_path, bind=None, http=True) as server:  # no bind at all
        outside = f"http://{address}:{server.http_port}/x"
        status, _, body = request(outside)
        assert status == 403 and b"protected mode" in body
        assert request(server.http_url + "/x")[0] == 404  # loopback: served
        server.client().config_set("requirepass", "pw")
        assert request(outside)[0] == 401  # a password lifts protected mode
        assert request(outside, headers={"Authorization": "Bearer pw"})[0] == 404


class Cfg:
    def __init__(self, **kw):
        self.protected_mode = True
        self.bind: list[str] = []
        self.http_bind: list[str] = []
        self.requirepass = None
        self.__dict__.update(kw)


def test_protected_mode_rule_and_peer_check():
    assert http_protected(Cfg())
    assert not http_protected(Cfg(protected_mode=False))
    assert not http_protected(Cfg(bind=["10.0.0.1"]))
    assert not http_protected(Cfg(http_bind=["10.0.0.1"]))
    assert not http_protected(Cfg(requirepass="x"))
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.2")
    assert not is_loopback("10.1.2.3") and not is_loopback(None)


def test_authorization_header_parsing():
    assert credentials_of("Bearer abc") == (b"default", b"abc")
    assert credentials_of("basic " + base64.b64encode(b"u:p:q").decode()) == (b"u", b"p:q")
    assert credentials_of("Basic " + base64.b64encode(b":pw").decode()) == (b"default", b"pw")
    assert credentials_of("Basic " + base64.b64encode(b"nocolon").decode()) is None
    assert credentials_of("Basic !!!") is None
    assert credentials_of("Digest x") is None
    assert same_origin("http://h:1", "h:1") and not same_origin("http://h:2", "h:1")
    assert not same_origin("null", "h:1") and not same_origin("ftp://h:1", "h:1")


def test_dashboard_files_load_without_the_password(tmp_path):
    """The page and its files hold no data: they load, and the page asks for the
    password itself; everything else still needs it, however the path is spelled."""
    with running_server(tmp_path, ["--requirepass", "s3cret"], http=True) as server:
        for path in ("/", "/static/dashboard.js", "/static/dashboard.css"):
            assert request(server.http_url + path)[0] == 200
        for path in ("/static/../api/cluster", "/static/%2e%2e/api/cluster", "/api/cluster"):
            assert request(server.http_url + path)[0] == 401
        assert request(server.http_url + "/", method="POST")[0] in (401, 405)


def test_every_reply_carries_the_security_headers(tmp_path):
    """The page, the API, an error and /metrics: the policy allows the node's own files
    only, so markup that slipped into the page could load and run nothing."""
    with running_server(tmp_path, http=True) as server:
        for path in ("/", "/static/dashboard.js", "/api/cluster", "/api/nowhere", "/metrics"):
            status, headers, _ = request(server.http_url + path)
            assert status in (200, 404), (path, status)
            policy = headers["Content-Security-Policy"]
            assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy, path
            assert "unsafe-inline" not in policy
            assert headers["X-Content-Type-Options"] == "nosniff"
