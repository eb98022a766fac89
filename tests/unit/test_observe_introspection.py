"""Unit tests of the introspection commands run in-process through
:meth:`ServerState.execute`, with a recording shell: what reaches the shell
(sleep, restart, close), reply suppression, the pause deadline, and the
helpers that parse (``strtod``) and format (CLIENT LIST lines, COMMAND entries)."""

from __future__ import annotations

import time

import pytest

from disquette.commands import introspection as intro
from disquette.commands import new_state
from disquette.config import Config
from disquette.core.client import REPLY_OFF, REPLY_ON, REPLY_SKIP
from disquette.state import clients
from disquette.state.server import ServerState
from tests.unit.core_harness import Harness, RecordingClient


class Shell:
    def __init__(self, restart_ok: bool = True) -> None:
        self.calls: list[tuple] = []
        self.restart_ok = restart_ok

    def shutdown(self, rewrite_aof: bool) -> bool:
        self.calls.append(("shutdown", rewrite_aof))
        return True

    def close_client(self, client) -> None:
        self.calls.append(("close", client.id))

    def sleep(self, seconds: float) -> None:
        self.calls.append(("sleep", seconds))

    def restart(self, delay_ms: int, rewrite_config: bool) -> bool:
        self.calls.append(("restart", delay_ms, rewrite_config))
        return self.restart_ok


@pytest.fixture
def shell() -> Shell:
    return Shell()


@pytest.fixture
def state(shell) -> ServerState:
    st = new_state(Config(), Harness().node, shell=shell)
    for cid in (1, 2, 3):
        client = RecordingClient(cid)
        client.addr = b"127.0.0.1:%d" % (1000 + cid)
        st.add_client(client)
    return st


def run(state: ServerState, *argv: bytes, client: int = 1) -> bytes | None:
    return state.execute(state.clients[client], list(argv))


# ---------------------------------------------------------------- strtod


@pytest.mark.parametrize(
    ("text", "value"),
    [(b"1.5", 1.5), (b"  2", 2.0), (b"3abc", 3.0), (b"abc", 0.0), (b"", 0.0), (b"-1", -1.0),
     (b".5", 0.5), (b"1e2", 100.0), (b"1e", 1.0), (b"+7.", 7.0)],
)  # fmt: skip
def test_strtod(text, value):
    assert intro.strtod(text) == value


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(b"0.25", 0.25), (b"-3", 0.0), (b"inf", 0.0), (b"nan", 0.0), (b"1e300", 0.0),
     (b"0.0000005", 0.0), (b"x", 0.0)],
)  # fmt: skip
def test_sleep_seconds(text, seconds):
    assert intro.sleep_seconds(text) == seconds


# ---------------------------------------------------------------- DEBUG


def test_debug_sleep_goes_through_the_shell(state, shell):
    assert run(state, b"DEBUG", b"SLEEP", b"0.5") == b"+OK\r\n"
    assert shell.calls == [("sleep", 0.5)]


@pytest.mark.parametrize(
    ("argv", "call"),
    [
        ([b"RESTART"], ("restart", 0, True)),
        ([b"restart", b"250"], ("restart", 250, True)),
        ([b"CRASH-AND-RECOVER", b"-5"], ("restart", 0, False)),
        ([b"crash-and-recover", b"10", b"extra"], ("restart", 10, False)),
    ],
)
def test_debug_restart_reaches_the_shell_without_reply(state, shell, argv, call):
    assert run(state, b"DEBUG", *argv) is None
    assert shell.calls == [call]


def test_debug_restart_failure(state, shell):
    shell.restart_ok = False
    assert run(state, b"DEBUG", b"RESTART") == (
        b"-ERR failed to restart the server. Check server logs.\r\n"
    )


def test_debug_restart_without_shell_fails(state):
    state.shell = None
    assert run(state, b"DEBUG", b"RESTART").startswith(b"-ERR failed to restart")


def test_struct_sizes():
    text = intro.struct_sizes()
    fields = dict(item.split(b":") for item in text.split(b" "))
    assert list(fields) == [b"bits", b"job", b"queue", b"client"]
    assert all(int(v) > 0 for v in fields.values())


# ---------------------------------------------------------------- CLIENT


def test_client_reply_modes(state):
    client = state.clients[1]
    assert run(state, b"CLIENT", b"REPLY", b"OFF") is None
    assert client.reply_mode == REPLY_OFF
    assert run(state, b"PING") is None
    assert run(state, b"CLIENT", b"REPLY", b"SKIP") is None
    assert client.reply_mode == REPLY_OFF  # SKIP does nothing while OFF
    assert run(state, b"CLIENT", b"REPLY", b"ON") == b"+OK\r\n"
    assert client.reply_mode == REPLY_ON
    assert run(state, b"CLIENT", b"REPLY", b"SKIP") is None
    assert client.reply_mode == REPLY_SKIP
    assert run(state, b"PING") is None
    assert run(state, b"PING") == b"+PONG\r\n"


