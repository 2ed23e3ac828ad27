"""What every job's Spark session guarantees beyond Spark's defaults, each in a fresh
process (a JVM's logging and Python-worker settings are fixed when it starts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kinesis_lake.spark.spark_version import require_spark

REPO_ROOT = Path(__file__).resolve().parents[2]

COUNT_THROUGH_A_PYTHON_WORKER = """
import sys
from kinesis_lake.spark.runtime.session import build_spark_session
spark = build_spark_session("local[1]", log_dir=sys.argv[1])
print("rows", spark.sparkContext.parallelize(range(5), 1).map(lambda x: x + 1).sum())
spark.stop()
"""


def _run(code: str, log_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, str(log_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO_ROOT,
    )


def test_spark_logs_to_the_file_not_the_terminal(tmp_path: Path) -> None:
    """Commands print the pipeline's story: Spark's WARN lines (DataSourceManager's
    re-registration notice twice per session, native-hadoop, ...) go to the log file."""
    result = _run(COUNT_THROUGH_A_PYTHON_WORKER, tmp_path / "logs", dict(os.environ))

    assert result.returncode == 0, result.stderr
    assert "rows 15" in result.stdout
    assert "WARN" not in result.stderr and "INFO" not in result.stderr, result.stderr
    log = (tmp_path / "logs" / "spark.log").read_text()
    assert "WARN DataSourceManager" in log


def test_python_workers_run_this_interpreter_whatever_is_on_path(tmp_path: Path) -> None:
    """Spark starts Python workers with `python3` from PATH unless told otherwise, and that
    interpreter lacks the package (DATA_SOURCE_NOT_FOUND, or a worker that cannot import
    kinesis-lake's daemon). Our sessions name this interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/bin:/bin"
    result = _run(COUNT_THROUGH_A_PYTHON_WORKER, tmp_path / "logs", env)

    assert result.returncode == 0, result.stderr[-2000:]
    assert "rows 15" in result.stdout


def test_this_sessions_spark_passes(spark):
    require_spark(spark.version)
