"""Protected mode (beyond Disque, as in modern Redis): with no ``bind`` and no
``requirepass``, only loopback clients are served; others are told why.

Real non-loopback peers would need another host, so these tests give the real
connection class a transport that reports the peer address under test.
"""

from __future__ import annotations

import asyncio

import pytest

from disquette.config import Config
from disquette.server.app import Server
from disquette.server.connection import PROTECTED_MODE, ClientConnection
from disquette.server.log import Log


class FakeTransport:
    def __init__(self, peer: tuple[str, int]) -> None:
        self.peer = peer
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str) -> object:
        return self.peer if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0


def connect(config: Config, host: str) -> FakeTransport:
    """Connect from ``host`` and send PING; what came back by the end of the turn."""

    async def main() -> FakeTransport:
        server = Server(config, Log("warning"))
        transport = FakeTransport((host, 40000))
        conn = ClientConnection(server)
        conn.connection_made(transport)
        if not transport.closed:
            conn.data_received(b"PING\r\n")
        await asyncio.sleep(0)  # the end of the turn: the outbox writes the replies
        return transport

    return asyncio.run(main())


@pytest.mark.parametrize("host", ["10.1.2.3", "192.168.0.7", "2001:db8::1"])
def test_remote_clients_are_refused_with_an_explanation(host):
    transport = connect(Config(), host)
    assert transport.closed
    assert transport.written == PROTECTED_MODE
    assert transport.written.startswith(b"-DENIED ")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_loopback_clients_are_served(host):
    transport = connect(Config(), host)
    assert not transport.closed
    assert transport.written == b"+PONG\r\n"


@pytest.mark.parametrize(
    "setting", [("bind", ["0.0.0.0"]), ("requirepass", "pw"), ("protected_mode", False)]
)
def test_bind_password_or_switch_lifts_protection(setting):
    config = Config()
    setattr(config, *setting)
    transport = connect(config, "10.1.2.3")
    assert not transport.closed
    expected = (
        b"-NOAUTH Authentication required.\r\n" if setting[0] == "requirepass" else b"+PONG\r\n"
    )
    assert transport.written == expected
