"""Bucket partitions: files written per bucket and committed with the partition pyiceberg
itself computes, so partition-filtered scans find every row and compaction keeps them."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from kinesis_lake.iceberg.commit import commit_files
from kinesis_lake.iceberg.data_files import TableWriteTarget, write_data_files
from kinesis_lake.iceberg.maintenance import compact
from kinesis_lake_tests.iceberg.helpers import DAY0

SCHEMA = Schema(
    NestedField(1, "user_id", StringType(), required=False),
    NestedField(2, "n", LongType(), required=False),
    NestedField(3, "at", TimestamptzType(), required=False),
)
SPEC = PartitionSpec(
    PartitionField(3, 1000, DayTransform(), "at_day"),
    PartitionField(1, 1001, BucketTransform(4), "user_id_bucket"),
)
USERS = [f"user-{i}" for i in range(12)]


def _rows(start: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"user_id": USERS[i % 12], "n": start + i, "at": DAY0} for i in range(48)],
        schema=pa.schema(
            [("user_id", pa.string()), ("n", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))]
        ),
    )


def _partitions(table) -> set[tuple]:
    return {tuple(task.file.partition) for task in table.scan().plan_files()}


def test_files_land_in_the_buckets_pyiceberg_computes_and_filters_find_every_row(tmp_path):
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    catalog.create_namespace("lake")
    ours = catalog.create_table("lake.ours", SCHEMA, partition_spec=SPEC)
    theirs = catalog.create_table("lake.theirs", SCHEMA, partition_spec=SPEC)

    for batch in range(2):
        written = write_data_files(
            TableWriteTarget.from_table(ours),
            _rows(batch * 100).to_batches(),
            file_prefix=f"b{batch}",
        )
        commit_files(ours, written, writer_id="w", batch_id=batch)
        theirs.append(_rows(batch * 100))

    assert _partitions(ours) == _partitions(theirs)
    assert len(_partitions(ours)) == 4
    for user in USERS:
        found = ours.scan(row_filter=EqualTo("user_id", user)).to_arrow()
        assert found.num_rows == 8, user  # 4 per batch, none pruned away
        assert set(found.column("user_id").to_pylist()) == {user}

    compact(ours, target_file_size_bytes=64 * 1024 * 1024)

    assert _partitions(ours) == _partitions(theirs)
    assert ours.scan(row_filter=EqualTo("user_id", "user-3")).to_arrow().num_rows == 8
    assert ours.scan().to_arrow().num_rows == 96
