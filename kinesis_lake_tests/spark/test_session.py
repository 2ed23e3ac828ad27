"""What every job's Spark session guarantees beyond Spark's defaults, each in a fresh
process (a JVM's logging and Python-worker settings are fixed when it starts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kinesis_lake.spark.spark_version import SparkVersionError, require_spark

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


@pytest.mark.parametrize("version", ["3.5.6-amzn-1", "4.0.2-amzn-0", "4.1.1", "4.1.0"])
def test_a_spark_older_than_4_2_is_refused_in_one_line_saying_what_qualifies(version):
    """Spark 4.0/4.1 would fail at the first trigger with a TypeError (latestOffset takes
    the read limit only since 4.2): managed runtimes still ship those (EMR 8, Glue 6)."""
    with pytest.raises(SparkVersionError) as refused:
        require_spark(version)
    message = str(refused.value)
    assert f"Spark {version} is too old" in message and "4.2 or later" in message
    assert "\n" not in message


@pytest.mark.parametrize("version", ["4.2.0", "4.3.0", "5.0.0-SNAPSHOT"])
def test_spark_4_2_and_later_pass(version):
    require_spark(version)


def test_this_sessions_spark_passes(spark):
    require_spark(spark.version)
