"""The cluster bus over TLS (``tls-cluster yes``), for real: three nodes mesh and replicate
with mutual authentication (and the cluster-secret handshake inside the TLS link); a
plaintext node and a node whose certificate another CA signed are refused.

Each node keeps its plain client port as the tests' control channel; with
``tls-cluster yes`` it announces its TLS port, so nodes meet on TLS ports and the bus
listens on the TLS port + 10000.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.support.cluster import sees_mesh
from tests.support.ports import free_port
from tests.support.servers import ServerProcess, wait_for
from tests.support.tls import Pki

SECRET = "bus-secret"
REFUSED = "Refused the cluster bus link"


class TlsNode:
    """One server with a plain control port and a TLS port announced to the cluster."""

    def __init__(self, workdir: Path, pki: Pki, name: str, *more: str, ca_file: Path | None = None):
        workdir.mkdir()
        self.tls_port = free_port()
        identity = pki.issue(name)
        args = [
            "--tls-port", str(self.tls_port), "--tls-cert-file", str(identity.cert),
            "--tls-key-file", str(identity.key), "--tls-ca-cert-file", str(ca_file or pki.ca_file),
            "--cluster-secret", SECRET, *more,
        ]  # fmt: skip
        self.server = ServerProcess(workdir, args)
        self.server.wait_ready()
        self.client: redis.Redis = self.server.client()

    def nodes(self) -> str:
        return self.client.execute_command("CLUSTER", "NODES").decode()

    def refusals(self) -> int:
        return self.server.log().count(REFUSED)

    def meshed_with(self, ports: set[int]) -> bool:
        info = self.client.execute_command("CLUSTER", "INFO").decode()
        return sees_mesh(self.nodes(), info, ports)


@pytest.fixture
def nodes(tmp_path):
    made: list[TlsNode] = []
    yield made, tmp_path
    for node in made:
        node.client.close()
        node.server.stop()


def test_three_nodes_mesh_and_replicate_over_tls_and_refuse_strangers(nodes):
    made, base = nodes
    pki, other = Pki(base / "pki"), Pki(base / "other", "other")
    for i in range(3):
        made.append(TlsNode(base / f"n{i}", pki, f"node{i}", "--tls-cluster", "yes"))
    first = made[0]
    for node in made[1:]:
        assert first.client.execute_command("CLUSTER", "MEET", "127.0.0.1", node.tls_port)
    ports = {node.tls_port for node in made}
    wait_for(lambda: all(node.meshed_with(ports) for node in made), 60, what="a TLS mesh")
    job = first.client.execute_command("ADDJOB", "q", "replicated over tls", 0, "REPLICATE", 3)
    for node in made[1:]:
        assert node.client.execute_command("SHOW", job) is not None

    # A plaintext node meets the cluster: its bus link is refused by the TLS bus.
    before = first.refusals()
    plain = TlsNode(base / "plain", pki, "plain")  # no tls-cluster: a plaintext bus
    made.append(plain)
    assert plain.client.execute_command("CLUSTER", "MEET", "127.0.0.1", first.tls_port)
    wait_for(lambda: first.refusals() > before, 60, what="the plaintext peer refused")

    # A node whose certificate another CA signed (it trusts both CAs, so only its own
    # certificate is the problem) is refused too.
    bundle = base / "both.crt"
    bundle.write_bytes(pki.ca_file.read_bytes() + other.ca_file.read_bytes())
    stranger = TlsNode(base / "stranger", other, "stranger", "--tls-cluster", "yes",
                       ca_file=bundle)  # fmt: skip
    made.append(stranger)
    before = first.refusals()
    assert stranger.client.execute_command("CLUSTER", "MEET", "127.0.0.1", first.tls_port)
    wait_for(lambda: first.refusals() > before, 60, what="the other CA's peer refused")
    assert "certificate verify failed" in first.server.log().rsplit(REFUSED, 1)[1].splitlines()[0]

    # Neither joined: the three nodes still see each other and nobody else.
    for node in made[:3]:
        listed = {int(line.split()[1].rsplit(":", 1)[1]) for line in node.nodes().splitlines()}
        assert listed == ports
        assert node.meshed_with(ports)
