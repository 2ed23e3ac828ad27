"""The Dagster side of continuous ingestion: ``defs.raw_assets.ingest_continuously`` records
each micro-batch on the instance it is given, as ``kinesis-lake stream`` does with
$DAGSTER_HOME's (``test_continuous_stream``): one raw_events materialization per batch that
moved rows, with the same numeric metadata."""

from __future__ import annotations

import threading

import dagster as dg

from kinesis_lake.defs.raw_assets import RAW_EVENTS, ingest_continuously
from kinesis_lake.pipeline.ingest_report import BatchReport
from kinesis_lake_tests.pipeline_helpers import produce, raw_keys

SENT = 30


def test_ingest_continuously_records_each_batch_on_the_instance(spark, lake, instance):
    produce(lake.settings, SENT, seed=41)
    stop = threading.Event()
    seen: list[BatchReport] = []

    def on_batch(batch: BatchReport) -> None:
        seen.append(batch)
        if sum(b.rows for b in seen) >= SENT:
            stop.set()

    timeout = threading.Timer(300, stop.set)
    timeout.start()
    try:
        with dg.build_resources({"spark": lake.resources["spark"]}) as resources:
            result = ingest_continuously(
                resources.spark,
                lake.settings,
                stop=stop,
                processing_time="1 second",
                on_batch=on_batch,
                instance=instance,
            )
    finally:
        timeout.cancel()

    assert result.rows == SENT == len(set(raw_keys(lake.settings)))
    records = instance.fetch_materializations(RAW_EVENTS, limit=100).records
    recorded = [r.asset_materialization.metadata for r in reversed(records)]
    assert len(recorded) == len(seen) == result.batches
    for metadata, batch in zip(recorded, seen, strict=True):
        assert metadata["batch_id"] == dg.IntMetadataValue(batch.batch_id)
        assert metadata["rows_added"] == dg.IntMetadataValue(batch.rows)
        assert metadata["dagster/row_count"] == dg.IntMetadataValue(batch.raw_rows_total)
        assert isinstance(metadata["max_millis_behind_latest"], dg.IntMetadataValue)
        assert metadata["skipped_ranges"] == dg.IntMetadataValue(0)
    assert recorded[-1]["dagster/row_count"] == dg.IntMetadataValue(SENT)
