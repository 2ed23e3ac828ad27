"""Freezing a worker's imported objects must not outlive the process's own clean exit."""

from __future__ import annotations

import subprocess
import sys

FREEZE_THEN_EXIT = """
import duckdb
connection = duckdb.connect()
connection.execute("SELECT 1").fetchone()
from kinesis_lake.spark.worker_process import freeze_imported_objects
freeze_imported_objects()
"""


def test_a_process_that_froze_its_objects_exits_without_leak_reports() -> None:
    """gc.freeze keeps objects from ever being collected, so at exit DuckDB's bindings
    reported each one as leaked: a block of noise after every test run (and every Spark
    driver that wrote through the sink in-process)."""
    result = subprocess.run(
        [sys.executable, "-c", FREEZE_THEN_EXIT], capture_output=True, text=True, check=True
    )
    assert "leaked" not in result.stderr, result.stderr
