"""The wire protocol against a real server (reference sections 1-2): inline and
multi-bulk requests, pipelining, protocol errors and limits, the processing
order of a command (QUIT, lookup, arity, NOAUTH, OOM), and connection limits."""

from __future__ import annotations

import socket

import pytest

from disquette import __version__
from disquette.core.dialect import PROTOCOL
from tests.support.raw import Error, RawConnection, Status, encode
from tests.support.servers import running_server, wait_for


def test_inline_requests(raw):
    raw.send(b"PING\r\n")
    assert raw.read() == Status(b"PONG")
    raw.send(b"ping hello\n")
    assert raw.read() == b"hello"
    raw.send(b'PING "a b\\x41\\n"\r\n')
    assert raw.read() == b"a bA\n"
    raw.send(b"PING 'it''s'\r\n")  # a closing quote must be followed by a space
    assert raw.read() == Error(b"ERR Protocol error: unbalanced quotes in request")
    assert raw.closed_by_server()


def test_inline_drops_empty_arguments_and_lines(raw):
    raw.send(b'\r\n\r\nPING "" ""\r\n')
    assert raw.read() == Status(b"PONG")


def test_pipelined_mixed_requests(raw):
    raw.send(
        encode(b"PING") + b"PING x\r\n" + encode(b"ADDJOB", b"pipe", b"x", 0) * 3 + b"QLEN pipe\r\n"
    )
    assert raw.read() == Status(b"PONG")
    assert raw.read() == b"x"
    for _ in range(3):
        assert raw.read().startswith(b"D-")
    assert raw.read() >= 3


def test_request_split_across_packets(shared_server):
    with RawConnection(shared_server.port) as c:
        data = encode(b"PING", b"split me")
        for i in range(len(data)):
            c.send(data[i : i + 1])
        assert c.read() == b"split me"


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"*abc\r\n", b"ERR Protocol error: invalid multibulk length"),
        (b"*1048577\r\n", b"ERR Protocol error: invalid multibulk length"),
        (b"*1\r\n:1\r\n", b"ERR Protocol error: expected '$', got ':'"),
        (b"*1\r\n$-1\r\n", b"ERR Protocol error: invalid bulk length"),
        (b"*1\r\n$536870913\r\n", b"ERR Protocol error: invalid bulk length"),
        (b"*1\r\n$abc\r\n", b"ERR Protocol error: invalid bulk length"),
        (b"*1" + b"1" * 70000, b"ERR Protocol error: too big mbulk count string"),
        (b"*1\r\n$" + b"1" * 70000, b"ERR Protocol error: too big bulk count string"),
        (b"P" * 70000, b"ERR Protocol error: too big inline request"),
    ],
)
def test_protocol_errors_reply_then_close(shared_server, data, error):
    with RawConnection(shared_server.port) as c:
        c.send(encode(b"PING") + data)
        assert c.read() == Status(b"PONG")  # requests before the error are served
        assert c.read() == Error(error)
        assert c.closed_by_server()


def test_empty_multibulk_is_ignored(raw):
    raw.send(b"*0\r\n*-1\r\n" + encode(b"PING"))
    assert raw.read() == Status(b"PONG")


def test_unknown_command_and_arity(raw):
    assert raw.command(b"NOSUCH", b"x") == Error(b"ERR unknown command 'NOSUCH'")
    assert raw.command(b"nOsUcH") == Error(b"ERR unknown command 'nOsUcH'")
    assert raw.command(b"ADDJOB", b"q", b"x") == Error(
        b"ERR wrong number of arguments for 'addjob' command"
    )
    assert raw.command(b"TIME", b"x") == Error(b"ERR wrong number of arguments for 'time' command")
    assert raw.command(b"PING", b"a", b"b") == Error(
        b"ERR wrong number of arguments for 'ping' command"
    )
    assert raw.command(b"AddJob", b"q") == Error(
        b"ERR wrong number of arguments for 'addjob' command"
    )


def test_quit_replies_ok_and_closes(raw):
    raw.send(encode(b"QUIT") + encode(b"PING"))
    assert raw.read() == Status(b"OK")
    assert raw.closed_by_server()
    assert raw.buf == b""  # the PING after QUIT was not answered


