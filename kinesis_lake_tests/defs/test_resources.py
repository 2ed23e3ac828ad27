"""The Spark resource (dagster-pyspark's lazy resource, extended): uses a session it did not
start without stopping it, and stops one it started."""

from __future__ import annotations

import subprocess
import sys

import dagster as dg

from kinesis_lake.defs.resources import SparkResource


def test_a_session_started_elsewhere_is_used_and_left_running(spark, lake):
    with dg.build_resources({"spark": SparkResource(master="local[2]")}) as resources:
        assert resources.spark.session.sparkContext is spark.sparkContext
    # Teardown ran; the shared session must still work.
    assert spark.range(3).count() == 3


STARTS_AND_TEARS_DOWN = """
import dagster as dg
from pyspark import SparkContext
from kinesis_lake.defs.resources import SparkResource
from dagster_pyspark import LazyPySparkResource
assert issubclass(SparkResource, LazyPySparkResource)
with dg.build_resources({"spark": SparkResource(master="local[1]", log_dir="logs")}) as r:
    assert r.spark.session is r.spark.spark_session
    print("rows", r.spark.session.range(4).count())
print("after teardown", SparkContext._active_spark_context)
"""


def test_a_session_it_started_is_stopped_at_teardown(tmp_path):
    """In its own process: the suite's shared session must not be the one started."""
    result = subprocess.run(
        [sys.executable, "-c", STARTS_AND_TEARS_DOWN],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rows 4" in result.stdout
    assert "after teardown None" in result.stdout
    assert (tmp_path / "logs" / "spark.log").exists()
