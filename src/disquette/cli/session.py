"""One node's asyncio client for a subcommand that reads the cluster through it
(``disquette failed``, ``disquette workflows``): its timeouts, and a node that cannot
be reached said in plain words (cli/reach.py) with exit status 1, the same for each.

Apart from cli/reach.py so that ``disquette-cli``, which words failures the same way
but talks to its node with the sync client, does not load the asyncio one.
"""

from __future__ import annotations

import argparse
import ssl
import sys
from collections.abc import Awaitable, Callable

from disquette.aio import Client
from disquette.cli.reach import unreachable
from disquette.client.errors import ConnectionFailedError, DisqueError
from disquette.client.topology import format_address, parse_address

CONNECT_TIMEOUT = 1.0  # seconds to connect to a node
SOCKET_TIMEOUT = 10.0  # seconds for a reply (a step of a reading may take long)


async def session(
    tool: str,
    args: argparse.Namespace,
    tls: ssl.SSLContext | None,
    work: Callable[[Client, str], Awaitable[int]],
) -> int:
    """``work(client, seed)``'s exit status, on a client of the node ``args.node``
    names (with ``args.password``); a node that cannot be reached or answers an
    error: said on stderr, exit status 1."""
    seed = format_address(parse_address(args.node))
    client = Client(seed, password=args.password, ssl=tls, connect_timeout=CONNECT_TIMEOUT,
                    socket_timeout=SOCKET_TIMEOUT)  # fmt: skip
    try:
        return await work(client, seed)
    except (DisqueError, OSError, TimeoutError) as exc:
        cause = exc.__cause__ if isinstance(exc, ConnectionFailedError) else None
        sys.stderr.write(f"disquette {tool}: {seed}: {unreachable(cause or exc)}\n")
        return 1
    finally:
        await client.close()
