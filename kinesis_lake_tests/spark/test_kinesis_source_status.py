"""The source status: per-batch records and per-shard MillisBehindLatest, as ingest reads it.

On moto, whose GetRecords reports a real MillisBehindLatest (kinesalite always says 0).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.ingest_query import source_metadata_path
from kinesis_lake.spark.kinesis.progress import ShardProgressStore
from kinesis_lake_tests.pipeline_helpers import table_rows
from kinesis_lake_tests.spark.source_helpers import keyed_events, new_stream, put

SHARD = "shardId-000000000000"


def test_status_shows_the_last_batch_and_the_lag_of_every_shard(
    spark, moto_endpoint, settings_factory
):
    url = moto_endpoint.url
    settings = settings_factory(
        moto_endpoint, stream_name=new_stream(url, shards=1), max_records_per_shard=25
    )
    put(url, settings.stream_name, keyed_events("early", keys=5, per_key=5))
    time.sleep(0.3)  # the later records arrive measurably later than the early ones
    put(url, settings.stream_name, keyed_events("late", keys=5, per_key=7))

    result = run_ingestion(spark, settings)

    metadata = source_metadata_path(settings)
    (run_id,) = [p.name for p in Path(metadata).iterdir() if p.is_dir()]
    store = ShardProgressStore(metadata)
    epochs = [store.load(run_id, epoch, SHARD).outcome for epoch in (1, 2, 3)]
    assert [e.records_read for e in epochs] == [25, 25, 10]
    assert epochs[0].millis_behind_latest > 0, "after the first batch 35 records were left"
    assert epochs[2].millis_behind_latest == 0, "caught up"

    status = store.read_status(run_id)
    assert status["epoch"] == 3, "the run's last batch is in the status"
    assert status["recordsRead"] == status["userRecords"] == 10
    batches = Counter(r["batch_id"] for r in table_rows(settings, settings.raw_table))
    assert batches[max(batches)] == 10
    assert status["shards"][SHARD]["millis_behind_latest"] == 0
    assert status["shards"][SHARD]["reader"]["pid"] > 0
    assert status["skippedRanges"] == 0
    assert result.millis_behind_latest == {SHARD: 0}
    assert (result.shards_read, result.rows, result.skipped_ranges) == (1, 60, 0)
