"""Where PySpark finds the ``disque`` format without a ``register()`` call.

At its first use of a Python data source, Spark imports every top-level
module whose name starts with ``pyspark_`` and registers its ``DefaultSource``.
"""

from disquette.spark.datasource import DisqueDataSource as DefaultSource

__all__ = ["DefaultSource"]
