"""The stream source's acknowledgements sent beside the next batch (spark/acks.py):
in order, each batch released once answered, a failure raised by the next call.

The end-to-end guarantees (every job acknowledged when an AvailableNow query ends,
none before its batch is committed) are in test_source.py, test_recovery.py and
test_driver_crash.py.
"""

from __future__ import annotations

import threading

import pytest

from disquette.spark.acks import Acknowledgements


def test_batches_are_acknowledged_in_order_then_released():
    sent: list[int] = []
    released: list[int] = []
    gate = threading.Event()
    acks = Acknowledgements(released.append)

    def send(seq: int):
        def run() -> None:
            gate.wait(10)
            sent.append(seq)

        return run

    for seq in (1, 2, 3):
        acks.submit(seq, send(seq))
    acks.submit(4, None)  # a batch that held nothing is released all the same
    assert released == []  # nothing answered yet: every batch still kept alive
    gate.set()
    acks.wait()
    assert sent == [1, 2, 3]
    assert released == [1, 2, 3, 4]
    acks.stop()


def test_a_failure_is_raised_by_the_next_call_and_the_batch_released():
    released: list[int] = []
    acks = Acknowledgements(released.append)

    def fail() -> None:
        raise ConnectionError("no node could be reached")

    acks.submit(1, fail)
    with pytest.raises(ConnectionError, match="no node"):
        acks.wait()
    assert released == [1]  # its jobs come back through their retry
    acks.submit(2, fail)
    with pytest.raises(ConnectionError):
        for _ in range(1000):  # raised by a later submit once it failed
            threading.Event().wait(0.01)
            acks.submit(3, None)
    acks.stop()  # says it, raises nothing
