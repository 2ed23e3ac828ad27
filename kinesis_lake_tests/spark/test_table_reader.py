"""``spark.read.format("kinesis_lake_iceberg")``: a lake table read by Spark's executors
with pyiceberg's answers (rows, snapshots, partition pruning), and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.types import StringType

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.iceberg.tables import ensure_table_for_arrow
from kinesis_lake.spark.iceberg.sink import SINK_NAME
from kinesis_lake_tests.iceberg.helpers import ingest

NAMESPACE = "reads"


@pytest.fixture
def raw(data_dir: Path) -> Table:
    """Three commits: days 0 and 1, then day 2, then more of day 0."""
    catalog: Catalog = open_catalog(data_dir=data_dir)
    ensure_namespace(catalog, NAMESPACE)
    table = ensure_raw_table(catalog, f"{NAMESPACE}.raw_events")
    ingest(table, "w", 0, list(range(0, 40)), day=0)
    ingest(table, "w", 1, list(range(40, 80)), day=1)
    ingest(table, "w", 2, list(range(80, 120)), day=2)
    table.refresh()
    return table


def _reader(spark, data_dir: Path, **options: str):
    return spark.read.format(SINK_NAME).option("dataDir", str(data_dir)).options(**options)


def _keys(frame) -> list[int]:
    return sorted(int(row.sequence_number) for row in frame.select("sequence_number").collect())


def test_a_table_reads_as_pyiceberg_reads_it_by_its_bare_name(spark, raw, data_dir):
    frame = _reader(spark, data_dir, namespace=NAMESPACE).load("raw_events")

    expected = raw.scan().to_arrow()
    assert frame.columns == expected.column_names
    assert frame.count() == expected.num_rows == 120
    assert _keys(frame) == sorted(int(k) for k in expected.column("sequence_number").to_pylist())
    first = frame.where("sequence_number = '7'").first()
    assert first is not None and bytes(first.data) == b'{"n": 7}'
    assert frame.count() == 120  # Spark's filter on the frame planned above changed nothing


def test_columns_snapshot_id_and_as_of_timestamp(spark, raw, data_dir):
    snapshots = sorted(raw.snapshots(), key=lambda s: s.sequence_number)
    first, second = snapshots[0], snapshots[1]

    projected = _reader(spark, data_dir, columns="sequence_number,shard_id").load(
        f"{NAMESPACE}.raw_events"
    )
    by_id = _reader(spark, data_dir, **{"snapshot-id": str(first.snapshot_id)}).load(
        f"{NAMESPACE}.raw_events"
    )
    as_of = _reader(spark, data_dir, **{"as-of-timestamp": str(second.timestamp_ms)}).load(
        f"{NAMESPACE}.raw_events"
    )

    assert projected.columns == ["sequence_number", "shard_id"]
    assert projected.count() == 120
    assert _keys(by_id) == list(range(40))
    assert _keys(as_of) == list(range(80))


DAY_ONE = (
    "approximate_arrival_timestamp >= '2024-05-02T00:00:00+00:00' and "
    "approximate_arrival_timestamp < '2024-05-03T00:00:00+00:00'"
)


def test_a_filter_on_the_partition_column_reads_only_that_days_files(spark, raw, data_dir):
    everything = _reader(spark, data_dir).load(f"{NAMESPACE}.raw_events")
    day_one = _reader(spark, data_dir, filter=DAY_ONE, columns="sequence_number").load(
        f"{NAMESPACE}.raw_events"
    )

    assert day_one.columns == ["sequence_number"]  # the filter's column is read, not returned
    assert _keys(day_one) == list(range(40, 80))
    planned = list(raw.scan(row_filter=DAY_ONE).plan_files())
    assert day_one.rdd.getNumPartitions() == len(planned) == 1
    assert everything.rdd.getNumPartitions() == 3
    assert everything.count() == 120  # planning the filtered read changed nothing else


def test_rows_of_a_kept_file_that_miss_the_filter_are_not_returned(spark, raw, data_dir):
    """Day 0's file holds keys 0-39; the filter keeps the file and drops the other rows."""
    some = _reader(spark, data_dir, filter="sequence_number in ('3', '5')").load(
        f"{NAMESPACE}.raw_events"
    )
    assert _keys(some) == [3, 5]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"columns": "sequence_number,nope"}, "Option 'columns' names nope, which"),
        ({"snapshot-id": "12345"}, "Option 'snapshot-id'='12345': reads.raw_events has no such"),
        ({"as-of-timestamp": "0"}, "Option 'as-of-timestamp'='0' is before reads.raw_events's"),
        ({"as-of-timestamp": "yesterday"}, "Option 'as-of-timestamp'='yesterday' is neither"),
        ({"filter": "nope = 1"}, "Option 'filter'='nope = 1' is not an Iceberg row filter"),
    ],
)
def test_bad_read_options_fail_naming_the_option(spark, raw, data_dir, options, message):
    with pytest.raises(Exception, match=message):
        _reader(spark, data_dir, **options).load(f"{NAMESPACE}.raw_events").collect()


def test_an_empty_table_and_a_filter_that_prunes_every_file_read_as_no_rows(spark, raw, data_dir):
    """Spark hands a reader with no partitions one empty partition to read; the reader
    took it for a file task and the read failed instead of returning no rows."""
    ensure_raw_table(open_catalog(data_dir=data_dir), f"{NAMESPACE}.never_written")
    empty = _reader(spark, data_dir).load(f"{NAMESPACE}.never_written")
    before_any = "approximate_arrival_timestamp < '2001-01-01T00:00:00+00:00'"
    pruned = _reader(spark, data_dir, filter=before_any)

    assert empty.collect() == []
    assert pruned.load(f"{NAMESPACE}.raw_events").collect() == []


def test_a_filter_on_a_nested_field(spark, data_dir):
    """The row filter names a field inside a struct: PyArrow needs its full path."""
    catalog = open_catalog(data_dir=data_dir)
    ensure_namespace(catalog, NAMESPACE)
    nested = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("device", pa.struct([pa.field("kind", pa.string())])),
        ]
    )
    table = ensure_table_for_arrow(catalog, f"{NAMESPACE}.devices", nested)
    table.append(
        pa.table(
            {"id": [1, 2, 3], "device": [{"kind": "phone"}, {"kind": "tv"}, {"kind": "phone"}]},
            schema=nested,
        )
    )

    phones = _reader(spark, data_dir, filter="device.kind = 'phone'").load(f"{NAMESPACE}.devices")

    assert sorted(row.id for row in phones.collect()) == [1, 3]


def test_a_loaded_frame_keeps_the_snapshot_and_columns_it_was_loaded_with(spark, raw, data_dir):
    """Spark fixes a frame's columns at ``load``; the reader planned again at each action,
    so a column added in between made the rows disagree with the frame's schema."""
    frame = _reader(spark, data_dir).load(f"{NAMESPACE}.raw_events")
    with raw.update_schema() as update:
        update.add_column("added_later", StringType())
    ingest(raw, "w", 3, list(range(120, 160)), day=3)

    assert "added_later" not in frame.columns
    assert frame.count() == 120
    assert len(frame.collect()) == 120