def test_time_ping_hello_types(raw, shared_server):
    secs, usecs = raw.command(b"TIME")
    assert secs.isdigit() and usecs.isdigit() and int(usecs) < 1_000_000
    hello = raw.command(b"HELLO")
    myid = raw.command(b"CLUSTER", b"MYID")
    assert hello == [1, myid, [myid, b"", str(shared_server.port).encode(), b"1"]]


def test_cluster_for_a_node_alone(raw, shared_server):
    myid = raw.command(b"CLUSTER", b"MYID")
    assert len(myid) == 40 and all(c in b"0123456789abcdef" for c in myid)
    nodes = raw.command(b"CLUSTER", b"NODES")
    # Disque's six fields, then what the node speaks (core/dialect.py).
    speaks = b"release=%s bus=%d" % (__version__.encode(), PROTOCOL)
    assert nodes == b"%s :%d myself 0 0 connected %s\n" % (myid, shared_server.port, speaks)
    info = raw.command(b"CLUSTER", b"INFO").decode()
    assert info == (
        "cluster_state:ok\r\ncluster_known_nodes:1\r\ncluster_reachable_nodes:0\r\n"
        "cluster_size:1\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n"
    )
    assert raw.command(b"CLUSTER", b"NOPE") == Error(
        b"ERR Wrong CLUSTER subcommand or number of arguments"
    )
    assert raw.command(b"CLUSTER", b"MYID", b"x") == Error(
        b"ERR Wrong CLUSTER subcommand or number of arguments"
    )
    assert raw.command(b"CLUSTER", b"LEAVING") == Status(b"no")
    assert raw.command(b"CLUSTER", b"LEAVING", b"maybe") == Error(
        b"ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'"
    )


def test_leaving_node_refuses_to_block_consumers(tmp_path):
    with running_server(tmp_path) as srv, RawConnection(srv.port) as c:
        assert c.command(b"CLUSTER", b"LEAVING", b"yes") == Status(b"OK")
        assert c.command(b"CLUSTER", b"NODES").split()[2] == b"myself,leaving"
        assert c.command(b"HELLO")[2][3] == b"100"
        assert c.command(b"GETJOB", b"FROM", b"q") == Error(
            b"LEAVING This node is leaving the cluster, please connect to a different one"
        )
        assert c.command(b"ADDJOB", b"q", b"x", 0).startswith(b"NOREPL Not enough reachable")


def test_auth_and_noauth_order(tmp_path):
    with running_server(tmp_path, ["--requirepass", "s3cret"]) as srv, RawConnection(srv.port) as c:
        # Lookup and arity come before authentication.
        assert c.command(b"NOSUCH") == Error(b"ERR unknown command 'NOSUCH'")
        assert c.command(b"QLEN") == Error(b"ERR wrong number of arguments for 'qlen' command")
        assert c.command(b"PING") == Error(b"NOAUTH Authentication required.")
        assert c.command(b"AUTH", b"wrong") == Error(b"ERR invalid password")
        assert c.command(b"AUTH", b"s3cret") == Status(b"OK")
        assert c.command(b"PING") == Status(b"PONG")
        assert c.command(b"AUTH", b"wrong") == Error(b"ERR invalid password")
        assert c.command(b"PING") == Error(b"NOAUTH Authentication required.")
        c.send(encode(b"QUIT"))
        assert c.read() == Status(b"OK")


def test_auth_without_password(raw):
    assert raw.command(b"AUTH", b"x") == Error(b"ERR Client sent AUTH, but no password is set")


def test_oom_refuses_only_deny_oom_commands(tmp_path):
    args = ["--maxmemory-policy", "noeviction"]
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        jid = c.command(b"ADDJOB", b"q", b"x", 0)
        c.command(b"GETJOB", b"FROM", b"q")
        assert c.command(b"CONFIG", b"SET", b"maxmemory", b"1000") == Status(b"OK")
        oom = Error(b"OOM command not allowed when used memory > 'maxmemory'.")
        assert c.command(b"ADDJOB", b"q", b"x", 0) == oom
        assert c.command(b"NACK", jid) == oom
        assert c.command(b"ENQUEUE", jid) == oom
        assert c.command(b"QLEN", b"q") == 0
        assert c.command(b"ACKJOB", jid) == 1


