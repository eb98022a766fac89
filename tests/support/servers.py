"""Starting and stopping real ``disquette-server`` processes for tests.

Every server binds 127.0.0.1 on a port the test picks free, runs in its own
temporary directory, and is stopped (SIGTERM, then SIGKILL) by whoever started
it. Readiness is a condition (PING answered), waited for with a deadline.
``DISQUETTE_TEST_SERVER_ARGS`` adds directives to every server a run starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import redis

from tests.support.ports import free_port

SRC = Path(__file__).resolve().parents[2] / "src"


def redis_cli(port: int, *args: str) -> str:
    """What redis-cli (a real third-party client) prints for one command, stripped."""
    cli = shutil.which("redis-cli")
    assert cli is not None, "redis-cli is not installed (make tools installs it)"
    result = subprocess.run([cli, "-p", str(port), *args], capture_output=True, text=True,
                            timeout=30, check=True)  # fmt: skip
    return result.stdout.strip()


def wait_for(
    condition,
    timeout: float = 30.0,
    interval: float = 0.02,
    what: str | Callable[[], str] = "condition",
):
    """Poll ``condition()`` until it returns a truthy value; fail after ``timeout``
    (``what`` names the condition; a callable is asked at the failure, to show the state)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(interval)


class ServerProcess:
    def __init__(
        self,
        workdir: Path,
        args: list[str] | None = None,
        port: int | None = None,
        config_file: Path | None = None,
        stdin: bytes | None = None,
        command: list[str] | None = None,
        http: bool | int = False,
        bind: str | None = "127.0.0.1",
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        #: The HTTP port (``http=True`` picks a free one, an int is kept, as on restart).
        self.http_port = (free_port() if http is True else int(http)) if http else 0
        self.workdir = workdir
        self.log_path = workdir / "server.log"
        cmd = list(command or [sys.executable, "-m", "disquette.server"])
        if config_file is not None:
            cmd.append(str(config_file))
        elif stdin is not None:
            cmd.append("-")
        cmd += ["--port", str(self.port)]
        if bind is not None:  # (None: every interface, as with no bind directive)
            cmd += ["--bind", bind]
        if self.http_port:
            cmd += ["--http-port", str(self.http_port)]
        cmd += args or []
        # Every server of a run given more directives (``make test`` runs Disque's
        # compatibility tests again with every job past a queue's head on disk).
        cmd += os.environ.get("DISQUETTE_TEST_SERVER_ARGS", "").split()
        environment = dict(os.environ)
        environment["PYTHONPATH"] = str(SRC) + os.pathsep + environment.get("PYTHONPATH", "")
        # ``env`` wins: another release's sources (PYTHONPATH), a rehearsal's variables.
        environment.update(env or {})
        self._log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=environment,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        if stdin is not None:
            self.proc.stdin.write(stdin)
            self.proc.stdin.close()

    @property
    def http_url(self) -> str:
        """The base URL of the node's HTTP port (started with ``http=True``)."""
        assert self.http_port, "this server was started without its HTTP port"
        return f"http://127.0.0.1:{self.http_port}"

    def client(self, **kwargs) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 30)
        return redis.Redis(host="127.0.0.1", port=self.port, protocol=2, **kwargs)

    def wait_ready(self, timeout: float = 30.0) -> ServerProcess:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    data = s.recv(100)
                    return data.startswith((b"+PONG", b"-NOAUTH", b"-LOADING"))
            except OSError:
                return False

        wait_for(ready, timeout, what=f"server on port {self.port}")
        if self.http_port:
            wait_for(self._http_listening, timeout, what=f"HTTP port {self.http_port}")
        return self

    def _http_listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.http_port), timeout=1):
                return True
        except OSError:
            return False

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@contextlib.contextmanager
def running_server(
    workdir: Path, args: list[str] | None = None, **kwargs
) -> Iterator[ServerProcess]:
    """A started server, stopped on exit. When the test did not choose the port, a
    port taken by someone else between the pick and the bind is retried elsewhere."""
    attempts = 1 if kwargs.get("port") else 3
    for attempt in range(attempts):
        server = ServerProcess(workdir, args, **kwargs)
        try:
            server.wait_ready()
            break
        except AssertionError:
            server.stop()
            if attempt + 1 == attempts or "already in use" not in server.log():
                raise
    try:
        yield server
    finally:
        server.stop()
