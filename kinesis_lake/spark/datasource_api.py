"""The Python data source API classes the source and sink build on, from the PySpark that
runs them: 4.0 and 4.1 lack some of 4.2+'s (docs/spark-4.0-4.1.md has the evidence).

* Read limits (``ReadLimit``, ``ReadAllAvailable``, ``ReadMaxRows``, ``ReadMaxBytes``) and
  ``SupportsTriggerAvailableNow`` live in ``pyspark.sql.streaming.datasource`` since 4.2.
  On 4.0/4.1 that module is missing and Spark calls ``latestOffset()`` with no arguments:
  the kinesis reader applies its default limit itself, with the stand-ins below, which
  Spark never sees; a bounded run drains differently
  (:mod:`kinesis_lake.spark.kinesis.available_now`).
* ``DataSourceStreamArrowWriter`` exists since 4.1. 4.0's sink runner writes Arrow batches
  through any ``DataSourceArrowWriter``, streaming or not, so there the stream writer's base
  is made of the two.

The source and sink run in Spark's own Python processes, whose path starts with Spark's
own ``pyspark.zip``, so what is imported here always matches the JVM. Only the data source
packages import this module, after their Spark 3.x check (``spark_version``).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # PySpark 4.0/4.1

    class ReadLimit:  # type: ignore[no-redef]
        """How much one micro-batch may read (Spark's own class since 4.2)."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """No limit."""

    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """At most ``max_rows`` rows (the kinesis source counts Kinesis records)."""

        def __init__(self, max_rows: int) -> None:
            self.max_rows = max_rows

    class ReadMaxBytes(ReadLimit):  # type: ignore[no-redef]
        """At most ``max_bytes`` bytes (the kinesis source counts Kinesis records' bytes)."""

        def __init__(self, max_bytes: int) -> None:
            self.max_bytes = max_bytes

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """A marker only: 4.0/4.1 never call ``prepareForTriggerAvailableNow`` on a Python
        source."""


try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
except ImportError:  # PySpark 4.0

    class DataSourceStreamArrowWriter(  # type: ignore[no-redef, misc]
        DataSourceStreamWriter, DataSourceArrowWriter
    ):
        """4.0's sink runner writes Arrow batches through any ``DataSourceArrowWriter``
        (``write_into_data_source.py``) and commits it as a stream writer,
        ``commit(messages, batchId)``."""


__all__ = [
    "DataSourceStreamArrowWriter",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxBytes",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
]
