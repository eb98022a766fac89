"""A Spark Connect server for the tests: a local session with the Connect plugin.

``python -m tests.spark.connect_server --port P`` starts a local SparkSession
(:func:`~disquette.spark.local.local_session`, so its Python workers run this
interpreter and find the ``disque`` format) with Spark's Connect plugin, which
ships with PySpark (``jars/spark-connect_*.jar``: nothing is downloaded),
listening on 127.0.0.1:P, and serves until killed.
"""

from __future__ import annotations

import argparse
import signal

from disquette.spark.local import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    local_session(
        "disquette-connect-server",
        config={
            "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
        },
    )
    print(f"connect server on {port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    main()
