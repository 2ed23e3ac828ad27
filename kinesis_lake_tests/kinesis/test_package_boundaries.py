"""The kinesis library stays free of the orchestration and compute stacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_library_imports_neither_dagster_spark_nor_iceberg() -> None:
    modules = [
        "backlog", "client", "endpoint", "fault_proxy", "kpl", "producer", "records", "retry",
        "shard_reader", "streams",
    ]  # fmt: skip
    code = (
        "import sys\n"
        + "".join(f"import kinesis_lake.kinesis.{m}\n" for m in modules)
        + "print(sorted({n.split('.')[0] for n in sys.modules} & "
        "{'dagster', 'pyspark', 'pyiceberg'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    assert result.stdout.strip() == "[]"