def test_small_maxmemory_replicates_externally_before_oom(tmp_path):
    """At 75 % a node stops keeping copies: alone, ADDJOB says why it cannot."""
    with running_server(tmp_path, ["--maxmemory", "3mb"]) as srv, RawConnection(srv.port) as c:
        body = b"x" * 10_000
        replies = [c.command(b"ADDJOB", b"q", body, 0) for _ in range(400)]
        assert isinstance(replies[0], Status)
        refusal = Error(
            b"NOREPL Not enough reachable nodes for the requested replication level, since I'm "
            b"unable to hold a copy of the message for the following reason: I'm out of memory"
        )
        assert refusal in replies
        assert replies.index(refusal) > 100  # levels fill in order: 0, then 1


def test_maxclients(tmp_path):
    with running_server(tmp_path, ["--maxclients", "2"]) as srv:
        a, b = RawConnection(srv.port), RawConnection(srv.port)
        assert a.command(b"PING") == Status(b"PONG") and b.command(b"PING") == Status(b"PONG")
        with RawConnection(srv.port) as third:
            assert third.read() == Error(b"ERR max number of clients reached")
            assert third.closed_by_server()
        a.close()
        b.close()


def test_idle_timeout_closes_idle_clients_but_not_blocked_ones(tmp_path):
    with running_server(tmp_path, ["--timeout", "1"]) as srv:
        idle = RawConnection(srv.port)
        blocked = RawConnection(srv.port)
        blocked.send(encode(b"GETJOB", b"FROM", b"wait"))
        assert idle.closed_by_server(timeout=30)
        with RawConnection(srv.port) as c:
            assert c.command(b"QSTAT", b"wait")[9] == 1  # still blocked, still connected
            jid = c.command(b"ADDJOB", b"wait", b"x", 0)
        assert blocked.read() == [[b"wait", jid, b"x"]]
        blocked.close()


def test_rename_command(tmp_path):
    args = ["--rename-command", "qlen", "queuelength", "--rename-command", "pause", ""]
    with running_server(tmp_path, args) as srv, RawConnection(srv.port) as c:
        assert c.command(b"QLEN", b"q") == Error(b"ERR unknown command 'QLEN'")
        assert c.command(b"QUEUELENGTH", b"q") == 0
        assert c.command(b"PAUSE", b"q", b"in") == Error(b"ERR unknown command 'PAUSE'")


def test_many_connections_and_disconnects_while_blocked(shared_server):
    conns = []
    for i in range(50):
        c = socket.create_connection(("127.0.0.1", shared_server.port))
        c.sendall(encode(b"GETJOB", b"TIMEOUT", 60000, b"FROM", b"crowd-%d" % (i % 5)))
        conns.append(c)
    with RawConnection(shared_server.port) as r:
        wait_for(lambda: all(r.command(b"QSTAT", b"crowd-%d" % i) and
                             r.command(b"QSTAT", b"crowd-%d" % i)[9] == 10 for i in range(5)),
                 what="50 blocked consumers")  # fmt: skip
        for c in conns:
            c.close()
        wait_for(lambda: all(r.command(b"QSTAT", b"crowd-%d" % i)[9] == 0 for i in range(5)),
                 what="consumers gone")  # fmt: skip
        assert r.command(b"PING") == Status(b"PONG")


def test_client_reply_off_and_skip_silence_early_errors_too(raw):
    raw.send(encode(b"CLIENT", b"REPLY", b"OFF") + encode(b"NOSUCH") + encode(b"QLEN"))
    raw.send(encode(b"CLIENT", b"REPLY", b"SKIP") + encode(b"NOSUCH"))
    raw.send(encode(b"CLIENT", b"REPLY", b"ON") + encode(b"PING"))
    assert raw.read() == Status(b"OK")  # CLIENT REPLY ON itself answers
    assert raw.read() == Status(b"PONG")


