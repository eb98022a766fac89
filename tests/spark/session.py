"""The SparkSession settings shared by the tests and the driver subprocess they start.

``local[2,4]`` is local mode on two cores that retries a failed task up to
four times (local mode ignores ``spark.task.maxFailures``): the sink's
at-least-once contract relies on task retries. Logs are quiet, the UI is
off, and workers run this interpreter (which has the project installed).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

LOG4J = Path(__file__).with_name("log4j2.properties")


def spark_session(app: str) -> SparkSession:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return (
        SparkSession.builder.master("local[2,4]")
        .appName(app)
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{LOG4J}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
