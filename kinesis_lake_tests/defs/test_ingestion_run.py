"""The ingestion job as the backlog sensor launches it: an observation of the stream, then
raw_events. Real Spark, moto Kinesis behind a fault proxy, a real catalog."""

from __future__ import annotations

import threading
import time

import dagster as dg

from kinesis_lake.defs.raw_assets import RAW_EVENTS, raw_events
from kinesis_lake.defs.streams import KINESIS_STREAM, kinesis_stream
from kinesis_lake.pipeline.ingest_query import prepare_raw_table
from kinesis_lake_tests.defs.helpers import make_lake
from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy
from kinesis_lake_tests.pipeline_helpers import produce, raw_rows


def _ingestion_run(lake, *, raise_on_error: bool = True) -> dg.ExecuteInProcessResult:
    """The ingestion job's selection, as the backlog sensor launches it."""
    with dg.instance_for_test() as instance:
        return dg.materialize(
            [kinesis_stream, raw_events],
            selection=dg.AssetSelection.assets(KINESIS_STREAM, RAW_EVENTS),
            resources=lake.resources,
            instance=instance,
            raise_on_error=raise_on_error,
        )


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
        result = _ingestion_run(lake, raise_on_error=False)
    finally:
        proxy.stop()

    assert proxy.counts[("ListShards", "invalid_argument")] == 1
    assert result.success
    # The downstream tables followed raw in the run: only raw's commit is asked about.
    (written,) = [e for e in result.get_asset_materialization_events() if e.asset_key == RAW_EVENTS]
    assert written.materialization.metadata["rows_added"].value == 20
    (observed,) = result.get_asset_observation_events()
    error = observed.event_specific_data.asset_observation.metadata["observation_error"].value
    assert "InvalidArgumentException" in error and "\n" not in error


def test_a_lingering_run_records_each_micro_batch_as_it_commits(
    spark, moto_endpoint, tmp_path, monkeypatch
):
    """With KINESIS_LAKE_RUN_LINGER_SECONDS the run goes on after its drain: the UI must
    show the raw table moving while it does, batch by batch, not only when the run ends."""
    lake = make_lake(monkeypatch, tmp_path / "data", moto_endpoint.url)
    lake = lake.rebuild(monkeypatch, KINESIS_LAKE_RUN_LINGER_SECONDS="4")
    produce(lake.settings, 30, seed=31)
    prepare_raw_table(lake.settings)  # so the watching thread can count its rows from the start

    def put_after_the_first_commit() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and raw_rows(lake.settings) < 30:
            time.sleep(0.3)
        produce(lake.settings, 25, seed=32)

    producer = threading.Thread(target=put_after_the_first_commit, daemon=True)
    producer.start()
    result = _ingestion_run(lake)
    producer.join(5)

    batches = [
        event.materialization.metadata
        for event in result.get_asset_materialization_events()
        if event.asset_key == RAW_EVENTS
    ]
    # One materialization per commit: the run adds no total of its own at its end
    # (test_lingering_run_truth.py holds the rest of what a lingering run shows).
    assert len(batches) >= 2
    assert sum(batch["rows_added"].value for batch in batches) == 55
    assert [batch["dagster/row_count"].value for batch in batches][-1] == 55
