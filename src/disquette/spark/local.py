"""A local SparkSession set up for this machine: what the example, the benchmark and the tests use.

Three settings matter on a development machine or a CI runner: Spark must bind
the loopback address (``SPARK_LOCAL_IP``; otherwise it picks whatever interface
it finds), its Python workers must run this interpreter (``PYSPARK_PYTHON``;
another ``python3`` lacks the project's packages), and its logs are cut down
to errors (a log4j2 file in a temporary folder of its own, removed when the
process exits).

``local[N,F]`` runs N cores and retries a failed task up to F times: local mode
ignores ``spark.task.maxFailures``, and the sink's at-least-once contract relies
on task retries.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def local_session(
    app: str, cores: int = 2, task_attempts: int = 4, config: dict[str, str] | None = None
) -> SparkSession:
    """A quiet local SparkSession on the loopback address, workers on this interpreter
    (``config``: more settings, e.g. the Spark Connect plugin's)."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    folder = Path(tempfile.mkdtemp(prefix="disquette-spark-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    log4j = folder / "log4j2.properties"
    log4j.write_text(LOG4J2)
    builder = SparkSession.builder
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    return (
        builder.master(f"local[{cores},{task_attempts}]")
        .appName(app)
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log4j}")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .getOrCreate()
    )
