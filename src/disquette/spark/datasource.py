"""``format("disque")``: the PySpark data source that ties the roles together.

Spark creates a :class:`DisqueDataSource` with the options of a read or a
write and asks it for the object that does the work. Each method parses and
checks the options of its role first (:mod:`~disquette.spark.options`), so
bad options fail on the driver before anything touches a job.

======================================  =========================================
``df.write.format("disque")``           :class:`~disquette.spark.sink.DisqueWriter`
``df.writeStream.format("disque")``     :class:`~disquette.spark.sink.DisqueStreamWriter`
``spark.readStream.format("disque")``   :class:`~disquette.spark.stream.DisqueStreamReader`
``spark.read.format("disque")``         :class:`~disquette.spark.peek.DisquePeekReader` (a peek)
======================================  =========================================

Spark finds the format without ``spark.dataSource.register``: the top-level
module ``pyspark_disque`` exposes this class as ``DefaultSource``.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from disquette.spark.jobs import spark_schema
from disquette.spark.options import SinkOptions, SourceOptions
from disquette.spark.peek import DisquePeekReader
from disquette.spark.sink import DisqueStreamWriter, DisqueWriter, SinkPlan
from disquette.spark.stream import DisqueStreamReader


class DisqueDataSource(DataSource):
    """Jobs of a Disque-protocol cluster as DataFrame rows, and rows as jobs."""

    @classmethod
    def name(cls) -> str:
        return "disque"

    def schema(self) -> StructType:
        options = self._source_options("disque source")
        return spark_schema(options.body_as_string, options.job_fields)

    def reader(self, schema: StructType) -> DisquePeekReader:
        return DisquePeekReader(self._source_options("disque peek (batch read)"))

    def streamReader(self, schema: StructType) -> DisqueStreamReader:
        return DisqueStreamReader(self._source_options("disque source"))

    def writer(self, schema: StructType, overwrite: bool) -> DisqueWriter:
        return DisqueWriter(SinkPlan.check(SinkOptions.parse(self.options), schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DisqueStreamWriter:
        plan = SinkPlan.check(SinkOptions.parse(self.options), schema, overwrite)
        return DisqueStreamWriter(plan)

    def _source_options(self, role: str) -> SourceOptions:
        return SourceOptions.parse(self.options, role)
