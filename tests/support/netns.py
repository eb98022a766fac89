"""Several hosts on one machine: network namespaces, each a host with its own address.

:class:`Hosts` makes ``count`` namespaces joined by a bridge that lives in one more
namespace, the *hub* (the root namespace is left alone: no interface, route or file
of it changes but ``/etc/netns/<name>/``, which the test makes and removes). Host i has
the address ``<subnet>.<i + 1>`` on its ``eth0``; the hub has ``<subnet>.254``. Each
host resolves the others' names (``host0`` ...) through its own ``/etc/hosts``:
``ip netns exec`` mounts ``/etc/netns/<namespace>/hosts`` over it, so a name can be
moved to another address (:meth:`Hosts.move`). The subnet and the names are picked at
random, so that two test runs on one machine never meet. Needs root (CI runs as root).
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support.servers import SRC, wait_for

NETNS_ETC = Path("/etc/netns")


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout  # fmt: skip


class Hosts:
    def __init__(self, count: int) -> None:
        tag = f"dq{random.randrange(16**6):06x}"
        self.hub = f"{tag}-hub"
        self.names = [f"{tag}-h{i}" for i in range(count)]
        self.subnet = f"10.{random.randrange(100, 250)}.{random.randrange(250)}"
        self.addresses = {f"host{i}": f"{self.subnet}.{i + 1}" for i in range(count)}
        self._made: list[str] = []
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self) -> None:
        ip("netns", "add", self.hub)
        self._made.append(self.hub)
        ip("-n", self.hub, "link", "set", "lo", "up")
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "addr", "add", f"{self.subnet}.254/24", "dev", "br0")
        ip("-n", self.hub, "link", "set", "br0", "up")
        for i, ns in enumerate(self.names):
            ip("netns", "add", ns)
            self._made.append(ns)
            ip("-n", self.hub, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0",
               "netns", ns)  # fmt: skip
            ip("-n", self.hub, "link", "set", f"v{i}", "master", "br0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "addr", "add", f"{self.subnet}.{i + 1}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
        self._write_hosts()

    def _write_hosts(self) -> None:
        text = "127.0.0.1 localhost\n" + "".join(
            f"{address} {name}\n" for name, address in self.addresses.items()
        )
        for ns in self._made:
            (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / ns / "hosts").write_text(text)

    def move(self, index: int, address: str) -> None:
        """Host ``index`` gets ``address`` instead of its own, and its name follows."""
        ns, name = self.names[index], f"host{index}"
        # (the old one first: deleting a primary address deletes its secondaries)
        ip("-n", ns, "addr", "del", f"{self.addresses[name]}/24", "dev", "eth0")
        ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        self.addresses[name] = address
        self._write_hosts()

    def add_address(self, index: int, address: str) -> None:
        ip("-n", self.names[index], "addr", "add", f"{address}/24", "dev", "eth0")

    def command(self, ns: str, *argv: str) -> list[str]:
        """``argv`` run in namespace ``ns``, this checkout's sources first on the path."""
        return ["ip", "netns", "exec", ns, "env", f"PYTHONPATH={SRC}:{SRC.parent}", *argv]

    def cli(self, ns: str, address: str, *args: str) -> str:
        """redis-cli in namespace ``ns`` against ``address`` (ip:port)."""
        host, port = address.rsplit(":", 1)
        result = subprocess.run(
            self.command(ns, "redis-cli", "-h", host, "-p", port, *args),
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        return result.stdout.strip()

    def start(self, index: int, workdir: Path, *args: str) -> subprocess.Popen:
        """A node on host ``index``, listening on its address and loopback, port 7711."""
        workdir.mkdir(parents=True, exist_ok=True)
        ns = self.names[index]
        log = open(workdir / "server.log", "ab")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            self.command(ns, sys.executable, "-m", "disquette.server", "--port", "7711",
                         "--bind", "0.0.0.0", "--protected-mode", "no", *args),
            cwd=workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 30
        while self.cli(ns, "127.0.0.1:7711", "PING") != "PONG":
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError((workdir / "server.log").read_text(errors="replace"))
            time.sleep(0.05)
        return proc

    def close(self) -> None:
        for ns in self._made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        self._made.clear()


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


__all__ = ["Hosts", "stop", "wait_for"]
