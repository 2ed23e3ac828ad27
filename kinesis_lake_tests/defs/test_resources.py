"""The Spark resource: uses a session it did not start without stopping it."""

from __future__ import annotations

import dagster as dg

from kinesis_lake.defs.resources import SparkResource


def test_a_session_started_elsewhere_is_used_and_left_running(spark, lake):
    with dg.build_resources({"spark": SparkResource(master="local[2]")}) as resources:
        assert resources.spark.session.sparkContext is spark.sparkContext
    # Teardown ran; the shared session must still work.
    assert spark.range(3).count() == 3
