"""The raw table keeps the source's reads to the tip and the deployment's start, for a
query that starts with neither checkpoint nor progress folder (issue 31, seed 30023)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.pipeline.earlier_reads import earlier_reads, record_earlier_reads
from kinesis_lake.spark.kinesis.earlier_runs import with_earlier_reads
from kinesis_lake.spark.kinesis.options import EarlierReads, KinesisOptionError
from kinesis_lake.spark.kinesis.options import KinesisSourceOptions as Options
from kinesis_lake_tests.spark.offset_helpers import initial, shard


def status(started_ms: int, **tips: int | None) -> dict:
    return {"startedMs": started_ms, "shards": {s: {"tip_ms": t} for s, t in tips.items()}}


def test_tips_move_only_forward_and_the_start_only_back(tmp_path: Path):
    catalog = open_catalog(data_dir=tmp_path)
    ensure_namespace(catalog, "lake")
    table = ensure_raw_table(catalog, "lake.raw")
    assert earlier_reads(table) == EarlierReads()

    record_earlier_reads(table, status(5_000, a=9_000, b=None))
    record_earlier_reads(table, status(7_000, a=8_000, b=6_000))  # an older run's status

    reloaded = catalog.load_table("lake.raw")
    assert earlier_reads(reloaded) == EarlierReads(since_ms=5_000, tip_ms={"a": 9_000, "b": 6_000})
    assert reloaded.current_snapshot() is None  # a property, never a snapshot


def test_a_start_takes_the_tables_later_tip_and_earlier_start():
    offset = initial(shard("a"), shard("b"))
    reads = EarlierReads(since_ms=5, tip_ms={"a": 9, "gone": 3})

    learned = with_earlier_reads(offset, reads)

    assert learned.shards["a"].tip_ms == 9
    assert learned.quiet_since("b") == 5  # read since then: what expired after is loss


def test_times_of_a_deleted_stream_of_the_same_name_are_ignored():
    offset = initial(shard("a"))  # a stream created at 1 ms
    assert with_earlier_reads(offset, EarlierReads(since_ms=0, tip_ms={"a": 0})) == offset


@pytest.mark.parametrize("text", ["[1]", '{"tipMs": {"a": "soon"}}', "{"])
def test_a_malformed_earlier_reads_option_names_itself_and_the_form(text: str):
    with pytest.raises(KinesisOptionError, match=r"earlierReads.*sinceMs"):
        Options.parse({"streamName": "s", "earlierReads": text})
