"""PySpark's Python worker daemon, with this project's imports done once, before forking.

Spark starts one daemon per executor (``spark.python.daemon.module``) and forks a worker
from it for every Python task runner. Stock workers import pyarrow, pyiceberg, boto3 and
this package themselves, and a reused worker runs a full ``gc.collect()`` after every
task that walks all of it: a quarter and a third of the worker CPU in the ingestion
profile (``benchmarks/results/REPORT.md``). Imported here, the modules are inherited by
every fork for free, and frozen (``gc.freeze``), the collections skip them; objects the
tasks create are still collected. botocore's parsed Kinesis model is inherited the same
way (each worker's first client read and parsed it again before). The daemon itself is
PySpark's, unchanged.
"""

from __future__ import annotations

import contextlib
import gc
import importlib

PRELOADED = (
    "pyarrow",
    "pyarrow.parquet",
    "pyiceberg.io.pyarrow",
    "pyiceberg.table",
    "boto3",
    "kinesis_lake.spark.kinesis.source",
    "kinesis_lake.spark.iceberg.writer",
    "kinesis_lake.spark.iceberg.table_reader",
    "kinesis_lake.spark.iceberg.files_reader",
    "kinesis_lake.spark.routing",
)
"""What our tasks import. PySpark's own data source runners are added when present."""

PYSPARK_RUNNERS = (
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source",
    "pyspark.sql.worker.commit_data_source_write",
    "pyspark.sql.worker.python_streaming_sink_runner",
    "pyspark.sql.streaming.python_streaming_source_runner",
)


def preload() -> None:
    for name in PRELOADED:
        importlib.import_module(name)
    from kinesis_lake.kinesis.client import preload_service_models

    preload_service_models()
    for name in PYSPARK_RUNNERS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    gc.collect()
    gc.freeze()


if __name__ == "__main__":
    preload()
    from pyspark import daemon

    daemon.manager()
