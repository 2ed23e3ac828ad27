"""Where the lake is when nothing says otherwise, importable without pyiceberg.

Spark parses the sink's options in planner processes that never open the catalog
(:mod:`kinesis_lake.spark.iceberg.sink`), and every one of them is a new process a query
waits for: their defaults must not cost an import of the catalog code.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_CATALOG_NAME = "kinesis_lake"
DEFAULT_NAMESPACE = "kinesis_lake"


def default_data_dir() -> Path:
    """Home of the embedded default catalog and warehouse when nothing says otherwise:
    ``.data`` in the repository (beside the package), whatever the working directory, so
    the CLI, Dagster and a Spark job started elsewhere find the same lake."""
    return Path(__file__).resolve().parents[2] / ".data"