def test_client_pause_holds_the_rest_of_a_pipelined_batch(shared_server):
    def usec(t: list[bytes]) -> int:
        return int(t[0]) * 1_000_000 + int(t[1])

    with RawConnection(shared_server.port) as c:
        before = usec(c.command(b"TIME"))
        c.send(encode(b"CLIENT", b"PAUSE", 300) + encode(b"TIME"))
        assert c.read() == Status(b"OK")
        # The TIME in the same batch ran only once the pause was over (the pause's
        # deadline has millisecond resolution, TIME microsecond).
        assert usec(c.read()) - before >= 299_000


# A long pipeline runs 512 requests per event-loop turn (server/connection.py):
# replies keep their order across turns, a block or a pause in the middle holds
# the rest, QUIT drops it, and other clients are answered meanwhile.
LONG = 1500


def test_a_long_pipeline_runs_in_turns_in_order(shared_server, raw):
    with RawConnection(shared_server.port) as c:
        c.send(
            b"".join(encode(b"ADDJOB", b"turns", b"%d" % i, 0) for i in range(LONG))
            + encode(b"QLEN", b"turns")
            + b"".join(encode(b"PING", b"%d" % i) for i in range(LONG))
        )
        assert raw.command(b"PING") == Status(b"PONG")  # another client, meanwhile
        ids = [c.read() for _ in range(LONG)]
        assert all(isinstance(i, Status) and i.startswith(b"D-") for i in ids)
        assert c.read() == LONG
        assert [c.read() for _ in range(LONG)] == [b"%d" % i for i in range(LONG)]
        jobs = c.command(b"GETJOB", b"COUNT", LONG, b"FROM", b"turns")
        assert [job[2] for job in jobs] == [b"%d" % i for i in range(LONG)]


def test_a_block_inside_a_long_pipeline_holds_the_rest(shared_server, queue):
    with RawConnection(shared_server.port) as c:
        pings = encode(b"PING") * LONG
        c.send(pings + encode(b"GETJOB", b"TIMEOUT", 200, b"FROM", queue) + pings)
        assert [c.read() for _ in range(LONG)] == [Status(b"PONG")] * LONG
        assert c.read() is None
        assert [c.read() for _ in range(LONG)] == [Status(b"PONG")] * LONG
        assert c.command(b"PING", b"after") == b"after"


def test_quit_inside_a_long_pipeline_drops_the_rest(shared_server):
    with RawConnection(shared_server.port) as c:
        pings = encode(b"PING") * LONG
        c.send(pings + encode(b"QUIT") + pings)
        assert [c.read() for _ in range(LONG)] == [Status(b"PONG")] * LONG
        assert c.read() == Status(b"OK")
        assert c.closed_by_server()
        assert c.buf == b""


def test_config_set_loglevel_takes_effect(tmp_path):
    with running_server(tmp_path, ["--loglevel", "warning"]) as srv, RawConnection(srv.port) as c:
        assert c.command(b"CONFIG", b"SET", b"loglevel", b"verbose") == Status(b"OK")
        c2 = RawConnection(srv.port)
        c2.command(b"PING")
        c2.close()
        assert c.command(b"CONFIG", b"SET", b"timeout", b"1") == Status(b"OK")
        idle = RawConnection(srv.port)
        assert idle.closed_by_server(timeout=30)
        wait_for(lambda: "Closing idle client" in srv.log(), what="verbose log line")


def test_commands_after_shutdown_in_a_batch_are_not_run(tmp_path):
    with running_server(tmp_path) as srv, RawConnection(srv.port) as c:
        c.send(encode(b"SHUTDOWN") + encode(b"ADDJOB", b"q", b"x", 0))
        assert c.closed_by_server()
        assert c.buf == b""
        srv.proc.wait(30)
        assert srv.proc.returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        [b"ADDJOB", b"q", b"x", b"9" * 5000],
        [b"ADDJOB", b"q", b"x", b"0", b"TTL", b"1" * 5000],
        [b"GETJOB", b"TIMEOUT", b"5" * 5000, b"FROM", b"q"],
        [b"JSCAN", b"7" * 5000],
        [b"QPEEK", b"q", b"-" + b"3" * 5000],
        [b"CLIENT", b"PAUSE", b"8" * 5000],
    ],
)
def test_enormous_numbers_are_errors_not_crashes(raw, args):
    assert isinstance(raw.command(*args), Error)
    assert raw.command(b"PING") == Status(b"PONG")
