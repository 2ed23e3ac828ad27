"""Spark 4 auto-registration hook for the ``kinesis`` data source.

At its first data-source lookup Spark imports every top-level module named ``pyspark_*``
and registers its ``DefaultSource`` under ``DefaultSource.name()``, so installing
kinesis-lake is enough for ``spark.readStream.format("kinesis")`` to work.
"""

from kinesis_lake.spark.kinesis.source import KinesisDataSource as DefaultSource

__all__ = ["DefaultSource"]
