"""The ``kinesis_lake_iceberg`` Spark data source: an exactly-once Iceberg sink and readers.

* ``sink``: the data source, the outward face Spark's lookup imports (kept free of
  Iceberg's table code: ``test_data_source_imports.py``).
* ``options``: its options, parsed without importing Iceberg.
* ``writer``: executor-side Parquet writes, one driver commit per batch.
* ``table_reader``: batch reads of a table at a snapshot.
* ``files_reader``: reads of given data files (a derived table's new slice of raw).

This file imports only the version check: Spark imports the package in every process it
starts, and a Spark 3.x must be refused before a module here imports what it lacks.
"""

from kinesis_lake.spark.spark_version import require_pyspark

require_pyspark()
