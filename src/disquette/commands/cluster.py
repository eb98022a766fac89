"""HELLO and CLUSTER (reference sections 5.1 and 5.2), for a node alone.

The node table of a cluster of one holds only this node: HELLO lists it with
priority 1 (100 when leaving), CLUSTER NODES prints its line, CLUSTER INFO its
counters. Subcommands that change membership arrive with the cluster bus.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from disquette.commands.table import command
from disquette.core.errors import DisqueError
from disquette.protocol import reply

if TYPE_CHECKING:
    from disquette.commands.state import ServerState
    from disquette.core.client import Client

WRONG_SUBCOMMAND = reply.err("Wrong CLUSTER subcommand or number of arguments")
WRONG_LEAVING_ARG = reply.err("Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")


@command("hello", 1, "rF")
def hello(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    node = state.node
    priority = b"100" if node.leaving else b"1"
    me = reply.bulk_array([node.myself, node.ip, b"%d" % node.port, priority])
    return b"*3\r\n" + reply.integer(1) + reply.bulk(node.myself) + me


def nodes_lines(state: ServerState) -> bytes:
    node = state.node
    flags = b"myself,leaving" if node.leaving else b"myself"
    return b"%s %s:%d %s 0 0 connected\n" % (node.myself, node.ip, node.port, flags)


@command("cluster", -2, "ar")
def cluster(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    sub = argv[1].lower()
    n = len(argv)
    node = state.node
    if sub == b"myid" and n == 2:
        return reply.bulk(node.myself)
    if sub == b"nodes" and n == 2:
        return reply.bulk(nodes_lines(state))
    if sub == b"info" and n == 2:
        info = (
            "cluster_state:ok\r\n"
            f"cluster_known_nodes:1\r\n"
            f"cluster_reachable_nodes:{len(node.reachable_nodes())}\r\n"
            f"cluster_size:{node.cluster_size()}\r\n"
            "cluster_stats_messages_sent:0\r\n"
            "cluster_stats_messages_received:0\r\n"
        )
        return reply.bulk(info.encode())
    if sub == b"leaving" and n == 2:
        return reply.simple(b"yes" if node.leaving else b"no")
    if sub == b"leaving" and n == 3:
        value = argv[2].lower()
        if value not in (b"yes", b"no"):
            raise DisqueError(WRONG_LEAVING_ARG)
        node.leaving = value == b"yes"
        return reply.OK
    raise DisqueError(WRONG_SUBCOMMAND)
