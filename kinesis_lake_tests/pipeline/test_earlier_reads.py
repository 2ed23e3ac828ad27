"""The raw table keeps the source's reads to the tip and the deployment's start, for a
query that starts with neither checkpoint nor progress folder (issue 31, seed 30023)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.pipeline.earlier_reads import earlier_reads, record_earlier_reads
from kinesis_lake.spark.kinesis.earlier_runs import with_earlier_reads
from kinesis_lake.spark.kinesis.options import EarlierReads, KinesisOptionError
from kinesis_lake.spark.kinesis.options import KinesisSourceOptions as Options
from kinesis_lake.spark.kinesis.progress import ProgressRecord, ShardProgressStore
from kinesis_lake_tests.kinesis.helpers import outcome
from kinesis_lake_tests.spark.offset_helpers import initial, shard


def published(store: ShardProgressStore, run: str, started_ms: int, **tips: int | None) -> None:
    """A status as the source publishes it after an epoch of run ``run``."""
    shards = {s: {"tip_ms": t} for s, t in tips.items()}
    store.write_status(run, {"startedMs": started_ms, "writtenAtMs": started_ms, "shards": shards})


def raw_table(tmp_path: Path) -> tuple[Catalog, Table]:
    catalog = open_catalog(data_dir=tmp_path / "data")
    ensure_namespace(catalog, "lake")
    return catalog, ensure_raw_table(catalog, "lake.raw")


def test_tips_move_only_forward_and_the_start_only_back(tmp_path: Path):
    catalog, table = raw_table(tmp_path)
    assert earlier_reads(table) == EarlierReads()
    first, second = (ShardProgressStore(str(tmp_path / name)) for name in ("a", "b"))
    published(first, "run-1", 5_000, a=9_000, b=None)
    published(second, "run-2", 7_000, a=8_000, b=6_000)  # another machine, behind

    record_earlier_reads(table, first)
    record_earlier_reads(table, second)

    reloaded = catalog.load_table("lake.raw")
    assert earlier_reads(reloaded) == EarlierReads(since_ms=5_000, tip_ms={"a": 9_000, "b": 6_000})
    assert reloaded.current_snapshot() is None  # a property, never a snapshot


def test_a_run_whose_first_batch_failed_records_its_start_and_empty_reads(tmp_path: Path):
    """Seed 90006 of the simulation: a second machine's first commit failed, so no
    status was ever published; its plan and its first batch's read are all there is."""
    catalog, table = raw_table(tmp_path)
    store = ShardProgressStore(str(tmp_path / "progress"))
    offset = replace(initial(shard("a")), started_ms=4_000, listed_ms=4_000)
    store.write_plan(offset.run_id, offset.to_dict())
    caught_up = replace(outcome("a", None, records=0, caught_up=True), tip_ms=4_500)
    store.save(offset.run_id, 1, ProgressRecord(caught_up))

    record_earlier_reads(table, store)

    assert earlier_reads(catalog.load_table("lake.raw")) == EarlierReads(4_000, {"a": 4_500})


def test_a_shard_the_latest_plan_finished_counts_as_read_to_the_tip_at_its_listing(
    tmp_path: Path,
):
    """A closed shard read to its end has no read to the tip of its own: the plan that
    finished it listed the stream after that read, and nothing arrives on it after
    (seed 110139 of the simulation, on a second machine)."""
    catalog, table = raw_table(tmp_path)
    store = ShardProgressStore(str(tmp_path / "progress"))
    published(store, "run-1", 1_000, b=8_000)
    plan = replace(initial(shard("b")), started_ms=1_000, listed_ms=9_000)
    plan = replace(plan, finished=frozenset({"a"}), epoch=3, planned_ms=9_000)
    store.write_plan(plan.run_id, plan.to_dict())

    record_earlier_reads(table, store)

    assert earlier_reads(catalog.load_table("lake.raw")) == EarlierReads(
        1_000, {"a": 9_000, "b": 8_000}
    )


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
