"""The ingestion job as the backlog sensor launches it: an observation of the stream, then
raw_events. Real Spark, moto Kinesis behind a fault proxy, a real catalog."""

from __future__ import annotations

import dagster as dg

from kinesis_lake.defs.assets import KINESIS_STREAM, RAW_EVENTS, kinesis_stream, raw_events
from kinesis_lake.kinesis.fault_proxy import FaultProxy
from kinesis_lake_tests.defs.helpers import make_lake
from kinesis_lake_tests.pipeline_helpers import produce


def test_a_failed_stream_observation_does_not_stop_the_ingestion_after_it(
    spark, moto_endpoint, tmp_path, monkeypatch
):
    """raw_events depends on the stream's observation, so an observation that failed (one
    refused ListShards) skipped the ingestion: a run that only looks at the stream must
    not stop the one that drains it."""
    proxy = FaultProxy(moto_endpoint.url).start()
    try:
        lake = make_lake(monkeypatch, tmp_path / "data", proxy.url)
        produce(lake.settings, 20, seed=13)
        proxy.inject("ListShards", "invalid_argument")  # not retried by botocore
        with dg.instance_for_test() as instance:
            result = dg.materialize(
                [kinesis_stream, raw_events],
                selection=dg.AssetSelection.assets(KINESIS_STREAM, RAW_EVENTS),
                resources=lake.resources,
                instance=instance,
                raise_on_error=False,
            )
    finally:
        proxy.stop()

    assert proxy.counts[("ListShards", "invalid_argument")] == 1
    assert result.success
    (written,) = result.get_asset_materialization_events()
    assert written.asset_key == RAW_EVENTS
    assert written.materialization.metadata["rows_added"].value == 20
    (observed,) = result.get_asset_observation_events()
    error = observed.event_specific_data.asset_observation.metadata["observation_error"].value
    assert "InvalidArgumentException" in error and "\n" not in error
