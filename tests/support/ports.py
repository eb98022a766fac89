"""Ports for the servers tests start: free, outside the kernel's ephemeral range, and
never the same in two pytest-xdist workers.

Asking the kernel for port 0 hands out a port from the ephemeral range, the range every
outgoing connection (a client's, a bus link's) also takes its local port from: a port
picked that way can be taken by some connection before the server binds it, and two
workers running side by side can be handed the same one. Here every port comes from
10000-18999 instead (its bus port, +10000, from 20000-28999; the HTTP port a local
cluster gives a node, +1000, from 11000-19999: all below Linux's ephemeral range, which
starts at 32768), and each worker takes its own block of it (worker k of n: the k-th
n-th), walked from a random start, so that two workers never compete and one worker
does not go back to a port it closed a moment ago. Test sessions run side by side
(``make test``'s three) are given parts of the range by ``DISQUETTE_TEST_PORTS``
(``low-high``, inside 10000-19000).
"""

from __future__ import annotations

import itertools
import os
import random
import socket

# Client ports; + 1000 (HTTP) and + 10000 (bus) stay below 32768.
LOW, HIGH = (int(n) for n in os.environ.get("DISQUETTE_TEST_PORTS", "10000-19000").split("-"))
SIDES = (0, 1000, 10000)  # a client port, the HTTP port beside it, its bus port


def _share() -> tuple[int, int]:
    """This process's worker index and the number of workers (0 and 1 without xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return int(worker.removeprefix("gw") or 0) % count, count


def _candidates() -> itertools.cycle[int]:
    index, count = _share()
    size = (HIGH - LOW) // count
    mine = range(LOW + index * size, LOW + (index + 1) * size)
    start = random.randrange(len(mine))
    return itertools.cycle([*mine[start:], *mine[:start]])


_next = _candidates()


def bindable(port: int) -> bool:
    """Whether ``port`` can be bound on 127.0.0.1 now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int = 1) -> int:
    """The first of ``n`` consecutive ports of this worker's block whose HTTP and bus
    ports are free too (tools/local_cluster.py numbers its nodes' ports that way)."""
    index, count = _share()
    end = LOW + (index + 1) * ((HIGH - LOW) // count)
    for _ in range((HIGH - LOW) // count):
        base = next(_next)
        ports = range(base, base + n)
        if ports[-1] < end and all(bindable(p + side) for p in ports for side in SIDES):
            return base
    raise RuntimeError("no free ports")


def free_port() -> int:
    """One free port (with its HTTP and bus ports free too)."""
    return free_ports(1)
