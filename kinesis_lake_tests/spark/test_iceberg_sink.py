"""The Iceberg sink's commit protocol: invisible until committed, once per batch id."""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.commit import commit_arrow
from kinesis_lake.iceberg.data_files import TableWriteTarget
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.iceberg.summary import committed_positions
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.ingest_query import checkpoint_location
from kinesis_lake.spark.iceberg.options import SinkOptions
from kinesis_lake.spark.iceberg.writer import IcebergStreamWriter
from kinesis_lake_tests.ambiguous_catalog import catalog_environment, pause_commits
from kinesis_lake_tests.iceberg.helpers import raw_batch
from kinesis_lake_tests.pipeline_helpers import produce, raw_keys, stream_truth


def sink_for(data_dir: Path) -> tuple[IcebergStreamWriter, object]:
    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    ensure_namespace(catalog, "lake")
    table = ensure_raw_table(catalog, "lake.raw")
    options = SinkOptions.parse(
        {
            "table": "lake.raw",
            "dataDir": str(data_dir),
            "writerId": "query-1",
            "positionColumns": "shard_id,sequence_number",
        }
    )
    return IcebergStreamWriter(options, TableWriteTarget.from_table(table)), catalog


def row_count(catalog) -> int:
    return catalog.load_table("lake.raw").scan().to_arrow().num_rows


def test_files_written_but_not_committed_are_invisible_and_the_rerun_commits_once(tmp_path):
    writer, catalog = sink_for(tmp_path)
    crashed = writer.write(iter([raw_batch(range(100, 150), shard="shard-1")]))
    assert crashed.paths and all(Path(p.removeprefix("file://")).exists() for p in crashed.paths)
    assert row_count(catalog) == 0, "data files alone must not be visible"

    rerun = writer.write(iter([raw_batch(range(100, 150), shard="shard-1")]))
    writer.commit([rerun], batchId=0)
    assert row_count(catalog) == 50

    replay = writer.write(iter([raw_batch(range(100, 150), shard="shard-1")]))
    writer.commit([replay], batchId=0)
    assert row_count(catalog) == 50, "a batch id already committed is skipped"
    assert not any(Path(p.removeprefix("file://")).exists() for p in replay.paths)


def test_positions_of_every_shard_accumulate_in_a_table_property_not_in_every_snapshot(
    tmp_path,
):
    """The merged map of every shard's position is kept once, in the table property, and
    not again in each snapshot's summary: with 500 shards the summaries of 100 retained
    snapshots made the metadata JSON 4.7 MB, written and read back by every commit."""
    writer, catalog = sink_for(tmp_path)
    writer.commit(
        [
            writer.write(
                iter([raw_batch(range(5, 8), shard="a"), raw_batch(range(90, 92), shard="b")])
            )
        ],
        batchId=0,
    )
    writer.commit([writer.write(iter([raw_batch(range(8, 12), shard="a")]))], batchId=1)

    table = catalog.load_table("lake.raw")
    assert table.properties["kinesis-lake.positions"] == '{"a": "11", "b": "91"}'
    assert committed_positions(table) == {"a": "11", "b": "91"}
    summaries = [snapshot.summary.additional_properties for snapshot in table.snapshots()]
    assert [summary["kinesis-lake.batch-id"] for summary in summaries] == ["0", "1"]
    assert all("kinesis-lake.positions" not in summary for summary in summaries)


def test_a_task_tracks_each_shard_s_lowest_and_highest_sequence_number_as_numbers(tmp_path):
    """One Arrow batch can hold several shards (Spark re-chunks what a coalesced task
    reads), in any order, and sequence numbers are decimal strings of varying length: "9"
    is below "10", though it sorts after it as text."""
    writer, _ = sink_for(tmp_path)
    mixed = pa.concat_batches(
        [
            raw_batch([10, 9, 123], shard="a"),
            raw_batch([7], shard="b"),
            raw_batch([99, 100], shard="a"),
        ]
    )
    written = writer.write(iter([mixed, raw_batch([8], shard="b")]))
    assert written.rows == 7
    assert written.positions == {"a": "123", "b": "8"}
    assert written.first_positions == {"a": "9", "b": "7"}


