"""HELLO and CLUSTER (reference sections 5.1 and 5.2).

HELLO lists every node of the table with a priority clients use to pick one
(1 fine, 5 no link, 10 PFAIL, 100 FAIL or leaving). CLUSTER reads and changes
the membership table of :mod:`disquette.core.membership`: MEET starts a
handshake, FORGET and RESET drop nodes (RESET also flushes every job and
queue), LEAVING sets the flag every header announces, SAVECONFIG writes
nodes.conf. Argument checks and error texts are Disque's.

Beyond Disque, CLUSTER CLOCKS shows how far each other node's clock is from this
one's, as estimated from PING/PONG round trips (:mod:`disquette.core.clock`): a bulk
string with one line per node, handshakes aside, in the manner of CLUSTER NODES::

    <node id> <ip>:<port> offset=<ms> bound=<ms> rtt=<ms> age=<ms> <ok|skewed|unknown>

``offset`` is its clock minus ours (positive: ahead), true within ``offset +/- bound``;
``rtt`` the shortest round trip behind the estimate; ``age`` how long ago the last
sample came; ``skewed`` says it is over ``clock-skew-warn-ms``. A node not measured
yet shows ``offset=- bound=- rtt=- age=- unknown``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from disquette.commands.args import parse_int
from disquette.commands.connection import hello_protocol
from disquette.commands.table import command
from disquette.config.cstring import strerror
from disquette.config.values import is_host_name
from disquette.core.errors import DisqueError
from disquette.core.membership import MAX_PORT, NODE_ID_LEN, normalize_ip
from disquette.protocol import reply

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.state.server import ServerState

WRONG_SUBCOMMAND: Final = reply.err("Wrong CLUSTER subcommand or number of arguments")
WRONG_LEAVING_ARG: Final = reply.err("Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")
INVALID_NODE_ID: Final = reply.err("Invalid node identifier")
FORGET_MYSELF: Final = reply.err("I tried hard but I can't forget myself...")


@command("hello", -1, "rF", disque_arity=1)
def hello(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    """Bare HELLO is Disque's greeting; with arguments, Redis's RESP3 handshake."""
    if len(argv) > 1:
        return hello_protocol(state, client, argv)
    node = state.node
    entries = node.cluster.hello_entries()
    parts = [b"*%d\r\n" % (2 + len(entries)), reply.integer(1), reply.bulk(node.myself)]
    for node_id, ip, port, priority in entries:
        parts.append(reply.bulk_array([node_id, ip, b"%d" % port, b"%d" % priority]))
    return b"".join(parts)


@command("cluster", -2, "ar")
def cluster(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    sub = argv[1].lower()
    n = len(argv)
    node = state.node
    members = node.cluster
    if sub == b"myid" and n == 2:
        return reply.bulk(node.myself)
    if sub == b"nodes" and n == 2:
        return reply.bulk(members.nodes_text())
    if sub == b"clocks" and n == 2:
        return reply.bulk(members.clocks_text())
    if sub == b"info" and n == 2:
        info = (
            "cluster_state:ok\r\n"
            f"cluster_known_nodes:{len(members.nodes)}\r\n"
            f"cluster_reachable_nodes:{len(members.reachable_nodes())}\r\n"
            f"cluster_size:{members.cluster_size()}\r\n"
            f"cluster_stats_messages_sent:{members.messages_sent}\r\n"
            f"cluster_stats_messages_received:{members.messages_received}\r\n"
        )
        return reply.bulk(info.encode())
    if sub == b"meet" and n in (4, 5):
        return _meet(state, argv[2], argv[3], argv[4] if n == 5 else b"0")
    if sub == b"forget" and n == 3:
        node_id = argv[2]
        if len(node_id) != NODE_ID_LEN:
            raise DisqueError(INVALID_NODE_ID)
        if node_id not in members.nodes:
            raise DisqueError(reply.err(b"Unknown node " + node_id))
        if node_id == node.myself:
            raise DisqueError(FORGET_MYSELF)
        members.forget(node_id)
        return reply.OK
    if sub == b"reset" and n in (2, 3):
        mode = argv[2].lower() if n == 3 else b"soft"
        if mode not in (b"soft", b"hard"):
            raise DisqueError(reply.SYNTAX_ERROR)
        node.flush_all()
        members.reset(hard=mode == b"hard")
        return reply.OK
    if sub == b"saveconfig" and n == 2:
        try:
            members.save_config()
        except OSError as e:
            raise DisqueError(
                reply.err(f"error saving the cluster node config: {strerror(e)}")
            ) from None
        return reply.OK
    if sub == b"leaving" and n == 2:
        return reply.simple(b"yes" if node.leaving else b"no")
    if sub == b"leaving" and n == 3:
        value = argv[2].lower()
        if value not in (b"yes", b"no"):
            raise DisqueError(WRONG_LEAVING_ARG)
        members.set_leaving(value == b"yes")
        return reply.OK
    raise DisqueError(WRONG_SUBCOMMAND)


def _meet(state: ServerState, host: bytes, port_arg: bytes, bus_arg: bytes) -> bytes:
    """CLUSTER MEET ip port [bus-port]: an IP is met at once; a DNS name (beyond Disque)
    is resolved in the background by the shell, and each of its addresses met."""
    port = parse_int(port_arg)
    if port is None:
        raise DisqueError(reply.err(b"Invalid TCP port specified: " + port_arg))
    bus_port = parse_int(bus_arg)
    if bus_port is None or not 0 <= bus_port <= 0xFFFF:
        raise DisqueError(reply.err(b"Invalid TCP bus port specified: " + bus_arg))
    invalid = reply.err(b"Invalid node address specified: " + host + b":" + port_arg)
    if normalize_ip(host) is None and state.meet_name is not None and is_host_name(host):
        if not 0 < port <= (0xFFFF if bus_port else MAX_PORT):
            raise DisqueError(invalid)
        state.meet_name(host, port, bus_port)
        return reply.OK
    try:
        state.node.cluster.start_handshake(host, port, bus_port)
    except ValueError:
        raise DisqueError(invalid) from None
    return reply.OK
