"""Spark 4.0 and 4.1 run the data sources; Spark 3.x is refused in one line.

What differs between versions is documented in docs/spark-4.0-4.1.md. These tests run on
the locked PySpark and call the reader as Spark 4.0/4.1 do, or run the bounded run's 4.0/4.1
drain; `make test` also runs the compatibility suite (spark_compat_suite.txt) on 4.0 and
4.1 themselves.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kinesis_lake.spark.kinesis.available_now import AvailableNow
from kinesis_lake.spark.kinesis.options import KinesisSourceOptions
from kinesis_lake.spark.kinesis.source import KinesisStreamReader
from kinesis_lake.spark.spark_version import (
    SparkVersionError,
    has_read_limits,
    progress_offset,
    require_spark,
)
from kinesis_lake_tests.spark.source_helpers import (
    keyed_events,
    new_stream,
    put,
    record_keys,
    source_options,
    start_source,
    stream_positions,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("version", ["3.5.6-amzn-1", "3.4.1", "2.4.8"])
def test_a_spark_before_4_0_is_refused_in_one_line_saying_what_qualifies(version):
    with pytest.raises(SparkVersionError) as refused:
        require_spark(version)
    message = str(refused.value)
    assert f"Spark {version} is too old" in message and "4.0 or later" in message
    assert "EMR 8" in message and "docs/operations.md" in message
    assert "\n" not in message


@pytest.mark.parametrize("version", ["4.0.2-amzn-0", "4.0.5", "4.1.1", "4.2.0", "4.3.0"])
def test_spark_4_0_and_later_pass(version):
    require_spark(version)


@pytest.mark.parametrize(
    ("version", "limits"),
    [("4.0.2-amzn-0", False), ("4.1.4", False), ("4.2.0", True), ("4.3.0", True), ("5.0.0", True)],
)
def test_read_limits_and_their_available_now_come_with_spark_4_2(version, limits):
    assert has_read_limits(version) is limits
    assert AvailableNow(version).source_options() == ({} if limits else {"availableNow": "true"})


def test_importing_the_data_sources_under_pyspark_3_fails_in_one_line(tmp_path: Path):
    """Spark 3.x has no pyspark.sql.datasource: the packages refuse before importing it,
    as under spark-submit on an EMR 7 cluster (its pyspark first on the path)."""
    stub = tmp_path / "pyspark"
    (stub / "sql").mkdir(parents=True)
    (stub / "__init__.py").write_text('__version__ = "3.5.6"\n')
    (stub / "sql" / "__init__.py").write_text("")
    for module in ("kinesis_lake.spark.kinesis.source", "kinesis_lake.spark.iceberg.sink"):
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            cwd=REPO_ROOT,
            env={"PYTHONPATH": f"{tmp_path}:{REPO_ROOT}", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode != 0
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("kinesis_lake.spark.spark_version.SparkVersionError: Spark 3.5.6")


def test_progress_end_offsets_of_every_version_read_alike():
    """4.2+ report a source's endOffset as JSON, 4.0/4.1 as a Python dict's repr."""
    offset = {"version": 1, "runId": "r", "epoch": 3, "finished": {"s": True}, "cutoffMs": None}
    assert progress_offset(offset) == offset
    assert (
        progress_offset(
            '{"version": 1, "runId": "r", "epoch": 3, "finished": {"s": true}, "cutoffMs": null}'
        )
        == offset
    )
    assert progress_offset(str(offset)) == offset


def test_a_reader_called_as_spark_4_0_calls_it_plans_after_what_spark_logged(
    kinesalite_endpoint, tmp_path
):
    """Spark 4.0/4.1 call ``latestOffset()`` with no arguments, before ``initialOffset()``
    for a new query, and tell a restarted one its last logged offset only through
    ``partitions(X, X)`` (docs/spark-4.0-4.1.md, call order). The byte cap rides with
    the records' (Spark 4.2+ carry only one limit): records are 17 bytes, so 40 bytes over
    two shards take fewer records than the 6 allowed."""
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=2)
    put(url, stream, keyed_events("a", keys=4, per_key=5))
    options = KinesisSourceOptions.parse(
        source_options(
            url, stream, tmp_path / "meta", maxRecordsPerBatch="6", maxBytesPerBatch="40"
        )
    )

    reader = KinesisStreamReader(options)
    first = reader.latestOffset()
    initial = reader.initialOffset()
    assert (first["runId"], first["epoch"]) == (initial["runId"], initial["epoch"] + 1)
    assert reader.initialOffset() == initial, "asked again, the same offset"
    assert 0 < sum(cursor["limit"] for cursor in first["shards"].values()) <= 6, (
        "the default read limit applies though Spark passed none"
    )
    assert sum(cursor["maxBytes"] for cursor in first["shards"].values()) <= 40
    read = [row for task in reader.partitions(initial, first) for row in _rows(reader, task)]
    assert 0 < len(read) < 6, "the byte cap, not the record cap, bounded the batch"
    assert sum(len(row["data"]) + len(row["partition_key"]) for row in read) <= 40

    restarted = KinesisStreamReader(options)  # a new query on the same checkpoint
    assert restarted.partitions(first, first) == []  # setLatestSeenOffset, as 4.0/4.1 send it
    following = restarted.latestOffset()
    assert (following["runId"], following["epoch"]) == (first["runId"], first["epoch"] + 1)
    after = {sid: cursor["start"] for sid, cursor in following["shards"].items()}
    assert after != {sid: cursor["start"] for sid, cursor in first["shards"].items()}, (
        "the plan starts where epoch 1's reads stopped"
    )


def _rows(reader: KinesisStreamReader, task) -> list[dict]:
    """What an executor task reads (in this process: the read freezes its heap for the
    garbage collector, as in a Spark worker, so it is thawed again)."""
    try:
        return [row for batch in reader.read(task) for row in batch.to_pylist()]
    finally:
        gc.unfreeze()


def test_the_4_0_and_4_1_drain_reads_a_backlog_in_bounded_batches_and_stops(
    spark, kinesalite_endpoint, tmp_path
):
    """The bounded run Spark 4.0/4.1 get (processAllAvailable under the availableNow
    cutoff), here on the locked Spark: several bounded batches, every record once, then
    the query stops by itself."""
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=2)
    put(url, stream, keyed_events("a", keys=6, per_key=4))
    options = source_options(url, stream, tmp_path / "meta", maxRecordsPerBatch="7")
    bounded = AvailableNow("4.0.5")

    query, rows = start_source(spark, options, tmp_path / "checkpoint", bounded=bounded)
    try:
        assert bounded.wait(query, 600), "the drain did not end"
        assert not query.isActive
    finally:
        query.stop()

    batches = Counter(row["batch_id"] for row in rows)
    assert len(batches) >= 4 and max(batches.values()) <= 7, batches
    keys = record_keys(rows)
    assert len(keys) == len(set(keys)) == 24
    assert {(shard, sequence) for shard, sequence, _ in keys} == stream_positions(url, stream)
