"""Batches: bounded windows, lazy input, results in order, lost replies."""

from __future__ import annotations

import math

from disquette.client.batch import Batch
from disquette.client.calls import Command
from disquette.client.errors import ProtocolError, ReplyLostError, ResponseError


def ping(n: int) -> Command[bytes]:
    return Command((b"PING", b"%d" % n))


def test_window_bounds_commands_in_flight_and_input_is_read_lazily():
    pulled = []

    def source():
        for n in range(10):
            pulled.append(n)
            yield ping(n)

    batch = Batch(source(), window=3)
    assert [c.args[1] for c in batch.outgoing()] == [b"0", b"1", b"2"]
    assert pulled == [0, 1, 2]
    assert batch.outgoing() == []  # window full
    batch.received([b"0"])
    assert [c.args[1] for c in batch.outgoing()] == [b"3"]
    batch.received([b"1", b"2", b"3"])
    while not batch.done:
        sent = batch.outgoing()
        batch.received([c.args[1] for c in sent])
    assert batch.results == [b"%d" % n for n in range(10)]


def test_errors_take_their_place_and_stop_on_error_stops_sending():
    batch = Batch((ping(n) for n in range(5)), window=2, stop_on_error=True)
    batch.outgoing()
    batch.received([ResponseError("ERR nope"), b"1"])
    assert batch.outgoing() == []
    assert batch.done
    assert isinstance(batch.results[0], ResponseError) and batch.results[1] == b"1"


def test_undecodable_reply_becomes_a_protocol_error_result():
    batch = Batch([Command((b"QLEN", b"q"), int)])
    batch.outgoing()
    batch.received([b"not a number"])
    assert isinstance(batch.results[0], ProtocolError)


def test_lost_connection_marks_in_flight_commands():
    batch = Batch((ping(n) for n in range(5)), window=3)
    batch.node = "h:1"
    batch.outgoing()
    batch.received([b"0"])
    batch.lost(ConnectionResetError("gone"))
    assert batch.done
    assert batch.results[0] == b"0"
    assert [type(r) for r in batch.results[1:]] == [ReplyLostError, ReplyLostError]
    assert "PING was sent to h:1" in str(batch.results[1])


def test_read_timeout_adds_what_blocking_commands_may_wait():
    batch = Batch([Command((b"GETJOB",), block=2.0), Command((b"PING",))], window=2)
    batch.outgoing()
    assert batch.read_timeout(1.0) == 3.0
    assert batch.read_timeout(None) is None
    forever = Batch([Command((b"GETJOB",), block=math.inf)])
    forever.outgoing()
    assert forever.read_timeout(1.0) is None


def test_sink_receives_results_instead_of_the_list():
    seen = []
    batch = Batch((ping(n) for n in range(3)), window=8, sink=seen.append)
    batch.received([b"x"] * len(batch.outgoing()))
    assert seen == [b"x"] * 3 and batch.results == []


def test_a_shell_sends_half_a_window_at_a_time():
    """outgoing(limit) caps what goes at once; the window still bounds what is in flight,
    and a source that ends short of the cap stops the batch."""
    batch = Batch((ping(n) for n in range(5)), window=4)
    assert batch.chunk == 2
    assert [c.args[1] for c in batch.outgoing(batch.chunk)] == [b"0", b"1"]
    assert [c.args[1] for c in batch.outgoing(batch.chunk)] == [b"2", b"3"]
    assert batch.outgoing(batch.chunk) == []  # the window is full
    batch.received([b"0", b"1", b"2"])
    assert [c.args[1] for c in batch.outgoing(batch.chunk)] == [b"4"]
    assert batch.outgoing(batch.chunk) == [] and not batch.done
    batch.received([b"3", b"4"])
    assert batch.done
    assert Batch([], window=1).chunk == 1
