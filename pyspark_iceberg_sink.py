"""Spark 4 auto-registration hook for the ``kinesis_lake_iceberg`` data source.

Sessions built by kinesis-lake register the sink explicitly too, but a registration is
per session: this module makes ``format("kinesis_lake_iceberg")`` resolve in any session,
including one used from another thread. See ``pyspark_kinesis`` for the mechanism.
"""

from kinesis_lake.spark.iceberg.sink import IcebergDataSource as DefaultSource

__all__ = ["DefaultSource"]
