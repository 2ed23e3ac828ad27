"""Ingestion through the real source and sink: exactly once, across restarts."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import replace

import pytest
from pyspark.errors import StreamingQueryException

from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.ingest_query import checkpoint_location
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.pipeline_helpers import produce, raw_keys, run_cli, stream_truth


def test_ingest_commits_every_record_once_with_its_shard_and_sequence(
    spark, any_endpoint, settings_factory
):
    settings = settings_factory(any_endpoint, max_records_per_shard=150)
    produce(settings, 700, seed=1)

    result = run_ingestion(spark, settings)

    keys = raw_keys(settings)
    assert len(keys) == 700
    assert not [k for k, n in Counter(keys).items() if n > 1]
    assert {(shard, seq) for shard, seq, _ in keys} == stream_truth(settings)
    assert result.rows == 700
    # 700 records over 2 shards at <= 150 per shard per batch needs several batches.
    assert result.batches >= 3


def test_restart_in_a_new_spark_process_continues_exactly_once(
    spark, kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 300, seed=2)
    run_ingestion(spark, settings)
    assert len(raw_keys(settings)) == 300

    produce(settings, 200, seed=3)
    completed = run_cli(settings, "ingest")
    assert completed.returncode == 0, completed.stderr[-3000:]

    keys = raw_keys(settings)
    assert len(keys) == 500
    assert len(set(keys)) == 500
    assert {(shard, seq) for shard, seq, _ in keys} == stream_truth(settings)


def test_an_idle_stream_adds_nothing(spark, kinesalite_endpoint, settings_factory):
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 50, seed=4)
    run_ingestion(spark, settings)

    again = run_ingestion(spark, settings)

    assert again.rows == 0
    assert len(raw_keys(settings)) == 50


def test_a_lost_checkpoint_resumes_after_the_tables_committed_positions(
    spark, kinesalite_endpoint, settings_factory, tmp_path
):
    """The raw table is the durable state: a new checkpoint starts where it left off,
    even when the configured starting position would say otherwise."""
    settings = settings_factory(kinesalite_endpoint, max_records_per_shard=80)
    produce(settings, 250, seed=5)
    run_ingestion(spark, settings)
    produce(settings, 120, seed=6)
    elsewhere = replace(
        settings,
        checkpoint_dir=str(tmp_path / "another-machine" / "checkpoints"),
        starting_position="latest",
    )

    resumed = run_ingestion(spark, elsewhere)

    assert resumed.rows == 120
    keys = raw_keys(settings)
    assert len(keys) == len(set(keys)) == 370
    assert {(shard, seq) for shard, seq, _ in keys} == stream_truth(settings)

    # The first machine's checkpoint comes back: it is behind the table, and its next
    # batch would re-add the 120 records. It is refused, and nothing is added.
    produce(settings, 40, seed=7)
    with pytest.raises(StreamingQueryException, match="Delete this query's checkpoint"):
        run_ingestion(spark, settings)
    assert len(raw_keys(settings)) == 370
    shutil.rmtree(checkpoint_location(settings))

    run_ingestion(spark, settings)

    keys = raw_keys(settings)
    assert len(keys) == len(set(keys)) == 410
    assert {(shard, seq) for shard, seq, _ in keys} == stream_truth(settings)


def _files_added_per_commit(settings) -> list[int]:
    table = open_lake(settings).load_table(settings.raw_table)
    return [
        int(snapshot.summary.additional_properties["added-data-files"])
        for snapshot in table.snapshots()
    ]


def test_max_write_tasks_zero_writes_a_file_per_shard(spark, kinesalite_endpoint, settings_factory):
    settings = settings_factory(kinesalite_endpoint, shard_count=6, max_write_tasks=0)
    produce(settings, 600, seed=7)

    result = run_ingestion(spark, settings)

    keys = raw_keys(settings)
    assert result.rows == 600 == len(set(keys)) == len(keys)
    assert result.batches == 1
    assert _files_added_per_commit(settings) == [len({shard for shard, _, _ in keys})] == [6]


def test_by_default_files_per_commit_follow_the_data_not_the_shard_count(
    spark, kinesalite_endpoint, settings_factory
):
    """Issue 34: every shard was a task and each task writes a file per micro-batch, so a
    500-shard stream committed ~500 small files every trigger (benchmark 9), and a
    coalesce to the cores was known on a local master only. By default the source packs
    shards into tasks by the bytes their last reads gave, up to the table's target file
    size: a small batch over 24 shards is one task, one file (per arrival day), in every
    micro-batch, the first (sized by guess) and the later ones (by the last reads), and
    every record still lands once. (Before: 2 files per commit, one per core.)"""
    settings = settings_factory(kinesalite_endpoint, shard_count=24, max_records_per_shard=12)
    assert settings.max_write_tasks is None
    produce(settings, 600, seed=7)

    result = run_ingestion(spark, settings)

    keys = raw_keys(settings)
    assert result.rows == 600 == len(set(keys)) == len(keys)
    assert {(shard, seq) for shard, seq, _ in keys} == stream_truth(settings)
    assert len({shard for shard, _, _ in keys}) == 24
    assert result.batches >= 2  # ~25 records a shard at <= 12 per batch
    # produce() stamps one day, so one task writes one file per batch.
    assert _files_added_per_commit(settings) == [1] * result.batches


def test_an_explicit_number_of_write_tasks_bounds_the_data_files_of_a_commit(
    spark, kinesalite_endpoint, settings_factory
):
    """KINESIS_LAKE_MAX_WRITE_TASKS=2 wins over the packing by bytes: each shard is read
    in a task of its own, coalesced into 2 writing tasks, each writing one file per
    partition value; every record still lands once."""
    settings = settings_factory(kinesalite_endpoint, shard_count=6, max_write_tasks=2)
    produce(settings, 600, seed=7)

    result = run_ingestion(spark, settings)

    keys = raw_keys(settings)
    assert result.rows == 600 == len(set(keys)) == len(keys)
    assert {(shard, seq) for shard, seq, _ in keys} == stream_truth(settings)
    assert len({shard for shard, _, _ in keys}) == 6
    added = _files_added_per_commit(settings)
    # produce() stamps one day, so each of the two tasks writes one file per batch.
    assert added == [2] * result.batches, added
