"""The PySpark data source for Disque-protocol clusters: ``format("disque")``.

Install with the ``spark`` extra (``pip install disquette[spark]``); Spark then
finds the format by itself. Rows with a ``body`` column are written as jobs
(batch and streaming), and queues are read as a streaming DataFrame with
at-least-once delivery. See docs/spark.md.
"""

from disquette.spark.datasource import DisqueDataSource
from disquette.spark.options import OptionError

__all__ = ["DisqueDataSource", "OptionError"]