def test_a_batch_aborted_because_a_task_failed_leaves_no_files(tmp_path):
    """Spark passes None for the failed task's message and never called commit: the
    other tasks' files were never sent to the catalog and can go at once."""
    writer, catalog = sink_for(tmp_path)
    message = writer.write(iter([raw_batch(range(1, 11), shard="a")]))
    writer.abort([message, None], batchId=0)
    assert not any(Path(p.removeprefix("file://")).exists() for p in message.paths)
    assert row_count(catalog) == 0


def test_a_second_writer_committing_during_ingestion_loses_nothing(
    spark, kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint, max_records_per_shard=60)
    produce(settings, 600, seed=41)
    catalog = open_catalog(settings.catalog_name, data_dir=settings.data_dir)
    ensure_namespace(catalog, settings.namespace)
    ensure_raw_table(catalog, settings.raw_table)
    stop = threading.Event()
    backfilled = []

    def backfill() -> None:
        batch_id = 0
        while not stop.is_set() and batch_id < 40:
            table = open_catalog(settings.catalog_name, data_dir=settings.data_dir).load_table(
                settings.raw_table
            )
            first = 10_000 + batch_id * 5
            rows = pa.Table.from_batches([raw_batch(range(first, first + 5), shard="backfill")])
            commit_arrow(table, rows, writer_id="backfill", batch_id=batch_id)
            backfilled.extend(rows.column("sequence_number").to_pylist())
            batch_id += 1

    thread = threading.Thread(target=backfill)
    thread.start()
    try:
        run_ingestion(spark, settings)
    finally:
        stop.set()
        thread.join()

    keys = raw_keys(settings)
    streamed = {(shard, seq) for shard, seq, _ in keys if shard != "backfill"}
    assert streamed == stream_truth(settings)
    assert len([k for k in keys if k[0] != "backfill"]) == 600
    assert sorted(seq for shard, seq, _ in keys if shard == "backfill") == sorted(backfilled)


def test_a_checkpoint_less_restart_after_a_stale_empty_batch_raced_ingestion_reads_once(
    spark, kinesalite_endpoint, settings_factory, tmp_path, monkeypatch
):
    """Issue 31, defect 1, through Spark: a stale query's empty batch loads the table's
    positions, the live query ingests 10 more records before that commit reaches the
    catalog, and the empty batch's commit lands last. A restart without a checkpoint
    resumes after the table's positions: had they been rolled back, it would read the
    10 records again."""
    settings = settings_factory(kinesalite_endpoint, shard_count=1)
    for key, value in catalog_environment(
        settings.data_dir, tmp_path / "faults.json", settings.catalog_name
    ).items():
        monkeypatch.setenv(key, value)  # this process only: Spark's workers started before
    produce(settings, 10, seed=3)
    run_ingestion(spark, settings)
    options = SinkOptions.parse(
        {
            "table": settings.raw_table,
            "catalog": settings.catalog_name,
            "dataDir": str(settings.data_dir),
            "writerId": "stale-query",
            "positionColumns": "shard_id,sequence_number",
        }
    )
    stale = IcebergStreamWriter(options, TableWriteTarget.from_table(options.load_table()))
    produce(settings, 10, seed=4)
    raced = threading.Lock()

    def live_query_ingests_first(_table: str) -> None:
        if raced.acquire(blocking=False):
            run_ingestion(spark, settings)

    with pause_commits(live_query_ingests_first):
        stale.commit([stale.write(iter([]))], batchId=7)
    shutil.rmtree(checkpoint_location(settings))
    run_ingestion(spark, settings)

    keys = raw_keys(settings)
    assert not [key for key, n in Counter(keys).items() if n > 1], "records read twice"
    assert {(shard, sequence) for shard, sequence, _ in keys} == stream_truth(settings)
    assert len(keys) == 20
