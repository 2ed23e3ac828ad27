"""The Spark resource: uses a session it did not start without stopping it, and passes
the continuous mode through."""

from __future__ import annotations

import threading

import dagster as dg

from kinesis_lake.defs.resources import SparkResource
from kinesis_lake_tests.pipeline_helpers import produce, raw_keys


def test_a_session_started_elsewhere_is_used_and_left_running(spark, lake):
    with dg.build_resources({"spark": SparkResource(master="local[2]")}) as resources:
        assert resources.spark.session.sparkContext is spark.sparkContext
    # Teardown ran; the shared session must still work.
    assert spark.range(3).count() == 3


def test_continuous_ingestion_runs_until_stopped(spark, lake):
    produce(lake.settings, 25, seed=21)
    stop = threading.Event()
    reports = []

    def on_batch(report):
        reports.append(report)
        if sum(r.rows for r in reports) >= 25:
            stop.set()

    timeout = threading.Timer(120, stop.set)
    timeout.start()
    try:
        with dg.build_resources({"spark": lake.resources["spark"]}) as resources:
            result = resources.spark.ingest_continuously(
                lake.settings, stop=stop, processing_time="1 second", on_batch=on_batch
            )
    finally:
        timeout.cancel()

    assert result.rows == 25
    assert sum(r.rows for r in reports) == 25
    assert len(set(raw_keys(lake.settings))) == 25
    assert spark.range(1).count() == 1
