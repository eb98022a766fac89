#!/usr/bin/env python3
"""Floor servers: what a benchmark measures when part of the work is taken away.

A ratio target says how close disquette must come to another figure; a floor says
how close *any* implementation of this design can come on this machine, by running
the same load against a server that skips the work in question. Two floors, each
started as ``python bench/floors.py MODE --port N [directives]``:

``echo``
    A bare uvloop + hiredis server that answers every Disque command with a constant
    reply (``ADDJOB`` a fixed ID, ``GETJOB`` one fixed job, ``ACKJOB`` 1, ...) and
    keeps no state: the per-request cost of reading and answering in Python, with no
    command work at all. ``bench/run.py --floor`` runs it beside disquette and Redis.

``free-replicas``
    disquette itself, except that a node receiving REPLJOBs confirms them with GOTJOB
    and stores nothing: the cost of a REPLICATE 3 job when its two copies are free.
    ``bench/cluster.py --floor`` runs it beside disquette; its REPLICATE 3 / REPLICATE
    1 ratio is the most any way of storing replicas could reach.

Neither is a usable server: they exist only to be measured.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

MODES = ("echo", "free-replicas")

_JOB_ID = b"D-01234567-0123456789abcdef01234567-05a1"
_CANNED = {
    b"ADDJOB": b"+" + _JOB_ID + b"\r\n",
    b"GETJOB": b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + _JOB_ID + b"\r\n$64\r\n" + b"x" * 64 + b"\r\n",
    b"ACKJOB": b":1\r\n",
    b"FASTACK": b":1\r\n",
    b"PING": b"+PONG\r\n",
    b"QLEN": b":100000000\r\n",
}
_INFO = b"# Server\r\ndisque_version:floor-echo\r\n"
_INFO_REPLY = b"$%d\r\n%s\r\n" % (len(_INFO), _INFO)
_OK = b"+OK\r\n"


class _Echo(asyncio.Protocol):
    """One client of the echo floor: a reply per complete request, written once per read."""

    def __init__(self) -> None:
        import hiredis

        self.reader = hiredis.Reader()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        out = []
        while (request := reader.gets()) is not False:
            name = request[0].upper() if isinstance(request, list) and request else b""
            reply = _CANNED.get(name)
            if reply is None:
                reply = _INFO_REPLY if name == b"INFO" else _OK
            out.append(reply)
        self.transport.write(b"".join(out))


def _port(argv: Sequence[str]) -> int:
    try:
        return int(argv[list(argv).index("--port") + 1])
    except (ValueError, IndexError):
        sys.exit("floors: echo needs --port N")


async def _serve_echo(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(_Echo, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def _confirm_only(node: Any, sender: bytes, messages: Sequence[Any]) -> None:
    """The REPLJOB handler of ``free-replicas``: GOTJOB for every REPLJOB that
    asks for one, with the ID read from the serialized job (bytes 4-44), nothing kept."""
    from disquette.core import messages as msg

    confirmed = tuple(m[1][4:44] for m in messages if not m[2] & msg.NOREPLY)
    if confirmed:
        node.send(sender, (msg.GOTJOB, confirmed))


def main(argv: Sequence[str]) -> None:
    if not argv or argv[0] not in MODES:
        sys.exit(f"usage: floors.py {{{'|'.join(MODES)}}} --port N [directives]")
    mode, rest = argv[0], list(argv[1:])
    if mode == "echo":
        import uvloop

        uvloop.run(_serve_echo(_port(rest)))
        return
    from disquette.core import replication
    from disquette.server.main import run

    replication.on_repljobs = _confirm_only  # read by replication.install at node start
    sys.exit(run(rest))


if __name__ == "__main__":
    main(sys.argv[1:])
