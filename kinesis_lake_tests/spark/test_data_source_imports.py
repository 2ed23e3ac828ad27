"""Spark's planner processes import only what their step needs from the sink's module.

For every query Spark starts Python processes that only look up, create or plan the data
sources: ``lookup_data_sources`` imports every ``pyspark_*`` module, ``create_data_source``
unpickles the source. Each is a new process, one after another (benchmark 12's
timeline), so what importing ``pyspark_iceberg_sink`` pulls in is paid in each. Those steps
need the data source class and its options, not Iceberg's table, file and catalog code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ICEBERG_IO = (
    "pyiceberg.table",
    "pyiceberg.io.pyarrow",
    "pyiceberg.catalog.sql",
    "sqlalchemy",
    "pandas",
)


def _imported_after(statement: str) -> set[str]:
    probe = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(done.stdout.split())


@pytest.mark.parametrize(
    ("hook", "name"),
    [("pyspark_iceberg_sink", "kinesis_lake_iceberg"), ("pyspark_kinesis", "kinesis")],
)
def test_looking_up_a_data_source_imports_no_iceberg_table_code(hook: str, name: str) -> None:
    # What lookup_data_sources does with the hook: import it, ask its DefaultSource's name.
    imported = _imported_after(f"import {hook}\nassert {hook}.DefaultSource.name() == {name!r}")
    assert sorted(set(ICEBERG_IO) & imported) == []
