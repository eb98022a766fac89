"""Bad options and schemas fail on the driver, with a clear message, before any job is touched.

Each case is checked against the node: a failed write added no job, and a
failed read took none (QLEN unchanged).
"""

from __future__ import annotations

import re

import pytest

from disquette.spark.options import OptionError, SourceOptions
from tests.spark.helpers import DEADLINE, to_memory


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nodes": " ", "queue": "opt-w"}, "needs the option 'nodes'"),
        ({"nodes": "127.0.0.1:x", "queue": "opt-w"}, "'127.0.0.1:x' is not host:port"),
        ({"queue": "opt-w", "replicate": "0"}, "option 'replicate' must be between 1 and 255"),
        ({"queue": "opt-w", "retry": "soon"}, "option 'retry' must be an integer"),
        ({"queue": "opt-w", "async": "maybe"}, "option 'async' must be true or false"),
        ({"queue": "opt-w", "priority": "10"}, "option 'priority' must be between 0 and 9"),
        ({"queue": "opt-w", "dedup": "maybe"}, "option 'dedup' must be true or false"),
        (
            {"queue": "opt-w", "backoff": "exponential:60:1"},
            "option 'backoff' must be fixed:<seconds> or exponential:<base>:<cap>, not "
            "'exponential:60:1' (the backoff's cap must not be below its base)",
        ),
        ({"queue": "opt-w", "replicat": "2"}, "unknown option(s) for the disque sink: replicat"),
        ({}, "needs the queue either as a 'queue' column or as the 'queue' option"),
    ],
)
def test_bad_sink_options(spark, node, client, options, message):
    options = {"nodes": f"127.0.0.1:{node.port}", **options}
    df = spark.range(10).selectExpr("concat('x', id) AS body")
    with pytest.raises(Exception, match=re.escape(message)):
        df.write.format("disque").mode("append").options(**options).save()
    assert client.qlen("opt-w") == 0


@pytest.mark.parametrize(
    ("columns", "mode", "message"),
    [
        (["id AS payload"], "append", "needs a 'body' column"),
        (["id AS body"], "append", "'body' must be a string or binary column, bigint"),
        (["'x' AS body", "id AS queue"], "append", "the 'queue' column must be a string"),
        (["'x' AS body", "'opt-w' AS queue"], "append", "not both"),
        (["'x' AS body"], "overwrite", "can only append jobs"),
    ],
)
def test_bad_sink_schema_or_mode(spark, node, client, columns, mode, message):
    df = spark.range(10).selectExpr(*columns)
    writer = df.write.format("disque").mode(mode)
    writer = writer.option("nodes", f"127.0.0.1:{node.port}").option("queue", "opt-w")
    with pytest.raises(Exception, match=message):
        writer.save()
    assert client.qlen("opt-w") == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queues": ""}, "needs the option 'queues'"),
        ({"queues": "opt-r,"}, "option 'queues' has an empty queue name"),
        ({"maxJobsPerTrigger": "0"}, "'maxJobsPerTrigger' must be between 1 and 10000000"),
        (
            {"maxJobsPerTrigger": "100001", "readMode": "driver"},
            "'maxJobsPerTrigger' must be between 1 and 100000",
        ),
        ({"bodyType": "json"}, "option 'bodyType' must be one of binary, string"),
        ({"queue": "opt-r"}, r"unknown option\(s\) for the disque source: queue"),
        (
            {"jobFields": "priority,owner"},
            "option 'jobFields' takes some of priority, dedup, progress, claim, not owner",
        ),
        ({"readMode": "executors"}, "option 'readMode' must be one of auto, driver"),
    ],
)
def test_bad_source_options(spark, node, client, tmp_path, options, message):
    client.add_jobs("opt-r", [b"keep-me"] * 3, retry=60)
    queued = client.qlen("opt-r")
    options = {"nodes": f"127.0.0.1:{node.port}", "queues": "opt-r", **options}
    with pytest.raises(Exception, match=message):
        df = spark.readStream.format("disque").options(**options).load()
        query = to_memory(df, "opt_r", tmp_path / "cp", availableNow=True)
        try:
            query.awaitTermination(DEADLINE)
        finally:
            query.stop()
    assert client.qlen("opt-r") == queued


def test_jobs_per_trigger_depend_on_who_reads():
    """The default and the bound of maxJobsPerTrigger: the executors read large batches
    (the offset holds counts), the driver small ones (it holds IDs and bodies)."""
    base = {"nodes": "127.0.0.1:7711", "queues": "q"}
    default = SourceOptions.parse(base)
    assert default.jobs_per_trigger(planned=True) == 500_000
    assert default.jobs_per_trigger(planned=False) == 10_000
    given = SourceOptions.parse({**base, "maxJobsPerTrigger": "2000000"})
    assert given.jobs_per_trigger(planned=True) == 2_000_000
    # readMode=auto against plain Disque: the driver reads, and refuses so many.
    with pytest.raises(OptionError, match="must be at most 100000 when the driver reads"):
        given.jobs_per_trigger(planned=False)