def test_client_kill_closes_through_the_shell(state, shell):
    assert run(state, b"CLIENT", b"KILL", b"127.0.0.1:1002") == b"+OK\r\n"
    assert shell.calls == [("close", 2)]


def test_client_kill_self_closes_after_reply(state, shell):
    assert run(state, b"CLIENT", b"KILL", b"127.0.0.1:1001") == b"+OK\r\n"
    assert state.clients[1].close_after_reply
    assert shell.calls == []


def test_client_kill_id_zero_matches_everyone(state, shell):
    assert run(state, b"CLIENT", b"KILL", b"ID", b"0") == b":2\r\n"
    assert shell.calls == [("close", 2), ("close", 3)]


def test_client_kill_unix_socket_address(state, shell):
    state.clients[3].unix_socket = True
    state.clients[3].addr = b"/tmp/disque.sock"
    assert run(state, b"CLIENT", b"KILL", b"/tmp/disque.sock") == b"-ERR No such client\r\n"
    assert run(state, b"CLIENT", b"KILL", b"/tmp/disque.sock:0") == b"+OK\r\n"
    assert shell.calls == [("close", 3)]


def test_client_info_line():
    client = RecordingClient(7)
    client.ctime = 1_000
    client.last_interaction = 4_000
    client.name = b"w1"
    client.monitor = True
    client.last_command = b"getjob"
    line = clients.client_info_line(client, 10_500)
    assert line == (
        b"id=7 addr=127.0.0.1:1 fd=-1 name=w1 age=9 idle=6 flags=O qbuf=0 qbuf-free=0 "
        b"obl=0 oll=0 omem=0 events=r cmd=getjob"
    )


def test_client_flags_letters():
    client = RecordingClient(1)
    assert clients.client_flags(client) == b"N"
    client.blocked = 1
    client.close_after_reply = True
    client.unix_socket = True
    assert clients.client_flags(client) == b"bcU"


def test_client_pause_sets_and_only_extends(state):
    now = int(time.time() * 1000)
    assert run(state, b"CLIENT", b"PAUSE", b"100000") == b"+OK\r\n"
    first = state.clients_paused_until
    assert now + 100000 <= first <= now + 200000
    assert run(state, b"CLIENT", b"PAUSE", b"10") == b"+OK\r\n"
    assert state.clients_paused_until == first  # shorter pause does not shorten
    state.clients_paused_until = now - 1  # expired
    assert run(state, b"CLIENT", b"PAUSE", b"0") == b"+OK\r\n"
    assert state.clients_paused_until == 0


# ---------------------------------------------------------------- MONITOR, CONFIG


def test_monitor_registers_once(state):
    assert run(state, b"MONITOR") == b"+OK\r\n"
    assert run(state, b"MONITOR") is None
    assert state.monitors == [state.clients[1]]
    assert state.clients[1].monitor
    run(state, b"PING", client=2)
    assert state.clients[1].replies[-1].endswith(b'"PING"\r\n')
    state.remove_client(state.clients[1])
    assert state.monitors == []


def test_config_resetstat_resets_stats_and_command_counters(state):
    run(state, b"PING")
    run(state, b"TIME")
    state.stats.net_input_bytes = 99
    state.stats.track_memory(12345)
    assert run(state, b"CONFIG", b"RESETSTAT") == b"+OK\r\n"
    calls = {cmd.name: cmd.calls for cmd in state.commands.values() if cmd.calls}
    assert calls == {"config": 1}
    assert state.stats.commands_processed == 1
    assert state.stats.net_input_bytes == 0
    assert state.stats.peak_memory == 12345


def test_config_set_error_keeps_client_bytes(state):
    assert run(state, b"CONFIG", b"SET", b"hz", b"\xff") == (
        b"-ERR Invalid argument '\xff' for CONFIG SET 'hz'\r\n"
    )


# ---------------------------------------------------------------- COMMAND


def test_command_entry_format(state):
    assert intro.command_entry(state.commands[b"ping"]) == (
        b"*6\r\n$4\r\nping\r\n:-1\r\n*2\r\n+readonly\r\n+fast\r\n:0\r\n:0\r\n:0\r\n"
    )
    assert intro.command_entry(None) == b"$-1\r\n"


def test_command_count_follows_the_table(state):
    # Disque's 32 commands, QPOLICY, JOBLOG, CANCEL, WAITJOB, CRON, OBSERVE and ACL
    # (beyond Disque).
    assert run(state, b"COMMAND", b"COUNT") == b":39\r\n"
    del state.commands[b"hello"]
    assert run(state, b"COMMAND", b"COUNT") == b":38\r\n"


def test_command_shows_disques_arity_for_an_extended_command(state):
    # WORKING takes a progress text beyond Disque; COMMAND keeps Disque's arity 2.
    assert state.commands[b"working"].arity == -2
    assert intro.command_entry(state.commands[b"working"]).startswith(
        b"*6\r\n$7\r\nworking\r\n:2\r\n"
    )
