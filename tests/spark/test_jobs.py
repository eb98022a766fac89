"""Jobs as Arrow columns (spark/jobs.py): an executor's record batch built straight from
a GETJOB reply is the one the general path (JobColumns) builds, in both body types."""

from __future__ import annotations

import pyarrow as pa
import pytest

from disquette.spark.jobs import JobColumns, arrow_schema, reply_batch

REPLY = [
    [b"orders", b"D-0123abcd-" + b"0" * 24 + b"-0001", b"first", b"nacks", 0,
     b"additional-deliveries", 0],
    [b"orders", b"D-0123abcd-" + b"1" * 24 + b"-0001", "s\u00e9cond".encode(), b"nacks", 2,
     b"additional-deliveries", 1],
]  # fmt: skip


@pytest.mark.parametrize("body_as_string", [False, True])
def test_a_reply_batch_is_the_batch_of_its_jobs(body_as_string):
    columns = JobColumns()
    columns.add_getjob_reply("127.0.0.1:7711", REPLY)
    batch = reply_batch(REPLY, body_as_string)
    assert batch.equals(columns.record_batch(body_as_string))
    assert batch.schema == arrow_schema(body_as_string)
    assert batch.column("nacks").to_pylist() == [0, 2]


def test_a_body_that_is_not_utf8_fails_a_string_read():
    reply = [[*REPLY[0][:2], b"\xff\xfe", *REPLY[0][3:]]]
    assert reply_batch(reply, False).column("body").to_pylist() == [b"\xff\xfe"]
    with pytest.raises(pa.ArrowInvalid):
        reply_batch(reply, True)
